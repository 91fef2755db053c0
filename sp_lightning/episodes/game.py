"""GameEpisode: a PettingZoo AEC text game played with a policy per seat."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sp_lightning.episodes.base import Episode, EpisodeContext
from sp_lightning.prompts import ParseResult, PlainTemplate, PromptTemplate
from sp_lightning.rubric import Rubric
from sp_lightning.types import ModelRequest, PolicyKind, PolicyRef, Role, Rollout, Step

log = logging.getLogger(__name__)


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
    learner_seats = [a for a, p in rollout.seats.items() if p.kind is PolicyKind.LEARNER]
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
    moves = [s for s in rollout.steps if s.completion.policy.kind is PolicyKind.LEARNER]
    if moves:
        metrics["invalid_move_rate"] = sum(s.info.get("invalid_move", False) for s in moves) / len(moves)
        metrics["well_formed_rate"] = sum(s.info.get("well_formed", False) for s in moves) / len(moves)
        metrics["completion_tokens"] = sum(len(s.completion.completion_ids) for s in moves) / len(moves)
    metrics["length"] = float(len(rollout.steps))
    return metrics
