"""League training as a Lightning callback: the league on disk, its checkpoint schedule, the
ratings, a background evaluator and the league's TensorBoard charts.

The hero is the learner; the league is a registry file (``<dir>/league.json``, see
``registry``) of baselines (the base model, RandomBot, ChaosBot), past checkpoints of the hero
(peft adapters in ``<dir>/adapters/``, loadable by ``PeftModel.from_pretrained`` and by vLLM) and
the hero itself. Every step the callback:

1. records the step's games (hero against league members) in the registry: TrueSkill and Elo;
2. promotes the hero to a checkpoint when the schedule names the step (recent / anchor / elite)
   and prunes recent checkpoints that left the window;
3. every ``evaluator.every`` steps starts a tournament of the newest checkpoint against
   gatekeepers in a separate process (it reads adapters from disk and writes the registry under
   its lock), and logs earlier tournaments once they finish;
4. hands the datamodule's :class:`~sp_lightning.league.sampler.LeagueSampler` a fresh view;
5. logs the hero's rating beside the baselines and the best past checkpoint, the win rate per
   opponent type, the realised opponent-type mix and (Kuhn Poker) exploitability.

Resume: the registry's content is saved in the Lightning checkpoint and written back on resume,
so a killed run continues with the league as it was at its last checkpoint (the matchmaker's
state travels with the datamodule's). Adapters of pruned checkpoints are deleted only once a
Lightning checkpoint that no longer names them has been written.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import lightning as L

from sp_lightning.league.ratings import MatchPooler, TrueSkillRatings
from sp_lightning.league.registry import AgentRecord, LeagueRegistry
from sp_lightning.league.sampler import HERO_ID, LeagueSampler

log = logging.getLogger(__name__)

DEFAULT_BASELINES = ["base_model", "random_bot", "chaos_bot"]
"""The default baselines: they play every game."""


def baseline_policy(agent_id: str) -> str:
    """The policy spec of a baseline id: ``base_model`` (the adapter off), or ``<name>_bot`` for
    ``bot:<name>``."""
    from envs import BOTS

    if agent_id == "base_model":
        return "base"
    if agent_id.endswith("_bot") and agent_id.removesuffix("_bot") in BOTS:
        return f"bot:{agent_id.removesuffix('_bot')}"
    known = ["base_model"] + sorted(f"{b}_bot" for b in BOTS)
    raise ValueError(f"league.baselines: expected ids among {known}, got {agent_id!r}")


@dataclass
class CheckpointSchedule:
    """When the hero becomes a league checkpoint."""

    recent_every: int = 10
    """Promote every this many steps; these 'recent' checkpoints stay while inside the window."""
    recent_window: int = 100
    """A recent checkpoint leaves the league once it is this many steps old (unless anchor/elite)."""
    anchor_every: int = 100
    """Promote every this many steps, kept forever (anchors)."""
    elite: bool = True
    """Also keep forever a checkpoint whose hero rating (TrueSkill mu) is a new best by elite_margin."""
    elite_margin: float = 1.0
    """How far (in TrueSkill mu) above the best so far a rating must be to count as a new best."""

    def __post_init__(self):
        for name in ("recent_every", "recent_window", "anchor_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"league.schedule.{name}: expected >= 1, got {getattr(self, name)}")

    def tags(self, step: int, new_best: bool) -> list[str]:
        tags = []
        if step % self.recent_every == 0:
            tags.append("recent")
        if step % self.anchor_every == 0:
            tags.append("anchor")
        if self.elite and new_best and step % self.recent_every == 0:
            tags.append("elite")
        return tags

    def keeps(self, agent_step: int, tags: list[str], now: int) -> bool:
        return "anchor" in tags or "elite" in tags or now - agent_step < self.recent_window


@dataclass
class EvaluatorSettings:
    """The background tournament of the newest checkpoint against gatekeepers."""

    every: int = 50
    """Start a tournament every this many steps (0 disables the evaluator)."""
    games_per_seat: int = 50
    """Games per seat against each gatekeeper."""
    gatekeepers: list[str] = field(default_factory=lambda: ["random_bot", "best", "recent"])
    """League ids, or 'best' (the best-rated checkpoint) and 'recent' (the previous checkpoint)."""
    threads: int = 1
    """Torch threads of the evaluator process."""
    seed: int = 99_000


class LeagueCallback(L.Callback):
    def __init__(
        self,
        dir: str,
        schedule: CheckpointSchedule | None = None,
        evaluator: EvaluatorSettings | None = None,
        baselines: list[str] | None = None,
        exploitability_every: int = 0,
        run_name: str = "",
        games_per_match: int = 1,
    ):
        """
        Args:
            dir: Where the league lives: league.json, adapters/, evaluations/.
            schedule: When the hero is promoted to a checkpoint, and how long checkpoints stay.
            evaluator: The background tournament (every N steps, gatekeepers, games).
            baselines: Baseline members of the league, by id: base_model, random_bot, chaos_bot,
                or ``<name>_bot`` for any other bot (``bot:<name>``, e.g. tictactoe_tactical_bot).
                Default: base_model, random_bot, chaos_bot (they play every game).
            exploitability_every: Log the hero's and the league mixture's exploitability every
                this many steps, for games that have it (Kuhn Poker); 0 disables it.
            run_name: Stored in the registry's metadata.
            games_per_match: Games of the same agents pooled into one rated match, scored by
                total payoff (league.ratings.MatchPooler across training steps, pool_matches
                within an evaluator tournament). 1 rates every game, right for win/draw/loss
                games; poker needs blocks of hands so that ratings follow chips won, not hands won.
        """
        for entry in baselines or []:
            baseline_policy(entry)  # a bad name fails here, before any game is played
        self.dir = dir
        self.schedule = schedule or CheckpointSchedule()
        self.evaluator = evaluator or EvaluatorSettings()
        self.baselines = list(DEFAULT_BASELINES if baselines is None else baselines)
        self.exploitability_every = exploitability_every
        self.pooler = MatchPooler(games_per_match)
        self._warned_adapter_cap = False
        self.process_labels: dict[str, str] = {}
        self.run_name = run_name
        self.registry = LeagueRegistry(os.path.join(dir, "league.json"), run_name=run_name)
        self.best_hero_rating: float | None = None
        self.pruned: list[tuple[int, str]] = []  # (step pruned at, adapter dir) awaiting deletion
        self.saved_step = -1
        self.process: subprocess.Popen | None = None
        self.process_spec: str | None = None
        self._restore: dict | None = None
        self.sampler: LeagueSampler | None = None

    # ---- set up, cold start, resume -----------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        sampler = getattr(trainer.datamodule, "opponents", None)
        if not isinstance(sampler, LeagueSampler):
            raise ValueError("LeagueCallback: expected data.opponents to be sp_lightning.league.LeagueSampler "
                             f"(the league chooses the opponents), got {type(sampler).__name__}")
        self.sampler = sampler

    def on_train_start(self, trainer, pl_module) -> None:
        os.makedirs(os.path.join(self.dir, "adapters"), exist_ok=True)
        if self._restore is not None:
            self.registry.restore(self._restore["registry"])
            self.best_hero_rating = self._restore["best_hero_rating"]
            self.pruned = [tuple(p) for p in self._restore["pruned"]]
            if "pooler" in self._restore:  # absent in checkpoints from before games_per_match
                self.pooler.load_state_dict(self._restore["pooler"])
            self._restore = None
        else:
            if self.registry.read().agents:
                raise ValueError(f"league.dir {self.dir!r} already holds a league; resume its run with "
                                 f"--ckpt_path, or give this run another league.dir")
            self.registry.set_metadata(run_name=self.run_name)
            for name in self.baselines:
                self.registry.add_agent(AgentRecord(id=name, type="baseline", policy=baseline_policy(name)))
            self.registry.add_agent(AgentRecord(id=HERO_ID, type="learner", policy="learner", step=0))
            self._event(trainer, f"league started in {self.dir} with {', '.join(self.baselines)}")
        worker = trainer.datamodule.worker
        for agent in self.registry.agents(type="checkpoint"):
            worker.register_adapter(agent.id, agent.adapter_path)
        self._refresh()

    def state_dict(self) -> dict[str, Any]:
        return {"registry": self.registry.snapshot_dict(), "best_hero_rating": self.best_hero_rating,
                "pruned": [list(p) for p in self.pruned], "pooler": self.pooler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._restore = state

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.saved_step = trainer.global_step

    # ---- every step ---------------------------------------------------------------------------
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        matches, buckets, results = self.sampler.drain()
        if matches:
            rated = self.pooler.add(matches)
            if rated:
                self.registry.record_matches(rated, step=step, source="train")
        metrics = self._mix_and_results(buckets, results)
        state = self.registry.read()
        promoted_or_pruned = self._promote_and_prune(trainer, step, state)
        self._delete_pruned()
        evaluated = self._poll_evaluator(trainer)
        metrics.update(evaluated)
        if self.evaluator.every and step % self.evaluator.every == 0 and self.process is None:
            self._start_evaluator(trainer, pl_module, step)
        if self.exploitability_every and step % self.exploitability_every == 0:
            metrics.update(self._exploitability(trainer))
        metrics.update(self._refresh(step, None if promoted_or_pruned or evaluated else state))
        pl_module.log_dict(metrics, batch_size=1)

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

    def _promote_and_prune(self, trainer, step: int, state) -> bool:
        """Promote the hero and prune checkpoints by the schedule; True if the league changed."""
        league = state.agents
        checkpoints = [a for a in league.values() if a.type == "checkpoint"]
        hero = league[HERO_ID]
        rating = hero.mu
        new_best = self.best_hero_rating is not None and rating > self.best_hero_rating + self.schedule.elite_margin
        tags = self.schedule.tags(step, new_best)
        if tags:
            agent_id = f"ckpt-{step:06d}"
            path = os.path.join(self.dir, "adapters", agent_id)
            trainer.lightning_module.save_adapter(path)
            parent = max(checkpoints, key=lambda a: a.step, default=None)
            self.registry.update_agent(HERO_ID, step=step)
            self.registry.add_agent(AgentRecord(
                id=agent_id, type="checkpoint", policy=f"checkpoint:{agent_id}", adapter_path=path, step=step,
                parent=parent.id if parent else None, tags=tags, mu=hero.mu, sigma=hero.sigma, elo=hero.elo,
                stats={f"coverage_{n}": v for n, v in self.sampler.coverage.coverages(HERO_ID).items()},
            ), exist_ok=True)
            trainer.datamodule.worker.register_adapter(agent_id, path)
            self._warn_if_adapters_thrash(trainer.datamodule.worker, len(checkpoints) + 1)
            if self.best_hero_rating is None or new_best:
                self.best_hero_rating = rating
            self._event(trainer, f"step {step}: {agent_id} added ({', '.join(tags)}), rating {rating:.2f}")
        pruned = [agent for agent in checkpoints if not self.schedule.keeps(agent.step, agent.tags, step)]
        for agent in pruned:
            self.registry.remove_agent(agent.id)
            trainer.datamodule.worker.forget_adapter(agent.id)
            self.pruned.append((step, agent.adapter_path))
            self._event(trainer, f"step {step}: {agent.id} left the league (older than the recent window)")
        return bool(tags or pruned)

    def _warn_if_adapters_thrash(self, worker, checkpoints: int) -> None:
        """Once per run: a league with more checkpoints than the worker holds reloads adapters
        from disk every turn (one run, 64 games against 20 checkpoints: 4.1 s with a cap of 8,
        0.7 s with 32)."""
        cap = getattr(worker, "max_adapters", None)
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

    def _refresh(self, step: int | None = None, state=None) -> dict[str, float]:
        """A league view for the sampler (``state``, or read now), and the ratings to log."""
        state = state if state is not None else self.registry.read()
        hero = state.agents[HERO_ID]
        members = list(state.agents.values())
        self.sampler.refresh(members, hero, step)
        metrics = {"league/hero/mu": hero.mu, "league/hero/sigma": hero.sigma, "league/hero/elo": hero.elo,
                   "league/hero/rating": TrueSkillRatings.conservative(hero.mu, hero.sigma),
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
        for n, value in self.sampler.coverage.coverages(HERO_ID).items():
            metrics[f"league/hero/coverage_{n}gram"] = value
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

        dm = trainer.datamodule
        spec = spec_for(pl_module.policy_settings, dm.games[0], dm.eval_sampling(), self.registry.path,
                        newest.id, gatekeepers, self.evaluator.games_per_seat, self.evaluator.seed + step,
                        step, self.evaluator.threads,
                        dm.eval_env_overrides(),
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

    def on_exception(self, trainer, pl_module, exception) -> None:
        if self.process is not None:
            self.process.terminate()

    # ---- exploitability -----------------------------------------------------------------------
    def _exploitability(self, trainer) -> dict[str, float]:
        from sp_lightning.evaluation.exploitability import mixture_exploitability
        from sp_lightning.evaluation.strategy import model_action_probs, policy_exploitability
        from sp_lightning.types import PolicyRef

        dm = trainer.datamodule
        game = dm.games[0]
        hero = policy_exploitability(dm.worker, game)
        if hero is None:
            return {}
        metrics = {"league/exploitability/hero": hero.exploitability,
                   "league/exploitability/hero_legal_mass": hero.legal_mass_mean}
        members = [model_action_probs(dm.worker, PolicyRef("checkpoint", a.id), game.prompt_template)
                   for a in self.registry.agents(type="checkpoint")]
        if members:
            metrics["league/exploitability/mixture"] = mixture_exploitability(members).exploitability
        return metrics

    # ---- events -------------------------------------------------------------------------------
    def _event(self, trainer, text: str) -> None:
        log.info("league: %s", text)
        experiment = getattr(trainer.logger, "experiment", None)
        if hasattr(experiment, "add_text"):
            experiment.add_text("league/events", text, global_step=trainer.global_step)
