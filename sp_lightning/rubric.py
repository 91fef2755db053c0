"""Rewards: weighted reward functions that turn a finished episode into rewards per role.

Two kinds of reward function, one mechanism:
- an *outcome* function maps a Rollout to ``{role: reward}`` (e.g. the game's payoff, win/loss,
  a judge's verdict);
- a *step* function maps one Step to a float (e.g. a penalty on that invalid move only).
The rubric sums each kind with its weight into ``rollout.rewards`` and ``step.reward``; the
credit assigner then reads both (see ``credit.step_return``).

Outcome functions may be sync or async (``async def``, or any callable returning an awaitable),
and may ask for more than the rollout by naming a parameter:

- ``extras``: the episode's ``get_extras(rollout)``, the one bridge from an episode's own state
  (the reference answer of a question, a child episode's pass rate) to its rubric;
- ``ctx``: the running episode's context, so that the function can call a model
  (``await ctx.generate(request)``), as a judge does (see ``sp_lightning.judges``).

The arena scores each rollout inside its episode's task, as soon as the episode ends
(``await rubric.ascore(...)``): a judge's model calls then join the same batched generate calls
as every other episode's, and a parent episode reads its children's rewards as soon as
``ctx.run`` / ``ctx.run_many`` returns. The async functions of one rollout run concurrently.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sp_lightning.prompts import format_reward
from sp_lightning.types import Rollout, Step

OutcomeFn = Callable[[Rollout], dict[str, float]]
StepFn = Callable[[Step], float]


def game_payoff(rollout: Rollout) -> dict[str, float]:
    """The game's own outcome per role (chips in poker, +1/0/-1 in Tic-Tac-Toe)."""
    return dict(rollout.outcome)


def win_loss(rollout: Rollout) -> dict[str, float]:
    """+1 for a positive payoff, -1 for a negative one, 0 for a draw."""
    return {role: float((value > 0) - (value < 0)) for role, value in rollout.outcome.items()}


def invalid_move(step: Step) -> float:
    """-1 on a move the game rejected, 0 otherwise (weight it to set the penalty)."""
    return -1.0 if step.info.get("invalid_move") else 0.0


OPTIONAL_ARGUMENTS = ("extras", "ctx")


def _optional_arguments(fn: Callable) -> tuple[str, ...]:
    """Which of ``extras`` / ``ctx`` an outcome function names among its parameters."""
    try:
        parameters = inspect.signature(fn).parameters  # functions, methods, partials, callable objects
    except (TypeError, ValueError):  # builtins without a signature take the rollout only
        return ()
    return tuple(name for name in OPTIONAL_ARGUMENTS if name in parameters)


def _name(fn: Callable) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


@dataclass
class Rubric:
    """Weighted outcome functions (rollout -> {role: reward}, sync or async) and weighted step
    functions (step -> float). See the module docstring for what a function may ask for."""

    outcome: list[tuple[OutcomeFn, float]] = field(default_factory=lambda: [(game_payoff, 1.0)])
    step: list[tuple[StepFn, float]] = field(default_factory=list)

    def __post_init__(self):
        self._wanted = [_optional_arguments(fn) for fn, _ in self.outcome]  # once, not per rollout

    def _calls(self, rollout: Rollout, ctx: Any, extras: dict[str, Any]) -> list:
        """Each outcome function called with what it asks for: its result, or an awaitable."""
        available = {"extras": extras, "ctx": ctx}
        results = []
        for (fn, _), wanted in zip(self.outcome, self._wanted):
            if "ctx" in wanted and ctx is None:
                raise ValueError(
                    f"rubric function {_name(fn)} needs a running episode's ctx (it calls a model): score "
                    f"the rollout through the arena (Rubric.ascore), not Rubric.score"
                )
            results.append(fn(rollout, **{name: available[name] for name in wanted}))
        return results

    def _fill(self, rollout: Rollout, values: list[dict[str, float]]) -> None:
        totals = {role: 0.0 for role in rollout.seats}
        for (fn, weight), result in zip(self.outcome, values):
            if not isinstance(result, dict):
                raise TypeError(f"rubric function {_name(fn)} returned {type(result).__name__}; "
                                f"expected a dict role -> reward")
            for role, value in result.items():
                totals[role] = totals.get(role, 0.0) + weight * float(value)
        rollout.rewards = totals
        for step in rollout.steps:
            step.reward = sum(weight * fn(step) for fn, weight in self.step)

    async def ascore(self, rollout: Rollout, ctx: Any = None, extras: dict[str, Any] | None = None) -> None:
        """Fill ``rollout.rewards`` and every ``step.reward`` in place; the async functions run
        concurrently (their model calls join one batch)."""
        results = self._calls(rollout, ctx, dict(extras or {}))
        awaited = [i for i, result in enumerate(results) if inspect.isawaitable(result)]
        if awaited:
            values = await asyncio.gather(*(results[i] for i in awaited))
            for i, value in zip(awaited, values):
                results[i] = value
        self._fill(rollout, results)

    def score(self, rollout: Rollout, extras: dict[str, Any] | None = None) -> None:
        """Fill ``rollout.rewards`` and every ``step.reward`` in place, for rubrics whose
        functions are all sync (outside a running arena); an async function is a clear error."""
        results = self._calls(rollout, None, dict(extras or {}))
        for (fn, _), result in zip(self.outcome, results):
            if inspect.isawaitable(result):
                if hasattr(result, "close"):
                    result.close()  # never awaited: close it rather than leave a warning behind
                raise ValueError(f"rubric function {_name(fn)} is async: score the rollout through the "
                                 f"arena or with 'await rubric.ascore(...)'")
        self._fill(rollout, results)


@dataclass
class RewardSettings:
    """How a game's outcome becomes a reward (the game rubric, from config)."""

    outcome: str = "payoff"
    """"payoff" (the game's own scores) or "win_loss" (+1/0/-1)."""
    outcome_weight: float = 1.0
    invalid_move_penalty: float = 1.0
    """Subtracted from the reward of each invalid move, on that step only."""
    format_reward: float = 0.0
    """Added to the reward of each move whose answer followed the prompt template's format."""

    def build(self) -> Rubric:
        outcomes = {"payoff": game_payoff, "win_loss": win_loss}
        if self.outcome not in outcomes:
            raise ValueError(f"reward.outcome: expected one of {sorted(outcomes)}, got {self.outcome!r}")
        step = [(invalid_move, self.invalid_move_penalty)] if self.invalid_move_penalty else []
        if self.format_reward:
            step.append((format_reward, self.format_reward))
        return Rubric(outcome=[(outcomes[self.outcome], self.outcome_weight)], step=step)
