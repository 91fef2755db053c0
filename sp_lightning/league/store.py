"""The lead's league: the registry on disk, the checkpoint schedule, and what a Lightning
checkpoint carries of the league.

Only the lead (rank 0) keeps one (``LeagueCallback``). It opens the league when training starts
(a new one, or the one a resumed run's checkpoint carries), records each step's rated games,
promotes the learner to a checkpoint when the schedule names the step and prunes the checkpoints
that left the window, snapshots exploiters that succeeded, and writes best-response tables. What
it adds to the league it returns as the messages every rank acts on (``Promotion``,
``BestResponse``, pruned ids); serving adapters on each rank is ``sync``'s.

A pruned checkpoint's adapter is deleted only once a Lightning checkpoint that no longer names
it has been written, so a run resumed from its last checkpoint finds every adapter its league
names. One resumed from an older checkpoint (``best.ckpt``) may name adapters deleted since:
those agents leave the league, with a warning, and the run goes on.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Collection
from typing import Any

from sp_lightning.errors import UserError
from sp_lightning.evaluation.exploitability import ExploitabilityResult
from sp_lightning.league import best_responses
from sp_lightning.league.exploiters import ExploiterTracker
from sp_lightning.league.messages import BestResponse, Promotion, Reset
from sp_lightning.league.ratings import MatchPooler
from sp_lightning.league.registry import AgentRecord, LeagueRegistry, LeagueState
from sp_lightning.league.settings import DEFAULT_BASELINES, LeagueSettings, baseline_policy
from sp_lightning.types import LEARNER_ID

SaveAdapter = Callable[[str, str], None]
"""``(path, learner)``: one learner's adapter saved as a peft directory (``SelfPlayModule.save_adapter``)."""


class LeagueStore:
    """The league on disk, as the lead changes it; ``event`` says each change (logged, and
    written to TensorBoard as ``league/events``)."""

    def __init__(self, settings: LeagueSettings, event: Callable[[str], None]):
        self.dir = settings.dir
        self.schedule = settings.schedule
        self.baselines = list(DEFAULT_BASELINES if settings.baselines is None else settings.baselines)
        self.registry = LeagueRegistry(os.path.join(settings.dir, "league.json"))
        self.pooler = MatchPooler(settings.games_per_match)
        self.exploiters = ExploiterTracker(settings.exploiters) if settings.exploiters is not None else None
        self.event = event
        self.best_learner_rating: float | None = None
        self.pruned: list[tuple[int, str]] = []  # (step pruned at, adapter dir) awaiting deletion
        self.departed: set[str] = set()  # ids of the checkpoints that left the league in this run
        self.saved_step = -1  # the step of the last Lightning checkpoint written
        self._restore: dict[str, Any] | None = None

    # ---- opening, and the Lightning checkpoint ------------------------------------------------
    def open(self) -> LeagueState:
        """The league training starts with: restored from the checkpoint on resume, else a new
        one of the baselines and the learner. A new run refuses a directory that holds a league."""
        os.makedirs(os.path.join(self.dir, "adapters"), exist_ok=True)
        if self._restore is not None:
            self._restored(self._restore)
            self._restore = None
        elif self._existing().agents:
            raise ValueError(f"league.dir {self.dir!r} already holds a league; resume its run with "
                             f"--ckpt_path, or give this run another league.dir")
        else:
            for name in self.baselines:
                self.registry.add_agent(AgentRecord(id=name, type="baseline", policy=baseline_policy(name)))
            self.registry.add_agent(AgentRecord(id=LEARNER_ID, type=LEARNER_ID, policy=LEARNER_ID, step=0))
            self.event(f"league started in {self.dir} with {', '.join(self.baselines)}")
        return self.registry.read()

    def _existing(self) -> LeagueState:
        """The league already in ``dir`` (empty: none), or the line that says its file is broken."""
        try:
            return self.registry.read()
        except ValueError as error:  # not JSON, or not a league's
            raise UserError(f"data.league.dir {self.dir}: {error}; give this run another data.league.dir (or "
                            f"move the broken league.json away)") from error

    def _restored(self, state: dict[str, Any]) -> None:
        self.registry.restore(state["registry"])
        self.best_learner_rating = state["best_learner_rating"]
        self.pruned = [tuple(p) for p in state["pruned"]]
        self.pooler.load_state_dict(state["pooler"])
        if self.exploiters is not None and "exploiters" in state:  # absent: a run resumed with exploiters added
            self.exploiters.load_state_dict(state["exploiters"])
        for agent in self.registry.read().agents.values():  # a checkpoint older than the last one
            if agent.adapter_path and not os.path.isdir(agent.adapter_path):
                self._leave(agent.id)
                self.event(f"{agent.id} left the league on resume: its adapter {agent.adapter_path} was deleted "
                           f"after this checkpoint was written (pruned by the run that wrote a later one)",
                           logging.WARNING)

    def state_dict(self) -> dict[str, Any]:
        """The league's content, the best rating so far, the adapters awaiting deletion, the
        games waiting to be pooled into a match, and the exploiters' figures."""
        state = {"registry": self.registry.snapshot_dict(), "best_learner_rating": self.best_learner_rating,
                 "pruned": [list(p) for p in self.pruned], "pooler": self.pooler.state_dict()}
        if self.exploiters is not None:
            state["exploiters"] = self.exploiters.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Kept until :meth:`open`: only the lead writes it back, when training starts."""
        self._restore = state

    def saved(self, step: int) -> None:
        """A Lightning checkpoint of ``step`` was written (adapters pruned by then may go)."""
        self.saved_step = step

    @property
    def registry_path(self) -> str:
        """The league file (``<dir>/league.json``), which the background evaluator writes too."""
        return self.registry.path

    def read(self) -> LeagueState:
        return self.registry.read()

    def checkpoint_ids(self) -> list[str]:
        return [a.id for a in self.registry.agents(type="checkpoint")]

    # ---- every step ---------------------------------------------------------------------------
    def record(self, matches: list[tuple[list[str], list[float]]], step: int) -> int:
        """The step's rating matches, pooled into blocks of ``games_per_match``, rated. A game
        with a checkpoint that has left the league since its batch seated it (batches played
        ahead: asynchronous collection) rates nobody; returns how many there were."""
        kept = [(ids, scores) for ids, scores in matches if not self.departed.intersection(ids)]
        if kept:
            rated = self.pooler.add(kept)
            if rated:
                self.registry.record_matches(rated, step=step, source="train")
        return len(matches) - len(kept)

    def promote(self, step: int, state: LeagueState, learner: str, save_adapter: SaveAdapter,
                coverages: dict[int, float]) -> Promotion | None:
        """The learner ``learner`` becomes checkpoint ``ckpt-<step>`` when the schedule names the
        step (recent, anchor, or elite on a new best rating); ``coverages`` go in its stats."""
        checkpoints = [a for a in state.agents.values() if a.type == "checkpoint"]
        record = state.agents[LEARNER_ID]
        rating = record.mu
        new_best = self.best_learner_rating is not None and rating > self.best_learner_rating + self.schedule.elite_margin
        tags = self.schedule.tags(step, new_best)
        if not tags:
            return None
        agent_id = f"ckpt-{step:06d}"
        path = os.path.join(self.dir, "adapters", agent_id)
        save_adapter(path, learner)
        parent = max(checkpoints, key=lambda a: a.step, default=None)
        self.registry.update_agent(LEARNER_ID, step=step)
        self.registry.add_agent(AgentRecord(
            id=agent_id, type="checkpoint", policy=f"checkpoint:{agent_id}", adapter_path=path, step=step,
            parent=parent.id if parent else None, tags=tags, mu=record.mu, sigma=record.sigma, elo=record.elo,
            stats={f"coverage_{n}": v for n, v in coverages.items()},
        ), exist_ok=True)
        if self.best_learner_rating is None or new_best:
            self.best_learner_rating = rating
        self.event(f"step {step}: {agent_id} added ({', '.join(tags)}), rating {rating:.2f}")
        return Promotion(agent_id, learner, path)

    def prune(self, step: int, state: LeagueState) -> list[str]:
        """The checkpoints of ``state`` the schedule no longer keeps leave the league; returns
        their ids (their adapters are deleted later: :meth:`delete_pruned`)."""
        pruned = [a for a in state.agents.values()
                  if a.type == "checkpoint" and not self.schedule.keeps(a.step, a.tags, step)]
        for agent in pruned:
            self._leave(agent.id)
            self.pruned.append((step, agent.adapter_path))
            self.event(f"step {step}: {agent.id} left the league (older than the recent window)")
        return [agent.id for agent in pruned]

    def _leave(self, agent_id: str) -> None:
        """``agent_id`` leaves the league: its record, its games waiting to be pooled (none can
        complete their blocks any more), and any later game with it is not rated (``record``)."""
        self.registry.remove_agent(agent_id)
        self.pooler.forget(agent_id)
        self.departed.add(agent_id)

    def exploiter_step(self, step: int, results: list[tuple[str, float, float]]
                       ) -> tuple[dict[str, float], list[str], list[Reset]]:
        """The exploiters' results taken in (``ExploiterTracker.step``): their metrics, those
        that succeeded, the resets; nothing in a league without exploiters."""
        if self.exploiters is None:
            return {}, [], []
        return self.exploiters.step(step, results)

    def promote_exploiter(self, step: int, learner: str, save_adapter: SaveAdapter) -> Promotion:
        """A snapshot of the exploiter ``learner``, which has just succeeded, joins the league as
        a checkpoint the main agent plays (kept for good: tag ``exploiter``)."""
        agent_id = f"{learner}-{step:06d}"
        path = os.path.join(self.dir, "adapters", agent_id)
        save_adapter(path, learner)
        self.registry.add_agent(AgentRecord(id=agent_id, type="checkpoint", policy=f"checkpoint:{agent_id}",
                                            adapter_path=path, step=step, tags=["exploiter", learner]),
                                exist_ok=True)
        self.event(f"step {step}: exploiter {learner} succeeded; {agent_id} joins the league")
        return Promotion(agent_id, learner, path)

    def add_best_response(self, step: int, game: str, result: ExploitabilityResult, several: bool) -> BestResponse:
        """The exact best response to the learner in ``game`` joins the league: its table on
        disk, an agent of type best_response rated from the learner's rating (in a run of
        ``several`` games, named and tagged by its game, which it alone plays)."""
        agent = best_responses.agent_id(step, game if several else None)
        path = best_responses.table_path(self.dir, agent)
        best_responses.save_table(path, game, result.best_response, step, result.exploitability)
        record = self.registry.read().agents[LEARNER_ID]
        self.registry.add_agent(AgentRecord(
            id=agent, type=best_responses.AGENT_TYPE, policy=f"bot:{agent}", step=step,
            tags=best_responses.tags(game if several else None), mu=record.mu, sigma=record.sigma, elo=record.elo,
            stats={"exploitability": result.exploitability},
        ), exist_ok=True)
        self.event(f"step {step}: {agent}, the best response to the learner "
                   f"(exploitability {result.exploitability:.3f}), joins the league")
        return BestResponse.from_table(agent, best_responses.load_table(path))

    def best_responses(self, state: LeagueState) -> list[BestResponse]:
        """Every best response of ``state``, read back from its table (on resume too)."""
        return [BestResponse.from_table(a.id, best_responses.load_table(best_responses.table_path(self.dir, a.id)))
                for a in state.agents.values() if a.type == best_responses.AGENT_TYPE]

    def delete_pruned(self, in_play: Collection[str] = ()) -> None:
        """Adapters pruned at or before the last written Lightning checkpoint are no longer
        named by any checkpoint a run could resume from; those of agents ``in_play`` (the
        background tournament's, which loads each when it first plays it) wait for a later call.
        An adapter's folder is named by its agent's id."""
        keep = []
        for pruned_at, path in self.pruned:
            if pruned_at <= self.saved_step and os.path.basename(os.path.normpath(path)) not in in_play:
                shutil.rmtree(path, ignore_errors=True)
            else:
                keep.append((pruned_at, path))
        self.pruned = keep
