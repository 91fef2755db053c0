"""Intervals for evaluation figures: Wilson for rates, the bootstrap for means."""

from __future__ import annotations

import math

import numpy as np


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (well-behaved near 0 and 1)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def bootstrap_mean_interval(values: list[float], resamples: int = 2000, seed: int = 0,
                            level: float = 0.95) -> tuple[float, tuple[float, float]]:
    """Mean and its percentile-bootstrap interval: ``resamples`` resamples of ``values`` with
    replacement, drawn from ``seed`` (the same values give the same interval). Payoffs of games
    take few distinct values (-1, 0, 1 and penalties) and are far from normal in small samples:
    the bootstrap makes no such assumption."""
    n = len(values)
    if n == 0:
        return 0.0, (0.0, 0.0)
    data = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(data.mean()), (float(low), float(high))
