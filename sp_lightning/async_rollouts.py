"""Asynchronous rollout collection: the next batches are played while the trainer steps.

In the default synchronous loop a batch is played, then trained on, then the next is played:
the engine idles while the trainer computes gradients and the trainer idles while the engine
generates. With ``data.async_rollouts: {enabled: true}`` a producer thread plays batches into a
bounded queue (``queue_size``) while the trainer trains on the previous one. The price is
staleness: a record may have been sampled by weights some training steps old. Every record
carries the policy version that generated it (the training step whose weights played); the
trainer's version minus that is the record's *lag*, in training steps. Records whose lag exceeds
``max_policy_lag`` are dropped (and counted). The others are held in check by PPO's clipped
ratio to the behaviour logprobs where those are the trainer's own (the Hugging Face worker);
another engine's are corrected by truncated importance sampling (``loss.importance_sampling``)
instead, its ratio taken to the trainer's first pass, so there the lag is bounded only by
``tis_cap`` (docs/rollout.md).

How big the lag gets: a producer faster than the trainer runs ``queue_size`` batches ahead plus
the one it waits to put, so its records are trained ``queue_size + 1`` batches after they were
played; a slower one keeps the queue empty and they are trained one batch after. A batch is one
training step, so in steady state the lag is at most ``queue_size + 1``: the default bound
(null), which drops nothing in steady state. A smaller bound makes the queue a buffer whose stale
records are thrown away, and drops are the price of a producer outrunning the trainer.

Every backend that serves the trainer's weights holds a copy of its own, written only by the
weight path (``RolloutWorker.load_weights``), so each can run this way
(``RolloutWorker.supports_async``): the Hugging Face worker, vLLM in-process, OpenAI-compatible
servers.

Two threads share the arena (its source, the league's opponent sampler, the bots' random
streams, the episode log) and the rollout worker. One lock, the arena *baton*, makes the arena
single-threaded: the producer holds it while it plays, except inside a ``generate`` call; the
trainer's thread holds it the rest of the time, except while it waits for a batch and while it
computes gradients and steps the optimizer. So what overlaps is exactly the expensive pair,
generation and the update, and batch-level callbacks (``on_train_batch_end``: the league's
promotions, checkpoints) and validation see an arena that does not change under them; hooks
called inside the update (``on_after_backward``, ``on_before_optimizer_step``) must not touch it. A second lock serialises every call into the
worker (vLLM's engine client and an HTTP pool are not for two threads at once); the producer
never waits for the baton while holding it, so the two cannot deadlock. Weights reach the
engine on the trainer's thread (``load_weights``, from the weight path's callback at the end of
each step, when the trainer holds the baton again): the producer never reads weights mid-update.

A resumed asynchronous run continues from the batch count of its checkpoint but does not replay
the unbroken run's games exactly (which batch a version trains on depends on timing); the batches
that were queued when the run stopped are lost (the count includes them), and the resumed run
plays on from the next batch index.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sp_lightning.batch import Batch
from sp_lightning.rollout.base import RolloutWorker


@dataclass
class AsyncRolloutSettings:
    """``data.async_rollouts``: play the next batches while the trainer steps."""

    enabled: bool = False
    queue_size: int = 1
    """Finished batches waiting for the trainer; the producer blocks on a full queue."""
    max_policy_lag: int | None = None
    """A record sampled more than this many training steps ago is dropped (and counted), never
    trained on. Null: ``queue_size + 1``, which drops nothing in steady state (see the module
    docstring)."""

    def __post_init__(self):
        if not isinstance(self.queue_size, int) or self.queue_size < 1:
            raise ValueError(f"data.async_rollouts.queue_size: expected an int >= 1, got {self.queue_size!r}")
        if self.max_policy_lag is not None and (not isinstance(self.max_policy_lag, int) or self.max_policy_lag < 1):
            raise ValueError(f"data.async_rollouts.max_policy_lag: expected an int >= 1 (the records of a "
                             f"batch played during the previous step have lag 1) or null, got "
                             f"{self.max_policy_lag!r}")

    def lag_bound(self) -> int:
        """The bound in force: the setting, or the steady-state lag."""
        if self.max_policy_lag is not None:
            return self.max_policy_lag
        return self.queue_size + 1


class ArenaBaton:
    """A lock that knows its holder and can be lent: the thread holding the arena lends it while
    it waits on something that does not touch the arena (a generate call, the queue, a gradient
    step) and takes it back after."""

    def __init__(self):
        self._lock = threading.Lock()
        self._holder: int | None = None

    def take(self) -> None:
        self._lock.acquire()
        self._holder = threading.get_ident()

    def give(self) -> None:
        if not self.held_here():
            raise RuntimeError("ArenaBaton.give: this thread does not hold the arena")
        self._holder = None
        self._lock.release()

    def held_here(self) -> bool:
        return self._holder == threading.get_ident()

    @contextmanager
    def lent(self) -> Iterator[None]:
        """The baton released for the block if this thread holds it (a no-op otherwise)."""
        if not self.held_here():
            yield
            return
        self.give()
        try:
            yield
        finally:
            self.take()


class SerializedWorker(RolloutWorker):
    """The rollout worker as both threads see it: one call into it at a time, and the producer
    lends the arena baton while it waits on a call (the trainer's thread keeps it: its
    validation games and adapter registrations run with the arena still). Every method and
    capability of the interface is the wrapped worker's."""

    def __init__(self, worker: RolloutWorker, baton: ArenaBaton, stopping: threading.Event):
        self.inner = worker
        self._baton = baton
        self._calls = threading.RLock()
        self._producer: threading.Thread | None = None  # the producer thread while it runs
        self._stopping = stopping  # set by AsyncCollector.stop

    def bind_producer(self, thread: threading.Thread | None) -> None:
        """The thread whose calls lend the arena and end once stopping (None: no producer)."""
        self._producer = thread

    def unbind_producer(self, thread: threading.Thread) -> None:
        """``thread`` ends: no producer, unless another has been bound since."""
        if self._producer is thread:
            self._producer = None

    @contextmanager
    def _serialized(self) -> Iterator[None]:
        on_producer = self._producer is not None and threading.current_thread() is self._producer
        with self._baton.lent() if on_producer else _held(), self._calls:
            if on_producer and self._stopping.is_set():
                raise ProducerStopped  # the collector is stopping: leave the batch unplayed
            yield

    # ---- capabilities and state: the wrapped worker's ------------------------------------------
    @property
    def trains(self) -> bool:
        return self.inner.trains

    @property
    def supports_async(self) -> bool:
        return self.inner.supports_async

    @property
    def serves_checkpoints(self) -> bool:
        return self.inner.serves_checkpoints

    @property
    def scores_completions(self) -> bool:
        return self.inner.scores_completions

    @property
    def max_adapters(self) -> int | None:
        return self.inner.max_adapters

    @property
    def adapter_slots(self) -> int | None:
        return self.inner.adapter_slots

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    @property
    def generated_tokens(self) -> int:
        return self.inner.generated_tokens

    @property
    def adapter_load_seconds(self) -> float:
        return self.inner.adapter_load_seconds

    @property
    def tokenizer(self):
        return self.inner.tokenizer

    def health_metrics(self) -> dict[str, float]:
        return self.inner.health_metrics()

    # ---- calls: one at a time ------------------------------------------------------------------
    def generate(self, requests, sampling):
        with self._serialized():
            return self.inner.generate(requests, sampling)

    def completion_logprobs(self, requests, completions):
        with self._serialized():
            return self.inner.completion_logprobs(requests, completions)

    def register_adapter(self, name: str, path: str) -> None:
        with self._serialized():
            self.inner.register_adapter(name, path)

    def forget_adapter(self, name: str) -> None:
        with self._serialized():
            self.inner.forget_adapter(name)

    def close(self) -> None:
        with self._serialized():
            self.inner.close()

    def load_weights(self, update) -> None:
        """The trainer's weights, into the engine at once, between two of the producer's calls."""
        with self._calls:
            self.inner.load_weights(update)


@contextmanager
def _held() -> Iterator[None]:
    yield


class ProducerStopped(Exception):
    """Raised on the producer thread at its next worker call once the collector stops."""


class AsyncCollector:
    """The producer thread, its queue and the lag filter of asynchronous collection.

    It serves the worker to both threads as ``self.worker``, a SerializedWorker on the
    collector's baton: build the arena on it, and run the trainer's update inside
    ``baton.lent()``.

    Args:
        worker: The rollout worker (its engine must hold its own weights: ``supports_async``).
        settings: Queue size and lag bound.
        play_next_batch: Plays the next batch (the synchronous loop's, so a batch's games depend
            on its index only); called on the producer thread while it holds the baton.
    """

    def __init__(self, worker: RolloutWorker, settings: AsyncRolloutSettings, play_next_batch: Callable[[], Batch]):
        self.settings = settings
        self.max_policy_lag = settings.lag_bound()
        self.play_next_batch = play_next_batch
        self.baton = ArenaBaton()
        self.stopping = threading.Event()  # shared with the worker: its calls see it
        self.worker = SerializedWorker(worker, self.baton, self.stopping)
        self.queue: queue.Queue = queue.Queue(maxsize=settings.queue_size)
        self.thread: threading.Thread | None = None
        self._unfinished: threading.Thread | None = None  # a producer that outlived stop's timeout
        self.dropped_records = 0
        self.dropped_batches = 0  # batches of which every record was too old
        self.error: BaseException | None = None  # the producer's, raised on the trainer's thread

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> None:
        """Start the producer (idempotent), at the first batch the trainer asks for: the weight
        path has sent the weights training starts from by then. The calling thread takes the
        baton and keeps it, lending it while it waits and trains."""
        if self.thread is not None:
            return
        if self._unfinished is not None and self._unfinished.is_alive():
            raise RuntimeError("asynchronous rollouts: the previous producer thread is still inside a worker call "
                               "(stop timed out); a second producer would play beside it")
        self._unfinished = None
        if not self.baton.held_here():
            self.baton.take()
        self.stopping.clear()
        self.error = None
        self.thread = threading.Thread(target=self._produce, name="sp-lightning-rollouts", daemon=True)
        self.worker.bind_producer(self.thread)
        self.thread.start()

    def stop(self, timeout: float = 120.0) -> bool:
        """Stop the producer at its next worker call (the one in flight ends first) and forget
        the queued batches; the calling thread gives the arena up. Returns whether the producer
        ended within ``timeout`` seconds (if not, it is still inside a worker call)."""
        if self.thread is None:
            return True
        self.stopping.set()
        deadline = time.monotonic() + timeout
        with self.baton.lent():  # let it reach a point where it sees the flag
            while self.thread.is_alive() and time.monotonic() < deadline:
                self._drain()
                self.thread.join(timeout=0.1)
        stopped = not self.thread.is_alive()
        self._drain()
        if not stopped:  # still inside a worker call: it ends at the next one (stopping stays set)
            self._unfinished = self.thread
        self.thread = None
        if stopped:
            self.stopping.clear()
        if self.baton.held_here():
            self.baton.give()
        return stopped

    def _drain(self) -> None:
        try:
            while True:
                self.queue.get_nowait()
        except queue.Empty:
            pass

    def _produce(self) -> None:
        try:
            while not self.stopping.is_set():
                self.baton.take()
                try:
                    if self.stopping.is_set():
                        return
                    batch = self.play_next_batch()
                except ProducerStopped:
                    return
                finally:
                    self.baton.give()
                batch.metrics["rollout/produced_at"] = time.perf_counter()
                while not self.stopping.is_set():
                    try:
                        self.queue.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as error:  # handed to the trainer's thread, which raises it
            self.error = error
        finally:  # calls from any other thread (validate after fit) are the trainer's again
            self.worker.unbind_producer(threading.current_thread())

    def next_batch(self, trainer_version: int) -> Batch:
        """The next queued batch, its records older than ``max_policy_lag`` versions behind
        ``trainer_version`` dropped (a batch left with none is skipped, unless it had none to
        begin with; imitation records are kept whatever their age), with the queue and lag
        metrics (of the sampled records). Raises the producer's error if it failed.
        A partly dropped batch keeps its rollouts and their metrics, and its kept records the
        advantages computed with the dropped ones."""
        self.start()
        waited = 0.0
        depth = self.queue.qsize()  # batches ready when the trainer asked
        while True:
            start = time.perf_counter()
            with self.baton.lent():  # the producer plays while this thread waits
                batch = self._get()
            waited += time.perf_counter() - start
            # the bound is on moves sampled from the learner; a teacher's moves to imitate are
            # labels drawn from a buffer of the whole run (sp_lightning.imitation): of any age
            lags = [trainer_version - r.policy_version for r in batch.records if not r.imitation]
            kept = [r for r in batch.records if r.imitation or trainer_version - r.policy_version <= self.max_policy_lag]
            self.dropped_records += len(batch.records) - len(kept)
            if batch.records and not kept:
                self.dropped_batches += 1
                continue
            batch.records, batch.policy_lags = kept, lags
            batch.metrics.update(self._metrics(lags, depth, waited, batch.metrics.pop("rollout/produced_at")))
            return batch

    def _get(self):
        while True:
            try:
                return self.queue.get(timeout=0.5)
            except queue.Empty:
                if self.error is not None:
                    raise self.error
                if not self.running:
                    raise RuntimeError("asynchronous rollouts: the producer thread stopped without a batch "
                                       "or an error (was the collector stopped?)") from None

    def _metrics(self, lags: list[int], depth: int, waited: float, produced_at: float) -> dict[str, float]:
        """Queue depth (batches ready when the trainer asked, before any was dropped), the
        trainer's wait, the mean and largest lag of the records kept, and the batch's
        policy-lag histogram: the fraction of its records at each lag 0..max_policy_lag
        (``rollout/policy_lag/<k>``) and beyond it (``rollout/policy_lag/dropped``)."""
        bound = self.max_policy_lag
        n = max(len(lags), 1)
        kept = [lag for lag in lags if lag <= bound]
        dropped = len(lags) - len(kept)
        counts = Counter(kept)
        metrics = {
            "rollout/queue_depth": float(depth),
            "rollout/wait_seconds": waited,
            "rollout/queued_seconds": time.perf_counter() - produced_at,
            "rollout/dropped_records": float(dropped),
            "rollout/dropped_records_total": float(self.dropped_records),
            "rollout/dropped_batches_total": float(self.dropped_batches),
        }
        if kept:  # of the records trained on
            metrics["rollout/policy_lag_mean"] = sum(kept) / len(kept)
            metrics["rollout/policy_lag_max"] = float(max(kept))
        for k in range(bound + 1):
            metrics[f"rollout/policy_lag/{k}"] = counts[k] / n
        metrics["rollout/policy_lag/dropped"] = dropped / n
        return metrics
