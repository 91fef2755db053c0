"""The arena: plays many episodes at once and turns their rollouts into a training batch.

Batching across games is where the speed comes from. Every running episode is a coroutine; when
all of them are waiting on a model, their pending requests go to the rollout worker in one
``generate`` call (the worker splits them per policy/adapter). No polling and no threads: the
arena counts the episodes that can still make progress, and the last one to block flushes.
Bot seats are answered at once, without a model. A remote model (``remote:<name>``, an
OpenAI-compatible server) is awaited on its own: while its answer is on the way the episode
counts as blocked, so the local model's batches go on without it.

The :class:`Arena` is also the engine specification's arena: roles, episodes and artifact stores
are registered on it (``add_role``, ``add_episode``, ``add_store``); ``get_batch`` (overridable:
curricula live there) says what a batch plays; ``generate_rollouts`` plays it, at most
``max_concurrent`` episodes at once; ``build_training_batch`` credits and flattens the result
trees into records; ``step()`` and ``run()`` drive it outside Lightning, and the DataModule drives
the same ``get_batch`` / ``step`` inside ``fit`` (``data.arena`` names a custom arena class).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sp_lightning.credit import step_return, trainable_steps
from sp_lightning.episodes import Episode
from sp_lightning.rollout.base import RetrySettings, RolloutWorker, SamplingSettings, generate_with_retries
from sp_lightning.sources import NOTHING_TO_PLAY, EpisodeRequest, EpisodeSource
from sp_lightning.stores import ArtifactStore
from sp_lightning.types import Completion, ModelRequest, Role, Rollout, TrainingRecord


class _Context:
    """The EpisodeContext the arena hands to one running episode."""

    def __init__(self, arena: _Run, seed: int, episode_id: str = "0", trainable: bool = True):
        self._run = arena
        self.seed = seed
        self.episode_id = episode_id  # "3" for a run's fourth episode, "3.1" for its second child
        self.trainable = trainable  # False below a sub-episode requested as not trainable
        self._children = 0

    async def generate(self, request: ModelRequest) -> Completion:
        return await self._run.generate(request, self.episode_id)

    async def run(self, episode: Episode, seed: int, trainable: bool = True) -> Rollout:
        """A nested episode in the same task: the parent simply waits for it, and gets it back
        scored by its own rubric. ``trainable=False``: its steps inform the parent (through
        ``get_extras``) and never train."""
        (rollout,) = await self.run_many([episode], [seed], trainable)
        return rollout

    async def run_many(self, episodes: Sequence[Episode], seeds: Sequence[int],
                       trainable: bool = True) -> list[Rollout]:
        """Nested episodes played concurrently; their model calls join the same batches."""
        first, self._children = self._children, self._children + len(episodes)
        ids = [f"{self.episode_id}.{first + i}" for i in range(len(episodes))]
        return await self._run.gather_children(episodes, seeds, ids, self.trainable and trainable)

    @property
    def level(self) -> int:
        """The depth of this episode in its tree (0 for a batch's own episodes)."""
        return self.episode_id.count(".")


async def play_and_score(episode: Episode, ctx: _Context) -> Rollout:
    """Play one episode and score it with its rubric, in the episode's own task: a judge's
    model calls join the batch of whatever else is pending, and a parent reads its children's
    rewards as soon as they return."""
    log = ctx._run.arena.episode_log
    if log is not None:
        log.episode_start(ctx.episode_id, episode, ctx.seed)
    rollout = await episode.rollout(ctx)
    rollout.level = ctx.level
    if not ctx.trainable:  # a sub-episode requested not trainable, or below one: its steps never train
        for step in rollout.steps:
            step.in_trainable_episode = False
    rollout.extras = episode.get_extras(rollout)  # once: the rubric reads it, the batch's metrics log it
    await episode.rubric.ascore(rollout, ctx=ctx, extras=rollout.extras)
    if log is not None:
        log.episode_end(ctx.episode_id, rollout)
    return rollout


class _Run:
    """One call of Arena.play: the pending requests and the count of runnable episodes."""

    def __init__(self, arena: Arena):
        self.arena = arena
        self.pending: list[tuple[ModelRequest, asyncio.Future]] = []
        self.runnable = 0
        self.generate_calls = 0
        self.requests_sent = 0  # requests over every generate call
        self.most_requests = 0  # the largest generate call
        self.retries = 0
        self.remote_versions: dict[str, int] = {}  # each remote model's version, read once per run

    async def generate(self, request: ModelRequest, episode_id: str = "0") -> Completion:
        completion = await self.answer(request)
        if self.arena.episode_log is not None:
            self.arena.episode_log.model_call(episode_id, request, completion)
        return completion

    async def answer(self, request: ModelRequest) -> Completion:
        if not request.policy.is_model:
            return self.arena.bot_answer(request)
        if request.policy.kind == "remote":
            return await self.remote_answer(request)
        if request.policy.kind == "learner" and self.arena.worker is not None:
            request.policy_version = self.arena.worker.policy_version  # the weights it is asked of
        future = asyncio.get_running_loop().create_future()
        self.pending.append((request, future))
        self.runnable -= 1
        self.maybe_flush()
        return await future

    async def remote_answer(self, request: ModelRequest) -> Completion:
        model = self.arena.remote_model(request.policy.name)
        # sent first (on the model's thread pool), then the local batch may go while it is on the way
        answer = model.submit(request, self.arena.sampling, self.remote_versions)
        self.runnable -= 1  # blocked on the server: the others' local batch need not wait for it
        self.maybe_flush()
        try:
            return await answer
        finally:
            self.runnable += 1

    def maybe_flush(self) -> None:
        if self.runnable > 0 or not self.pending:
            return
        batch, self.pending = self.pending, []
        self.generate_calls += 1
        self.requests_sent += len(batch)
        self.most_requests = max(self.most_requests, len(batch))
        completions, retries = generate_with_retries(
            self.arena.worker, [r for r, _ in batch], self.arena.sampling, self.arena.retry)
        self.retries += retries
        self.runnable += len(batch)
        for (_, future), completion in zip(batch, completions):
            future.set_result(completion)

    async def play_all(self, episodes: Sequence[Episode], seeds: Sequence[int],
                       max_concurrent: int | None) -> list[Rollout]:
        """Every episode, at most ``max_concurrent`` at once: each lane plays one episode after
        another, taking the next as soon as its last one ends, so the lane stays runnable."""
        results: list[Rollout | None] = [None] * len(episodes)
        queue = iter(enumerate(zip(episodes, seeds)))
        lanes = len(episodes) if max_concurrent is None else min(max_concurrent, len(episodes))
        self.runnable = lanes
        self.in_flight = self.most_in_flight = 0

        async def lane() -> None:
            try:
                for index, (episode, seed) in queue:  # one shared iterator: each lane takes the next
                    self.in_flight += 1
                    self.most_in_flight = max(self.most_in_flight, self.in_flight)
                    try:
                        results[index] = await play_and_score(episode, _Context(self, seed, str(index)))
                    finally:
                        self.in_flight -= 1
            finally:
                self.runnable -= 1
                self.maybe_flush()

        await asyncio.gather(*(lane() for _ in range(lanes)))
        return results  # type: ignore[return-value]

    async def gather_children(self, episodes: Sequence[Episode], seeds: Sequence[int], ids: Sequence[str],
                              trainable: bool = True) -> list[Rollout]:
        """Sub-episodes with ids ``ids``; ``trainable=False``: their steps never train (the
        parent's request, or an ancestor's)."""
        if not episodes:
            return []
        remaining = len(episodes)
        self.runnable += remaining - 1  # the parent's slot passes to its children

        async def child(episode: Episode, seed: int, episode_id: str) -> Rollout:
            nonlocal remaining
            try:
                return await play_and_score(episode, _Context(self, seed, episode_id, trainable))
            finally:
                remaining -= 1
                if remaining:  # the last child hands its slot back to the waiting parent
                    self.runnable -= 1
                    self.maybe_flush()

        return list(await asyncio.gather(*(child(e, s, i) for e, s, i in zip(episodes, seeds, ids))))


@dataclass
class Batch:
    """What the arena hands to training: records, the rollouts they came from, and metrics."""

    records: list[TrainingRecord]
    rollouts: list[Rollout]
    metrics: dict[str, float] = field(default_factory=dict)
    policy_lags: list[int] | None = None
    """Each record's policy lag when it reached the trainer (asynchronous collection sets it,
    dropped records included; the TensorBoard callback draws its histogram)."""


class Arena:
    """Plays episodes (any mix of policies, nested episodes included), scores, credits and batches
    them; the engine specification's arena.

    Args:
        worker: The rollout backend serving every model policy (None: bots and remote models only).
            The DataModule sets it (and the other engine settings below) at setup, so a custom
            arena named in ``data.arena`` needs none of them in its own arguments.
        sampling: How model completions are sampled.
        bots: Scripted players by name (``bot:<name>`` seats).
        retry: How a generate call that failed with a transient fault is retried.
        remotes: Models behind OpenAI-compatible servers by name (``remote:<name>`` seats and judges).
        max_concurrent: Episodes in flight at once (None: every episode of a batch at once).
            Fewer bound the memory of long episodes; the batched generate calls get smaller.
        episodes_per_batch: Episodes a ``step()`` plays (the DataModule sets its own).
        credit: The credit assigner ``step()`` and ``build_training_batch`` use (default GRPO).
        seed: Seed of ``step()``'s batch streams (batch ``i`` draws from ``seeded_rng(seed, 0, i)``).
        source: What ``get_batch`` draws from when no episode is registered (the DataModule sets
            the config's ``data.episodes`` or its games' mix).
        episode_log: A :class:`sp_lightning.episode_log.EpisodeLog` to write the run's events to.
        online_evaluation: A :class:`sp_lightning.evaluation.online.OnlineEvaluation` whose games
            ``step()`` plays alongside each batch's (the DataModule sets it from
            ``data.eval.online_games``); their figures join the batch's metrics, and they give
            no records.

    Subclass it and override ``get_batch`` for a curriculum, the hooks (``on_startup``,
    ``on_shutdown``, ``on_train_start``, ``on_train_end``) for resources, ``observe`` to read a
    batch's rollouts (a store of generated questions grows there).
    """

    def __init__(self, worker: RolloutWorker | None = None, sampling: SamplingSettings | None = None,
                 bots: dict | None = None, retry: RetrySettings | None = None, remotes: dict | None = None,
                 max_concurrent: int | None = None, episodes_per_batch: int = 64, credit=None, seed: int = 0,
                 source: EpisodeSource | None = None, episode_log=None, online_evaluation=None):
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError(f"arena.max_concurrent: expected >= 1 or null, got {max_concurrent!r}")
        if episodes_per_batch < 1:
            raise ValueError(f"arena.episodes_per_batch: expected >= 1, got {episodes_per_batch!r}")
        self.worker = worker
        self.sampling = sampling or SamplingSettings()
        self.bots = dict(bots or {})
        self.remotes = dict(remotes or {})  # name -> rollout.remote.RemoteModel
        self.retry = retry or RetrySettings()
        self.max_concurrent = max_concurrent
        self.episodes_per_batch = episodes_per_batch
        self.credit = credit
        self.seed = seed
        self.source = source
        self.episode_log = episode_log
        self.online_evaluation = online_evaluation
        self.roles: dict[str, Role] = {}
        self.episodes: dict[str, tuple[Episode, float]] = {}  # name -> (episode, weight)
        self.stores: dict[str, ArtifactStore] = {}
        self.steps_done = 0
        self.last_retries = 0
        self.last_generate_calls = 0
        self.last_requests_sent = 0
        self.last_most_requests = 0
        self.last_most_in_flight = 0

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
    def bot_answer(self, request: ModelRequest) -> Completion:
        name = request.policy.name
        if name not in self.bots:
            raise ValueError(f"no bot named {name!r} is registered; known: {sorted(self.bots)}")
        text = self.bots[name].act(request.messages[-1]["content"], request.legal_actions or [])
        return Completion(text=text, policy=request.policy)

    def remote_model(self, name: str):
        if name not in self.remotes:
            raise ValueError(f"no remote model named {name!r} is configured (data.remote_models); "
                             f"known: {sorted(self.remotes)}")
        return self.remotes[name]

    def play(self, episodes: Sequence[Episode], seeds: Sequence[int],
             max_concurrent: int | None = None) -> list[Rollout]:
        """Play every episode, concurrently (at most ``max_concurrent`` at once; default the
        arena's); each is scored by its rubric as it ends (nested ones included)."""
        run = _Run(self)
        limit = max_concurrent if max_concurrent is not None else self.max_concurrent
        rollouts = list(_run_coroutine(run.play_all(episodes, seeds, limit)))
        self.last_generate_calls = run.generate_calls
        self.last_requests_sent, self.last_most_requests = run.requests_sent, run.most_requests
        self.last_retries = run.retries
        self.last_most_in_flight = run.most_in_flight
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

    def build_training_batch(self, rollouts: list[Rollout], credit=None) -> Batch:
        """Credit the result trees (``credit``, default the arena's) and flatten them into
        training records: every trainable step with tokens, at any level; non-trainable
        sub-episodes, judges, bots and other policies give none."""
        credit = credit if credit is not None else self._credit()
        credit.assign(rollouts)
        records = to_records(rollouts)
        metrics = rollout_metrics(rollouts)
        metrics["rollout/records"] = float(len(records))
        for name, value in getattr(credit, "last_stats", {}).items():
            metrics[f"credit/{name}"] = float(value)
        return Batch(records=records, rollouts=rollouts, metrics=metrics)

    def collect(self, episodes: Sequence[Episode], seeds: Sequence[int], credit=None, evaluation=None) -> Batch:
        """Play, score, assign credit and build the training records of one batch. ``evaluation``:
        the matches of an :class:`~sp_lightning.evaluation.online.OnlineEvaluation`, played in the
        same run (their moves share the batch's generate calls) and reported in the metrics."""
        matches = list(evaluation or [])
        side_episodes, side_seeds = [], []
        if matches:
            from sp_lightning.evaluation.matches import episodes_of  # evaluation builds on the arena

            side_episodes, side_seeds = episodes_of(matches)
        start = time.perf_counter()
        tokens_before = getattr(self.worker, "generated_tokens", 0)
        loads_before = getattr(self.worker, "adapter_load_seconds", 0.0)
        played = self.play([*episodes, *side_episodes], [*seeds, *side_seeds])
        rollouts, side_rollouts = played[:len(episodes)], played[len(episodes):]
        elapsed = time.perf_counter() - start
        batch = self.build_training_batch(rollouts, credit)
        if matches:
            from sp_lightning.evaluation.online import online_metrics  # evaluation builds on the arena

            batch.metrics.update(online_metrics(matches, side_rollouts))
        generated = getattr(self.worker, "generated_tokens", 0) - tokens_before
        batch.metrics["rollout/tokens_per_s"] = generated / max(elapsed, 1e-9)
        batch.metrics["rollout/seconds"] = elapsed
        batch.metrics["rollout/generate_calls"] = float(self.last_generate_calls)
        # requests the engine runs at once: each generate call sends every pending request
        batch.metrics["rollout/running_requests"] = self.last_requests_sent / max(self.last_generate_calls, 1)
        batch.metrics["rollout/running_requests_max"] = float(self.last_most_requests)
        batch.metrics["rollout/retries"] = float(self.last_retries)
        batch.metrics["rollout/policy_version"] = float(getattr(self.worker, "policy_version", 0))
        if hasattr(self.worker, "adapter_load_seconds"):  # backends that load adapters per version
            batch.metrics["rollout/adapter_load_seconds"] = self.worker.adapter_load_seconds - loads_before
        return batch

    def step(self, rng: random.Random | None = None, size: int | None = None, credit=None) -> Batch:
        """One batch: ``get_batch`` (from ``rng``, default batch ``steps_done``'s own stream),
        played, credited and built, then shown to ``observe``."""
        rng = rng if rng is not None else seeded_rng(self.seed, 0, self.steps_done)
        if self.episode_log is not None:
            self.episode_log.batch_index = self.steps_done  # the events of this batch carry its index
        requests = self.get_batch(rng, size or self.episodes_per_batch)
        evaluation = self.online_evaluation.matches(self.steps_done) if self.online_evaluation is not None else None
        batch = self.collect([r.episode for r in requests], [r.seed for r in requests], credit, evaluation)
        self.observe(batch.rollouts)
        if self.episode_log is not None:
            self.episode_log.batch(batch)
        self.steps_done += 1
        return batch

    def run(self, steps: int, show: int = 0, out=None) -> list[dict[str, float]]:
        """``steps`` batches without training (a rollout-only run: any backend, remote models
        included), between ``on_startup`` and ``on_shutdown``; prints each batch's summary and
        ``show`` of its episodes and records (decoded when the worker has a tokenizer) to
        ``out``. Returns every batch's metrics."""
        out = out or sys.stdout
        history = []
        self.on_startup()
        try:
            for _ in range(steps):
                index = self.steps_done
                batch = self.step()
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
        tokenizer = getattr(self.worker, "tokenizer", None)
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

    def _credit(self):
        if self.credit is None:
            from sp_lightning.credit import GRPO

            self.credit = GRPO()
        return self.credit

    # ---- lifecycle hooks (override; call super() for the defaults) ----------------------------
    def on_startup(self) -> None:
        """Before the first batch (``run``, and the DataModule's setup)."""

    def on_shutdown(self) -> None:
        """After the last batch: closes remote models' connections (a remote rollout worker's too)
        and the episode log. Each reopens on demand, so calling it twice is harmless."""
        for model in self.remotes.values():
            model.close()
        if hasattr(self.worker, "close"):
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


def record_means(records: Sequence[TrainingRecord]) -> tuple[float, float]:
    """The mean reward and mean advantage of ``records`` (0 for none)."""
    count = max(len(records), 1)
    return sum(r.reward for r in records) / count, sum(r.advantage for r in records) / count


def batch_summary(batch: Batch) -> str:
    """One line: episodes, records, mean reward and advantage, and the per-episode metrics."""
    records = batch.records
    reward, advantage = record_means(records)
    shown = {k: v for k, v in batch.metrics.items() if not k.startswith(("rollout/", "credit/"))}
    parts = [f"{len(batch.rollouts)} episodes", f"{len(records)} records",
             f"reward {reward:+.3f}", f"advantage {advantage:+.3f}"]
    parts += [f"{k} {v:.3g}" for k, v in sorted(shown.items())]
    return ", ".join(parts)


def describe_rollout(rollout: Rollout, max_chars: int = 160, indent: str = "") -> str:
    """A finished episode as text: who sat where, every step's answer, the rewards, and its
    children below it."""
    seats = ", ".join(f"{role}={policy}" for role, policy in rollout.seats.items()) or "no seats"
    rewards = ", ".join(f"{role} {reward:+.3f}" for role, reward in rollout.rewards.items())
    lines = [f"{indent}episode {rollout.episode} (level {rollout.level}{'' if rollout.trainable else ', not trainable'}"
             f"; {seats}): rewards {rewards or 'none'}"]
    for step in rollout.steps:
        text = step.completion.text
        text = text if len(text) <= max_chars else text[:max_chars] + "..."
        flags = " (invalid)" if step.info.get("invalid_move") else ""
        lines.append(f"{indent}  {step.role} [{step.completion.policy}]: {text!r}{flags}")
    for verdict in rollout.judgements:
        lines.append(f"{indent}  judge {verdict.get('judge', '')} [{verdict.get('policy', '')}]: "
                     f"{str(verdict.get('text', ''))[:max_chars]!r}")
    lines += [describe_rollout(child, max_chars, indent + "    ") for child in rollout.children]
    return "\n".join(lines)


def decoded_record(record: TrainingRecord, tokenizer=None) -> dict:
    """A record as text (ids where there is no tokenizer), with its mask, reward and advantage."""
    def text(ids):
        return tokenizer.decode(ids) if tokenizer is not None else " ".join(map(str, ids))

    return {"prompt": text(record.prompt_ids), "completion": text(record.completion_ids),
            "action_mask": list(record.action_mask), "reward": record.reward,
            "advantage": record.advantage, "policy_version": record.policy_version}


def _run_coroutine(coroutine):
    """asyncio.run, also from code that already runs inside an event loop (a Jupyter kernel):
    there the games are played on a worker thread with its own loop."""
    if not _in_event_loop():
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _in_event_loop() -> bool:
    """Whether an event loop runs in this thread. Asked apart from running the games, so that an
    episode's error is not reported as raised while handling "no running event loop"."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def to_records(rollouts: Sequence[Rollout]) -> list[TrainingRecord]:
    """Every trainable step (of any nesting level) with an advantage becomes one record."""
    records = []
    for _, rollout, step in trainable_steps(list(rollouts)):
        if step.advantage is None:
            continue
        c = step.completion
        records.append(
            TrainingRecord(
                prompt_ids=c.prompt_ids,
                completion_ids=c.completion_ids,
                logprobs=c.logprobs,
                advantage=float(step.advantage),
                reward=step_return(rollout, step),
                action_mask=[1] * len(c.completion_ids),
                policy_version=c.policy_version,
                legal_actions=step.info.get("legal_actions") or None,
            )
        )
    return records


def rollout_metrics(rollouts: Sequence[Rollout]) -> dict[str, float]:
    """Per episode name: the mean of every number among the extras, and the mean reward per role."""
    sums: dict[str, list[float]] = defaultdict(list)
    for rollout in rollouts:
        for key, value in rollout.extras.items():
            if isinstance(value, (int, float)):  # numbers are logged; other extras are for the rubric
                sums[f"{rollout.episode}/{key}"].append(float(value))
        for role, reward in rollout.rewards.items():
            if rollout.seats.get(role) is not None and rollout.seats[role].kind == "learner":
                sums[f"{rollout.episode}/reward/{role}"].append(reward)
    return {key: sum(values) / len(values) for key, values in sums.items()}


def seeded_rng(seed: int, rank: int = 0, batch: int = 0) -> random.Random:
    """One RNG per data-parallel rank and batch: ranks play different games, and a batch's games
    depend only on (seed, rank, batch), so a resumed run draws the games the unbroken run drew."""
    return random.Random(f"{seed}/{rank}/{batch}")
