"""The arena: what a batch plays, played many episodes at once, and turned into a training batch.

The :class:`Arena` is the engine specification's arena: roles, episodes and artifact stores are
registered on it (``add_role``, ``add_episode``, ``add_store``); ``get_batch`` (overridable:
curricula live there) says what a batch plays; :meth:`Arena.step` is the one entry point that
plays a batch: ``get_batch``, the episodes played together (at most ``max_concurrent`` at once,
their model calls coalesced by ``sp_lightning.scheduler``), credited and flattened into records
(``build_training_batch``), shown to ``observe``. ``play``, ``generate_rollouts`` and
``run_episode`` play episodes without building a batch (evaluation, tests); ``run()`` drives
``step`` outside Lightning (``sp-lightning rollout``). In ``fit`` the run's engine
(``sp_lightning.engine``) builds the arena once and calls ``step`` for every batch.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Sequence

from sp_lightning.learners import Learners
from sp_lightning.batch import Batch, batch_summary, decoded_record, describe_rollout, rollout_metrics, to_records
from sp_lightning.credit import GRPO, CreditAssigner
from sp_lightning.episodes import Episode
from sp_lightning.rng import seeded_rng
from sp_lightning.rollout.base import RetrySettings, RolloutWorker, SamplingSettings
from sp_lightning.sampling import SamplingPlan
from sp_lightning.scheduler import PlayStats, Scheduler
from sp_lightning.sources import NOTHING_TO_PLAY, EpisodeRequest, EpisodeSource
from sp_lightning.stores import ArtifactStore
from sp_lightning.types import Role, Rollout


class Arena:
    """Plays episodes (any mix of policies, nested episodes included), scores, credits and batches
    them; the engine specification's arena. Everything it plays with is given to its
    constructor and never reassigned.

    Args:
        worker: The rollout backend serving every model policy (None: bots and remote models only).
        sampling: How model completions are sampled: settings for every request, or a
            ``SamplingPlan`` (a role's and a policy's own; ``sp_lightning.sampling``).
        bots: Scripted players by name (``bot:<name>`` seats).
        retry: How a generate call that failed with a transient fault is retried.
        remotes: Models behind OpenAI-compatible servers by name (``remote:<name>`` seats and judges).
        max_concurrent: Episodes in flight at once (None: every episode of a batch at once).
            Fewer bound the memory of long episodes; the batched generate calls get smaller.
        episodes_per_batch: Episodes a ``step()`` plays.
        credit: The credit assigner ``step()`` and ``build_training_batch`` use (default GRPO).
        seed: Seed of ``step()``'s batch streams (batch ``i`` draws from ``seeded_rng(seed, 0, i)``).
        source: What ``get_batch`` draws from when no episode is registered (a run's engine gives
            the config's ``data.episodes`` or its games' mix).
        episode_log: A :class:`sp_lightning.episode_log.EpisodeLog` to write the run's events to.
        learners: The run's learners (``model.learners``): which one answers a learner request
            in each role (None: one unnamed learner answers them all).

    In a config, ``data.arena`` names a subclass and its own arguments (``init_args:
    {max_concurrent: N}``); the run's engine gives it the rest. Subclass it and override
    ``get_batch`` for a curriculum, the hooks (``on_startup``, ``on_shutdown``,
    ``on_train_start``, ``on_train_end``) for resources, ``observe`` to read a batch's rollouts
    (a store of generated questions grows there).
    """

    def __init__(self, worker: RolloutWorker | None = None,
                 sampling: SamplingSettings | SamplingPlan | None = None, *,
                 bots: dict | None = None, retry: RetrySettings | None = None, remotes: dict | None = None,
                 max_concurrent: int | None = None, episodes_per_batch: int = 64,
                 credit: CreditAssigner | None = None, seed: int = 0, source: EpisodeSource | None = None,
                 episode_log=None, learners: Learners | None = None):
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError(f"arena.max_concurrent: expected >= 1 or null, got {max_concurrent!r}")
        if episodes_per_batch < 1:
            raise ValueError(f"arena.episodes_per_batch: expected >= 1, got {episodes_per_batch!r}")
        self.worker = worker
        self.sampling = SamplingPlan.of(sampling)
        self.bots = dict(bots or {})
        self.remotes = dict(remotes or {})  # name -> rollout.remote.RemoteModel
        self.max_concurrent = max_concurrent
        self.episodes_per_batch = episodes_per_batch
        self.credit = credit if credit is not None else GRPO()
        self.seed = seed
        self.source = source
        self.episode_log = episode_log
        self.scheduler = Scheduler(worker, self.sampling, retry or RetrySettings(), self.bots, self.remotes,
                                   episode_log, self.credit.branching, learners)
        self.roles: dict[str, Role] = {}
        self.episodes: dict[str, tuple[Episode, float]] = {}  # name -> (episode, weight)
        self.stores: dict[str, ArtifactStore] = {}
        self.steps_done = 0
        self.last_play = PlayStats()
        """How the last ``play`` went (generate calls, requests, retries, episodes in flight)."""
        self.finish_batch: Callable[[Batch, int], None] | None = None
        """Called by :meth:`step` with each built batch and its index, before the batch is logged
        and returned: the engine's imitation records (``Imitation.apply``) join it there."""

    # ---- registries ---------------------------------------------------------------------------
    def add_role(self, role: Role) -> Role:
        """Register a trainable role (a seat, a proposer, a solver); names are unique."""
        if role.name in self.roles:
            raise ValueError(f"arena.add_role: a role named {role.name!r} is already registered")
        self.roles[role.name] = role
        return role

    def add_episode(self, episode: Episode, weight: float = 1.0, name: str | None = None) -> Episode:
        """Register an episode that the default ``get_batch`` draws by ``weight`` (its roles are
        registered too, once each)."""
        name = name or episode.name
        if name in self.episodes:
            raise ValueError(f"arena.add_episode: an episode named {name!r} is already registered")
        if not weight > 0.0:
            raise ValueError(f"arena.add_episode({name!r}): expected a weight > 0, got {weight!r}")
        self.episodes[name] = (episode, float(weight))
        for role in getattr(episode, "roles", []):
            self.roles.setdefault(role.name, role)
        return episode

    def add_store(self, name: str, store: ArtifactStore) -> ArtifactStore:
        """Register an artifact store (topics, questions): ``get_batch`` and ``observe`` read and
        grow it, and the arena's state (hence a checkpoint) holds it."""
        if name in self.stores:
            raise ValueError(f"arena.add_store: a store named {name!r} is already registered")
        self.stores[name] = store
        return store

    # ---- what a batch plays -------------------------------------------------------------------
    def get_batch(self, rng: random.Random, size: int) -> list[EpisodeRequest]:
        """``size`` episode requests for one batch, everything random drawn from ``rng``: the
        registered episodes by weight, or else the source's batch. Override it for a curriculum."""
        if self.episodes:
            names = list(self.episodes)
            weights = [self.episodes[n][1] for n in names]
            picked = rng.choices(names, weights=weights, k=size)
            return [EpisodeRequest(self.episodes[n][0], rng.randrange(2**31)) for n in picked]
        if self.source is not None:
            return self.source.get_batch(rng, size)
        raise ValueError(NOTHING_TO_PLAY)

    def observe(self, rollouts: list[Rollout]) -> None:
        """A batch's finished rollouts (scored, credited): the source's (curricula, the league's
        ratings) by default."""
        if self.source is not None:
            self.source.observe(rollouts)

    # ---- playing ------------------------------------------------------------------------------
    def play(self, episodes: Sequence[Episode], seeds: Sequence[int], max_concurrent: int | None = None,
             trainable: Sequence[bool] | None = None) -> list[Rollout]:
        """Play every episode, concurrently (at most ``max_concurrent`` at once; default the
        arena's); each is scored by its rubric as it ends (nested ones included). ``trainable[i]``
        False plays episode ``i`` as never trained on (default: all trainable)."""
        limit = max_concurrent if max_concurrent is not None else self.max_concurrent
        rollouts, self.last_play = self.scheduler.play(episodes, seeds, limit, trainable)
        return rollouts

    def generate_rollouts(self, requests: Sequence[EpisodeRequest],
                          max_concurrent: int | None = None) -> list[Rollout]:
        """The result tree (``GenerateResult``) of each request, in order."""
        return self.play([r.episode for r in requests], [r.seed for r in requests], max_concurrent)

    def run_episode(self, episode: Episode | EpisodeRequest, seed: int = 0) -> Rollout:
        """One episode, played and scored (a request carries its own seed)."""
        if isinstance(episode, EpisodeRequest):
            episode, seed = episode.episode, episode.seed
        (rollout,) = self.play([episode], [seed])
        return rollout

    def build_training_batch(self, rollouts: list[Rollout], credit: CreditAssigner | None = None) -> Batch:
        """Credit the result trees (``credit``, default the arena's) and flatten them into
        training records: every trainable step with tokens, at any level; non-trainable
        sub-episodes, judges, bots and other policies give none."""
        credit = credit if credit is not None else self.credit
        credit.assign(rollouts)
        records = to_records(rollouts)
        metrics = rollout_metrics(rollouts)
        metrics["rollout/records"] = float(len(records))
        for name, value in credit.last_stats.items():
            metrics[f"credit/{name}"] = float(value)
        return Batch(records=records, rollouts=rollouts, metrics=metrics)

    def step(self, rng: random.Random | None = None, size: int | None = None,
             side_episodes: Sequence[EpisodeRequest] = (),
             side_metrics: Callable[[list[Rollout]], dict[str, float]] | None = None) -> Batch:
        """One batch, the arena's one entry point for it: ``get_batch`` (from ``rng``, default
        batch ``steps_done``'s own stream), played, credited and built, then shown to ``observe``.

        ``side_episodes`` are played in the same run (their model calls share the batch's
        generate calls), as never trained on, and returned as ``batch.side_rollouts``: they give
        no records, and neither credit nor ``observe`` sees them (the engine's online evaluation
        games); ``side_metrics`` of them join the batch's metrics. ``finish_batch`` (if set)
        completes the batch before it is logged, so that the episode log's records are what
        training gets."""
        rng = rng if rng is not None else seeded_rng(self.seed, 0, self.steps_done)
        if self.episode_log is not None:
            self.episode_log.start_batch(self.steps_done)
        requests = [*self.get_batch(rng, size or self.episodes_per_batch)]
        start = time.perf_counter()
        worker = self.worker
        tokens_before = worker.generated_tokens if worker is not None else 0
        loads_before = worker.adapter_load_seconds if worker is not None else 0.0
        everything = [*requests, *side_episodes]
        played = self.play([r.episode for r in everything], [r.seed for r in everything],
                           trainable=[True] * len(requests) + [False] * len(side_episodes))
        elapsed = time.perf_counter() - start
        batch = self.build_training_batch(played[:len(requests)])
        batch.side_rollouts = played[len(requests):]
        batch.metrics.update(self._play_metrics(elapsed, tokens_before, loads_before))
        if side_metrics is not None:
            batch.metrics.update(side_metrics(batch.side_rollouts))
        self.observe(batch.rollouts)
        if self.finish_batch is not None:
            self.finish_batch(batch, self.steps_done)
        if self.episode_log is not None:
            self.episode_log.batch(batch)
        self.steps_done += 1
        return batch

    def _play_metrics(self, elapsed: float, tokens_before: int, loads_before: float) -> dict[str, float]:
        """``rollout/...``: how the last play went (throughput, coalescing, retries, versions)."""
        stats, worker = self.last_play, self.worker
        generated = (worker.generated_tokens - tokens_before) if worker is not None else 0
        metrics = {
            "rollout/tokens_per_s": generated / max(elapsed, 1e-9),
            "rollout/seconds": elapsed,
            "rollout/generate_calls": float(stats.generate_calls),
            # requests the engine runs at once: each generate call sends every pending request
            "rollout/running_requests": stats.requests_sent / max(stats.generate_calls, 1),
            "rollout/running_requests_max": float(stats.most_requests),
            "rollout/retries": float(stats.retries),
            "rollout/policy_version": float(worker.policy_version if worker is not None else 0),
        }
        metrics["rollout/adapter_load_seconds"] = (worker.adapter_load_seconds - loads_before
                                                   if worker is not None else 0.0)
        if worker is not None:
            metrics.update(worker.health_metrics())
        return metrics

    def run(self, steps: int, show: int = 0, out=None,
            play_batch: Callable[[], Batch] | None = None) -> list[dict[str, float]]:
        """``steps`` batches without training (a rollout-only run: any backend, remote models
        included), between ``on_startup`` and ``on_shutdown``; prints each batch's summary and
        ``show`` of its episodes and records (decoded when the worker has a tokenizer) to
        ``out``. ``play_batch`` plays each batch (default ``step()``; a run's engine passes its
        own, with the online evaluation games alongside). Returns every batch's metrics."""
        out = out or sys.stdout
        history = []
        self.on_startup()
        try:
            for _ in range(steps):
                index = self.steps_done
                batch = play_batch() if play_batch is not None else self.step()
                history.append(batch.metrics)
                print(f"batch {index}: {batch_summary(batch)}", file=out, flush=True)
                if show:
                    for rollout in batch.rollouts[:show]:
                        print(describe_rollout(rollout), file=out)
                    self.sanity_check_batch(batch, show, out=out)
        finally:
            self.on_shutdown()
        return history

    def sanity_check_batch(self, batch: Batch, count: int = 3, out=None) -> None:
        """Print ``count`` of the batch's records: prompt and completion (decoded when the worker
        has a tokenizer, else the ids), the trained-token mask, reward and advantage."""
        out = out or sys.stdout
        tokenizer = self.worker.tokenizer if self.worker is not None else None
        print(f"{len(batch.records)} records from {len(batch.rollouts)} episodes", file=out)
        for index, record in enumerate(batch.records[:count]):
            fields = decoded_record(record, tokenizer)
            print(f"--- record {index}: reward {record.reward:+.3f}, advantage {record.advantage:+.3f}, "
                  f"policy version {record.policy_version}, trained tokens {sum(record.action_mask)}"
                  f"/{len(record.completion_ids)}", file=out)
            print(f"prompt:     {fields['prompt'][-400:]!r}", file=out)
            print(f"completion: {fields['completion']!r}", file=out)
            print(f"mask:       {record.action_mask}", file=out)
        out.flush()

    # ---- lifecycle hooks (override; call super() for the defaults) ----------------------------
    def on_startup(self) -> None:
        """Before the first batch (``run``, and the DataModule's setup)."""

    def on_shutdown(self) -> None:
        """After the last batch: closes remote models' connections (a remote rollout worker's too)
        and the episode log. Each reopens on demand, so calling it twice is harmless."""
        for model in self.remotes.values():
            model.close()
        if self.worker is not None:
            self.worker.close()
        if self.episode_log is not None:
            self.episode_log.close()

    def on_train_start(self) -> None:
        """When ``fit`` starts training (the module calls it)."""

    def on_train_end(self) -> None:
        """When ``fit`` ends training."""

    # ---- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The registered stores' items and weights (the source checkpoints its own)."""
        return {"stores": {name: store.state_dict() for name, store in self.stores.items()},
                "steps_done": self.steps_done}

    def load_state_dict(self, state: dict) -> None:
        for name, store_state in state.get("stores", {}).items():
            if name in self.stores:
                self.stores[name].load_state_dict(store_state)
        self.steps_done = state.get("steps_done", self.steps_done)
