"""League training as a Lightning callback: the league on disk, its checkpoint schedule, the
ratings, a background evaluator and the league's TensorBoard charts.

The league is a registry file (``<dir>/league.json``, see ``registry``) of baselines (the base
model, RandomBot, ChaosBot), past checkpoints of the learner (peft adapters in
``<dir>/adapters/``, loadable by ``PeftModel.from_pretrained`` and by vLLM) and the learner
itself. Every step:

1. the step's games (learner against league members) are recorded in the registry: TrueSkill and
   Elo;
2. the learner becomes a checkpoint when the schedule names the step (recent / anchor / elite),
   and recent checkpoints that left the window are pruned;
3. every ``evaluator.every`` steps a tournament of the newest checkpoint against gatekeepers
   starts in the evaluator's process (one for the run, kept between tournaments: it reads
   adapters from disk and writes the registry under its lock), in every game of the run;
   earlier tournaments are logged once they finish;
4. the league's :class:`~sp_lightning.league.sampler.LeagueSampler` (which seats the training
   games) gets a fresh view;
5. the learner's rating is logged beside the baselines and the best past checkpoint, with the win
   rate per opponent type, the realised opponent-type mix and, for each game that has it (Kuhn
   Poker, Tic-Tac-Toe), the exact exploitability;
6. every ``best_response_every`` steps the exact best response to the learner in each game that
   has one joins the league as a bot (``best_responses``), which every rank seats.

This module only wires Lightning's hooks to the units that do the work: ``store`` (the lead's
league on disk, and what a Lightning checkpoint carries of it), ``sync`` (the ranks' collectives
and each rank's adapters), ``evaluator_process`` (the background tournament), ``exact``
(exploitability and best responses) and ``metrics`` (the figures' names); ``messages`` are what
passes between them across ranks and processes.

Resume: the registry's content is saved in the Lightning checkpoint and written back on resume,
so a killed run continues with the league as it was at its last checkpoint (the matchmaker's
state travels with the datamodule's); a background tournament being played at the checkpoint
(its games not yet in that league) is played again. Adapters of pruned checkpoints are deleted
only once a Lightning checkpoint that no longer names them has been written.

Several data-parallel ranks: rank 0 (the lead) alone owns the league on disk. Every step each
rank hands the lead its games, the lead records them all, promotes, prunes, evaluates, and sends
every rank the step's news: the league's members, which checkpoints joined or left, and the
metrics. Every rank then refreshes its sampler from the same league and logs the same metrics;
each rank's matchmaking draws from its own stream (its games' RNG). With one process the same
code runs with the collectives as no-ops.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L

from sp_lightning import rng as rng_streams
from sp_lightning.engine import Engine, engine_of
from sp_lightning.league import exact
from sp_lightning.league import metrics as league_metrics
from sp_lightning.league.best_responses import BestResponseBot
from sp_lightning.league.evaluator_process import EvaluatorProcess, Players
from sp_lightning.league.messages import (
    BestResponse, Promotion, RankReport, Reset, StartNews, StepNews, league_view,
)
from sp_lightning.league.registry import LeagueState
from sp_lightning.league.sampler import LeagueSampler
from sp_lightning.league.settings import LeagueSettings
from sp_lightning.league.store import LeagueStore
from sp_lightning.league.sync import RankSync
from sp_lightning.types import LEARNER_ID

log = logging.getLogger(__name__)


class LeagueCallback(L.Callback):
    """The league's half that follows training (the module docstring says what it does each
    step). Built with its opponent sampler from ``data.league`` by the DataModule, which hands
    it to Lightning; not a callback to list in ``trainer.callbacks``."""

    def __init__(self, settings: LeagueSettings, sampler: LeagueSampler):
        self.settings = settings
        self.sampler = sampler
        self.store = LeagueStore(settings, self._event)
        self.evaluator = EvaluatorProcess(settings.evaluator, settings.dir, self.store.registry_path,
                                          settings.games_per_match, self._event)
        self.sync = RankSync()
        self.engine: Engine | None = None  # the run's engine, from when training starts
        self.main = ""  # the main agent's learner name ("" the one unnamed learner), set at start
        self._trainer = None  # for the events' step and logger
        self._evaluating: dict[str, Any] = {}  # the tournament a resumed checkpoint was playing
        self.resend_weights = None
        """The weight path's ``send(module, version)`` (``sp_lightning.weight_sync``; the DataModule
        sets it): what an exploiter reset calls, since the step's weights were already sent."""

    @property
    def evaluating(self) -> bool:
        """Whether a background tournament is being played, for whoever watches it."""
        return self.evaluator.running

    # ---- start --------------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        self._trainer = trainer
        self.engine = engine_of(trainer)
        self.main = self.engine.learners.every_role or ""
        exploiters = self.settings.exploiters
        if exploiters is not None and exploiters.reset_to == "main":
            for name in exploiters.names().values():  # a shape mismatch now, not at the first reset
                pl_module.adapter_twins(self.main, name)
        exact.check_games(self.settings, self.engine.games)
        self.sync.attach(self.engine.worker, lead=trainer.global_rank == 0)
        self.sampler.adapter_slots = self.engine.worker.adapter_slots  # its batches fit the backend
        news = self.sync.start(self._start_news() if self.sync.lead else None)
        if self.sync.lead:  # after the restore, which takes the league back to the checkpoint's
            self.evaluator.resume(self._evaluating)
        self.sync.serve_league(news)
        self._seat(news.best_responses)
        self._refresh(news.league)

    def _start_news(self) -> StartNews:
        """The lead's league as training starts (new, or restored on resume), for every rank."""
        state = self.store.open()
        return StartNews(league=league_view(state), adapters=self.sync.adapter_files(state),
                         best_responses=self.store.best_responses(state))

    # ---- the Lightning checkpoint ---------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {**self.store.state_dict(), "evaluator": self.evaluator.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.store.load_state_dict(state)
        self._evaluating = state.get("evaluator", {})  # played again once the league is restored

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.store.saved(trainer.global_step)

    # ---- every step ---------------------------------------------------------------------------
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        trained = pl_module.last_batch
        self.sync.trained(trained.index if trained is not None and trained.index is not None
                          else self.engine.last_seated_batch)
        reports = self.sync.gather(self.sampler.drain())  # every rank's games, on every rank
        news = self._lead_step(pl_module, step, RankReport.merged(reports)) if self.sync.lead else None
        news = self.sync.broadcast(news)
        if not self.sync.lead:
            self.sync.follow(news, pl_module.save_adapter, self.engine.last_seated_batch)
        self._reset_exploiters(pl_module, news.resets)
        self._seat(news.best_responses)
        metrics = dict(news.metrics)
        metrics["league/clustered_batches"] = float(self.sampler.clustered_batches)  # this rank's
        metrics.update(self._refresh(news.league, step))
        pl_module.log_dict(metrics, batch_size=1)

    def _lead_step(self, pl_module, step: int, report: RankReport) -> StepNews:
        """The lead's part of a step: every rank's games recorded, the schedule's promotions and
        prunes, the exploiters, the evaluator and the exact figures; returns the news."""
        store = self.store
        unrated = store.record(report.matches, step)
        metrics = league_metrics.mix_and_win_rates(report.buckets, report.results)
        if self.engine.plays_ahead:  # games of batches seated before a prune, finished after it
            metrics["league/unrated_games"] = float(unrated)
        state = store.read()
        promoted = self._promote(pl_module, step, state)
        pruned = store.prune(step, state)
        self.sync.forget(pruned, self.engine.last_seated_batch)
        exploiter_metrics, succeeded, resets = store.exploiter_step(step, report.exploiter_results)
        metrics.update(exploiter_metrics)
        promoted += self._promote_exploiters(pl_module, step, succeeded)
        store.delete_pruned(in_play={*self.evaluator.in_play, *self.sync.still_served})
        evaluated = self.evaluator.poll()
        metrics.update(evaluated)
        if self.evaluator.due(step):
            engine = self.engine
            self.evaluator.start(step, store.read(), Players(pl_module.policy_settings, engine.games,
                                                             engine.eval_sampling().plain(),
                                                             engine.eval.env_overrides()))
        added = self._exact_figures(step, metrics)
        if promoted or pruned or evaluated or added:
            state = store.read()
        return StepNews(league=league_view(state), promoted=promoted, pruned=pruned, metrics=metrics,
                        resets=resets, best_responses=added)

    def _promote(self, pl_module, step: int, state: LeagueState) -> list[Promotion]:
        """The main agent promoted to a checkpoint if the schedule names the step, and served
        at once (the step's exploitability reads the league's checkpoints)."""
        promotion = self.store.promote(step, state, self.main, pl_module.save_adapter,
                                       self.sampler.coverage.coverages(LEARNER_ID))
        if promotion is None:
            return []
        self.sync.serve([promotion], pl_module.save_adapter)
        self.sync.warn_if_adapters_thrash(sum(a.type == "checkpoint" for a in state.agents.values()) + 1)
        return [promotion]

    def _promote_exploiters(self, pl_module, step: int, succeeded: list[str]) -> list[Promotion]:
        """A snapshot of each exploiter that succeeded joins the league, served at once."""
        promoted = [self.store.promote_exploiter(step, learner, pl_module.save_adapter) for learner in succeeded]
        self.sync.serve(promoted, pl_module.save_adapter)
        return promoted

    def _exact_figures(self, step: int, metrics: dict[str, float]) -> list[BestResponse]:
        """When due, the learner's exact exploitability in every game that has it (into
        ``metrics``) and its exact best responses, which join the league; returns those."""
        exploitability_due = _due(self.settings.exploitability_every, step)
        best_responses_due = _due(self.settings.best_response_every, step)
        if not (exploitability_due or best_responses_due):
            return []
        engine = self.engine
        several = len(engine.games) > 1
        results = exact.learner_results(engine.worker, engine.games, engine.learners.whole())
        metrics.update(exact.exploitability_metrics(engine.worker, results, self.store.checkpoint_ids(), several))
        if not best_responses_due:
            return []
        return [self.store.add_best_response(step, game.name, result, several)
                for game, result in results if result.best_response is not None]

    def _reset_exploiters(self, pl_module, resets: list[Reset]) -> None:
        """Every rank alike: each exploiter that starts over gets the same fresh adapter (or a
        copy of the main agent's, with ``reset_to: main``)."""
        exploiters = self.settings.exploiters
        copy_from = self.main if exploiters is not None and exploiters.reset_to == "main" else None
        for reset in resets:
            pl_module.reset_learner(reset.learner, reset.seed, copy_from=copy_from)
        if resets:  # changed outside an optimizer step, after the step's weights were sent:
            self.resend_weights(pl_module, self._trainer.global_step)  # the next batch plays them

    def _seat(self, best_responses: list[BestResponse]) -> None:
        """Every rank: each new best response becomes a bot its games can seat (``bot:<id>``),
        its moves drawn from a stream of its own (continued on resume: ``Engine.add_bot``)."""
        engine = self.engine
        for response in best_responses:
            if not engine.has_bot(response.agent):
                seed = rng_streams.rank_seed(None if engine.seed is None else engine.seed + response.step, engine.rank)
                engine.add_bot(response.agent, BestResponseBot(response.game, response.moves, seed=seed))

    def _refresh(self, league: LeagueState, step: int | None = None) -> dict[str, float]:
        """A league view for the sampler, and the ratings to log."""
        self.sampler.refresh(list(league.agents.values()), league.agents[LEARNER_ID], step)
        return league_metrics.ratings(league, self.sampler.coverage.coverages(LEARNER_ID))

    # ---- end ----------------------------------------------------------------------------------
    def on_train_end(self, trainer, pl_module) -> None:
        metrics = self.evaluator.finish()  # the last tournament lands in the registry
        if trainer.logger is not None and metrics:
            trainer.logger.log_metrics(metrics, step=trainer.global_step)
        self.sync.remove_copies()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.evaluator.stop()
        self.sync.remove_copies()

    def _event(self, text: str, level: int = logging.INFO) -> None:
        """A change in the league: logged (at ``level``: a failure is a warning, which shows
        where Python's default logging shows nothing below it), and written to TensorBoard as
        ``league/events``."""
        log.log(level, "league: %s", text)
        experiment = getattr(getattr(self._trainer, "logger", None), "experiment", None)
        if hasattr(experiment, "add_text"):
            experiment.add_text("league/events", text, global_step=self._trainer.global_step)


def _due(every: int, step: int) -> bool:
    return bool(every) and step % every == 0
