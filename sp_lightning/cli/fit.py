"""``sp-lightning fit``: LightningCLI over SelfPlayModule and SelfPlayDataModule.

The config's ``model:`` block is the module's arguments, ``data:`` the DataModule's (the run's
engine), ``trainer:`` Lightning's Trainer with this engine's defaults where it is silent
(``sp_lightning.trainer``). ``sp-lightning fit --help`` lists every key.
"""

from __future__ import annotations

import argparse
import warnings

from lightning.pytorch.cli import LightningCLI

from sp_lightning.checkpoints import unreadable
from sp_lightning.data import SelfPlayDataModule
from sp_lightning.errors import UserError, keyed_error, qualify
from sp_lightning.module import SelfPlayModule
from sp_lightning.trainer import finish_trainer, quiet_known_warnings, trainer_defaults, with_default_progress_bar


PARSER_KWARGS = {"allow_abbrev": False, "exit_on_error": False}
"""Every command's parser: a prefix of a flag is not the flag, and a parse error is raised
(``argparse.ArgumentError``) for ``sp_lightning.cli.main`` to print as one line, not a usage dump."""


class SelfPlayCLI(LightningCLI):
    """LightningCLI with this engine's Trainer defaults and finishing touches. The module
    configures its own optimizer (``model.optimizer``), so LightningCLI's ``--optimizer`` and
    ``--lr_scheduler`` are not offered."""

    def __init__(self, *args, **kwargs):
        quiet_known_warnings()
        kwargs.setdefault("auto_configure_optimizers", False)
        super().__init__(SelfPlayModule, SelfPlayDataModule, *args, **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        parser.set_defaults({f"trainer.{key}": value for key, value in trainer_defaults().items()})
        # the credit assigner is the data block's (it credits the played games); one that learns
        # values also trains value heads with the policy, so the module gets the same object
        parser.link_arguments("data", "model.credit", compute_fn=lambda data: data.settings.credit,
                              apply_on="instantiate")

    def _parse_ckpt_path(self) -> None:
        """Lightning reads ``--ckpt_path``'s hyperparameters while parsing (the checkpoint's model
        settings then win over the config's), with a bare ``torch.load``: a file that is not a
        checkpoint is said to be one here, naming it, instead of torch's unpickling error."""
        try:
            super()._parse_ckpt_path()
        except argparse.ArgumentError:
            raise
        except Exception as error:
            raise unreadable(self.config[self.config.subcommand].get("ckpt_path"), "ckpt_path", error) from error

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
        return finish_trainer(super().instantiate_trainer(**with_default_progress_bar(config)))


def run(subcommand: str, args: list[str]) -> None:
    """Lightning's ``subcommand`` (fit, validate) on the config ``args`` describe."""
    with warnings.catch_warnings():  # ``args`` are this command's share of the command line
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        SelfPlayCLI(args=[subcommand, *args], save_config_kwargs={"overwrite": True}, seed_everything_default=0,
                    parser_kwargs={**PARSER_KWARGS, "prog": "sp-lightning", subcommand: PARSER_KWARGS})


def main(args: list[str]) -> None:
    run("fit", args)
