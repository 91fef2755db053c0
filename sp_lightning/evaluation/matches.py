"""Any policy against any policy: N games per seat, fixed seeds, intervals on every figure.

Validation, the league's background evaluator and ``sp-lightning evaluate`` all call
:func:`evaluate`. The policy under test sits in each seat in turn (``games_per_seat`` games
there), the opponents fill the other seats. Everything random is drawn from ``seed``: the deals
(episode seeds), the bots (fresh instances seeded from it) and the model's sampling (torch's RNG
is forked and seeded for the evaluation, so evaluating also leaves the training RNG untouched).
The same seed, policies and weights give the same games.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from sp_lightning.arena import Arena
from sp_lightning.episodes.game import result_of
from sp_lightning.evaluation.stats import bootstrap_mean_interval, wilson_interval
from sp_lightning.games import GameSettings
from sp_lightning.rollout.base import RolloutWorker, SamplingSettings
from sp_lightning.sources import EpisodeRequest
from sp_lightning.types import LEARNER, PolicyKind, PolicyRef, Rollout, as_policy

SEAT_STRIDE = 1_000_003  # episode seeds of seat s start at seed + s * SEAT_STRIDE


@dataclass
class EvalResult:
    """A policy's results against its opponents over ``games`` games, with 95% intervals (Wilson
    for the rates, a seeded bootstrap for the mean payoff).

    Games the opponents lost by their own invalid move (a forfeit) count as wins and are also
    counted apart in ``opponent_forfeits``; summarised with ``exclude_opponent_forfeits`` they
    are left out of every figure (``games`` then counts the rest, ``opponent_forfeits`` still
    says how many were left out).
    """

    policy: str
    opponent: str
    games: int
    wins: int
    draws: int
    losses: int
    payoff_mean: float
    payoff_ci: tuple[float, float]
    legal_move_rate: float
    per_seat_win_rate: dict[str, float]
    opponent_forfeits: int = 0
    excludes_opponent_forfeits: bool = False
    payoffs: list[float] = field(default_factory=list, repr=False)
    per_seat_payoff: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Per seat: the mean payoff of the games played there and its 95% bootstrap interval (with
    several learners, each seat's own learner's figure)."""
    scores: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """The game's own scores beside the reward (``Rollout.scores``: Diplomacy's centres and
    sum-of-squares score), each as the mean over the games and its 95% bootstrap interval."""

    # With no game left to score (every one an opponent forfeit, left out) the figures are NaN,
    # not rates of 0 with made-up intervals.
    @property
    def win_rate(self) -> float:
        return self.wins / self.games if self.games else math.nan

    @property
    def draw_rate(self) -> float:
        return self.draws / self.games if self.games else math.nan

    @property
    def loss_rate(self) -> float:
        return self.losses / self.games if self.games else math.nan

    @property
    def win_ci(self) -> tuple[float, float]:
        return wilson_interval(self.wins, self.games) if self.games else (math.nan, math.nan)

    @property
    def opponent_forfeit_rate(self) -> float:
        """Of every game played, counted or left out."""
        played = self.games + (self.opponent_forfeits if self.excludes_opponent_forfeits else 0)
        return self.opponent_forfeits / max(played, 1)

    def as_metrics(self, prefix: str) -> dict[str, float]:
        out = {
            f"{prefix}/win_rate": self.win_rate,
            f"{prefix}/win_rate_ci_low": self.win_ci[0],
            f"{prefix}/win_rate_ci_high": self.win_ci[1],
            f"{prefix}/draw_rate": self.draw_rate,
            f"{prefix}/loss_rate": self.loss_rate,
            f"{prefix}/payoff": self.payoff_mean,
            f"{prefix}/payoff_ci_low": self.payoff_ci[0],
            f"{prefix}/payoff_ci_high": self.payoff_ci[1],
            f"{prefix}/legal_move_rate": self.legal_move_rate,
            f"{prefix}/opponent_forfeit_rate": self.opponent_forfeit_rate,
        }
        out.update({f"{prefix}/win_rate_{seat}": r for seat, r in self.per_seat_win_rate.items()})
        for seat, (mean, low, high) in self.per_seat_payoff.items():
            out.update({f"{prefix}/payoff_{seat}": mean, f"{prefix}/payoff_{seat}_ci_low": low,
                        f"{prefix}/payoff_{seat}_ci_high": high})
        for key, (mean, low, high) in self.scores.items():
            out.update({f"{prefix}/{key}": mean, f"{prefix}/{key}_ci_low": low, f"{prefix}/{key}_ci_high": high})
        return out

    def summary(self) -> str:
        if not self.games:
            return (f"0 games left to score: all {self.opponent_forfeits} played were lost by the opponent's "
                    f"invalid move (left out)")
        lo, hi = self.win_ci
        plo, phi = self.payoff_ci
        left_out = " (left out)" if self.excludes_opponent_forfeits else ""
        return (
            f"{self.games} games: win {self.win_rate:.3f} [{lo:.3f}, {hi:.3f}], "
            f"draw {self.draw_rate:.3f}, loss {self.loss_rate:.3f}, "
            f"payoff {self.payoff_mean:+.3f} [{plo:+.3f}, {phi:+.3f}], legal moves {self.legal_move_rate:.3f}, "
            f"opponent forfeits {self.opponent_forfeit_rate:.3f}{left_out}"
            + "".join(f", {key} {mean:.3f} [{low:.3f}, {high:.3f}]" for key, (mean, low, high) in self.scores.items())
        )


def serve_policy(worker: RolloutWorker, spec: str | PolicyRef, name: str | None = None, *, fits=None,
                 key: str = "checkpoint") -> PolicyRef:
    """``spec`` as a policy ``worker`` can serve: ``checkpoint:<adapter dir>`` is registered with
    the worker under ``name`` (default: the directory's name) and served as
    ``checkpoint:<name>``; anything else is as given. With ``fits`` (the policy model), an
    adapter that cannot sit on its base model is refused first, naming ``key``."""
    policy = as_policy(spec)
    if policy.kind is PolicyKind.CHECKPOINT and os.path.isdir(policy.name):
        if fits is not None:
            from sp_lightning.checkpoints import check_adapter_fits

            check_adapter_fits(policy.name, key, fits)
        name = name or os.path.basename(os.path.normpath(policy.name))
        worker.register_adapter(name, policy.name)
        return PolicyRef(PolicyKind.CHECKPOINT, name)
    return policy


def evaluate(worker: RolloutWorker | None, game: GameSettings, *, policy: str | PolicyRef = LEARNER,
             opponent: str | PolicyRef | Sequence[str | PolicyRef] = "bot:random", games_per_seat: int = 100,
             sampling=None, seed: int = 12345, env_overrides: dict | None = None) -> EvalResult:
    """``policy`` against ``opponent`` over ``games_per_seat`` games in each seat (``opponent`` is
    one policy for every other seat, or one per other seat in seat order). :func:`play` takes the
    rest (remote models, a run's learners, a rank's share, forfeits left out)."""
    return play_games(worker, game, policy=policy, opponent=opponent, games_per_seat=games_per_seat,
                      sampling=sampling, seed=seed, env_overrides=env_overrides)[0]


def play_games(worker: RolloutWorker | None, game: GameSettings, *, policy: str | PolicyRef = LEARNER,
               opponent: str | PolicyRef | Sequence[str | PolicyRef] = "bot:random", games_per_seat: int = 100,
               sampling=None, seed: int = 12345, env_overrides: dict | None = None,
               ) -> tuple[EvalResult, list[tuple[str, Rollout]]]:
    """:func:`evaluate`'s match, with ``(policy's seat, rollout)`` of every game besides its result."""
    return play(worker, Match(game, policy, opponent, games_per_seat, seed, env_overrides), Serving(sampling))


@dataclass
class Serving:
    """How an evaluation's model calls are served and its games counted, beside the worker."""

    sampling: Any = None
    """SamplingSettings or a SamplingPlan (``sp_lightning.sampling``); None: the defaults."""
    remotes: dict | None = None
    """``remote:<name>`` seats: the RemoteModel each name is served by."""
    learners: Any = None
    """A run's several learners (``sp_lightning.learners.Learners``): "the learner" is each seat's own."""
    exclude_opponent_forfeits: bool = False
    """Leave the games the opponents lost by their own invalid move out of the result's figures
    (they are still counted, and still in the games returned)."""


def play(worker: RolloutWorker | None, match: Match, serving: Serving | None = None,
         ) -> tuple[EvalResult, list[tuple[str, Rollout]]]:
    """``match`` played: its result and ``(policy's seat, rollout)`` of every game (for ratings).
    ``remote:<name>`` plays the model ``serving.remotes[name]`` serves; ``match.shard=(k, n)`` plays
    only the games ``k, k + n, ...`` of each seat, with the seeds they have in the whole match (a
    data-parallel rank's share: see :func:`played_games`)."""
    serving = serving or Serving()
    rollouts = play_matches(worker, [match], serving.sampling, match.seed, serving.remotes, serving.learners)[0]
    result = summarize(match.played(rollouts), str(match.tested), match.label, match.game.agents,
                       serving.exclude_opponent_forfeits, match.seed)
    return result, match.games(rollouts)


@dataclass
class Match:
    """The episodes of one ``policy`` against ``opponent`` evaluation (see :func:`play`)."""

    game: GameSettings
    policy: str | PolicyRef
    opponent: str | PolicyRef | Sequence[str | PolicyRef]
    games_per_seat: int
    seed: int
    env_overrides: dict | None = None
    shard: tuple[int, int] = (0, 1)
    """(k, n): only the games k, k + n, ... of each seat (a data-parallel rank's share)."""
    # derived in __post_init__: the tested policy, the opponents' label, and every game's
    # episode, seed and tested seat
    tested: PolicyRef = field(init=False)
    label: str = field(init=False)
    episodes: list = field(init=False, repr=False)
    seeds: list[int] = field(init=False, repr=False)
    tested_seats: list[str] = field(init=False, repr=False)
    orders: list[tuple[int, int]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        game = self.game
        self.tested = as_policy(self.policy)
        others = [self.opponent] if isinstance(self.opponent, (str, PolicyRef)) else list(self.opponent)
        others = [as_policy(o) for o in others]
        if len(others) == 1:
            others = others * (len(game.agents) - 1)
        if len(others) != len(game.agents) - 1:
            raise ValueError(f"evaluate: {game.name} has {len(game.agents)} seats; expected 1 or "
                             f"{len(game.agents) - 1} opponents, got {len(others)}")
        if self.games_per_seat < 1:
            raise ValueError(f"evaluate: games_per_seat: expected >= 1, got {self.games_per_seat}")
        self.label = str(others[0]) if len(set(others)) == 1 else ",".join(map(str, others))
        self.episodes, self.seeds, self.tested_seats, self.orders = [], [], [], []
        first, step = self.shard
        for s, seat in enumerate(game.agents):
            rest = iter(others)
            seats = {a: (self.tested if a == seat else next(rest)) for a in game.agents}
            for i in range(first, self.games_per_seat, step):
                self.episodes.append(game.episode(seats, **(self.env_overrides or {})))
                self.seeds.append(self.seed + s * SEAT_STRIDE + i)
                self.tested_seats.append(seat)
                self.orders.append((s, i))

    def games(self, rollouts: list[Rollout]) -> list[tuple[str, Rollout]]:
        return list(zip(self.tested_seats, rollouts))

    def played(self, rollouts: list[Rollout]) -> list[PlayedGame]:
        """The match's games as :class:`PlayedGame` records, each with its place in the match."""
        return [PlayedGame.of(seat, rollout, order) for seat, rollout, order in zip(self.tested_seats, rollouts, self.orders)]

    def requests(self) -> list[EpisodeRequest]:
        """The match's episodes with their seeds, as an arena plays them."""
        return [EpisodeRequest(episode, seed) for episode, seed in zip(self.episodes, self.seeds)]


def play_matches(worker: RolloutWorker | None, matches: list[Match], sampling: SamplingSettings | None,
                 seed: int, remotes: dict | None = None, learners=None) -> list[list[Rollout]]:
    """Every match's games in one arena run, so that the model moves of all of them (any mix of
    adapters) share generate calls; the rollouts of each match, in its episodes' order.
    ``remotes``: the remote models (by name) that ``remote:<name>`` seats ask; ``learners``: a
    run's several learners (``sp_lightning.learners.Learners``), each answering "the learner" in
    the seats it plays."""
    from envs import make_bots

    arena = Arena(worker, sampling or SamplingSettings(), bots=make_bots(seed), remotes=remotes, learners=learners)
    episodes, seeds = episodes_of(matches)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        rollouts = arena.play(episodes, seeds)
    return split_by_match(matches, rollouts)


def episodes_of(matches: list[Match]) -> tuple[list, list[int]]:
    """Every match's episodes and seeds, one match after the other (what one arena run plays)."""
    return [e for m in matches for e in m.episodes], [s for m in matches for s in m.seeds]


def split_by_match(matches: list[Match], rollouts: list[Rollout]) -> list[list[Rollout]]:
    """``rollouts`` of :func:`episodes_of` ``(matches)``, cut back into each match's own."""
    out, start = [], 0
    for m in matches:
        out.append(rollouts[start:start + len(m.episodes)])
        start += len(m.episodes)
    return out


@dataclass(frozen=True)
class PlayedGame:
    """What an evaluation reads of one game, from the tested policy's seat: small enough to
    gather from every data-parallel rank. ``order`` places it among the match's games (seat,
    then game index), so a split evaluation sums to the one-process one in the same order."""

    seat: str
    payoff: float
    moves: int
    legal_moves: int
    opponent_forfeit: bool
    order: tuple[int, int] = (0, 0)
    result: str = ""
    """``win``, ``draw`` or ``loss``: the game's own verdict where it gives one, else the payoff's sign."""
    scores: dict[str, float] = field(default_factory=dict)
    """The game's own scores of the seat (``Rollout.scores``)."""

    @classmethod
    def of(cls, seat: str, rollout: Rollout, order: tuple[int, int] = (0, 0)) -> PlayedGame:
        steps = rollout.steps_of(seat)
        payoff = rollout.outcome.get(seat, 0.0)
        return cls(seat, payoff, len(steps), sum(not step.info.get("invalid_move", False) for step in steps),
                   opponent_forfeited(seat, rollout), order, result_of(rollout, [seat], payoff),
                   dict(rollout.scores.get(seat, {})))


def summarize(games: Sequence[PlayedGame | tuple[str, Rollout]], policy: str, opponent: str, agents: list[str],
              exclude_opponent_forfeits: bool = False, seed: int = 0) -> EvalResult:
    """Win/draw/loss, payoff and legal-move rate of the policy in each game's seat (games as
    :class:`PlayedGame`, or ``(seat, rollout)``); ``seed`` seeds the payoff's bootstrap interval.
    With ``exclude_opponent_forfeits``, games the opponents lost by their own invalid move are
    counted apart and left out of the rest."""
    games = [g if isinstance(g, PlayedGame) else PlayedGame.of(*g) for g in games]
    forfeits = sum(g.opponent_forfeit for g in games)
    if exclude_opponent_forfeits:
        games = [g for g in games if not g.opponent_forfeit]
    payoffs = [g.payoff for g in games]
    seat_wins: dict[str, list[float]] = {a: [] for a in agents}
    seat_payoffs: dict[str, list[float]] = {a: [] for a in agents}
    for g in games:
        seat_wins[g.seat].append(float(g.result == "win"))
        seat_payoffs[g.seat].append(g.payoff)
    per_seat_payoff = {}
    for seat, values in seat_payoffs.items():
        if values:
            seat_mean, (low, high) = bootstrap_mean_interval(values, seed=seed)
            per_seat_payoff[seat] = (seat_mean, low, high)
    legal, moves = sum(g.legal_moves for g in games), sum(g.moves for g in games)
    mean, ci = bootstrap_mean_interval(payoffs, seed=seed) if payoffs else (math.nan, (math.nan, math.nan))
    scores = {}
    for key in dict.fromkeys(key for g in games for key in g.scores):  # the first game's order
        values = [g.scores[key] for g in games if key in g.scores]
        score_mean, (low, high) = bootstrap_mean_interval(values, seed=seed)
        scores[key] = (score_mean, low, high)
    return EvalResult(
        policy=policy,
        opponent=opponent,
        games=len(games),
        wins=sum(g.result == "win" for g in games),
        draws=sum(g.result == "draw" for g in games),
        losses=sum(g.result == "loss" for g in games),
        payoff_mean=mean,
        payoff_ci=ci,
        legal_move_rate=legal / moves if moves else math.nan,
        per_seat_win_rate={a: sum(w) / max(len(w), 1) for a, w in seat_wins.items()},
        opponent_forfeits=forfeits,
        excludes_opponent_forfeits=exclude_opponent_forfeits,
        payoffs=payoffs,
        per_seat_payoff=per_seat_payoff,
        scores=scores,
    )


def opponent_forfeited(seat: str, rollout: Rollout) -> bool:
    """The policy in ``seat`` won because another seat's invalid move ended the game (only
    meaningful under the forfeit policy, where an invalid move ends the game)."""
    last = rollout.steps[-1] if rollout.steps else None
    return (rollout.outcome.get(seat, 0.0) > 0 and last is not None and last.role != seat
            and bool(last.info.get("invalid_move")))
