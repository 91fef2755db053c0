"""Which of several OpenAI-compatible servers are in the rotation, and what each has loaded.

``ServerRolloutWorker`` spreads its requests over a fleet of servers. A server that stops
answering (refused connections, timeouts, 5xx after the client's retries) is taken out of the
rotation, and the request it failed goes to the next server in line; nothing is lost, and since
a failed request returned nothing, nothing is counted twice. A server out of the rotation is
probed (``/health``) every ``probe_every_s`` seconds, and once it answers it is taken back with
what it reports loaded (``/v1/models``: a restarted server has lost its adapters, which are then
loaded again as they are asked for).

This module only keeps the books (thread-safe: the worker sends from a thread pool); the HTTP
lives in ``rollout.server``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)


class ServerFleet:
    """The rotation of servers: round-robin over those in it, each with the adapter names it holds."""

    def __init__(self, urls: list[str], *, first: int = 0, probe_every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        """
        Args:
            urls: The servers' API roots.
            first: Where the round-robin starts (the rank: ranks sharing a fleet start on different
                servers).
            probe_every_s: Seconds between probes of a server out of the rotation.
            clock: Monotonic seconds (a test may pass its own).
        """
        if probe_every_s <= 0:
            raise ValueError(f"rollout.probe_every_s: expected > 0, got {probe_every_s}")
        self.urls = list(urls)
        self.probe_every_s = probe_every_s
        self._clock = clock
        self._turn = itertools.count(first)
        self._lock = threading.Lock()
        self._next_probe: dict[str, float] = {}  # servers out of the rotation -> when to probe next
        self._loaded: dict[str, set[str]] = {url: set() for url in self.urls}
        self._url_locks = {url: threading.Lock() for url in self.urls}
        self.taken_out = 0
        self.taken_back = 0
        self.requests = {url: 0 for url in self.urls}

    # ---- the rotation --------------------------------------------------------------------------
    def live(self) -> list[str]:
        with self._lock:
            return [url for url in self.urls if url not in self._next_probe]

    def next(self, avoid: Iterable[str] = ()) -> str | None:
        """The next server in the rotation, other than ``avoid``; None when none is left."""
        avoid = set(avoid)
        with self._lock:
            choices = [url for url in self.urls if url not in self._next_probe and url not in avoid]
            if not choices:
                return None
            return choices[next(self._turn) % len(choices)]

    def take_out(self, url: str, reason: object) -> None:
        with self._lock:
            if url in self._next_probe:
                return
            self._next_probe[url] = self._clock() + self.probe_every_s
            self._loaded[url] = set()  # unknown from now on: read again when it is taken back
            self.taken_out += 1
        log.warning("server %s taken out of the rotation (%s); probing it every %.0f s", url, reason,
                    self.probe_every_s)

    def due_for_probe(self) -> list[str]:
        """Servers out of the rotation whose next probe is due (each is then not due again for
        ``probe_every_s``, whatever the probe finds)."""
        now = self._clock()
        with self._lock:
            due = [url for url, at in self._next_probe.items() if at <= now]
            for url in due:
                self._next_probe[url] = now + self.probe_every_s
            return due

    def take_back(self, url: str, loaded: Iterable[str]) -> None:
        with self._lock:
            if self._next_probe.pop(url, None) is None:
                return
            self._loaded[url] = set(loaded)
            self.taken_back += 1
        log.warning("server %s answers again: back in the rotation", url)

    # ---- what each server holds ----------------------------------------------------------------
    def holds(self, url: str, name: str) -> bool:
        with self._lock:
            return name in self._loaded[url]

    def loaded(self, url: str, name: str) -> None:
        with self._lock:
            self._loaded[url].add(name)

    def unloaded(self, url: str, name: str) -> None:
        with self._lock:
            self._loaded[url].discard(name)

    def holding(self, name: str) -> list[str]:
        """Servers in the rotation that hold ``name``."""
        with self._lock:
            return [url for url in self.urls if url not in self._next_probe and name in self._loaded[url]]

    def server_lock(self, url: str) -> threading.Lock:
        """Held while an adapter is loaded on ``url``, so that two threads do not load it twice."""
        return self._url_locks[url]

    def counted(self, url: str) -> None:
        with self._lock:
            self.requests[url] += 1

    def metrics(self) -> dict[str, float]:
        with self._lock:
            return {"rollout/servers_live": float(len(self.urls) - len(self._next_probe)),
                    "rollout/servers_taken_out": float(self.taken_out),
                    "rollout/servers_taken_back": float(self.taken_back)}
