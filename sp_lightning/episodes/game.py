"""GameEpisode: a PettingZoo AEC text game played with a policy per seat."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sp_lightning.credit import CONTINUATIONS, continuation_return
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
    (logged per game as ``games/<game>/cut_off_*``, with one warning per game and rule).
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
        return await self.play(env, ctx, random.Random(f"{ctx.seed}/branch"))

    async def play(self, env, ctx: EpisodeContext, branch_rng: random.Random | None = None,
                   turns_played: int = 0) -> Rollout:
        """Play ``env`` from where it stands to the end (or a cut-off); ``turns_played`` actions
        count towards ``max_turns`` already. With ``ctx.branching`` (a credit assigner's, see
        ``sp_lightning.credit.Branching``) each trainable decision is also played on from copies
        of the game (:meth:`_branch`), drawn from ``branch_rng``."""
        branching = ctx.branching if branch_rng is not None else None
        outcome = {agent: 0.0 for agent in env.possible_agents}
        results, scores = {}, {}  # the game's own verdicts, where its final infos give them
        steps: list[Step] = []
        cut_off = None
        for agent in env.agent_iter():
            observation, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                if "result" in info:
                    results[agent] = info["result"]
                if "scores" in info:
                    scores[agent] = dict(info["scores"])
                env.step(None)
            elif turns_played + len(steps) >= self.max_turns:
                cut_off = "cut_off_turns"
                break
            else:
                step, cut_off = await self._move(ctx, env, agent, observation["text"], info, branching, branch_rng,
                                                 turns_played + len(steps) + 1)
                if cut_off is not None:
                    break
                steps.append(step)
            for a, reward in env.rewards.items():
                outcome[a] = outcome.get(a, 0.0) + float(reward)
        env.close()
        if cut_off is not None:
            outcome = {agent: 0.0 for agent in outcome}
            results, scores = {}, {}
            _warn_once(self.name, cut_off, self.max_turns)
        rollout = Rollout(episode=self.name, steps=steps, seats=dict(self.seats), outcome=outcome,
                          results=results, scores=scores)
        rollout.metrics = _game_metrics(rollout)
        for reason in CUT_OFF_REASONS:
            rollout.metrics[reason] = float(cut_off == reason)
        return rollout

    async def _move(self, ctx: EpisodeContext, env, agent: str, observation: str, info: dict, branching,
                    branch_rng: random.Random | None, turns: int) -> tuple[Step | None, str | None]:
        """``agent``'s decision, asked of its seat's policy and played in ``env``: its Step (with
        the continuations of a branched decision; ``turns`` counts it), or the reason the game is
        cut off (a prompt refused for its length)."""
        legal = list(info.get("legal_actions", []))
        request = ModelRequest(role=agent, messages=self.template.messages(observation, agent),
                               policy=self.seats[agent], legal_actions=legal)
        branches = None
        if (branching is not None and ctx.trainable and self.seats[agent].is_learner
                and branch_rng.random() < branching.decisions):
            branches = [env.snapshot(seed=branch_rng.randrange(2**31)) for _ in range(branching.continuations)]
        completion = await self.generate(ctx, request)
        if completion.refused:
            return None, "cut_off_prompt"
        if self.seats[agent].is_model:
            parsed = self.template.parse(completion.text)
        else:  # a bot answers a bare move token, outside any template's format
            parsed = ParseResult(completion.text, True, "bot")
        env.step(parsed.action_text)
        after = env.infos.get(agent, {})
        step = Step(role=agent, completion=completion,
                    info={"invalid_move": bool(after.get("invalid_move", False)),
                          "parsed_move": after.get("parsed_move"), "legal_actions": legal,
                          "well_formed": parsed.well_formed, "parse": parsed.reason})
        if not self.seats[agent].is_model:  # what imitating the bot reads: the prompt a model would have
            # had, and the bot's move as this template has a model answer it
            step.info["messages"], step.info["answer"] = request.messages, self.template.answer(completion.text)
        if branches is not None:
            step.info[CONTINUATIONS] = await self._branch(ctx, agent, branches, env, branching, branch_rng, turns)
        return step, None

    async def _branch(self, ctx: EpisodeContext, role: str, before: list, env, branching,
                      rng: random.Random, turns: int) -> dict[str, list[float] | None]:
        """The returns ``role`` got in continuations of its decision: from the copies ``before``
        the move (taken by the caller) and, with ``branching.after``, from as many copies of the
        position after it (none when the move ended the game: its outcome is known). They play
        as non-trainable sub-episodes, batched with everything else in flight."""
        game_over = not env.agents or all(env.terminations.get(a, False) for a in env.agents)
        after = ([env.snapshot(seed=rng.randrange(2**31)) for _ in range(branching.continuations)]
                 if branching.after and not game_over else [])
        turns_before = turns - 1
        episodes = ([_Continuation(self, copy, turns_before) for copy in before]
                    + [_Continuation(self, copy, turns) for copy in after])
        rollouts = await ctx.run_many(episodes, [rng.randrange(2**31) for _ in episodes], trainable=False)
        returns = [continuation_return(r, role, branching.discount, from_decision=i < len(before))
                   for i, r in enumerate(rollouts)]
        return {"before": returns[:len(before)], "after": returns[len(before):] if branching.after and not game_over
                else None}


@dataclass
class _Continuation(Episode):
    """A game played on from a copy of a position (``env.snapshot``) by the same seats, scored
    by the same rubric; a sub-episode of the game it copies, never trained on."""

    game: GameEpisode
    env: Any
    turns_played: int

    def __post_init__(self):
        self.name, self.rubric = self.game.name, self.game.rubric

    @property
    def roles(self) -> list[Role]:  # type: ignore[override]
        return self.game.roles

    @property
    def seats(self) -> dict[str, PolicyRef]:
        return self.game.seats

    async def rollout(self, ctx: EpisodeContext) -> Rollout:
        return await self.game.play(self.env, ctx, turns_played=self.turns_played)


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
        result = result_of(rollout, learner_seats, payoff)
        for verdict in ("win", "draw", "loss"):
            metrics[verdict] = float(result == verdict)
        metrics["payoff"] = payoff
        learner_scores = [rollout.scores[a] for a in learner_seats if a in rollout.scores]
        for key in learner_scores[0] if learner_scores else ():
            metrics[key] = sum(s[key] for s in learner_scores) / len(learner_scores)
    else:  # mirror self-play: a decisive game has a winner, so only the draw rate says anything
        metrics["draw"] = float(all(v == 0 for v in rollout.outcome.values()))
    moves = [s for s in rollout.steps if s.completion.policy.kind is PolicyKind.LEARNER]
    if moves:
        metrics["invalid_move_rate"] = sum(s.info.get("invalid_move", False) for s in moves) / len(moves)
        metrics["well_formed_rate"] = sum(s.info.get("well_formed", False) for s in moves) / len(moves)
        metrics["completion_tokens"] = sum(len(s.completion.completion_ids) for s in moves) / len(moves)
    metrics["length"] = float(len(rollout.steps))
    return metrics


def result_of(rollout: Rollout, seats: list[str], payoff: float) -> str:
    """``win``, ``draw`` or ``loss`` of the policy in ``seats`` (``payoff``: their summed outcome):
    the game's own verdicts where it gives them (a win in any of the seats is a win, else a
    draw in any is a draw), else the sign of the payoff, as in a two-player zero-sum game."""
    verdicts = [rollout.results[a] for a in seats if a in rollout.results]
    if verdicts and len(verdicts) == len(seats):
        return "win" if "win" in verdicts else "draw" if "draw" in verdicts else "loss"
    return "win" if payoff > 0 else "draw" if payoff == 0 else "loss"
