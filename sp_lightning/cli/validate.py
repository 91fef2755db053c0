"""``sp-lightning validate``: the in-training evaluation (Lightning's validate) of a checkpoint:
the policy against ``data.eval.opponent`` over ``data.eval.games`` games per game, split evenly
over the seats, with 95% intervals. For other seeds, opponents and several checkpoints at once,
see ``sp-lightning evaluate``."""

from __future__ import annotations

from sp_lightning.cli.fit import run


def main(args: list[str]) -> None:
    run("validate", args)
