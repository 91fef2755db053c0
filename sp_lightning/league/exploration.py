"""Exploration statistics: how varied each agent's play is, as n-gram coverage of its moves.

A policy collapsing onto one line of play repeats the same few move n-grams; one that explores
keeps producing new ones. :class:`NGramCoverage` keeps, per agent id, the set of distinct move
n-grams it has played and how many n-grams it played in all; ``coverage = distinct / total``
is a diversity ratio in (0, 1] (1 when no n-gram ever repeated; 0 before any n-gram). It is
cheap, model-free and comparable across checkpoints of one game, so matchmaking can use it
(``MatchmakingSettings.coverage_weight``) and the league can log it.

N-grams never span two sequences: pass one agent's own moves of one episode per :meth:`add`
call (canonical move strings such as "[4]" or "[bet]"). A sequence shorter than n adds nothing
for that n. The ratio falls as an agent plays more games of a finite game, so compare agents
over similar numbers of moves; key agents as "agent/game" to keep games apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class NGramCoverage:
    """Per-agent n-gram coverage of action sequences.

    Args:
        n: the n-gram length, when ``ns`` is not given.
        ns: several lengths at once, e.g. ``(1, 2)``; the first is the default for
            :meth:`coverage` and :meth:`distinct`, and :meth:`coverages` reports one number per n.
    """

    def __init__(self, n: int = 2, ns: Sequence[int] | None = None):
        self.ns = tuple(ns) if ns is not None else (n,)
        if not self.ns or any(not isinstance(m, int) or m < 1 for m in self.ns) or len(set(self.ns)) != len(self.ns):
            raise ValueError(f"n-gram lengths: expected distinct integers >= 1, got {self.ns}")
        # agent id -> n -> (distinct n-grams, total n-grams seen)
        self._seen: dict[str, dict[int, set[tuple[str, ...]]]] = {}
        self._total: dict[str, dict[int, int]] = {}

    def add(self, agent_id: str, actions: Sequence[str]) -> None:
        """Record one sequence of ``agent_id``'s moves (one episode, in order)."""
        if isinstance(actions, str):
            raise TypeError(f"actions: expected a sequence of move strings, got the string {actions!r}")
        seen = self._seen.setdefault(agent_id, {m: set() for m in self.ns})
        total = self._total.setdefault(agent_id, {m: 0 for m in self.ns})
        actions = list(actions)
        for m in self.ns:
            grams = [tuple(actions[i : i + m]) for i in range(len(actions) - m + 1)]
            seen[m].update(grams)
            total[m] += len(grams)

    def _n(self, n: int | None) -> int:
        if n is None:
            return self.ns[0]
        if n not in self.ns:
            raise ValueError(f"n-gram length {n} is not tracked; tracked: {self.ns}")
        return n

    def distinct(self, agent_id: str, n: int | None = None) -> int:
        """How many distinct n-grams the agent has played (0 for an unknown agent)."""
        n = self._n(n)
        return len(self._seen[agent_id][n]) if agent_id in self._seen else 0

    def total(self, agent_id: str, n: int | None = None) -> int:
        """How many n-grams the agent has played, repeats included."""
        n = self._n(n)
        return self._total[agent_id][n] if agent_id in self._total else 0

    def coverage(self, agent_id: str, n: int | None = None) -> float:
        """distinct / total n-grams: in (0, 1], or 0 when the agent has played none."""
        total = self.total(agent_id, n)
        return self.distinct(agent_id, n) / total if total else 0.0

    def coverages(self, agent_id: str) -> dict[int, float]:
        """Coverage for every tracked n."""
        return {m: self.coverage(agent_id, m) for m in self.ns}

    def state_dict(self) -> dict[str, Any]:
        """JSON-friendly: n-grams as lists of moves, n as string keys."""
        return {
            "ns": list(self.ns),
            "agents": {
                agent: {
                    str(m): {"distinct": sorted(list(g) for g in self._seen[agent][m]), "total": self._total[agent][m]}
                    for m in self.ns
                }
                for agent in self._seen
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ns = tuple(state.get("ns", ()))
        if ns != self.ns:
            raise ValueError(f"coverage state: tracks n-gram lengths {ns}, this tracker expects {self.ns}")
        self._seen, self._total = {}, {}
        for agent, per_n in state["agents"].items():
            self._seen[agent] = {m: {tuple(g) for g in per_n[str(m)]["distinct"]} for m in self.ns}
            self._total[agent] = {m: int(per_n[str(m)]["total"]) for m in self.ns}
