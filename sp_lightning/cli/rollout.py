"""``sp-lightning rollout``: the config's batches played by its arena and backend (a remote
server included, ``data.rollout`` or ``remote:`` seats), credited and printed, without training;
the episode log (``data.episode_log``) records them as in ``fit``."""

from __future__ import annotations

from sp_lightning.cli.common import fail, parse_command

PROG = "sp-lightning rollout"


def add_flags(parser) -> None:
    parser.add_argument("--steps", type=int, default=3, help="batches to play")
    parser.add_argument("--show", type=int, default=2, help="episodes and records of each batch to print")
    parser.add_argument("--checkpoint", type=str | None, default=None,
                        help="Lightning .ckpt or peft adapter dir of the policy; none: untrained")


def main(args: list[str]) -> list[dict[str, float]]:
    ours, module, datamodule = parse_command(PROG, __doc__, add_flags, args)
    if ours.steps < 1 or ours.show < 0:
        fail(PROG, f"expected --steps >= 1 and --show >= 0, got {ours.steps} and "
                         f"{ours.show}")
    if ours.checkpoint:
        module.load_policy_weights(ours.checkpoint)
    return datamodule.build_engine(module).run(ours.steps, show=ours.show)
