"""``sp-lightning fit``: LightningCLI over SelfPlayModule and SelfPlayDataModule.

The config's ``model:`` block is the module's arguments, ``data:`` the DataModule's (the run's
engine), ``trainer:`` Lightning's Trainer with this engine's defaults where it is silent
(``sp_lightning.trainer``). ``sp-lightning fit --help`` lists every key.
"""

from __future__ import annotations

import warnings

from lightning.pytorch.cli import LightningCLI

from sp_lightning.data import SelfPlayDataModule
from sp_lightning.errors import UserError, check_writable, keyed_error, qualify
from sp_lightning.module import SelfPlayModule
from sp_lightning.trainer import finish_trainer, quiet_known_warnings, trainer_defaults, with_default_progress_bar


PARSER_KWARGS = {"allow_abbrev": False, "exit_on_error": False}
"""Every command's parser: a prefix of a flag is not the flag, and a parse error is raised
(``argparse.ArgumentError``) for ``sp_lightning.cli.main`` to print as one line, not a usage dump."""


def _warm_start_steps(data) -> int:
    """``data.warm_start.steps`` of the instantiated DataModule (0: no warm start)."""
    warm_start = data.settings.warm_start
    return warm_start.steps if warm_start is not None and warm_start.check() is not None else 0


SUBCOMMANDS = ("fit", "validate")
"""Lightning's Trainer methods that ``sp-lightning`` runs as its own subcommands."""


class SelfPlayCLI(LightningCLI):
    """LightningCLI with this engine's Trainer defaults and finishing touches. The module
    configures its own optimizer (``model.optimizer``), so LightningCLI's ``--optimizer`` and
    ``--lr_scheduler`` are not offered."""

    def __init__(self, *args, **kwargs):
        quiet_known_warnings()
        kwargs.setdefault("auto_configure_optimizers", False)
        command_line = kwargs.get("args")
        self._subcommand = command_line[0] if command_line and command_line[0] in SUBCOMMANDS else None
        super().__init__(SelfPlayModule, SelfPlayDataModule, *args, **kwargs)

    def subcommands(self) -> dict[str, set[str]]:
        """The Trainer methods offered as subcommands: ``fit`` and ``validate`` (the ones
        ``sp-lightning`` runs), and of those only the one the command line names. LightningCLI
        builds a parser of every class signature for each subcommand it offers (about 0.25 s
        apiece), then parses with one."""
        every = LightningCLI.subcommands()
        return {name: every[name] for name in ((self._subcommand,) if self._subcommand else SUBCOMMANDS)}

    def add_arguments_to_parser(self, parser) -> None:
        parser.set_defaults({f"trainer.{key}": value for key, value in trainer_defaults().items()})
        # the credit assigner is the data block's (it credits the played games); one that learns
        # values also trains value heads with the policy, so the module gets the same object
        parser.link_arguments("data", "model.credit", compute_fn=lambda data: data.settings.credit,
                              apply_on="instantiate")
        # a KL term toward the warm start's policy takes it when the warm start's steps are done
        parser.link_arguments("data", "model.warm_start_steps", compute_fn=_warm_start_steps, apply_on="instantiate")

    def _parse_ckpt_path(self) -> None:
        """Nothing: LightningCLI would load the checkpoint here to overwrite the config's ``model``
        settings with those it saved, silently (a resume with a new learning rate would keep the
        old one, a checkpoint of another config would be loaded into the model it describes). The
        config is the run's. The file is read once, when the trainer loads it: a damaged
        ``last.ckpt`` falls back to its ``.prev``, one with neither is named
        (``sp_lightning.checkpoint_io``), and weights that do not fit the config's model are
        refused naming the settings that differ (``sp_lightning.checkpoints.check_fits``)."""

    def instantiate_classes(self) -> None:
        """The config's objects; a check that names a setting by its tail (``loss.aggregation``,
        from a class used under several keys) is raised again as a :class:`UserError` naming the
        config's full key (``model.loss.aggregation``)."""
        try:
            super().instantiate_classes()
        except ValueError as error:
            keyed = keyed_error(error)
            if keyed is None:
                raise
            config = self.config[self.subcommand] if self.subcommand else self.config
            raise UserError(qualify(str(keyed), config.keys())) from error

    def instantiate_trainer(self, **kwargs):
        config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        if config.get("default_root_dir"):  # the run's config and logs go there: refused now, not at its first save
            check_writable(config["default_root_dir"], "trainer.default_root_dir", folder=True)
        return finish_trainer(super().instantiate_trainer(**with_default_progress_bar(config)))


def run(subcommand: str, args: list[str]) -> None:
    """Lightning's ``subcommand`` (fit, validate) on the config ``args`` describe."""
    with warnings.catch_warnings():  # ``args`` are this command's share of the command line
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        SelfPlayCLI(args=[subcommand, *args], save_config_kwargs={"overwrite": True}, seed_everything_default=0,
                    parser_kwargs={**PARSER_KWARGS, "prog": "sp-lightning", subcommand: PARSER_KWARGS})


def main(args: list[str]) -> None:
    run("fit", args)
