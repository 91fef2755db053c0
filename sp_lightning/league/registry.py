"""The league on disk: one JSON file that the trainer and a background evaluator process share.

Both processes read-modify-write the whole file (the trainer adds checkpoints and records its
training matches, the evaluator records tournament results), and either may be killed at any
moment. So:

- Every change runs in :meth:`LeagueRegistry.transaction`, which holds a file lock
  (``<path>.lock``, an OS ``flock`` through ``filelock``) from re-reading the file until the new
  file is in place: no process overwrites another's update with a stale copy. The OS drops the
  lock when its holder dies, even by SIGKILL, so a killed writer never blocks the others.
- A write goes through ``sp_lightning.atomic_file.atomic_write``: a temporary file in the same
  directory, flushed and fsynced, replaces the target with ``os.replace`` (atomic) and then the
  directory is fsynced. A reader therefore sees
  the previous complete file or the new one, never half of one, and reads take no lock.
  The two fsyncs (the main cost of a write) make the new state survive a power loss
  too; ``durable=False`` skips them and keeps everything else, as only the machine going down
  can lose a write that reached the page cache.

What a kill leaves: the state of the last finished transaction, plus at most a stray
``<name>.<uuid>.tmp`` that the next writer deletes. Only the transaction that was running is lost.

Schema (``schema_version`` 1; a newer version is refused, not guessed at)::

    {"schema_version": 1,
     "metadata": {"run_name", "created_at", "best_agent", "best_rating", "next_match_id", ...},
     "agents": {id: AgentRecord},
     "matches": [MatchRecord, ...]}   # the newest ``max_history``; match ids keep counting

``best_agent`` is the checkpoint with the highest conservative TrueSkill (``mu - 3 sigma``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from filelock import FileLock

from sp_lightning.atomic_file import atomic_write, remove_stray_temp_files

from .ratings import TrueSkillRatings, elo_update, mean_by_agent, ranks_from_scores

SCHEMA_VERSION = 1
AGENT_TYPES = ("baseline", "checkpoint", "fixed", "learner", "best_response")
DEFAULT_ELO = 1000.0
log = logging.getLogger(__name__)


def _records(cls: type, items: Iterable[dict[str, Any]]) -> list[Any]:
    """``cls(**item)`` for each item (the whole history is rebuilt on every read: keep it lean)."""
    try:
        return [cls(**item) for item in items]
    except TypeError as e:  # an unknown or missing key
        names = [f.name for f in dataclasses.fields(cls)]
        raise ValueError(f"{cls.__name__}: expected keys among {names} ({e})") from e


class _Record:
    """JSON round trip of a registry dataclass."""

    def to_dict(self, copy: bool = True) -> dict[str, Any]:
        """The fields as plain data: a shallow copy with list and dict fields copied
        (``dataclasses.asdict`` deep-copies every value and was most of a transaction's time), or
        with ``copy=False`` the record's own ``__dict__``, for encoding it at once."""
        if not copy:
            return self.__dict__
        out = dict(self.__dict__)
        for key, value in out.items():
            if isinstance(value, (list, dict)):
                out[key] = value.copy()
        return out


@dataclass
class AgentRecord(_Record):
    """One league member; ``policy`` is a policy spec such as ``"bot:random"`` or
    ``"checkpoint:ckpt-000100"``; ``parent`` is the agent it was trained from."""

    id: str
    type: str
    policy: str
    adapter_path: str | None = None
    step: int | None = None
    created_at: float = field(default_factory=time.time)
    parent: str | None = None
    tags: list[str] = field(default_factory=list)
    mu: float = 25.0
    sigma: float = 25.0 / 3.0
    elo: float = DEFAULT_ELO
    matches: int = 0
    stats: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.type not in AGENT_TYPES:
            raise ValueError(
                f"agent {self.id!r}: type must be one of {AGENT_TYPES}, got {self.type!r}")


@dataclass
class MatchRecord(_Record):
    """One played match: ``agents[k]`` (one per team or seat) got payoff ``scores[k]``."""

    id: int
    step: int | None
    source: str
    agents: list[str]
    scores: list[float]
    created_at: float


@dataclass
class LeagueState:
    metadata: dict[str, Any]
    agents: dict[str, AgentRecord] = field(default_factory=dict)
    matches: list[MatchRecord] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def empty(cls, run_name: str = "") -> LeagueState:
        meta = {"run_name": run_name, "created_at": time.time(), "best_agent": None,
                "best_rating": None, "next_match_id": 0}
        return cls(metadata=meta)

    def to_dict(self, copy: bool = True) -> dict[str, Any]:
        """Plain data (see _Record.to_dict); ``copy=False`` shares the records' dicts."""
        return {"schema_version": self.schema_version,
                "metadata": dict(self.metadata) if copy else self.metadata,
                "agents": {k: a.to_dict(copy) for k, a in self.agents.items()},
                "matches": [m.to_dict(copy) for m in self.matches]}

    @classmethod
    def from_dict(cls, data: Any, where: str = "league state") -> LeagueState:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            newer = isinstance(version, int) and version > SCHEMA_VERSION
            raise ValueError(
                f"{where}: schema_version {version!r} is not supported, expected {SCHEMA_VERSION}"
                + (" (written by a newer sp_lightning; upgrade it)" if newer else ""))
        agents, matches, metadata = data.get("agents", {}), data.get("matches", []), data.get("metadata", {})
        if not isinstance(agents, dict) or not all(isinstance(a, dict) for a in agents.values()):
            raise ValueError(f"{where}: expected 'agents' to map each id to an agent's record, got "
                             f"{type(agents).__name__}")
        if not isinstance(matches, list) or not all(isinstance(m, dict) for m in matches):
            raise ValueError(f"{where}: expected 'matches' to be a list of match records")
        if not isinstance(metadata, dict):
            raise ValueError(f"{where}: expected 'metadata' to be a JSON object, got {type(metadata).__name__}")
        return cls(metadata=dict(metadata),
                   agents=dict(zip(agents, _records(AgentRecord, agents.values()))),
                   matches=_records(MatchRecord, matches))


class LeagueRegistry:
    """The league file at ``path``; each method is one short locked transaction or a lock-free
    read. ``lock_timeout`` (seconds) bounds the wait for another process's transaction."""

    def __init__(self, path: str | os.PathLike[str], run_name: str = "", max_history: int = 20000,
                 trueskill: TrueSkillRatings | None = None, elo_k: float = 32.0,
                 lock_timeout: float = 300.0, durable: bool = True) -> None:
        if max_history < 0:
            raise ValueError(f"max_history must be >= 0, got {max_history}")
        self.path = os.fspath(path)
        self.run_name = run_name
        self.max_history = max_history
        self.trueskill = trueskill or TrueSkillRatings()
        self.elo_k = elo_k
        self.lock_timeout = lock_timeout
        self.durable = durable
        self._lock: FileLock | None = None
        self._lock_pid = -1
        self._local = threading.local()

    # -- file access ------------------------------------------------------------------------

    def _file_lock(self) -> FileLock:
        if self._lock_pid != os.getpid():  # a forked child gets a lock of its own
            # a short poll interval: the lock is held for milliseconds, 8 waiting processes
            # polling at the default 50 ms would leave it idle most of the time
            self._lock = FileLock(self.path + ".lock", timeout=self.lock_timeout,
                                  poll_interval=0.002)
            self._lock_pid = os.getpid()
        return self._lock

    def read(self) -> LeagueState:
        """A consistent snapshot (no lock needed: the file is only ever replaced whole)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return LeagueState.empty(self.run_name)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"league file {self.path} is not valid JSON: {e}") from e
        return LeagueState.from_dict(data, where=f"league file {self.path}")

    def _write(self, state: LeagueState) -> None:
        # encoded as they are (copy=False): no copy of a long history
        text = json.dumps(state.to_dict(copy=False), separators=(",", ":"), allow_nan=False,
                          check_circular=False)
        with atomic_write(self.path, "w", durable=self.durable, encoding="utf-8") as f:
            f.write(text)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[LeagueState]:
        """Lock, re-read, yield the state to change in place; written on normal exit only."""
        if getattr(self._local, "active", False):
            raise RuntimeError(f"nested transaction on {self.path}: the inner write would be lost")
        with self._file_lock():
            self._local.active = True
            try:
                # anything matching our temp names now is left by a writer that was killed
                remove_stray_temp_files(self.path)
                state = self.read()
                yield state
                self._write(state)
            finally:
                self._local.active = False

    # -- agents -----------------------------------------------------------------------------

    @staticmethod
    def _require(state: LeagueState, agent_id: str) -> AgentRecord:
        if agent_id not in state.agents:
            raise ValueError(f"unknown agent {agent_id!r}; known agents: {sorted(state.agents)}")
        return state.agents[agent_id]

    def add_agent(self, record: AgentRecord, exist_ok: bool = False) -> AgentRecord:
        """Add ``record``; returns the stored record (the existing one when ``exist_ok``)."""
        with self.transaction() as state:
            if record.id in state.agents:
                if not exist_ok:
                    raise ValueError(f"agent {record.id!r} is already in the league "
                                     "(pass exist_ok=True to keep the existing one)")
                return state.agents[record.id]
            state.agents[record.id] = record
            return record

    def remove_agent(self, agent_id: str) -> None:
        with self.transaction() as state:
            self._require(state, agent_id)
            del state.agents[agent_id]
            self._update_best(state)

    def get(self, agent_id: str) -> AgentRecord | None:
        """The agent's record, or None if the league has no such agent."""
        return self.read().agents.get(agent_id)

    def agents(self, type: str | None = None) -> list[AgentRecord]:
        """All agents in the order they were added, or only those of one ``type``."""
        if type is not None and type not in AGENT_TYPES:
            raise ValueError(f"type must be one of {AGENT_TYPES} or None, got {type!r}")
        return [a for a in self.read().agents.values() if type is None or a.type == type]

    def update_agent(self, agent_id: str, **fields: Any) -> AgentRecord:
        names = {f.name for f in dataclasses.fields(AgentRecord)} - {"id"}
        unknown = sorted(set(fields) - names)
        if unknown:
            raise ValueError(
                f"update_agent: no fields {unknown}; settable fields are {sorted(names)}")
        with self.transaction() as state:
            record = dataclasses.replace(self._require(state, agent_id), **fields)
            state.agents[agent_id] = record
            return record

    def set_metadata(self, **kv: Any) -> None:
        with self.transaction() as state:
            state.metadata.update(kv)

    # -- matches ----------------------------------------------------------------------------

    def record_matches(self, matches: list[tuple[list[str], list[float]]], step: int | None = None,
                       source: str = "train") -> list[MatchRecord]:
        """Append the matches to the history and update TrueSkill, Elo and match counts, all in
        one transaction. An agent in several entries of one match counts the match once and is
        rated once, by its mean score over those entries (see ``_rate``)."""
        with self.transaction() as state:
            for agent_ids, scores in matches:
                finite = all(map(math.isfinite, scores))
                if len(agent_ids) != len(scores) or len(agent_ids) < 2 or not finite:
                    raise ValueError("a match needs at least 2 agents and one finite score per "
                                     f"agent, got agents {agent_ids} and scores {scores}")
                for agent_id in agent_ids:
                    self._require(state, agent_id)
            now, out = time.time(), []
            for agent_ids, scores in matches:
                record = MatchRecord(id=int(state.metadata.get("next_match_id", 0)), step=step,
                                     source=source, agents=list(agent_ids),
                                     scores=[float(s) for s in scores], created_at=now)
                state.metadata["next_match_id"] = record.id + 1
                state.matches.append(record)
                out.append(record)
                self._rate(state, record)
            if len(state.matches) > self.max_history:
                del state.matches[: len(state.matches) - self.max_history]
            self._update_best(state)
        return out

    def _rate(self, state: LeagueState, match: MatchRecord) -> None:
        """An agent in several seats of a match (a league member drawn twice for a seven-power
        table, or mirror play) is rated once, by its mean score over its seats: it is never rated
        against itself, and a match of one agent alone rates nobody."""
        means = mean_by_agent(match.agents, match.scores)
        for agent_id in means:
            state.agents[agent_id].matches += 1
        if len(means) < 2:
            return
        records = [state.agents[agent_id] for agent_id in means]
        scores = list(means.values())
        try:
            new = self.trueskill.rate([[(r.mu, r.sigma)] for r in records],
                                      ranks_from_scores(scores))
        except FloatingPointError as e:  # the package gives up on very unlikely outcomes
            log.warning("match %d: TrueSkill update skipped (%s)", match.id, e)
            new = [[(r.mu, r.sigma)] for r in records]
        elos = elo_update([r.elo for r in records], scores, k=self.elo_k)
        for r, [(mu, sigma)], elo in zip(records, new, elos):
            r.mu, r.sigma, r.elo = mu, sigma, elo

    def _update_best(self, state: LeagueState) -> None:
        ranked = [(TrueSkillRatings.conservative(a.mu, a.sigma), a.id)
                  for a in state.agents.values() if a.type == "checkpoint"]
        best = max(ranked, default=None, key=lambda t: t[0])
        state.metadata["best_agent"] = best[1] if best else None
        state.metadata["best_rating"] = best[0] if best else None

    # -- checkpointing ----------------------------------------------------------------------

    def snapshot_dict(self) -> dict[str, Any]:
        """The whole league as plain JSON-able data (for a Lightning checkpoint)."""
        return self.read().to_dict()

    def restore(self, data: dict[str, Any]) -> None:
        """Replace the league with ``data`` from :meth:`snapshot_dict` (on resume); whatever the
        file held, including other processes' updates since the snapshot, is overwritten."""
        restored = LeagueState.from_dict(data, where="restored league state")
        with self.transaction() as state:
            state.metadata = restored.metadata
            state.agents, state.matches = restored.agents, restored.matches
