"""Cross-play: every policy of a set against every other, for a two-player game.

A league's ratings summarise who beats whom in one number per agent; a cross-play table shows
the pairs themselves, which is where non-transitivity (A beats B beats C beats A) and a
checkpoint that only beats its immediate predecessors show up.

Each unordered pair is played once, ``games_per_seat`` games with the row policy in each seat
(so both seats are covered), and both cells of the pair come from those same games: the column
policy's result is the row policy's games read from the other seat. The diagonal is the policy
against itself. Every pair is dealt the same seeds (common random numbers: the differences
between cells are not deal luck), and all pairs are played in one arena run, so model moves of
every pair share generate calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sp_lightning.evaluation.matches import EvalResult, Match, play_matches, summarize
from sp_lightning.games import GameSettings
from sp_lightning.rollout.base import RolloutWorker, SamplingSettings
from sp_lightning.types import PolicyRef


@dataclass
class CrossPlay:
    """``results[(row, column)]``: the row policy's results against the column policy."""

    labels: list[str]
    results: dict[tuple[str, str], EvalResult]

    def matrix(self, metric: str = "payoff_mean") -> list[list[float]]:
        """Rows and columns in ``labels`` order; ``metric`` is an ``EvalResult`` attribute
        (``payoff_mean``, ``win_rate``, ``legal_move_rate``...)."""
        return [[float(getattr(self.results[(a, b)], metric)) for b in self.labels] for a in self.labels]

    def interval_halfwidth(self) -> float:
        """The widest half-width of any cell's 95% payoff interval (for a caption)."""
        return max((r.payoff_ci[1] - r.payoff_ci[0]) / 2 for r in self.results.values())

    def table(self, metric: str = "payoff_mean") -> str:
        width = max(8, *(len(label) for label in self.labels))
        lines = [" " * width + " " + " ".join(f"{label:>{width}}" for label in self.labels)]
        for label, row in zip(self.labels, self.matrix(metric)):
            lines.append(f"{label:>{width}} " + " ".join(f"{v:>{width}.3f}" for v in row))
        return "\n".join(lines)


def cross_play(worker: RolloutWorker | None, game: GameSettings, policies: Mapping[str, str | PolicyRef], *,
               games_per_seat: int = 50, sampling: SamplingSettings | None = None, seed: int = 12345,
               env_overrides: dict | None = None) -> CrossPlay:
    """Play every pair of ``policies`` (label -> policy spec) in ``game``; see the module docstring."""
    if len(game.agents) != 2:
        raise ValueError(f"cross_play: {game.name} has {len(game.agents)} seats; a cross-play table needs 2")
    if not policies:
        raise ValueError("cross_play: expected at least one policy")
    labels = list(policies)
    pairs = [(a, b) for i, a in enumerate(labels) for b in labels[i:]]
    matches = [Match(game, policies[a], policies[b], games_per_seat, seed, env_overrides) for a, b in pairs]
    other = dict(zip(game.agents, reversed(game.agents)))  # the other seat of a two-seat game
    results: dict[tuple[str, str], EvalResult] = {}
    for (a, b), match, rollouts in zip(pairs, matches, play_matches(worker, matches, sampling, seed)):
        games = match.games(rollouts)
        results[(a, b)] = summarize(games, a, b, game.agents, seed=seed)
        if a != b:
            from_other_seat = [(other[seat], rollout) for seat, rollout in games]
            results[(b, a)] = summarize(from_other_seat, b, a, game.agents, seed=seed)
    return CrossPlay(labels, results)
