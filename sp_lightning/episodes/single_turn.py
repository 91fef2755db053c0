"""SingleTurnEpisode: one prompt, one completion."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sp_lightning.episodes.base import Episode, EpisodeContext
from sp_lightning.rubric import Rubric
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef, Role, Rollout, Step


@dataclass
class SingleTurnEpisode(Episode):
    """One prompt, one completion: a question answered, a proposal written.

    ``extras`` is handed to the rubric as is (the reference answer of the question, say); the
    completion's text is added to it as ``"completion"``. A refused prompt (longer than the
    model's context) gives a rollout with the refused completion's empty tokens: it never trains.
    """

    name: str
    messages: list[dict[str, str]]
    rubric: Rubric
    role: str = "assistant"
    policy: PolicyRef = LEARNER
    extras: dict[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None

    @property
    def roles(self) -> list[Role]:  # type: ignore[override]
        return [Role(self.role, self.system_prompt)]

    async def rollout(self, ctx: EpisodeContext) -> Rollout:
        messages = list(self.messages)
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        completion = await self.generate(ctx, ModelRequest(self.role, messages, self.policy))
        return Rollout(episode=self.name, steps=[Step(self.role, completion)], seats={self.role: self.policy})

    def get_extras(self, rollout: Rollout) -> dict[str, Any]:
        extras = {**self.extras, **rollout.metrics}
        if rollout.steps:
            extras["completion"] = rollout.steps[-1].completion.text
        return extras
