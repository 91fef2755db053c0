"""League training as a Lightning callback: the league on disk, its checkpoint schedule, the
ratings, a background evaluator and the league's TensorBoard charts.

The league is a registry file (``<dir>/league.json``, see
``registry``) of baselines (the base model, RandomBot, ChaosBot), past checkpoints of the learner
(peft adapters in ``<dir>/adapters/``, loadable by ``PeftModel.from_pretrained`` and by vLLM) and
the learner itself. Every step the callback:

1. records the step's games (learner against league members) in the registry: TrueSkill and Elo;
2. promotes the learner to a checkpoint when the schedule names the step (recent / anchor / elite)
   and prunes recent checkpoints that left the window;
3. every ``evaluator.every`` steps starts a tournament of the newest checkpoint against
   gatekeepers in a separate process (it reads adapters from disk and writes the registry under
   its lock), and logs earlier tournaments once they finish;
4. hands its :class:`~sp_lightning.league.sampler.LeagueSampler` (the league block's, which seats
   the training games) a fresh view;
5. logs the learner's rating beside the baselines and the best past checkpoint, the win rate per
   opponent type, the realised opponent-type mix and (Kuhn Poker, Tic-Tac-Toe) exploitability;
6. every ``best_response_every`` steps adds the exact best response to the learner as a bot
   (``best_responses``), which every rank seats.

Resume: the registry's content is saved in the Lightning checkpoint and written back on resume,
so a killed run continues with the league as it was at its last checkpoint (the matchmaker's
state travels with the datamodule's). Adapters of pruned checkpoints are deleted only once a
Lightning checkpoint that no longer names them has been written.

Several data-parallel ranks: rank 0 (the lead) alone owns the league on disk. Every step each
rank hands the lead its games (one gather), the lead records them all, promotes, prunes,
evaluates, and sends every rank the step's news in one broadcast: the league's agents, which
checkpoints joined or left, and the metrics. Every rank then refreshes its sampler from the same
league and logs the same metrics; each rank's matchmaking draws from its own stream (its games'
RNG). The weights are the same on every rank, so a follower saves its own copy of a promoted
adapter in a private temporary directory (no shared file system needed); on start it receives the
adapters of the league's checkpoints from the lead. With one process the same code runs with the
collectives as no-ops.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from typing import Any

import lightning as L

from sp_lightning import distributed
from sp_lightning import rng as rng_streams
from sp_lightning.engine import engine_of
from sp_lightning.league import best_responses
from sp_lightning.league.exploiters import ExploiterTracker
from sp_lightning.league.messages import RankReport
from sp_lightning.league.ratings import MatchPooler, TrueSkillRatings
from sp_lightning.league.registry import AgentRecord, LeagueRegistry, LeagueState
from sp_lightning.league.sampler import LeagueSampler
from sp_lightning.league.settings import DEFAULT_BASELINES, LeagueSettings, baseline_policy
from sp_lightning.types import LEARNER_ID

log = logging.getLogger(__name__)

class LeagueCallback(L.Callback):
    """The league's half that follows training (the module docstring says what it does each
    step). Built with its opponent sampler from ``data.league`` by the DataModule, which hands
    it to Lightning; not a callback to list in ``trainer.callbacks``."""

    def __init__(self, settings: LeagueSettings, sampler: LeagueSampler):
        self.settings = settings
        self.dir = settings.dir
        self.schedule = settings.schedule
        self.evaluator = settings.evaluator
        self.baselines = list(DEFAULT_BASELINES if settings.baselines is None else settings.baselines)
        self.exploitability_every = settings.exploitability_every
        self.best_response_every = settings.best_response_every
        self.pooler = MatchPooler(settings.games_per_match)
        self.sampler = sampler
        self._warned_adapter_cap = False
        self.process_labels: dict[str, str] = {}
        self.registry = LeagueRegistry(os.path.join(self.dir, "league.json"))
        self.best_learner_rating: float | None = None
        self.pruned: list[tuple[int, str]] = []  # (step pruned at, adapter dir) awaiting deletion
        self.saved_step = -1
        self.process: subprocess.Popen | None = None
        self.process_spec: str | None = None
        self._restore: dict | None = None
        self.lead = True  # rank 0 owns the league on disk (set again when training starts)
        self.copies: str | None = None  # a follower's own adapter copies
        self.main = ""  # the main agent's learner name ("" the one unnamed learner), set at start
        self.exploiters = ExploiterTracker(settings.exploiters) if settings.exploiters is not None else None

    def on_train_start(self, trainer, pl_module) -> None:
        self.lead = trainer.global_rank == 0
        self.main = engine_of(trainer).learners.every_role or ""
        if self.exploiters is not None and self.exploiters.settings.reset_to == "main":
            for name in self.exploiters.kinds:  # a shape mismatch now, not at the first reset
                pl_module.adapter_twins(self.main, name)
        if self.best_response_every:
            game = engine_of(trainer).games[0].name
            if game not in best_responses.OBSERVATION_KEYS:
                raise ValueError(f"data.league.best_response_every: the game {game!r} has no exact best response; "
                                 f"expected one of {sorted(best_responses.OBSERVATION_KEYS)}, or 0")
        if self.lead:
            self._open_league(trainer)
            state = self.registry.read()
            news = {"agents": _agents_of(state), "adapters": self._adapter_files(state),
                    "best_responses": {a.id: best_responses.load_table(best_responses.table_path(self.dir, a.id))
                                       for a in state.agents.values() if a.type == best_responses.AGENT_TYPE}}
        else:
            news = None
        news = distributed.broadcast(news)
        worker = engine_of(trainer).worker
        state = _state_of(news)
        for agent in (a for a in state.agents.values() if a.type == "checkpoint"):
            worker.register_adapter(agent.id, self._own_copy(agent, news["adapters"]))
        self._seat_best_responses(trainer, news["best_responses"])
        self._refresh(state=state)

    def _open_league(self, trainer) -> None:
        """The lead's league on disk: restored from the checkpoint on resume, else a new one."""
        os.makedirs(os.path.join(self.dir, "adapters"), exist_ok=True)
        if self._restore is not None:
            self.registry.restore(self._restore["registry"])
            self.best_learner_rating = self._restore["best_learner_rating"]
            self.pruned = [tuple(p) for p in self._restore["pruned"]]
            self.pooler.load_state_dict(self._restore["pooler"])
            if self.exploiters is not None and "exploiters" in self._restore:
                self.exploiters.load_state_dict(self._restore["exploiters"])
            self._restore = None
            return
        if self.registry.read().agents:
            raise ValueError(f"league.dir {self.dir!r} already holds a league; resume its run with "
                             f"--ckpt_path, or give this run another league.dir")
        for name in self.baselines:
            self.registry.add_agent(AgentRecord(id=name, type="baseline", policy=baseline_policy(name)))
        self.registry.add_agent(AgentRecord(id=LEARNER_ID, type=LEARNER_ID, policy=LEARNER_ID, step=0))
        self._event(trainer, f"league started in {self.dir} with {', '.join(self.baselines)}")

    def _adapter_files(self, state: LeagueState) -> dict[str, dict[str, bytes]] | None:
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

    def _own_copy(self, agent: AgentRecord, files: dict[str, dict[str, bytes]] | None) -> str:
        """Where this rank loads ``agent``'s adapter from: the league's own path on the lead, a
        copy of the lead's files in the follower's directory otherwise."""
        if self.lead:
            return agent.adapter_path
        path = os.path.join(self._copies_dir(), agent.id)
        for relative, data in files[agent.id].items():
            os.makedirs(os.path.dirname(os.path.join(path, relative)), exist_ok=True)
            with open(os.path.join(path, relative), "wb") as f:
                f.write(data)
        return path

    def _copies_dir(self) -> str:
        if self.copies is None:
            self.copies = tempfile.mkdtemp(prefix=f"sp_lightning-league-rank{distributed.rank()}-")
        return self.copies

    def state_dict(self) -> dict[str, Any]:
        state = {"registry": self.registry.snapshot_dict(), "best_learner_rating": self.best_learner_rating,
                 "pruned": [list(p) for p in self.pruned], "pooler": self.pooler.state_dict()}
        if self.exploiters is not None:
            state["exploiters"] = self.exploiters.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restore = state

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.saved_step = trainer.global_step

    # ---- every step ---------------------------------------------------------------------------
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        drained = distributed.gather(self.sampler.drain())  # every rank's games, on every rank
        news = self._lead_step(trainer, pl_module, step, drained) if self.lead else None
        news = distributed.broadcast(news)
        if not self.lead:
            self._follow(trainer, pl_module, news)
        copy_from = self.main if self.exploiters is not None and self.exploiters.settings.reset_to == "main" else None
        for reset in news.get("resets", []):  # every rank alike: the same fresh adapter
            pl_module.reset_learner(reset.learner, reset.seed, copy_from=copy_from)
        if news.get("resets"):
            engine_of(trainer).worker.publish_weights()  # the next batch plays the fresh adapter
        self._seat_best_responses(trainer, news.get("best_responses", {}))
        metrics = dict(news["metrics"])
        metrics.update(self._refresh(step, _state_of(news)))
        pl_module.log_dict(metrics, batch_size=1)

    def _lead_step(self, trainer, pl_module, step: int, drained: list[RankReport]) -> dict[str, Any]:
        """The lead's part of a step: every rank's games recorded, the schedule's promotions and
        prunes, the evaluator and exploitability; returns the news for every rank."""
        report = RankReport.merged(drained)
        if report.matches:
            rated = self.pooler.add(report.matches)
            if rated:
                self.registry.record_matches(rated, step=step, source="train")
        metrics = self._mix_and_results(report.buckets, report.results)
        state = self.registry.read()
        promoted, pruned = self._promote_and_prune(trainer, step, state)
        resets = []
        if self.exploiters is not None:
            exploiter_metrics, succeeded, resets = self.exploiters.step(step, report.exploiter_results)
            metrics.update(exploiter_metrics)
            for name in succeeded:
                promoted.append(self._promote_exploiter(trainer, step, name))
        self._delete_pruned()
        evaluated = self._poll_evaluator(trainer)
        metrics.update(evaluated)
        if self.evaluator.every and step % self.evaluator.every == 0 and self.process is None:
            self._start_evaluator(trainer, pl_module, step)
        tables = {}
        log_exploitability = self.exploitability_every and step % self.exploitability_every == 0
        add_best_response = self.best_response_every and step % self.best_response_every == 0
        if log_exploitability or add_best_response:
            learner = self._learner_exploitability(trainer)
            metrics.update(self._exploitability_metrics(trainer, learner))
            if add_best_response and learner is not None and learner.best_response is not None:
                tables = self._add_best_response(trainer, step, learner)
        if promoted or pruned or evaluated or tables:
            state = self.registry.read()
        return {"agents": _agents_of(state), "promoted": promoted, "pruned": pruned, "metrics": metrics,
                "resets": resets, "best_responses": tables}

    def _follow(self, trainer, pl_module, news: dict[str, Any]) -> None:
        """A follower's part of a step: its own copy of each promoted adapter (the same weights
        as the lead's), the pruned ones forgotten and deleted (the lead keeps the files that a
        resume needs)."""
        worker = engine_of(trainer).worker
        for agent_id, learner in news["promoted"]:
            path = os.path.join(self._copies_dir(), agent_id)
            pl_module.save_adapter(path, learner)
            worker.register_adapter(agent_id, path)
        for agent_id in news["pruned"]:
            worker.forget_adapter(agent_id)
            shutil.rmtree(os.path.join(self._copies_dir(), agent_id), ignore_errors=True)

    def _mix_and_results(self, buckets: list[str], results: list[tuple[str, float]]) -> dict[str, float]:
        metrics = {}
        for bucket, count in Counter(buckets).items():
            metrics[f"league/mix/{bucket}"] = count / len(buckets)
        payoffs: dict[str, list[float]] = defaultdict(list)
        for kind, payoff in results:
            payoffs[kind].append(payoff)
        for kind, values in payoffs.items():
            if kind != "mirror":
                metrics[f"league/win_rate/{kind}"] = sum(v > 0 for v in values) / len(values)
        return metrics

    def _promote_and_prune(self, trainer, step: int, state) -> tuple[list[str], list[str]]:
        """Promote the learner and prune checkpoints by the schedule; returns the ids of the
        checkpoint added (if any) and of those pruned."""
        league = state.agents
        checkpoints = [a for a in league.values() if a.type == "checkpoint"]
        learner = league[LEARNER_ID]
        rating = learner.mu
        new_best = self.best_learner_rating is not None and rating > self.best_learner_rating + self.schedule.elite_margin
        tags = self.schedule.tags(step, new_best)
        promoted = []
        if tags:
            agent_id = f"ckpt-{step:06d}"
            path = os.path.join(self.dir, "adapters", agent_id)
            trainer.lightning_module.save_adapter(path, self.main)
            parent = max(checkpoints, key=lambda a: a.step, default=None)
            self.registry.update_agent(LEARNER_ID, step=step)
            self.registry.add_agent(AgentRecord(
                id=agent_id, type="checkpoint", policy=f"checkpoint:{agent_id}", adapter_path=path, step=step,
                parent=parent.id if parent else None, tags=tags, mu=learner.mu, sigma=learner.sigma, elo=learner.elo,
                stats={f"coverage_{n}": v for n, v in self.sampler.coverage.coverages(LEARNER_ID).items()},
            ), exist_ok=True)
            worker = engine_of(trainer).worker
            worker.register_adapter(agent_id, path)
            self._warn_if_adapters_thrash(worker, len(checkpoints) + 1)
            if self.best_learner_rating is None or new_best:
                self.best_learner_rating = rating
            self._event(trainer, f"step {step}: {agent_id} added ({', '.join(tags)}), rating {rating:.2f}")
            promoted.append((agent_id, self.main))
        pruned = [agent for agent in checkpoints if not self.schedule.keeps(agent.step, agent.tags, step)]
        for agent in pruned:
            self.registry.remove_agent(agent.id)
            engine_of(trainer).worker.forget_adapter(agent.id)
            self.pruned.append((step, agent.adapter_path))
            self._event(trainer, f"step {step}: {agent.id} left the league (older than the recent window)")
        return promoted, [agent.id for agent in pruned]

    def _promote_exploiter(self, trainer, step: int, learner: str) -> tuple[str, str]:
        """A snapshot of the exploiter ``learner``, which has just succeeded, joins the league as
        a checkpoint the main agent plays (kept for good: tag ``exploiter``)."""
        agent_id = f"{learner}-{step:06d}"
        path = os.path.join(self.dir, "adapters", agent_id)
        trainer.lightning_module.save_adapter(path, learner)
        self.registry.add_agent(AgentRecord(id=agent_id, type="checkpoint", policy=f"checkpoint:{agent_id}",
                                            adapter_path=path, step=step, tags=["exploiter", learner]),
                                exist_ok=True)
        engine_of(trainer).worker.register_adapter(agent_id, path)
        self._event(trainer, f"step {step}: exploiter {learner} succeeded; {agent_id} joins the league")
        return agent_id, learner

    def _warn_if_adapters_thrash(self, worker, checkpoints: int) -> None:
        """Once per run: a league with more checkpoints than the worker holds reloads adapters
        from disk every turn, which then dominates the turn (benchmarks/bench_rollout_and_step.py)."""
        cap = worker.max_adapters
        if cap is not None and checkpoints > cap and not self._warned_adapter_cap:
            self._warned_adapter_cap = True
            log.warning("the league holds %d checkpoints but the rollout worker keeps at most %d adapters "
                        "loaded (data.rollout.init_args.max_adapters): rollouts will reload adapters "
                        "from disk; raise it to the league's size if memory allows", checkpoints, cap)

    def _delete_pruned(self) -> None:
        """Adapters pruned at or before the last written Lightning checkpoint are no longer
        named by any checkpoint a run could resume from."""
        keep = []
        for pruned_at, path in self.pruned:
            if pruned_at <= self.saved_step:
                shutil.rmtree(path, ignore_errors=True)
            else:
                keep.append((pruned_at, path))
        self.pruned = keep

    def _refresh(self, step: int | None = None, state: LeagueState | None = None) -> dict[str, float]:
        """A league view for the sampler (``state``, or read now), and the ratings to log."""
        state = state if state is not None else self.registry.read()
        learner = state.agents[LEARNER_ID]
        members = list(state.agents.values())
        self.sampler.refresh(members, learner, step)
        metrics = {"league/learner/mu": learner.mu, "league/learner/sigma": learner.sigma, "league/learner/elo": learner.elo,
                   "league/learner/rating": TrueSkillRatings.conservative(learner.mu, learner.sigma),
                   "league/checkpoints": float(sum(a.type == "checkpoint" for a in members))}
        for agent in members:
            if agent.type == "baseline":
                metrics[f"league/baseline/{agent.id}/rating"] = TrueSkillRatings.conservative(agent.mu, agent.sigma)
                metrics[f"league/baseline/{agent.id}/mu"] = agent.mu  # with sigma: the interval
                metrics[f"league/baseline/{agent.id}/sigma"] = agent.sigma
                metrics[f"league/baseline/{agent.id}/elo"] = agent.elo
        best = state.metadata.get("best_agent")
        if best in state.agents:
            metrics["league/best/rating"] = state.metadata["best_rating"]
            metrics["league/best/elo"] = state.agents[best].elo
        for n, value in self.sampler.coverage.coverages(LEARNER_ID).items():
            metrics[f"league/learner/coverage_{n}gram"] = value
        return metrics

    # ---- background evaluator -----------------------------------------------------------------
    def _start_evaluator(self, trainer, pl_module, step: int) -> None:
        state = self.registry.read()
        checkpoints = sorted((a for a in state.agents.values() if a.type == "checkpoint"), key=lambda a: a.step)
        if not checkpoints:
            return
        newest = checkpoints[-1]
        best = state.metadata.get("best_agent")
        labels: dict[str, str] = {}  # gatekeeper id -> the name it was asked for (its chart)
        for label in self.evaluator.gatekeepers:
            name = label
            if label == "best":
                name = best
            elif label == "recent":
                name = checkpoints[-2].id if len(checkpoints) > 1 else None
            if name and name != newest.id and name not in labels and name in state.agents:
                labels[name] = label
        gatekeepers = list(labels)
        if not gatekeepers:
            return
        self.process_labels = labels
        from sp_lightning.league.evaluator import die_with_parent, spec_for

        engine = engine_of(trainer)
        spec = spec_for(pl_module.policy_settings, engine.games[0], engine.eval_sampling(), self.registry.path,
                        newest.id, gatekeepers, self.evaluator.games_per_seat, self.evaluator.seed + step,
                        step, self.evaluator.threads, engine.eval.env_overrides(),
                        games_per_match=self.pooler.games_per_match)
        folder = os.path.join(self.dir, "evaluations")
        os.makedirs(folder, exist_ok=True)
        self.process_spec = os.path.join(folder, f"{newest.id}-step{step:06d}.json")
        with open(self.process_spec, "w") as f:
            json.dump(spec, f)
        errors = open(self.process_spec.removesuffix(".json") + ".log", "w")
        self.process = subprocess.Popen([sys.executable, "-m", "sp_lightning.league.evaluator", self.process_spec],
                                        stdout=errors, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        self._event(trainer, f"step {step}: evaluating {newest.id} against {', '.join(gatekeepers)}")

    def _poll_evaluator(self, trainer, wait: bool = False) -> dict[str, float]:
        if self.process is None or (not wait and self.process.poll() is None):
            return {}
        code = self.process.wait()
        spec, self.process = self.process_spec, None
        result_path = spec.removesuffix(".json") + ".result.json"
        if code != 0 or not os.path.exists(result_path):
            self._event(trainer, f"evaluator failed (exit {code}); see {spec.removesuffix('.json')}.log")
            return {}
        with open(result_path) as f:
            summary = json.load(f)
        metrics = {"league/eval/seconds": summary["seconds"]}
        for gatekeeper, r in summary["results"].items():
            label = self.process_labels.get(gatekeeper, gatekeeper)  # "best" and "recent" apart
            metrics[f"league/eval/win_rate_vs_{label}"] = r["win_rate"]
            self._event(trainer, f"{summary['agent']} vs {gatekeeper}: win {r['win_rate']:.3f}, "
                                 f"payoff {r['payoff']:+.3f} over {r['games']} games; ratings updated")
        return metrics

    def on_train_end(self, trainer, pl_module) -> None:
        if self.process is not None:  # let the last tournament land in the registry
            metrics = self._poll_evaluator(trainer, wait=True)
            if trainer.logger is not None and metrics:
                trainer.logger.log_metrics(metrics, step=trainer.global_step)
        self._remove_copies()

    def on_exception(self, trainer, pl_module, exception) -> None:
        if self.process is not None:
            self.process.terminate()
        self._remove_copies()

    def _remove_copies(self) -> None:
        if self.copies is not None:
            shutil.rmtree(self.copies, ignore_errors=True)
            self.copies = None

    # ---- exploitability -----------------------------------------------------------------------
    def _learner_exploitability(self, trainer):
        """The learner's exact exploitability (with its best response), None for a game without."""
        from sp_lightning.evaluation.strategy import policy_exploitability

        engine = engine_of(trainer)
        return policy_exploitability(engine.worker, engine.games[0], engine.learners.whole())

    def _exploitability_metrics(self, trainer, learner) -> dict[str, float]:
        from sp_lightning.evaluation.strategy import MIXTURE_EXPLOITABILITY, model_action_probs
        from sp_lightning.types import PolicyKind, PolicyRef

        if learner is None:
            return {}
        engine = engine_of(trainer)
        game = engine.games[0]
        metrics = {"league/exploitability/learner": learner.exploitability,
                   "league/exploitability/learner_legal_mass": learner.legal_mass_mean}
        members = [model_action_probs(engine.worker, PolicyRef(PolicyKind.CHECKPOINT, a.id), game.prompt_template)
                   for a in self.registry.agents(type="checkpoint")]
        if members and game.name in MIXTURE_EXPLOITABILITY:
            metrics["league/exploitability/mixture"] = MIXTURE_EXPLOITABILITY[game.name](members).exploitability
        return metrics

    # ---- best responses -----------------------------------------------------------------------
    def _add_best_response(self, trainer, step: int, learner) -> dict[str, dict]:
        """The exact best response to the learner joins the league (its table on disk, an agent
        of type best_response rated from the learner's rating); returns it for every rank."""
        game = engine_of(trainer).games[0].name
        agent = best_responses.agent_id(step)
        best_responses.save_table(best_responses.table_path(self.dir, agent), game, learner.best_response,
                                  step, learner.exploitability)
        record = self.registry.read().agents[LEARNER_ID]
        self.registry.add_agent(AgentRecord(
            id=agent, type=best_responses.AGENT_TYPE, policy=f"bot:{agent}", step=step, tags=["best_response"],
            mu=record.mu, sigma=record.sigma, elo=record.elo, stats={"exploitability": learner.exploitability},
        ), exist_ok=True)
        self._event(trainer, f"step {step}: {agent}, the best response to the learner "
                             f"(exploitability {learner.exploitability:.3f}), joins the league")
        return {agent: best_responses.load_table(best_responses.table_path(self.dir, agent))}

    def _seat_best_responses(self, trainer, tables: dict[str, dict]) -> None:
        """Every rank: each new best response becomes a bot its games can seat (``bot:<id>``)."""
        engine = engine_of(trainer)
        for agent, table in tables.items():
            if not engine.has_bot(agent):
                seed = rng_streams.rank_seed(None if engine.seed is None else engine.seed + table["step"], engine.rank)
                engine.add_bot(agent, best_responses.BestResponseBot(table["game"], table["moves"], seed=seed))

    # ---- events -------------------------------------------------------------------------------
    def _event(self, trainer, text: str) -> None:
        log.info("league: %s", text)
        experiment = getattr(trainer.logger, "experiment", None)
        if hasattr(experiment, "add_text"):
            experiment.add_text("league/events", text, global_step=trainer.global_step)


def _agents_of(state: LeagueState) -> dict[str, Any]:
    """The league's members and metadata as plain data, what every rank's sampler is refreshed
    from (the match history stays on the lead's disk)."""
    return {"metadata": dict(state.metadata), "agents": {k: a.to_dict() for k, a in state.agents.items()}}


def _state_of(news: dict[str, Any]) -> LeagueState:
    return LeagueState.from_dict({"schema_version": LeagueState.empty().schema_version, **news["agents"]},
                                 where="the lead's league")

