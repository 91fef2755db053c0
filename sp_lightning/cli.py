"""The ``sp-lightning`` command: LightningCLI over SelfPlayModule and SelfPlayDataModule.

    sp-lightning fit --config configs/tictactoe_tiny.yaml
    sp-lightning validate --config configs/tictactoe_tiny.yaml --ckpt_path <ckpt> --data.eval.games 400

``validate`` is the evaluation: the policy against the evaluation opponent (RandomBot by
default) over ``data.eval.games`` games per game, split evenly over the seats, with 95%
intervals. Without ``--ckpt_path`` it evaluates the untrained policy.
"""

from __future__ import annotations

import warnings

from lightning.pytorch.cli import LightningCLI

from sp_lightning.data import SelfPlayDataModule
from sp_lightning.module import SelfPlayModule

# Lightning flags training_step(dataloader_iter) as experimental; we rely on it to stay on-policy.
warnings.filterwarnings("ignore", message=".*Found `dataloader_iter` argument.*")
warnings.filterwarnings("ignore", message=".*does not have many workers.*")
warnings.filterwarnings("ignore", message=".*Your `IterableDataset` has `__len__` defined.*")


def default_precision() -> str:
    """bf16 autocast where the hardware has it (a CUDA GPU with bf16), full precision elsewhere."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed"
    return "32-true"


class SelfPlayCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.set_defaults(
            {
                "trainer.precision": default_precision(),
                "trainer.max_steps": 100,
                "trainer.check_val_every_n_epoch": None,
                "trainer.val_check_interval": 50,
                "trainer.num_sanity_val_steps": 0,
                "trainer.log_every_n_steps": 1,
                "trainer.accelerator": "auto",
                "trainer.devices": 1,
            }
        )


def main(args=None) -> None:
    SelfPlayCLI(
        SelfPlayModule,
        SelfPlayDataModule,
        args=args,
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
    )


if __name__ == "__main__":
    main()
