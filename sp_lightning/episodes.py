"""Episodes: who sits in which seat, what each model is asked, when the episode ends.

An Episode is a coroutine: ``rollout(ctx)`` awaits ``ctx.generate(request)`` for each model
call, and the arena runs many episodes at once, coalescing their pending calls into batched
generate calls. Awaiting ``ctx.run(sub_episode)`` plays a nested episode (hierarchies such as a
proposer rewarded by solver episodes) through the same batching.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sp_lightning.prompts import ParseResult, PlainTemplate, PromptTemplate
from sp_lightning.rubric import Rubric
from sp_lightning.types import LEARNER, Completion, ModelRequest, PolicyRef, Role, Rollout, Step

log = logging.getLogger(__name__)


class EpisodeContext(Protocol):
    """What the arena gives a running episode."""

    seed: int

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


@dataclass
class GameEpisode(Episode):
    """Plays any PettingZoo AEC text game of the contract in ``envs/``, with a policy per seat.

    ``seats`` maps each agent of the game to the PolicyRef that plays it: the learner in every seat
    is mirror self-play; a bot or a league checkpoint in some seats is play against opponents.
    ``template`` builds each model's prompt and reads its answer back (see ``prompts``); a bot's
    answer goes to the env as is.

    Bounded work: a game still running after ``max_turns`` actions, or whose next prompt the
    backend refused as longer than the model's context (``Completion.refused``), is cut off:
    it ends there, every seat scores 0 (whatever the game had scored so far), the moves played
    still train, and the rollout's metrics carry ``cut_off_turns`` or ``cut_off_prompt`` = 1
    (logged per game as ``rollout/<game>/cut_off_*``, with one warning per game and rule).
    """

    name: str
    env_factory: Callable[[], Any]
    seats: dict[str, PolicyRef]
    rubric: Rubric
    template: PromptTemplate = field(default_factory=PlainTemplate)
    max_turns: int = 500

    @property
    def roles(self) -> list[Role]:  # type: ignore[override]
        return [Role(agent, self.template.system_prompt_for(agent)) for agent in self.seats]

    async def rollout(self, ctx: EpisodeContext) -> Rollout:
        env = self.env_factory()
        env.reset(seed=ctx.seed)
        outcome = {agent: 0.0 for agent in env.possible_agents}
        steps: list[Step] = []
        cut_off = None
        for agent in env.agent_iter():
            observation, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                env.step(None)
            elif len(steps) >= self.max_turns:
                cut_off = "cut_off_turns"
                break
            else:
                legal = list(info.get("legal_actions", []))
                request = ModelRequest(
                    role=agent,
                    messages=self.template.messages(observation["text"], agent),
                    policy=self.seats[agent],
                    legal_actions=legal,
                )
                completion = await self.generate(ctx, request)
                if completion.refused:
                    cut_off = "cut_off_prompt"
                    break
                if self.seats[agent].is_model:
                    parsed = self.template.parse(completion.text)
                else:  # a bot answers a bare move token, outside any template's format
                    parsed = ParseResult(completion.text, True, "bot")
                env.step(parsed.action_text)
                after = env.infos.get(agent, {})
                steps.append(
                    Step(
                        role=agent,
                        completion=completion,
                        info={
                            "invalid_move": bool(after.get("invalid_move", False)),
                            "parsed_move": after.get("parsed_move"),
                            "legal_actions": legal,
                            "well_formed": parsed.well_formed,
                            "parse": parsed.reason,
                        },
                    )
                )
            for a, reward in env.rewards.items():
                outcome[a] = outcome.get(a, 0.0) + float(reward)
        env.close()
        if cut_off is not None:
            outcome = {agent: 0.0 for agent in outcome}
            _warn_once(self.name, cut_off, self.max_turns)
        rollout = Rollout(episode=self.name, steps=steps, seats=dict(self.seats), outcome=outcome)
        rollout.metrics = _game_metrics(rollout)
        for reason in CUT_OFF_REASONS:
            rollout.metrics[reason] = float(cut_off == reason)
        return rollout


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


CUT_OFF_REASONS = ("cut_off_turns", "cut_off_prompt")
_warned: set[tuple[str, str]] = set()


def _warn_once(game: str, reason: str, max_turns: int) -> None:
    if (game, reason) in _warned:
        return
    _warned.add((game, reason))
    rule = (f"it was still running after max_turns={max_turns} actions" if reason == "cut_off_turns"
            else "its next prompt was longer than the model's context allows (rollout.max_prompt_tokens)")
    log.warning("%s: a game was cut off because %s; it scores 0 for every seat (metric rollout/%s/%s; "
                "warned once per game)", game, rule, game, reason)


def _game_metrics(rollout: Rollout) -> dict[str, float]:
    """Win/draw/loss, reward and invalid-move rate, from the learner's seats' point of view."""
    metrics: dict[str, float] = {}
    learner_seats = [a for a, p in rollout.seats.items() if p.kind == "learner"]
    if not learner_seats:
        return metrics
    if len(learner_seats) < len(rollout.seats):  # against an opponent: the result of the learner
        payoff = sum(rollout.outcome.get(a, 0.0) for a in learner_seats)
        metrics["win"] = float(payoff > 0)
        metrics["draw"] = float(payoff == 0)
        metrics["loss"] = float(payoff < 0)
        metrics["payoff"] = payoff
    else:  # mirror self-play: a decisive game has a winner, so only the draw rate says anything
        metrics["draw"] = float(all(v == 0 for v in rollout.outcome.values()))
    moves = [s for s in rollout.steps if s.completion.policy.kind == "learner"]
    if moves:
        metrics["invalid_move_rate"] = sum(s.info.get("invalid_move", False) for s in moves) / len(moves)
        metrics["well_formed_rate"] = sum(s.info.get("well_formed", False) for s in moves) / len(moves)
        metrics["completion_tokens"] = sum(len(s.completion.completion_ids) for s in moves) / len(moves)
    metrics["length"] = float(len(rollout.steps))
    return metrics
