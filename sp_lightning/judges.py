"""Judges: reward functions that ask a model for a verdict. A judge is not a role.

A debate is won by whoever convinces the judge; a proof is graded by a grader. The judge calls a
model (the learner's base model with the adapter off, a league checkpoint, the learner itself),
but it plays no seat: its request carries the role :data:`JUDGE`, which no episode declares, and
its completion is never a ``Step`` of any rollout, so it never becomes a training record, whichever
policy answered. The verdict is kept on the rollout (``rollout.judgements``) for logs.

A judge is an async outcome function of a :class:`~sp_lightning.rubric.Rubric`, so the arena
calls it inside the episode's task when the episode ends: the judge calls of every episode that
ends around the same time go out in one batched generate call with whatever else is pending.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sp_lightning.types import ModelRequest, PolicyRef, Rollout, as_policy

JUDGE = "judge"
"""The ``ModelRequest.role`` of a judge's call: not a role of any episode."""


@dataclass
class Judge:
    """Ask ``policy`` for a verdict on a finished rollout and turn its answer into rewards.

    Args:
        prompt: ``(rollout, extras) -> messages``: what the judge reads (the transcript, the
            question, the reference answer).
        verdict: ``(text, rollout) -> {role: reward}``: the judge's answer read back. It must
            not raise on any text: an answer it cannot read is a verdict too (usually a draw).
        policy: who judges: ``"base"`` (default: the base model, adapter off), ``"learner"``,
            ``"checkpoint:<id>"``, or a PolicyRef. A scripted judge needs no model: write it as a
            plain rubric function instead.
        name: names the verdict in ``rollout.judgements``.
    """

    prompt: Callable[[Rollout, dict[str, Any]], list[dict[str, str]]]
    verdict: Callable[[str, Rollout], dict[str, float]]
    policy: str | PolicyRef = "base"
    name: str = JUDGE

    def __post_init__(self):
        self._policy = as_policy(self.policy)
        if not self._policy.is_model:
            raise ValueError(f"Judge.policy: {self.policy!r} is a bot; a scripted judge is a plain rubric "
                             f"function (rollout -> {{role: reward}}), not a Judge")

    async def __call__(self, rollout: Rollout, extras: dict[str, Any], ctx) -> dict[str, float]:
        request = ModelRequest(role=JUDGE, messages=self.prompt(rollout, extras), policy=self._policy)
        completion = await ctx.generate(request)
        rewards = self.verdict(completion.text, rollout)
        rollout.judgements.append({"judge": self.name, "policy": str(self._policy), "text": completion.text,
                                   "tokens": len(completion.completion_ids), "temperature": completion.temperature,
                                   "rewards": dict(rewards)})
        return rewards
