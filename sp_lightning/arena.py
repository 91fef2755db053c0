"""The arena: plays many episodes at once and turns their rollouts into a training batch.

Batching across games is where the speed comes from. Every running episode is a coroutine; when
all of them are waiting on a model, their pending requests go to the rollout worker in one
``generate`` call (the worker splits them per policy/adapter). No polling and no threads: the
arena counts the episodes that can still make progress, and the last one to block flushes.
Bot seats are answered at once, without a model. A remote model (``remote:<name>``, an
OpenAI-compatible server) is awaited on its own: while its answer is on the way the episode
counts as blocked, so the local model's batches go on without it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sp_lightning.credit import step_return, trainable_steps
from sp_lightning.episodes import Episode
from sp_lightning.rollout.base import RetrySettings, RolloutWorker, SamplingSettings, generate_with_retries
from sp_lightning.types import Completion, ModelRequest, Rollout, TrainingRecord


class _Context:
    """The EpisodeContext the arena hands to one running episode."""

    def __init__(self, arena: _Run, seed: int):
        self._run = arena
        self.seed = seed

    async def generate(self, request: ModelRequest) -> Completion:
        return await self._run.generate(request)

    async def run(self, episode: Episode, seed: int, trainable: bool = True) -> Rollout:
        """A nested episode in the same task: the parent simply waits for it, and gets it back
        scored by its own rubric. ``trainable=False``: its steps inform the parent (through
        ``get_extras``) and never train."""
        (rollout,) = await self.run_many([episode], [seed], trainable)
        return rollout

    async def run_many(self, episodes: Sequence[Episode], seeds: Sequence[int],
                       trainable: bool = True) -> list[Rollout]:
        """Nested episodes played concurrently; their model calls join the same batches."""
        return await self._run.gather_children(episodes, seeds, trainable)


def _as_child(rollout: Rollout, trainable: bool) -> Rollout:
    """One level deeper; with ``trainable=False`` every step of its tree is kept from training."""
    for node in rollout.walk():
        node.level += 1
        if not trainable:
            for step in node.steps:
                step.in_trainable_episode = False
    return rollout


async def play_and_score(episode: Episode, ctx: _Context) -> Rollout:
    """Play one episode and score it with its rubric, in the episode's own task: a judge's
    model calls join the batch of whatever else is pending, and a parent reads its children's
    rewards as soon as they return."""
    rollout = await episode.rollout(ctx)
    rollout.extras = episode.get_extras(rollout)  # once: the rubric reads it, the batch's metrics log it
    await episode.rubric.ascore(rollout, ctx=ctx, extras=rollout.extras)
    return rollout


class _Run:
    """One call of Arena.play: the pending requests and the count of runnable episodes."""

    def __init__(self, arena: Arena):
        self.arena = arena
        self.pending: list[tuple[ModelRequest, asyncio.Future]] = []
        self.runnable = 0
        self.generate_calls = 0
        self.retries = 0
        self.remote_versions: dict[str, int] = {}  # each remote model's version, read once per run

    async def generate(self, request: ModelRequest) -> Completion:
        if not request.policy.is_model:
            return self.arena.bot_answer(request)
        if request.policy.kind == "remote":
            return await self.remote_answer(request)
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
        completions, retries = generate_with_retries(
            self.arena.worker, [r for r, _ in batch], self.arena.sampling, self.arena.retry)
        self.retries += retries
        self.runnable += len(batch)
        for (_, future), completion in zip(batch, completions):
            future.set_result(completion)

    async def play_top(self, episode: Episode, seed: int) -> Rollout:
        try:
            return await play_and_score(episode, _Context(self, seed))
        finally:
            self.runnable -= 1
            self.maybe_flush()

    async def gather_children(self, episodes: Sequence[Episode], seeds: Sequence[int],
                              trainable: bool = True) -> list[Rollout]:
        if not episodes:
            return []
        remaining = len(episodes)
        self.runnable += remaining - 1  # the parent's slot passes to its children

        async def child(episode: Episode, seed: int) -> Rollout:
            nonlocal remaining
            try:
                return _as_child(await play_and_score(episode, _Context(self, seed)), trainable)
            finally:
                remaining -= 1
                if remaining:  # the last child hands its slot back to the waiting parent
                    self.runnable -= 1
                    self.maybe_flush()

        return list(await asyncio.gather(*(child(e, s) for e, s in zip(episodes, seeds))))


@dataclass
class Batch:
    """What the arena hands to training: records, the rollouts they came from, and metrics."""

    records: list[TrainingRecord]
    rollouts: list[Rollout]
    metrics: dict[str, float] = field(default_factory=dict)


class Arena:
    """Registers a rollout worker and bots; plays episodes; scores, credits and batches them."""

    def __init__(self, worker: RolloutWorker | None, sampling: SamplingSettings, bots: dict | None = None,
                 retry: RetrySettings | None = None, remotes: dict | None = None):
        self.worker = worker
        self.sampling = sampling
        self.bots = dict(bots or {})
        self.remotes = dict(remotes or {})  # name -> rollout.remote.RemoteModel
        self.retry = retry or RetrySettings()
        self.last_retries = 0

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

    def play(self, episodes: Sequence[Episode], seeds: Sequence[int]) -> list[Rollout]:
        """Play every episode concurrently; each is scored by its rubric as it ends (nested
        ones included)."""
        run = _Run(self)
        run.runnable = len(episodes)

        async def main():
            return await asyncio.gather(*(run.play_top(e, s) for e, s in zip(episodes, seeds)))

        rollouts = list(_run_coroutine(main()))
        self.last_generate_calls = run.generate_calls
        self.last_retries = run.retries
        return rollouts

    def collect(self, episodes: Sequence[Episode], seeds: Sequence[int], credit) -> Batch:
        """Play, score, assign credit and build the training records of one batch."""
        start = time.perf_counter()
        tokens_before = getattr(self.worker, "generated_tokens", 0)
        rollouts = self.play(episodes, seeds)
        elapsed = time.perf_counter() - start
        credit.assign(rollouts)
        records = to_records(rollouts)
        metrics = rollout_metrics(rollouts)
        generated = getattr(self.worker, "generated_tokens", 0) - tokens_before
        metrics["rollout/tokens_per_s"] = generated / max(elapsed, 1e-9)
        metrics["rollout/seconds"] = elapsed
        metrics["rollout/generate_calls"] = float(self.last_generate_calls)
        metrics["rollout/retries"] = float(self.last_retries)
        metrics["rollout/records"] = float(len(records))
        for name, value in getattr(credit, "last_stats", {}).items():
            metrics[f"credit/{name}"] = float(value)
        return Batch(records=records, rollouts=rollouts, metrics=metrics)


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
