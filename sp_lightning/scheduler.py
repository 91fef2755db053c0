"""Many episodes at once, their model calls coalesced into one ``generate`` call.

Batching across games is where the speed comes from. Every running episode is a coroutine; when
all of them are waiting on a model, their pending requests go to the rollout worker in one
``generate`` call (the worker splits them per policy/adapter). No polling and no threads: the
scheduler counts the episodes that can still make progress, and the last one to block flushes.
Bot seats are answered at once, without a model. A remote model (``remote:<name>``, an
OpenAI-compatible server) is awaited on its own: while its answer is on the way the episode
counts as blocked, so the local model's batches go on without it.

Nested episodes (``ctx.run`` / ``ctx.run_many``) play in the same run: a parent's slot passes
to its children while they play, and their model calls join the same batches. Each episode is
scored by its rubric as it ends, in its own task, so a judge's model calls join the batch of
whatever else is pending too.

The arena (``sp_lightning.arena``) owns one :class:`Scheduler` and decides what to play; this
module only plays it.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Sequence
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sp_lightning.credit import Branching
from sp_lightning.episodes import Episode
from sp_lightning.learners import Learners
from sp_lightning.rollout.base import RetrySettings, RolloutWorker, SamplingSettings, generate_with_retries
from sp_lightning.sampling import SamplingPlan
from sp_lightning.types import Completion, ModelRequest, PolicyKind, Rollout


@dataclass
class PlayStats:
    """How one :meth:`Scheduler.play` went: the coalescing it achieved and the faults it met."""

    generate_calls: int = 0
    requests_sent: int = 0
    """Requests over every generate call."""
    most_requests: int = 0
    """Requests of the largest generate call."""
    retries: int = 0
    most_in_flight: int = 0
    """Most top-level episodes playing at once."""


class Scheduler:
    """Plays episodes concurrently for one rollout worker, with bots, remote models and retries.

    Args:
        worker: The backend serving every model policy (None: bots and remote models only).
        sampling: How model completions are sampled: one SamplingSettings for every request, or a
            ``sp_lightning.sampling.SamplingPlan`` (a role's and a policy's own settings).
        retry: How a generate call that failed with a transient fault is retried.
        bots: Scripted players by name (``bot:<name>`` seats).
        remotes: Models behind OpenAI-compatible servers by name (``remote:<name>`` seats and judges).
        episode_log: Where every episode's start, model calls and end are written (None: nowhere).
        branching: What game episodes play at each trainable decision for the run's credit
            assigner (``ctx.branching``; None: nothing).
        learners: Which learner answers an (unnamed) learner request in each role; the
            completion and the rollout's seats carry the learner that answered.
    """

    def __init__(self, worker: RolloutWorker | None, sampling: SamplingSettings | SamplingPlan, retry: RetrySettings,
                 bots: dict, remotes: dict, episode_log=None, branching: Branching | None = None,
                 learners: Learners | None = None):
        self.worker = worker
        self.learners = learners if learners is not None else Learners()
        self.branching = branching
        self.sampling = SamplingPlan.of(sampling)
        self.retry = retry
        self.bots = bots
        self.remotes = remotes
        self.episode_log = episode_log

    def play(self, episodes: Sequence[Episode], seeds: Sequence[int], max_concurrent: int | None = None,
             trainable: Sequence[bool] | None = None) -> tuple[list[Rollout], PlayStats]:
        """Every episode, scored, at most ``max_concurrent`` at once (None: all at once);
        ``trainable[i]`` False plays episode ``i`` as never trained on (default: all trainable)."""
        run = _Run(self)
        flags = list(trainable) if trainable is not None else [True] * len(episodes)
        with _no_cyclic_gc():
            rollouts = run_coroutine(run.play_all(episodes, seeds, max_concurrent, flags))
        return list(rollouts), run.stats

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


class EpisodeContext:
    """What a running episode is handed (``sp_lightning.episodes.EpisodeContext``): its seed,
    its id in the batch's tree, and the way to the model and to nested episodes."""

    def __init__(self, run: _Run, seed: int, episode_id: str = "0", trainable: bool = True):
        self._run = run
        self.seed = seed
        self.episode_id = episode_id  # "3" for a run's fourth episode, "3.1" for its second child
        self.trainable = trainable  # False below a sub-episode requested as not trainable
        self.branching = run.scheduler.branching
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
        if len(seeds) != len(episodes):  # fewer children would start than the scheduler counts: a hang
            raise ValueError(f"run_many: {len(episodes)} episodes and {len(seeds)} seeds; expected one seed per "
                             f"episode")
        first, self._children = self._children, self._children + len(episodes)
        ids = [f"{self.episode_id}.{first + i}" for i in range(len(episodes))]
        return await self._run.gather_children(episodes, seeds, ids, self.trainable and trainable)

    @property
    def level(self) -> int:
        """The depth of this episode in its tree (0 for a batch's own episodes)."""
        return self.episode_id.count(".")


async def play_and_score(episode: Episode, ctx: EpisodeContext) -> Rollout:
    """Play one episode and score it with its rubric, in the episode's own task: a judge's
    model calls join the batch of whatever else is pending, and a parent reads its children's
    rewards as soon as they return."""
    log = ctx._run.scheduler.episode_log
    if log is not None:
        log.episode_start(ctx.episode_id, episode, ctx.seed)
    rollout = await episode.rollout(ctx)
    learners = ctx._run.scheduler.learners
    if learners:  # the seats say which learner played them, as the completions do
        rollout.seats = {role: learners.resolve(policy, role) for role, policy in rollout.seats.items()}
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
    """One :meth:`Scheduler.play`: the pending requests and the count of runnable episodes."""

    def __init__(self, scheduler: Scheduler):
        self.scheduler = scheduler
        self.pending: list[tuple[ModelRequest, asyncio.Future]] = []
        self.runnable = 0
        self.in_flight = 0
        self.stats = PlayStats()
        self.remote_versions: dict[str, int] = {}  # each remote model's version, read once per run

    async def generate(self, request: ModelRequest, episode_id: str = "0") -> Completion:
        completion = await self.answer(request)
        if self.scheduler.episode_log is not None:
            self.scheduler.episode_log.model_call(episode_id, request, completion)
        return completion

    async def answer(self, request: ModelRequest) -> Completion:
        request.policy = self.scheduler.learners.resolve(request.policy, request.role)
        if not request.policy.is_model:
            return self.scheduler.bot_answer(request)
        request.sampling = self.scheduler.sampling.for_request(request)
        if request.policy.kind is PolicyKind.REMOTE:
            return await self.remote_answer(request)
        worker = self.scheduler.worker
        if request.policy.is_learner and worker is not None:
            request.policy_version = worker.policy_version  # the weights it is asked of
        future = asyncio.get_running_loop().create_future()
        self.pending.append((request, future))
        self.runnable -= 1
        self.maybe_flush()
        return await future

    async def remote_answer(self, request: ModelRequest) -> Completion:
        model = self.scheduler.remote_model(request.policy.name)
        # sent first (on the model's thread pool), then the local batch may go while it is on the way
        answer = model.submit(request, request.sampling, self.remote_versions)
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
        stats = self.stats
        stats.generate_calls += 1
        stats.requests_sent += len(batch)
        stats.most_requests = max(stats.most_requests, len(batch))
        completions, retries = generate_with_retries(
            self.scheduler.worker, [r for r, _ in batch], self.scheduler.sampling.default, self.scheduler.retry)
        stats.retries += retries
        self.runnable += len(batch)
        for (_, future), completion in zip(batch, completions):
            future.set_result(completion)

    async def play_all(self, episodes: Sequence[Episode], seeds: Sequence[int],
                       max_concurrent: int | None, trainable: Sequence[bool]) -> list[Rollout]:
        """Every episode, at most ``max_concurrent`` at once: each lane plays one episode after
        another, taking the next as soon as its last one ends, so the lane stays runnable."""
        results: list[Rollout | None] = [None] * len(episodes)
        queue = iter(enumerate(zip(episodes, seeds)))
        lanes = len(episodes) if max_concurrent is None else min(max_concurrent, len(episodes))
        self.runnable = lanes

        async def lane() -> None:
            try:
                for index, (episode, seed) in queue:  # one shared iterator: each lane takes the next
                    self.in_flight += 1
                    self.stats.most_in_flight = max(self.stats.most_in_flight, self.in_flight)
                    try:
                        context = EpisodeContext(self, seed, str(index), trainable[index])
                        results[index] = await play_and_score(episode, context)
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
                return await play_and_score(episode, EpisodeContext(self, seed, episode_id, trainable))
            finally:
                remaining -= 1
                if remaining:  # the last child hands its slot back to the waiting parent
                    self.runnable -= 1
                    self.maybe_flush()

        return list(await asyncio.gather(*(child(e, s, i) for e, s, i in zip(episodes, seeds, ids))))


@contextmanager
def _no_cyclic_gc():
    """Python's cycle collector paused while the games run. A play makes many short-lived
    objects, and beside a model's thousands of live objects each full collection walks them all:
    a tenth of a tiny-model play went to it. Nothing a play makes needs the collector (reference
    counting frees it); whatever cycles it leaves are collected once it is back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_coroutine(coroutine):
    """Run ``coroutine`` to its end on an event loop of its own, also from code that already runs
    inside an event loop (a Jupyter kernel): there the games are played on a worker thread."""
    if not _in_event_loop():
        return _run_on_new_loop(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_run_on_new_loop, coroutine).result()


def _run_on_new_loop(coroutine):
    """``asyncio.run`` without its SIGINT handler: restoring the handler makes Python's ``signal``
    module try the old handler as a ``Signals`` value, and the failed lookup formats the repr of
    the main task, every episode of the batch in it (4 ms a play of 64 tiny-model games). Ctrl-C
    still stops the games (KeyboardInterrupt, raised in the loop)."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(coroutine)
    try:
        return loop.run_until_complete(task)
    finally:
        try:
            _cancel_the_rest(loop)  # an episode that raised leaves the other lanes pending
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            if task.done() and not task.cancelled():
                # its error is the one raised from here: marked as read, or the garbage collector
                # logs it again with the whole stack (on Ctrl-C, "Task exception was never retrieved")
                task.exception()
            loop.close()


def _cancel_the_rest(loop) -> None:
    """Cancel the tasks still pending on ``loop`` and let them finish inside it (their ``finally``
    blocks run while the loop runs, as under ``asyncio.run``)."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def _in_event_loop() -> bool:
    """Whether an event loop runs in this thread. Asked apart from running the games, so that an
    episode's error is not reported as raised while handling "no running event loop"."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
