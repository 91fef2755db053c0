"""Online evaluation: evaluation games played inside every training batch.

Validation stops training to play its games at fixed intervals. Online evaluation plays
``games_per_batch`` games of each game more with every training batch instead, the way Unstable
Baselines keeps evaluation workers in flight. Those games pit the learner against a fixed opponent,
in every seat in turn, under the evaluation invalid-move rule. They are played by the arena in the
same run as the batch's training games, so their model moves share the same generate calls and
the same (latest) weights. They give no training records, and the league and curricula never see
them. Their results are logged per game as ``online_eval/<game>/...``.

Each training batch is played by one policy version, so ``games_per_batch`` is the cap per
checkpoint and per game: a curve of these figures is a curve over checkpoints, with no extra pause
in training. Their episode seeds (deals) come from a stream of their own, seeded from ``(seed,
i)`` for batch ``i``: they differ from the training games' and from validation's. Their bots
and the model's sampling draw from the same generators as the training games, though. Turning
them on therefore changes the training trajectory, and their results depend on the run's
history. A resumed run still replays exactly, because those generators are checkpointed. Every
data-parallel rank plays the same evaluation games.

The models sample at the training sampling settings: these games measure the policy that is
playing. Validation, ``sp-lightning evaluate`` and its ``data.eval.temperature`` measure it at the
evaluation temperature.
"""

from __future__ import annotations

from sp_lightning.evaluation.matches import Match, split_by_match, summarize
from sp_lightning.games import GameSettings
from sp_lightning.rng import seeded_rng
from sp_lightning.types import LEARNER, PolicyRef, Rollout

ONLINE_STREAM = 7  # seeded_rng's rank slot for the online evaluation stream (training uses the rank)


class OnlineEvaluation:
    """The evaluation games of each training batch and the figures of their results."""

    def __init__(self, games: list[GameSettings], opponent: str | PolicyRef, games_per_batch: int, seed: int,
                 env_overrides: dict | None = None) -> None:
        if games_per_batch < 1:
            raise ValueError(f"data.eval.online_games: expected an int >= 1 here (0 turns them off), "
                             f"got {games_per_batch!r}")
        self.games = list(games)
        self.opponent = opponent
        self.games_per_batch = games_per_batch
        self.seed = seed
        self.env_overrides = dict(env_overrides or {})

    def matches(self, batch_index: int) -> list[Match]:
        """Batch ``batch_index``'s evaluation games: for each game, ``games_per_batch`` rounded
        down to a multiple of its seats (at least one game per seat), the learner in each seat."""
        rng = seeded_rng(self.seed, ONLINE_STREAM, batch=batch_index)
        return [Match(game, LEARNER, self.opponent, max(1, self.games_per_batch // len(game.agents)),
                      rng.randrange(2**31), self.env_overrides) for game in self.games]


def online_metrics(matches: list[Match], rollouts: list[Rollout]) -> dict[str, float]:
    """``online_eval/<game>/...`` figures of the games of ``matches`` (``rollouts`` in the order
    of their episodes)."""
    out: dict[str, float] = {}
    for match, played in zip(matches, split_by_match(matches, rollouts)):
        result = summarize(match.played(played), str(match.tested), match.label, match.game.agents, seed=match.seed)
        out.update(result.as_metrics(f"online_eval/{match.game.name}"))
        out[f"online_eval/{match.game.name}/games"] = float(result.games)
    return out
