"""The league across data-parallel ranks: one owner, every rank in step.

Rank 0 (the lead) alone owns the league on disk (``store``). Every step each rank hands the lead
its games (one gather of :class:`~sp_lightning.league.messages.RankReport`), and the lead sends
every rank what it made of them (one broadcast of ``StepNews``); when training starts it sends
``StartNews``. Every rank calls each collective in the same order, the lead included, so none
waits forever; with one process the collectives return their input (``sp_lightning.distributed``).

Every rank's rollout worker serves the league's checkpoints: the lead from the league's own
adapter directories, a follower from copies of its own in a private temporary directory (no
shared file system needed): at start it writes the lead's files, and for each checkpoint that
joins later it saves its own adapter, whose weights are the same on every rank.

A checkpoint that leaves the league stays served until every batch that may have seated it has
been trained on: at once in a synchronous run (the batch just trained was the last one played),
a few batches later under asynchronous collection, whose producer may be playing games with it
when the prune happens (``Engine.last_seated_batch``).
"""

from __future__ import annotations

import logging
import os
import shutil

from sp_lightning import distributed
from sp_lightning.league.messages import Promotion, RankReport, StartNews, StepNews
from sp_lightning.league.registry import LeagueState
from sp_lightning.league.store import SaveAdapter
from sp_lightning.scratch_dirs import process_temp_dir

log = logging.getLogger(__name__)


class RankSync:
    """This rank's side of the league's collectives, and the league's adapters on its worker."""

    def __init__(self) -> None:
        self.lead = True  # set when training starts (attach)
        self.worker = None
        self.copies: str | None = None  # a follower's own adapter copies
        self.leaving: list[tuple[int, str]] = []  # (last batch that may seat it, id): pruned, still served
        self.trained_through = -1  # the index of the last batch trained on
        self._warned_adapter_cap = False

    def attach(self, worker, lead: bool) -> None:
        """The rollout worker that serves this rank's games; whether this rank is the lead."""
        self.worker, self.lead = worker, lead

    # ---- the collectives ----------------------------------------------------------------------
    def start(self, news: StartNews | None) -> StartNews:
        """The lead's ``news`` on every rank (followers pass None)."""
        return distributed.broadcast(news)

    def gather(self, report: RankReport) -> list[RankReport]:
        """Every rank's report, in rank order, on every rank."""
        return distributed.gather(report)

    def broadcast(self, news: StepNews | None) -> StepNews:
        """The lead's ``news`` on every rank (followers pass None)."""
        return distributed.broadcast(news)

    # ---- the league's adapters on this rank's worker --------------------------------------------
    def adapter_files(self, state: LeagueState) -> dict[str, dict[str, bytes]] | None:
        """The lead's adapter files of every checkpoint in the league, for the followers (None
        with one process: nothing to send)."""
        if distributed.world_size() == 1:
            return None
        files: dict[str, dict[str, bytes]] = {}
        for agent in (a for a in state.agents.values() if a.type == "checkpoint"):
            files[agent.id] = {}
            for folder, _, names in os.walk(agent.adapter_path):
                for name in names:
                    path = os.path.join(folder, name)
                    with open(path, "rb") as f:
                        files[agent.id][os.path.relpath(path, agent.adapter_path)] = f.read()
        return files

    def serve_league(self, news: StartNews) -> None:
        """Every checkpoint of the league training starts with, served by this rank's worker."""
        for agent in (a for a in news.league.agents.values() if a.type == "checkpoint"):
            path = agent.adapter_path if self.lead else self._write_copy(agent.id, news.adapters[agent.id])
            self.worker.register_adapter(agent.id, path)

    def serve(self, promotions: list[Promotion], save_adapter: SaveAdapter) -> None:
        """Checkpoints that joined the league, served: the lead's saved adapters, or a
        follower's own copy of the same weights."""
        for promotion in promotions:
            path = promotion.path
            if not self.lead:
                path = os.path.join(self._copies_dir(), promotion.agent)
                save_adapter(path, promotion.learner)
            self.worker.register_adapter(promotion.agent, path)

    def forget(self, pruned: list[str], seated_through: int) -> None:
        """Checkpoints that left the league, no longer served once the batches up to
        ``seated_through`` (those that may have seated them) have been trained on (a follower
        deletes its copies then; the lead's files go once no resumable checkpoint names them,
        ``store``, and none of these is still served, :attr:`still_served`)."""
        self.leaving += [(seated_through, agent_id) for agent_id in pruned]
        self._release()

    def trained(self, index: int) -> None:
        """Batch ``index`` has been trained on: its games are over."""
        self.trained_through = max(self.trained_through, index)
        self._release()

    @property
    def still_served(self) -> set[str]:
        """Checkpoints that left the league whose games may still be going on."""
        return {agent_id for _, agent_id in self.leaving}

    def _release(self) -> None:
        done = [agent_id for through, agent_id in self.leaving if through <= self.trained_through]
        self.leaving = [(through, agent_id) for through, agent_id in self.leaving if through > self.trained_through]
        for agent_id in done:
            self.worker.forget_adapter(agent_id)
            if not self.lead:
                shutil.rmtree(os.path.join(self._copies_dir(), agent_id), ignore_errors=True)

    def follow(self, news: StepNews, save_adapter: SaveAdapter, seated_through: int) -> None:
        """A follower's part of a step: what the lead promoted and pruned, on its own worker."""
        self.serve(news.promoted, save_adapter)
        self.forget(news.pruned, seated_through)

    def warn_if_adapters_thrash(self, checkpoints: int) -> None:
        """Once per run: a league with more checkpoints than the worker holds reloads adapters
        from disk every turn, which then dominates the turn (benchmarks/bench_rollout_and_step.py)."""
        cap = self.worker.max_adapters
        if cap is not None and checkpoints > cap and not self._warned_adapter_cap:
            self._warned_adapter_cap = True
            log.warning("the league holds %d checkpoints but the rollout worker keeps at most %d adapters "
                        "loaded (data.rollout.init_args.max_adapters): rollouts will reload adapters "
                        "from disk; raise it to the league's size if memory allows", checkpoints, cap)

    def remove_copies(self) -> None:
        """A follower's copies deleted (training ended or failed)."""
        if self.copies is not None:
            shutil.rmtree(self.copies, ignore_errors=True)
            self.copies = None

    def _write_copy(self, agent_id: str, files: dict[str, bytes]) -> str:
        path = os.path.join(self._copies_dir(), agent_id)
        for relative, data in files.items():
            os.makedirs(os.path.dirname(os.path.join(path, relative)), exist_ok=True)
            with open(os.path.join(path, relative), "wb") as f:
                f.write(data)
        return path

    def _copies_dir(self) -> str:
        if self.copies is None:
            self.copies = process_temp_dir(f"sp_lightning-league-rank{distributed.rank()}-")
        return self.copies
