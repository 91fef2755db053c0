"""The league's messages, as dataclasses: what crosses between data-parallel ranks, and between
the trainer and its background evaluator process.

Between ranks (pickled by ``sp_lightning.distributed``'s gather and broadcast): every step each
rank hands the lead a :class:`RankReport` of its games, and the lead sends every rank one
:class:`StepNews`; when training starts the lead sends :class:`StartNews`. A message names each
thing it carries, so a field added or moved is a change every reader sees, not a key or a tuple
position that one of them misreads.

Between processes (JSON files in ``<league dir>/evaluations/``): the trainer writes an
:class:`EvaluatorSpec`, the evaluator process writes back an :class:`EvaluatorResult`.

No Lightning and no torch here: the evaluator process imports this module too.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from sp_lightning.atomic_file import atomic_write
from sp_lightning.league.registry import LeagueState


def league_view(state: LeagueState) -> LeagueState:
    """The league's members and metadata without its match history: what every rank's sampler
    is refreshed from (the history stays on the lead's disk, and would only grow the message)."""
    return LeagueState(metadata=dict(state.metadata), agents=dict(state.agents), matches=[],
                       schema_version=state.schema_version)


# ---- between ranks -------------------------------------------------------------------------------
@dataclass
class RankReport:
    """One rank's finished games of a step (``LeagueSampler.drain``), for the lead to record."""

    matches: list[tuple[list[str], list[float]]] = field(default_factory=list)
    """Rating matches: the agents' ids (the learner first) and their payoffs."""
    buckets: list[str] = field(default_factory=list)
    """The matchmaking bucket of each opponent seated (the realised opponent mix)."""
    results: list[tuple[str, float]] = field(default_factory=list)
    """(opponent type, the learner's payoff) per game; type ``mirror`` for the learner against itself."""
    exploiter_results: list[tuple[str, float, float]] = field(default_factory=list)
    """(exploiter learner, its payoff, its margin over its opponents' mean payoff) per game it played."""

    @classmethod
    def merged(cls, reports: list[RankReport]) -> RankReport:
        """Every rank's report as one, in rank order (what the lead records)."""
        return cls(matches=[m for r in reports for m in r.matches], buckets=[b for r in reports for b in r.buckets],
                   results=[x for r in reports for x in r.results],
                   exploiter_results=[x for r in reports for x in r.exploiter_results])


@dataclass(frozen=True)
class Promotion:
    """A learner's adapter snapshotted into the league this step as checkpoint ``agent``. The
    weights are the same on every rank, so a follower saves its own copy rather than reading
    the lead's ``path``."""

    agent: str
    learner: str
    """The learner snapshotted ("" the one unnamed learner)."""
    path: str
    """Where the lead saved the adapter (the league's ``adapters/<agent>``)."""


@dataclass(frozen=True)
class Reset:
    """An exploiter that starts over, alike on every rank: ``seed`` draws its fresh adapter."""

    learner: str
    seed: int


@dataclass(frozen=True)
class BestResponse:
    """An exact best response in the league, which every rank seats as the bot ``bot:<agent>``
    in games of ``game`` (``sp_lightning.league.best_responses``)."""

    agent: str
    game: str
    step: int
    """The step it was computed at (its bot's random stream starts from it)."""
    moves: dict[str, list[str]]
    """Position key -> the best moves there."""

    @classmethod
    def from_table(cls, agent: str, table: dict[str, Any]) -> BestResponse:
        """From a table as ``best_responses.load_table`` reads it from disk."""
        return cls(agent=agent, game=table["game"], step=int(table["step"]), moves=dict(table["moves"]))


@dataclass
class StartNews:
    """The lead's league when training starts (new or restored), for every rank."""

    league: LeagueState
    """Members and metadata (:func:`league_view`)."""
    adapters: dict[str, dict[str, bytes]] | None
    """Checkpoint id -> its adapter's files (relative path -> bytes), for followers to copy;
    None with one process (nothing to send)."""
    best_responses: list[BestResponse]
    """Every best response in the league, for every rank to seat."""


@dataclass
class StepNews:
    """What the lead made of a step, for every rank: the league after it, what changed, and the
    metrics every rank logs alike."""

    league: LeagueState
    """Members and metadata (:func:`league_view`)."""
    promoted: list[Promotion] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    """Ids of the checkpoints that left the league (their adapters are no longer served)."""
    metrics: dict[str, float] = field(default_factory=dict)
    resets: list[Reset] = field(default_factory=list)
    best_responses: list[BestResponse] = field(default_factory=list)
    """Best responses that joined this step."""


# ---- between the trainer and the evaluator process ------------------------------------------------
@dataclass
class EvaluatorSpec:
    """A background tournament: ``agent`` against each of ``gatekeepers`` in each of ``games``.
    The settings travel as plain data (``dataclasses.asdict``) for the evaluator to rebuild."""

    policy: dict[str, Any]
    """``PolicySettings`` (the base model is rebuilt from it; checkpoints load as adapters)."""
    games: list[dict[str, Any]]
    """Each game's ``GameSettings`` fields (id, env_kwargs, prompts, reward)."""
    sampling: dict[str, Any]
    """``SamplingSettings`` of evaluation games."""
    registry: str
    """The league file, where the games are recorded (under its lock)."""
    agent: str
    gatekeepers: list[str]
    games_per_seat: int
    games_per_match: int
    seed: int
    step: int
    threads: int
    env_overrides: dict[str, Any] = field(default_factory=dict)

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(asdict(self), f)

    @classmethod
    def read(cls, path: str) -> EvaluatorSpec:
        with open(path) as f:
            return cls(**json.load(f))


@dataclass
class GatekeeperResult:
    """The agent's games against one gatekeeper in one game."""

    win_rate: float
    payoff: float
    legal_move_rate: float
    games: int


@dataclass
class EvaluatorResult:
    """A finished tournament (``SPEC.result.json``)."""

    agent: str
    step: int
    results: dict[str, dict[str, GatekeeperResult]] = field(default_factory=dict)
    """Game name -> gatekeeper id -> result (a gatekeeper pruned meanwhile is absent)."""
    seconds: float = 0.0

    def write(self, path: str) -> None:
        """Written whole, then renamed into place: the trainer polls for this file while the
        evaluator's process lives on, and must never read it half written."""
        with atomic_write(path, "w", durable=False) as f:
            json.dump(asdict(self), f)

    @classmethod
    def read(cls, path: str) -> EvaluatorResult:
        with open(path) as f:
            data = json.load(f)
        results = {game: {g: GatekeeperResult(**r) for g, r in per_game.items()}
                   for game, per_game in data.pop("results").items()}
        return cls(results=results, **data)
