"""Reference points for bargaining_v1: what the scripted bargainer and random legal play earn in each
seat against the bargainer (the fixed reference of configs/bargaining_two_learners_tiny.yaml).

    python benchmarks/bargaining_reference.py          # 2000 games per row, seeds 0-1999, a few seconds
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envs import RandomBot, make, play  # noqa: E402
from envs.bargaining import BargainerBot  # noqa: E402
from sp_lightning.evaluation.stats import bootstrap_mean_interval  # noqa: E402


def payoffs(seat: str, player, games: int) -> list[float]:
    """``seat``'s payoff in ``games`` games (seeds 0..games-1), ``player(seed)`` in that seat and
    the bargainer in the other."""
    out = []
    for seed in range(games):
        policies = {"player_0": BargainerBot(), "player_1": BargainerBot()}
        policies[seat] = player(seed)
        out.append(play(make("bargaining_v1"), policies, seed=seed)[seat])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", type=int, default=2000)
    args = parser.parse_args()
    print(f"bargaining_v1 against bot:bargainer, {args.games} games per cell (seeds 0-{args.games - 1}); "
          "95% bootstrap intervals.\n")
    print("| in the seat | seller (player_0) payoff | buyer (player_1) payoff |")
    print("|---|---|---|")
    for label, player in [("bot:bargainer", lambda seed: BargainerBot()), ("random legal moves", RandomBot)]:
        cells = []
        for seat in ("player_0", "player_1"):
            mean, (low, high) = bootstrap_mean_interval(payoffs(seat, player, args.games))
            cells.append(f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]")
        print(f"| {label} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
