"""Artifact stores: the things episodes are about (debate topics, questions, proposals), drawn
uniformly or by weight, growing while the run goes.

A store is what a curriculum reads and writes: an episode source draws a batch's topics from it
(``sample``), and may add what a run produced (a proposer's question that split the solvers) or
re-weight items by how they went (``set_weight``). Its items and weights are part of the run's
state (``state_dict``): the DataModule checkpoints its source, and a source checkpoints its
stores, so a resumed run draws from the store the killed run had.

Items must be JSON-like values (strings, numbers, lists, dicts) so that the state stays plain.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable
from typing import Any

SAMPLING = ("uniform", "weighted")


class ArtifactStore:
    """Items with weights; ``sample`` draws with replacement, uniformly or by weight.

    Args:
        items: The first items (all of weight ``1``), or None for an empty store.
        sampling: ``"uniform"`` (every item alike) or ``"weighted"`` (by weight).
        max_size: Keep at most this many items: adding beyond it drops the oldest. None: no cap.
        name: Names the store in errors.
    """

    def __init__(self, items: Iterable[Any] | None = None, sampling: str = "uniform",
                 max_size: int | None = None, name: str = "store"):
        if sampling not in SAMPLING:
            raise ValueError(f"{name}.sampling: expected one of {SAMPLING}, got {sampling!r}")
        if max_size is not None and max_size < 1:
            raise ValueError(f"{name}.max_size: expected >= 1 or null, got {max_size!r}")
        self.sampling = sampling
        self.max_size = max_size
        self.name = name
        self.items: list[Any] = []
        self.weights: list[float] = []
        for item in items or []:
            self.add(item)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **kwargs: Any) -> ArtifactStore:
        """Items from a file: a JSON list, or one item per non-empty line of text."""
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text.lstrip().startswith("["):
            items = json.loads(text)
        else:
            items = [line.strip() for line in text.splitlines() if line.strip()]
        if not items:
            raise ValueError(f"{kwargs.get('name', 'store')}: {os.fspath(path)!r} holds no items")
        return cls(items, **kwargs)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, item: Any, weight: float = 1.0) -> None:
        """Add an item (the oldest goes when the store is full)."""
        if not weight >= 0.0:  # also refuses NaN
            raise ValueError(f"{self.name}.add: expected a weight >= 0, got {weight!r}")
        self.items.append(item)
        self.weights.append(float(weight))
        if self.max_size is not None and len(self.items) > self.max_size:
            del self.items[0], self.weights[0]

    def set_weight(self, index: int, weight: float) -> None:
        """Re-weight item ``index`` (a curriculum's reading of how it went)."""
        if not weight >= 0.0:
            raise ValueError(f"{self.name}.set_weight: expected a weight >= 0, got {weight!r}")
        self.weights[index] = float(weight)

    def sample(self, rng: random.Random, k: int = 1) -> list[Any]:
        """``k`` items drawn with replacement from ``rng``, by the store's sampling rule."""
        if not self.items:
            raise ValueError(f"{self.name}: cannot sample from an empty store")
        if self.sampling == "uniform":
            return [self.items[rng.randrange(len(self.items))] for _ in range(k)]
        if sum(self.weights) <= 0.0:
            raise ValueError(f"{self.name}: every weight is 0; weighted sampling needs one above 0")
        return rng.choices(self.items, weights=self.weights, k=k)

    def state_dict(self) -> dict[str, Any]:
        return {"items": list(self.items), "weights": list(self.weights)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.items = list(state["items"])
        self.weights = [float(w) for w in state["weights"]]
