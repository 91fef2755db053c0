"""What the commands that read a config without training share: one parser per command that
owns both the config's keys (``--config``, ``--model...``, ``--data...``) and the command's own
flags, so a typo in either is reported by that parser; and :func:`build_from_config` for
scripts and notebooks.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import NoReturn

from sp_lightning.cli.fit import PARSER_KWARGS, SelfPlayCLI


class _ConfigCommand(SelfPlayCLI):
    """LightningCLI without a run and without a Trainer: the config's module and DataModule,
    and the command's own flags (added by ``add_flags``) in ``config``; ``prepare(config,
    parser)`` may complete the parsed config before anything is built."""

    def __init__(self, add_flags: Callable | None, *args, prepare: Callable | None = None, **kwargs):
        self._add_flags = add_flags
        self._prepare = prepare
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        if self._add_flags is not None:
            self._add_flags(parser)

    def before_instantiate_classes(self) -> None:
        if self._prepare is not None:
            self._prepare(self.config, self.parser)

    def instantiate_trainer(self, **kwargs):
        return None  # these commands play outside a Trainer


def parse_command(prog: str, description: str, add_flags: Callable | None, args: list[str],
                  prepare: Callable | None = None):
    """``(options, module, datamodule)`` of a command's ``args``: its own flags (added to the
    parser by ``add_flags(parser)``) and the config it names, seeded as ``fit`` seeds;
    ``prepare(config, parser)`` completes the parsed config first (see ``_ConfigCommand``). The
    config's ``trainer`` block is read (config files hold one) and not used."""
    with warnings.catch_warnings():  # ``args`` are this command's share of the command line
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = _ConfigCommand(add_flags, args=list(args), prepare=prepare, run=False, seed_everything_default=0,
                             save_config_callback=None,
                             parser_kwargs={**PARSER_KWARGS, "prog": prog, "description": description})
    return cli.config, cli.model, cli.datamodule


def build_from_config(*args: str):
    """The module and DataModule a config describes, without a Trainer or a run: ``args`` are
    ``fit``'s (``"--config", "a.yaml", "--data.eval.games", "400"``), the seed is set as ``fit``
    sets it. For scripts and notebooks that evaluate or play: ``datamodule.build_engine(module)``
    then serves the policy (``engine.worker``)."""
    _, module, datamodule = parse_command("build_from_config", "", None, list(args))
    return module, datamodule


def fail(prog: str, message: str) -> NoReturn:
    """Stop a command as its parser would on a bad flag: the message on stderr, exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)
