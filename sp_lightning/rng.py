"""Random-number streams saved with a run, so that a resumed run draws what the unbroken run
would have drawn.

Lightning's checkpoint holds weights, optimizer and loop state, but not the process's random
streams: torch's (which samples every completion), Python's and NumPy's global ones, nor the
private generators our bots keep. A run resumed without them plays different games from the
same weights, and "resumed" no longer means "the same run". ``global_states`` /
``set_global_states`` cover the process-wide streams; ``object_state`` / ``set_object_state``
cover an object whose ``rng`` attribute is a ``numpy.random.Generator`` or ``random.Random``
(what every bot in ``envs.bots`` has).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def global_states() -> dict[str, Any]:
    """torch's CPU stream, Python's and NumPy's global streams, as tensors, ints and lists only
    (what ``torch.load(weights_only=True)``, Lightning's default, accepts)."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), int(position), int(has_gauss), float(cached)],
    }


def set_global_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, position, has_gauss, cached = states["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))


def rank_seed(seed: int | None, rank: int) -> int | None:
    """A seed of data-parallel rank ``rank`` from the run's ``seed``: the seed itself on rank 0
    (a one-process run is unchanged), another for each other rank."""
    return seed if rank == 0 or seed is None else (seed * 1_000_003 + rank) % 2**31


def seed_rank(rank: int) -> None:
    """Reseed the process-wide streams for data-parallel rank ``rank`` from the seed they were
    given (``seed_everything`` seeds every rank alike): otherwise the ranks would sample the same
    completions wherever their games show the same prompt."""
    seed = (torch.initial_seed() * 1_000_003 + rank) % 2**32
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def object_state(obj: Any) -> Any | None:
    """The state of ``obj.rng``, or None when it has no generator we know."""
    rng = getattr(obj, "rng", None)
    if isinstance(rng, np.random.Generator):
        return {"numpy": rng.bit_generator.state}
    if isinstance(rng, random.Random):
        return {"python": rng.getstate()}
    return None


def set_object_state(obj: Any, state: dict[str, Any]) -> None:
    if "numpy" in state:
        obj.rng.bit_generator.state = state["numpy"]
    else:
        obj.rng.setstate(state["python"])


def seeded_rng(seed: int, rank: int = 0, batch: int = 0) -> random.Random:
    """One RNG per data-parallel rank and batch: ranks play different games, and a batch's games
    depend only on (seed, rank, batch), so a resumed run draws the games the unbroken run drew."""
    return random.Random(f"{seed}/{rank}/{batch}")
