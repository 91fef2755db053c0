"""The episode protocol: what an episode is and what the arena gives it while it runs.

An Episode is a coroutine: ``rollout(ctx)`` awaits ``ctx.generate(request)`` for each model
call, and the arena runs many episodes at once, coalescing their pending calls into batched
generate calls. Awaiting ``ctx.run(sub_episode)`` plays a nested episode (hierarchies such as a
proposer rewarded by solver episodes) through the same batching.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

from sp_lightning.credit import Branching
from sp_lightning.rubric import Rubric
from sp_lightning.types import Completion, ModelRequest, Role, Rollout


class EpisodeContext(Protocol):
    """What the arena gives a running episode."""

    seed: int
    trainable: bool
    """False below a sub-episode requested as not trainable: its steps never train."""
    branching: Branching | None
    """What the run's credit assigner asks a game to play at each trainable decision
    (``sp_lightning.credit.Branching``), or None."""

    async def generate(self, request: ModelRequest) -> Completion: ...

    async def run(self, episode: Episode, seed: int, trainable: bool = True) -> Rollout:
        """A sub-episode, scored by its own rubric; ``trainable=False`` keeps its steps from training."""
        ...

    async def run_many(self, episodes: list[Episode], seeds: list[int], trainable: bool = True) -> list[Rollout]:
        """Sub-episodes played concurrently, their model calls batched with everything pending."""
        ...


class Episode(ABC):
    """The episode protocol: rollout, rubric, get_extras, generate."""

    name: str
    roles: list[Role]
    rubric: Rubric

    @abstractmethod
    async def rollout(self, ctx: EpisodeContext) -> Rollout:
        """Play the episode to its end and return the Rollout (rewards are filled by the rubric)."""

    async def generate(self, ctx: EpisodeContext, request: ModelRequest) -> Completion:
        """One model call; override to post-process (e.g. retries or parsing)."""
        return await ctx.generate(request)

    def get_extras(self, rollout: Rollout) -> dict[str, Any]:
        """What the rubric may read of this episode besides the rollout (a reference answer, a
        child episode's pass rate): the one bridge from episode state to the rubric. Its numbers
        are also logged (averaged per episode name)."""
        return dict(rollout.metrics)
