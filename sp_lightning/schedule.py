"""An annealed coefficient: one type for every loss weight that changes over a run.

``Schedule(start, floor, steps)`` is ``start`` falling linearly to 0 over ``steps`` optimizer
steps, never below ``floor``; without ``steps`` it stays at ``start``. A config may write a bare
number for a constant (``coef: 0.05``) or the block (``coef: {start: 0.1, steps: 200, floor:
0.005}``); :func:`schedule_of` reads either.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Schedule:
    """A coefficient over training: ``start`` falling linearly to 0 over ``steps`` training steps
    (batches), never below ``floor``; constant ``start`` when ``steps`` is null."""

    start: float = 0.0
    floor: float = 0.0
    """The annealed value never goes below this."""
    steps: int | None = None
    """Training steps (batches) over which ``start`` falls to 0 (then to ``floor``); null: constant."""

    def checked(self, key: str) -> Schedule:
        """This schedule, or an error naming ``key`` (the config key it was read from)."""
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"{key}.steps: expected an int >= 1 or null, got {self.steps!r}")
        if self.start < 0:  # a negative coefficient turns a bonus or a pull into its opposite
            raise ValueError(f"{key}: expected >= 0, got {self.start!r}")
        if not 0.0 <= self.floor <= self.start or (self.floor and not self.steps):
            raise ValueError(f"{key}.floor: expected 0 <= floor <= start ({self.start}), with steps set; "
                             f"got {self.floor!r}")
        return self

    def at(self, step: float) -> float:
        """The coefficient at training step ``step`` (a fraction between two steps is allowed)."""
        if not self.steps:
            return self.start
        return max(self.floor, self.start * max(0.0, 1.0 - step / self.steps))

    def __bool__(self) -> bool:
        """Whether the coefficient is ever non-zero."""
        return self.start != 0.0


def schedule_of(value: float | Schedule, key: str) -> Schedule:
    """``value`` (a number or a Schedule) as a Schedule; a bad block names ``key``."""
    if isinstance(value, Schedule):
        return value.checked(key)
    try:
        start = float(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{key}: expected a number or {{start, floor, steps}}, got {value!r}") from error
    return Schedule(start=start).checked(key)
