"""Which games a run plays, against whom, and how a policy is evaluated against a bot.

A game in a config is a registered id (``tictactoe_v1``) or a class path, its env kwargs, a
sampling weight, the opponent mix and the reward settings. Each training episode seats the
learner in a random seat and fills the other seats from the opponent mix: ``learner`` (mirror
self-play), ``base`` (the base model, adapter off) or ``bot:<name>`` (e.g. ``bot:random``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from functools import partial

from sp_lightning.episodes import GameEpisode
from sp_lightning.prompts import make_template
from sp_lightning.rubric import RewardSettings
from sp_lightning.types import LEARNER, PolicyRef


def parse_policy(spec: str) -> PolicyRef:
    """``learner`` | ``base`` | ``bot:<name>`` | ``checkpoint:<id>`` -> PolicyRef."""
    kind, _, name = spec.partition(":")
    if kind in ("learner", "base") and not name:
        return PolicyRef(kind)
    if kind in ("bot", "checkpoint") and name:
        return PolicyRef(kind, name)
    raise ValueError(
        f"opponent {spec!r}: expected 'learner', 'base', 'bot:<name>' or 'checkpoint:<id>'"
    )


@dataclass
class GameSettings:
    """One game of the training mix."""

    id: str
    """A registered game id (see envs.GAMES) or a class path 'package.module.Class'."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the env's constructor (e.g. invalid_move: retry)."""
    weight: float = 1.0
    """Relative share of the episodes of each batch."""
    opponents: dict[str, float] = field(default_factory=lambda: {"learner": 1.0})
    """Opponent mix: policy spec -> weight. {'learner': 1} is mirror self-play."""
    system_prompt: str | None = None
    """The system prompt of every seat; None keeps the template's own (none for 'plain')."""
    template: str = "plain"
    """Prompt template: 'plain', 'reasoning' (see sp_lightning.prompts) or a class path."""
    template_args: dict = field(default_factory=dict)
    """Keyword arguments of the template (e.g. instruction)."""
    reward: RewardSettings = field(default_factory=RewardSettings)

    def __post_init__(self):
        if not self.opponents or any(w < 0 for w in self.opponents.values()):
            raise ValueError(f"games[{self.id}].opponents: expected non-negative weights, got {self.opponents}")
        self._opponents = [(parse_policy(spec), w) for spec, w in self.opponents.items()]
        self._rubric = self.reward.build()
        prompt = {} if self.system_prompt is None else {"system_prompt": self.system_prompt}
        try:
            self._template = make_template(self.template, **prompt, **self.template_args)
        except ValueError as exc:
            raise ValueError(f"games[{self.id}].template: {exc}") from exc
        from envs import make

        self._env_factory = partial(make, self.id, **self.env_kwargs)
        probe = self._env_factory()
        self.agents = list(probe.possible_agents)
        self.info = getattr(probe, "game_info", None)
        probe.close()

    @property
    def name(self) -> str:
        """The game's own name (game_info.name), which also names its metrics."""
        return self.info.name if self.info is not None else self.id.rsplit(".", 1)[-1]

    def episode(self, seats: dict[str, PolicyRef], **env_overrides) -> GameEpisode:
        factory = partial(self._env_factory, **env_overrides) if env_overrides else self._env_factory
        return GameEpisode(
            name=self.name,
            env_factory=factory,
            seats=seats,
            rubric=self._rubric,
            template=self._template,
        )

    def training_episode(self, rng: random.Random) -> GameEpisode:
        """The learner in one random seat; every other seat from the opponent mix."""
        policies, weights = zip(*self._opponents)
        opponent = rng.choices(policies, weights=weights)[0]
        learner_seat = rng.choice(self.agents)
        seats = {a: (LEARNER if a == learner_seat else opponent) for a in self.agents}
        return self.episode(seats)


@dataclass
class EvalResult:
    """A policy's results against an opponent over n games, with 95% intervals."""

    games: int
    wins: int
    draws: int
    losses: int
    payoff_mean: float
    payoff_ci: tuple[float, float]
    legal_move_rate: float
    per_seat_win_rate: dict[str, float]

    @property
    def win_rate(self) -> float:
        return self.wins / max(self.games, 1)

    @property
    def win_ci(self) -> tuple[float, float]:
        return wilson_interval(self.wins, self.games)

    def as_metrics(self, prefix: str) -> dict[str, float]:
        n = max(self.games, 1)
        out = {
            f"{prefix}/win_rate": self.win_rate,
            f"{prefix}/win_rate_ci_low": self.win_ci[0],
            f"{prefix}/win_rate_ci_high": self.win_ci[1],
            f"{prefix}/draw_rate": self.draws / n,
            f"{prefix}/loss_rate": self.losses / n,
            f"{prefix}/payoff": self.payoff_mean,
            f"{prefix}/payoff_ci_low": self.payoff_ci[0],
            f"{prefix}/payoff_ci_high": self.payoff_ci[1],
            f"{prefix}/legal_move_rate": self.legal_move_rate,
        }
        out.update({f"{prefix}/win_rate_{seat}": r for seat, r in self.per_seat_win_rate.items()})
        return out

    def summary(self) -> str:
        lo, hi = self.win_ci
        plo, phi = self.payoff_ci
        return (
            f"{self.games} games: win {self.win_rate:.3f} [{lo:.3f}, {hi:.3f}], "
            f"draw {self.draws / max(self.games, 1):.3f}, loss {self.losses / max(self.games, 1):.3f}, "
            f"payoff {self.payoff_mean:+.3f} [{plo:+.3f}, {phi:+.3f}], legal moves {self.legal_move_rate:.3f}"
        )


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (well-behaved near 0 and 1)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(values: list[float], z: float = 1.96) -> tuple[float, tuple[float, float]]:
    """Mean and its normal-approximation 95% interval."""
    n = len(values)
    if n == 0:
        return 0.0, (0.0, 0.0)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / max(n - 1, 1)
    half = z * math.sqrt(var / n)
    return mean, (mean - half, mean + half)


def evaluate(arena, game: GameSettings, games: int, opponent: str = "bot:random", seed: int = 12345,
             env_overrides: dict | None = None) -> EvalResult:
    """The learner against ``opponent`` over ``games`` games, split evenly over the seats.

    Each seat gets ``games // seats`` games (the learner in that seat, the opponent elsewhere).
    """
    opponent_ref = parse_policy(opponent)
    episodes, seeds = [], []
    per_seat = max(1, games // len(game.agents))
    for s, seat in enumerate(game.agents):
        seats = {a: (LEARNER if a == seat else opponent_ref) for a in game.agents}
        for i in range(per_seat):
            episodes.append(game.episode(seats, **(env_overrides or {})))
            seeds.append(seed + s * 100_000 + i)
    rollouts = arena.play(episodes, seeds)
    payoffs, legal, moves = [], 0, 0
    seat_wins: dict[str, list[float]] = {a: [] for a in game.agents}
    for rollout in rollouts:
        seat = next(a for a, p in rollout.seats.items() if p.kind == "learner")
        payoff = rollout.outcome.get(seat, 0.0)
        payoffs.append(payoff)
        seat_wins[seat].append(float(payoff > 0))
        for step in rollout.steps_of(seat):
            moves += 1
            legal += not step.info.get("invalid_move", False)
    mean, ci = mean_interval(payoffs)
    return EvalResult(
        games=len(rollouts),
        wins=sum(p > 0 for p in payoffs),
        draws=sum(p == 0 for p in payoffs),
        losses=sum(p < 0 for p in payoffs),
        payoff_mean=mean,
        payoff_ci=ci,
        legal_move_rate=legal / max(moves, 1),
        per_seat_win_rate={a: sum(w) / max(len(w), 1) for a, w in seat_wins.items()},
    )
