"""Intervals for evaluation figures: Wilson for rates, normal approximation for means."""

from __future__ import annotations

import math


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
