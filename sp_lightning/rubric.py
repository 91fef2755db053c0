"""Rewards: weighted reward functions that turn a finished episode into rewards per role.

Two kinds of reward function, one mechanism:
- an *outcome* function maps a Rollout to ``{role: reward}`` (e.g. the game's payoff, win/loss);
- a *step* function maps one Step to a float (e.g. a penalty on that invalid move only).
The rubric sums each kind with its weight into ``rollout.rewards`` and ``step.reward``; the
credit assigner then reads both (see ``credit.step_return``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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


@dataclass
class Rubric:
    outcome: list[tuple[OutcomeFn, float]] = field(default_factory=lambda: [(game_payoff, 1.0)])
    step: list[tuple[StepFn, float]] = field(default_factory=list)

    def score(self, rollout: Rollout) -> None:
        """Fill ``rollout.rewards`` and every ``step.reward`` in place."""
        totals = {role: 0.0 for role in rollout.seats}
        for fn, weight in self.outcome:
            for role, value in fn(rollout).items():
                totals[role] = totals.get(role, 0.0) + weight * value
        rollout.rewards = totals
        for step in rollout.steps:
            step.reward = sum(weight * fn(step) for fn, weight in self.step)


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
