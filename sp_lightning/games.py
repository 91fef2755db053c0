"""Which games a run plays and who sits in which seat of each training episode.

A game in a config is a registered id (``tictactoe_v1``) or a class path, its env kwargs, a
sampling weight, the opponent mix and the reward settings. Who sits where is decided by an
opponent sampler, chosen by class in the config (``data.opponents``): :class:`FixedMix` (the
default) seats the learner in a random seat and fills the others from the game's opponent mix:
``learner`` (mirror self-play), ``base`` (the base model, adapter off), ``bot:<name>`` (e.g.
``bot:random``) or ``checkpoint:<id>``; the league's sampler (``sp_lightning.league.sampler``)
picks league members by matchmaking instead.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sp_lightning.episodes import GameEpisode
from sp_lightning.errors import check_int
from sp_lightning.prompts import PromptTemplate, make_template
from sp_lightning.rubric import RewardSettings
from sp_lightning.types import LEARNER, PolicyKind, PolicyRef, parse_policy

DEFAULT_MAX_TURNS = 500
"""The cut-off of a game that names no ``max_turns`` and whose own bound is lower (or unknown)."""

MIRROR = {"learner": 1.0}
"""The opponent mix of a game that names none: the learner plays itself."""


@dataclass
class GameSettings:
    """One game of the training mix."""

    id: str
    """A registered game id (see envs.GAMES) or a class path 'package.module.Class'."""
    env_kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the env's constructor (e.g. invalid_move: retry)."""
    weight: float = 1.0
    """Relative share of the episodes of each batch."""
    opponents: dict[str, float] | None = None
    """Opponent mix of the default opponent sampler: policy spec -> weight. Null is mirror
    self-play ({learner: 1}). A league (``data.league``) chooses the opponents itself: setting
    both is an error."""
    system_prompt: str | None = None
    """The system prompt of every seat; None keeps the template's own (none for 'plain')."""
    template: str = "plain"
    """Prompt template: 'plain', 'reasoning' (see sp_lightning.prompts) or a class path."""
    template_args: dict = field(default_factory=dict)
    """Keyword arguments of the template (e.g. instruction)."""
    reward: RewardSettings = field(default_factory=RewardSettings)
    max_turns: int | None = None
    """Actions after which a game still running is cut off and scores 0 for every seat (a
    stated, logged rule; see GameEpisode). Null: the larger of 500 and the game's own bound on
    its length (``game_info.max_turns``: Diplomacy's grows with ``max_years``); every other
    built-in game ends far sooner than 500."""

    def __post_init__(self):
        mix = MIRROR if self.opponents is None else self.opponents
        try:
            self._opponents = [(parse_policy(spec, "opponent"), w) for spec, w in mix.items()]
        except ValueError as exc:
            raise ValueError(f"games[{self.id}].opponents: {exc}") from exc
        self._rubric = self.reward.build()
        prompt = {} if self.system_prompt is None else {"system_prompt": self.system_prompt}
        try:
            self._template = make_template(self.template, **prompt, **self.template_args)
        except ValueError as exc:
            raise ValueError(f"games[{self.id}].template: {exc}") from exc
        except TypeError as exc:  # an argument the template does not take
            raise ValueError(f"games[{self.id}].template_args: {exc}") from exc
        from envs import make

        self._env_factory = partial(make, self.id, **self.env_kwargs)
        self._facts: tuple[list[str], Any] | None = None  # (agents, game_info), from the first env built

    def check(self, key: str | None = None) -> None:
        """Build and deal one env of this game, so that env kwargs it refuses fail before any
        training, naming ``key`` (the game's config key); the game's seats and facts are read
        from it. Reading the config builds nothing: the run's engine calls this once."""
        if self._facts is not None:
            return
        key = key or f"games[{self.id}]"
        check_int(self.max_turns, f"{key}.max_turns", 1, nullable=True)
        weights = [w for _, w in self._opponents]
        if not weights or any(not w >= 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"{key}.opponents: expected weights >= 0 with at least one > 0 (a share of the "
                             f"games against each), got {self.opponents}")
        try:
            probe = self._env_factory()
            probe.reset(seed=0)
        except (TypeError, ValueError, AssertionError) as exc:  # AssertionError: TextArena's checks
            raise ValueError(f"{key} ({self.id}) with env_kwargs {self.env_kwargs}: {exc}") from exc
        self._facts = (list(probe.possible_agents), getattr(probe, "game_info", None))
        probe.close()
        if self.max_turns is None:
            self.max_turns = max(DEFAULT_MAX_TURNS, getattr(self._facts[1], "max_turns", 0))

    @property
    def opponent_policies(self) -> list[PolicyRef]:
        """The policies of this game's opponent mix (``opponents``)."""
        return [policy for policy, _ in self._opponents]

    @property
    def agents(self) -> list[str]:
        """The game's seats (``player_0`` ...)."""
        self.check()
        return self._facts[0]

    @property
    def info(self):
        """The game's facts (``envs.GameInfo``), or None for a game without them."""
        self.check()
        return self._facts[1]

    @property
    def prompt_template(self) -> PromptTemplate:
        return self._template

    @property
    def name(self) -> str:
        """The game's own name (game_info.name), which also names its metrics."""
        return self.info.name if self.info is not None else self.id.rsplit(".", 1)[-1]

    def make_env(self, **env_overrides):
        """A fresh env of this game, with its env_kwargs (and any overrides)."""
        return self._env_factory(**env_overrides)

    def episode(self, seats: dict[str, PolicyRef], **env_overrides) -> GameEpisode:
        self.check()  # resolves a null max_turns from the game's own bound
        return GameEpisode(
            name=self.name,
            env_factory=partial(self.make_env, **env_overrides),
            seats=seats,
            rubric=self._rubric,
            template=self._template,
            max_turns=self.max_turns,
        )

    def serve_checkpoint_dirs(self, serve) -> None:
        """Each ``checkpoint:<adapter dir>`` of the opponent mix replaced by what ``serve`` makes
        of it (``evaluation.matches.serve_policy``: registered with the rollout worker, served by
        the directory's name): a fixed past policy to train against, an exploiter's target."""
        self._opponents = [(serve(p) if p.kind is PolicyKind.CHECKPOINT and os.path.isdir(p.name) else p, w)
                           for p, w in self._opponents]

    def mix_opponent(self, rng: random.Random) -> PolicyRef:
        """One draw from this game's opponent mix."""
        policies, weights = zip(*self._opponents)
        return rng.choices(policies, weights=weights)[0]


@dataclass
class HeldOutGame:
    """A game a run validates and evaluates its policy on and never trains on
    (``data.eval.held_out``): transfer to a game the policy did not play in training, as
    Unstable Baselines keeps ``evaluation_envs`` apart from ``training_envs`` and SPIRAL measures
    transfer to games it never trained on. Its figures read ``val/held_out/<game>/...``."""

    id: str
    """A registered game id (see envs.GAMES) or a class path, as in ``data.games``."""
    opponent: str | None = None
    """Who the policy plays there: ``bot:<name>``, ``base``, ``checkpoint:<adapter dir>`` or
    ``remote:<name>``; null: ``data.eval.opponent``."""
    games: int | None = None
    """Games a validation plays, split evenly over the seats; null: ``data.eval.games``."""
    env_kwargs: dict = field(default_factory=dict)
    system_prompt: str | None = None
    template: str = "plain"
    template_args: dict = field(default_factory=dict)
    max_turns: int | None = None

    def __post_init__(self):
        if self.games is not None and (not isinstance(self.games, int) or self.games < 1):
            raise ValueError(f"data.eval.held_out[{self.id}].games: expected an int >= 1 or null, got {self.games!r}")
        self.game = GameSettings(id=self.id, env_kwargs=self.env_kwargs, system_prompt=self.system_prompt,
                                 template=self.template, template_args=self.template_args,
                                 max_turns=self.max_turns)

    def opponent_or(self, default: str) -> str:
        """Its own opponent, or the run's evaluation opponent (``default``) where it names none."""
        return self.opponent or default


class OpponentSampler:
    """Decides who sits in which seat of each training episode (``data.opponents``).

    ``seats`` is called once per episode with the batch's RNG (checkpointed with the run);
    ``observe`` sees every finished batch (for ratings and win-rate estimates); the state
    methods let a resumed run continue the same statistics.
    """

    def seats(self, game: GameSettings, rng: random.Random) -> dict[str, PolicyRef]:
        raise NotImplementedError

    def batch_seats(self, games: list[GameSettings], rng: random.Random) -> list[dict[str, PolicyRef]]:
        """The seats of a batch's games, in turn (a sampler that must see the whole batch, as the
        league's cluster sampling does, overrides this)."""
        return [self.seats(game, rng) for game in games]

    def observe(self, rollouts: list) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class FixedMix(OpponentSampler):
    """The learner in a random seat; every other seat from the game's fixed opponent mix."""

    def seats(self, game: GameSettings, rng: random.Random) -> dict[str, PolicyRef]:
        opponent = game.mix_opponent(rng)
        learner_seat = rng.choice(game.agents)
        return {a: (LEARNER if a == learner_seat else opponent) for a in game.agents}
