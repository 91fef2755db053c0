"""Asynchronous rollout collection (sp_lightning.async_rollouts): batches played on a producer
thread while the trainer steps, with a bounded queue and a bound on the policy lag.

The collector tests drive a real Arena, AsyncCollector and SerializedWorker with a scripted
backend (``VersionStampingWorker``: scripted answers, each stamped with the weight version it
was asked at, as an engine's are), so that the queue's state and the versions are set by the
test. The fit tests run the real Hugging Face backend (its own copy of the weights).
"""

from __future__ import annotations

import time

import lightning as L
import pytest
import torch

from envs import make_bots
from sp_lightning.arena import Arena
from sp_lightning.rng import seeded_rng
from sp_lightning.async_rollouts import ArenaBaton, AsyncCollector, AsyncRolloutSettings
from sp_lightning.games import FixedMix, GameSettings
from sp_lightning.rollout.base import SamplingSettings, WeightUpdate
from sp_lightning.sources import GameMix
from tests.helpers import KeepBatches, ScriptedWorker, tensorboard_events



def _stepped(worker, version: int) -> None:
    """The trainer's optimizer stepped to ``version``: its (empty, for a scripted backend) weights
    sent through the weight path's one call."""
    worker.load_weights(WeightUpdate({}, version))


class VersionStampingWorker(ScriptedWorker):
    """Test double of the backend: scripted answers (the first legal move), each completion
    stamped with the version it was generated at; fails with ``fail`` from generate call
    ``fail_at`` on (an engine that died)."""

    supports_async = True

    def __init__(self, fail_at: int | None = None, fail: Exception | None = None):
        super().__init__()
        self.fail_at, self.fail = fail_at, fail

    def generate(self, requests, sampling):
        if self.fail_at is not None and len(self.calls) >= self.fail_at:
            raise self.fail
        completions = super().generate(requests, sampling)
        for completion in completions:
            completion.policy_version = self.policy_version
        return completions


def _collector(worker, settings: AsyncRolloutSettings):
    """A real collector over a real arena built on its serialized worker (as the engine builds
    them); returns (collector, the serialized worker, the arena)."""
    game = GameSettings(id="tictactoe_v1", opponents={"learner": 0.5, "bot:random": 0.5})
    arenas = []
    collector = AsyncCollector(worker, settings, lambda: arenas[0].step(seeded_rng(0, 0, arenas[0].steps_done)))
    arenas.append(Arena(collector.worker, SamplingSettings(), bots=make_bots(0),
                        source=GameMix([game], FixedMix()), episodes_per_batch=4))
    return collector, collector.worker, arenas[0]


def _wait_for(condition, baton: ArenaBaton, timeout: float = 60.0) -> None:
    with baton.lent():  # the producer needs the arena to play
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "the producer did not get there in time"
            time.sleep(0.01)


def test_records_older_than_the_lag_bound_are_dropped_and_counted():
    """queue_size 2: the producer fills the queue and waits with a third batch, all played at
    version 0. The trainer then steps three times: those 24+ records have lag 3 > 1, so all three
    batches are dropped, and the batch served is the first one played at version 3."""
    collector, worker, arena = _collector(VersionStampingWorker(), AsyncRolloutSettings(queue_size=2, max_policy_lag=1))
    collector.start()
    try:
        _wait_for(lambda: collector.queue.full() and arena.steps_done == 3, collector.baton)
        _stepped(worker, 3)  # three optimizer steps while they waited
        batch = collector.next_batch(trainer_version=3)
        assert collector.dropped_batches == 3
        assert collector.dropped_records > 0
        assert batch.records and {r.policy_version for r in batch.records} == {3}
        assert batch.metrics["rollout/policy_lag/0"] == 1.0
        assert batch.metrics["rollout/policy_lag/dropped"] == 0.0
        assert batch.metrics["rollout/dropped_batches_total"] == 3.0
        assert batch.metrics["rollout/dropped_records_total"] == float(collector.dropped_records)
        assert batch.metrics["rollout/queue_depth"] == 2.0  # the queue was full when the trainer asked
    finally:
        collector.stop()
    assert collector.thread is None and not collector.baton.held_here()


def test_imitation_records_are_kept_whatever_their_age():
    """A teacher's moves to imitate (an imitation learner's, a warm start's) are labels drawn
    from a buffer of the whole run, not samples of the learner at a version: the lag bound drops
    the learner's stale moves beside them, never them, and the lag metrics are the sampled ones'."""
    from sp_lightning.types import TrainingRecord

    def with_a_label(batch):  # what Imitation.apply adds to each batch (no version stamped)
        batch.records.append(TrainingRecord([1, 2], [3], [0.0], 0.0, 0.0, [1], imitation=True))
        return batch

    game = GameSettings(id="tictactoe_v1", opponents={"learner": 0.5, "bot:random": 0.5})
    arenas = []
    collector = AsyncCollector(VersionStampingWorker(), AsyncRolloutSettings(queue_size=1, max_policy_lag=1),
                               lambda: with_a_label(arenas[0].step(seeded_rng(0, 0, arenas[0].steps_done))))
    arenas.append(Arena(collector.worker, SamplingSettings(), bots=make_bots(0),
                        source=GameMix([game], FixedMix()), episodes_per_batch=4))
    collector.start()
    try:
        _wait_for(lambda: collector.queue.full(), collector.baton)
        _stepped(collector.worker, 3)
        batch = collector.next_batch(trainer_version=3)
        assert collector.dropped_batches == 0 and collector.dropped_records > 0
        assert [r.imitation for r in batch.records] == [True], "the stale sampled moves dropped, the label kept"
        assert batch.metrics["rollout/policy_lag/dropped"] == 1.0 and "rollout/policy_lag_mean" not in batch.metrics
    finally:
        collector.stop()


def test_records_within_the_lag_bound_are_served_with_their_lag_histogram():
    collector, worker, _ = _collector(VersionStampingWorker(), AsyncRolloutSettings(queue_size=1, max_policy_lag=2))
    collector.start()
    try:
        _wait_for(lambda: collector.queue.full(), collector.baton)
        _stepped(worker, 2)
        batch = collector.next_batch(trainer_version=2)
        assert {r.policy_version for r in batch.records} == {0}
        assert batch.metrics["rollout/policy_lag/2"] == 1.0
        assert batch.metrics["rollout/policy_lag_mean"] == 2.0
        assert collector.dropped_records == 0
    finally:
        collector.stop()


def test_the_default_lag_bound_is_the_steady_state_lag_of_the_queue():
    """A training step is one batch whatever update_epochs: the default bound is queue_size + 1
    steps, and a batch trained two batches after it was played (lag 2) is kept."""
    assert AsyncRolloutSettings(queue_size=2).lag_bound() == 3
    assert AsyncRolloutSettings(queue_size=2, max_policy_lag=1).lag_bound() == 1
    collector, worker, _ = _collector(VersionStampingWorker(), AsyncRolloutSettings(queue_size=1))
    collector.start()
    try:
        _wait_for(lambda: collector.queue.full(), collector.baton)
        _stepped(worker, 2)
        batch = collector.next_batch(trainer_version=2)
        assert batch.records and collector.dropped_records == 0
        assert batch.metrics["rollout/policy_lag/2"] == 1.0
    finally:
        collector.stop()


class ReentryCheckingWorker(VersionStampingWorker):
    """Test double of the backend: flags any call made while another is in flight (each call
    sleeps a little to leave room for one)."""

    def __init__(self):
        super().__init__()
        self.in_flight = 0
        self.overlaps = 0
        self.trainer_calls = 0

    def _enter(self):
        self.in_flight += 1
        if self.in_flight > 1:
            self.overlaps += 1
        time.sleep(0.002)

    def generate(self, requests, sampling):
        self._enter()
        try:
            return super().generate(requests, sampling)
        finally:
            self.in_flight -= 1

    def register_adapter(self, name, path):
        self._enter()
        self.trainer_calls += 1
        self.in_flight -= 1

    def load_weights(self, update):
        self._enter()
        super().load_weights(update)
        self.trainer_calls += 1
        self.in_flight -= 1


def test_worker_calls_from_both_threads_never_overlap():
    inner = ReentryCheckingWorker()
    collector, worker, _ = _collector(inner, AsyncRolloutSettings(queue_size=4))
    collector.start()
    try:
        with collector.baton.lent():  # as during an update: the producer plays meanwhile
            before, trainer_before = len(inner.calls), inner.trainer_calls
            for index in range(40):
                worker.register_adapter(f"ckpt-{index}", "unused")
                _stepped(worker, index)
            produced = len(inner.calls) - before
    finally:
        assert collector.stop()
    assert inner.trainer_calls - trainer_before == 80 and produced > 0  # both threads, the same period
    assert inner.overlaps == 0


def test_stop_ends_the_producer_at_its_next_worker_call_and_frees_the_arena():
    class SlowWorker(VersionStampingWorker):
        def generate(self, requests, sampling):
            time.sleep(0.05)
            return super().generate(requests, sampling)

    slow = SlowWorker()
    collector, worker, _ = _collector(slow, AsyncRolloutSettings(queue_size=1))
    collector.start()
    _wait_for(lambda: len(slow.calls) >= 2, collector.baton)  # mid-batch
    calls_at_stop = len(slow.calls)
    start = time.monotonic()
    assert collector.stop()
    assert time.monotonic() - start < 5.0  # not a whole run of batches
    assert len(slow.calls) <= calls_at_stop + 1  # at most the call in flight, not the batch
    assert collector.thread is None and not collector.baton.held_here()
    assert collector.baton._lock.acquire(blocking=False)  # nobody holds the arena
    # afterwards a call from any thread (a validate after the fit, on an executor thread whose
    # ident may be the dead producer's) is served, not stopped
    from concurrent.futures import ThreadPoolExecutor

    request = slow.calls[0][:1]
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(worker.generate, request, SamplingSettings()).result()


def test_a_producer_that_outlives_stop_is_not_joined_by_a_second_one():
    """stop() times out while the producer is stuck in a worker call: start() refuses to run a
    second producer beside it; once it has left, a new producer starts and keeps its binding
    (the old one's exit does not clear it)."""
    import threading

    entered, release = threading.Event(), threading.Event()

    class StuckWorker(VersionStampingWorker):
        def generate(self, requests, sampling):
            entered.set()
            release.wait(timeout=30)
            return super().generate(requests, sampling)

    collector, worker, _ = _collector(StuckWorker(), AsyncRolloutSettings(queue_size=1))
    collector.start()
    _wait_for(entered.is_set, collector.baton)  # the producer is inside generate
    assert not collector.stop(timeout=0.3)
    with pytest.raises(RuntimeError, match="previous producer thread is still inside a worker call"):
        collector.start()
    old = collector._unfinished
    release.set()
    old.join(timeout=30)
    collector.start()
    try:
        assert worker._producer is collector.thread and collector.thread is not old
        collector.next_batch(trainer_version=0)
    finally:
        collector.stop()


def test_a_producer_failure_is_raised_on_the_trainer_thread():
    failing = VersionStampingWorker(fail_at=3, fail=RuntimeError("engine core died"))
    collector, _, _ = _collector(failing, AsyncRolloutSettings())
    try:
        with pytest.raises(RuntimeError, match="engine core died"):
            for _ in range(5):
                collector.next_batch(trainer_version=0)
    finally:
        collector.stop()


def test_settings_name_the_key_and_what_was_expected():
    with pytest.raises(ValueError, match=r"data.async_rollouts.queue_size: expected an int >= 1, got 0"):
        AsyncRolloutSettings(queue_size=0)
    with pytest.raises(ValueError, match=r"data.async_rollouts.max_policy_lag: expected an int >= 1"):
        AsyncRolloutSettings(max_policy_lag=0)


def test_the_hf_worker_serves_the_weights_it_was_sent_until_the_next_update():
    """The worker generates from a copy of its own: an optimizer step on the trainer's model
    changes nothing it serves until the weight path sends the update (what lets it play on the
    producer thread while the trainer steps)."""
    from sp_lightning.model import PolicySettings, load_policy
    from sp_lightning.rollout import HFRolloutWorker
    from tests.helpers import send_weights

    model, tokenizer = load_policy(PolicySettings())
    worker = HFRolloutWorker(model, tokenizer)
    assert worker.supports_async and worker.model is not model
    name, trained = next((n, p) for n, p in model.named_parameters() if p.requires_grad)
    with torch.no_grad():
        trained.add_(0.5)  # an optimizer step
    mine = dict(worker.model.named_parameters())[name]
    assert not torch.equal(mine, trained)  # the copy keeps the weights it was given until an update
    send_weights(worker, model, version=1)
    assert torch.equal(mine, trained) and mine.data_ptr() != trained.data_ptr() and worker.policy_version == 1
    frozen_name, frozen = next((n, p) for n, p in model.named_parameters() if not p.requires_grad)
    assert dict(worker.model.named_parameters())[frozen_name].data_ptr() != frozen.data_ptr()


@pytest.mark.slow
def test_the_hf_worker_validates_then_fits(tmp_path):
    """A standalone validate sends the weights under torch.inference_mode: the worker's copy must
    still be plain tensors that the fit's updates write into."""
    from sp_lightning import build_from_config, make_trainer

    module, dm = build_from_config("--config", "configs/kuhn_poker_tiny.yaml", "--data.eval.games", "8")
    trainer = make_trainer(max_steps=2, logger=False, enable_checkpointing=False, default_root_dir=str(tmp_path))
    trainer.validate(module, datamodule=dm)
    assert dm.engine.worker.model is not module.model
    trainer = make_trainer(max_steps=2, limit_val_batches=0, logger=False, enable_checkpointing=False,
                           default_root_dir=str(tmp_path))
    trainer.fit(module, datamodule=dm)
    copy = dict(dm.engine.worker.model.named_parameters())
    assert all(torch.equal(copy[n], p) for n, p in module.model.named_parameters() if p.requires_grad)


@pytest.mark.slow
def test_async_fit_trains_on_records_played_while_it_stepped_within_the_lag_bound(tmp_path):
    """Six steps with a validation after the third (the arena and the worker shared with it)."""
    from sp_lightning import build_from_config, make_trainer

    module, dm = build_from_config("--config", "configs/tictactoe_tiny.yaml", "--model.update_epochs", "1",
                                   "--data.async_rollouts", '{"enabled": true, "queue_size": 1}',
                                   "--data.eval.games", "8")
    from lightning.pytorch.loggers import TensorBoardLogger

    from sp_lightning.tensorboard import TensorBoardGames

    class ValidationSteps(L.Callback):
        steps: list[int] = []

        def on_validation_end(self, trainer, pl_module):
            self.steps.append(trainer.global_step)

    keep, validations = KeepBatches(), ValidationSteps()
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    trainer = make_trainer(max_steps=6, val_check_interval=3, num_sanity_val_steps=0, logger=logger,
                           enable_checkpointing=False, default_root_dir=str(tmp_path),
                           callbacks=[keep, validations, TensorBoardGames()])
    trainer.fit(module, datamodule=dm)
    batches = keep.batches
    assert trainer.global_step == 6 and dm.engine.worker.policy_version == 6
    assert 3 in validations.steps  # validated in the middle, with the producer running
    assert "val/tictactoe_v1/win_rate" in trainer.callback_metrics
    logger.experiment.flush()
    assert len(tensorboard_events(logger.log_dir).Histograms("rollout/policy_lag")) == 6  # one a step
    lags = [step - r.policy_version for step, batch in enumerate(batches) for r in batch.records]
    assert max(lags) <= 2 and max(lags) >= 1  # played while the trainer stepped, never too old
    for batch in batches:
        assert batch.metrics["rollout/running_requests"] > 0
        assert sum(batch.metrics[f"rollout/policy_lag/{k}"] for k in range(3)) == pytest.approx(1.0)
    assert dm.engine.collector.thread is None  # stopped at teardown
    copy = dict(dm.engine.worker.inner.model.named_parameters())
    for name, p in module.model.named_parameters():
        if p.requires_grad:  # the engine's copy holds the weights of the last step
            assert torch.equal(copy[name], p)


@pytest.mark.slow
def test_async_fit_resumes_from_its_checkpoint(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    from sp_lightning import build_from_config, make_trainer

    overrides = ["--data.async_rollouts.enabled", "true"]

    class WorkerWeightsAtFirstBatch(L.Callback):
        """The worker copy's weights when the first batch of the fit reaches the trainer."""
        weights = None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if self.weights is None:
                self.weights = {n: p.detach().clone() for n, p in trainer.datamodule.engine.worker.inner.model.named_parameters()}

    def fit(steps: int, ckpt_path=None):
        module, dm = build_from_config("--config", "configs/kuhn_poker_tiny.yaml", *overrides)
        last = ModelCheckpoint(dirpath=tmp_path, filename="last", every_n_train_steps=2,
                               enable_version_counter=False)
        keep, first_weights = KeepBatches(), WorkerWeightsAtFirstBatch()
        trainer = make_trainer(max_steps=steps, limit_val_batches=0, logger=False, default_root_dir=str(tmp_path),
                               callbacks=[last, keep, first_weights])
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
        return trainer, keep.batches, first_weights.weights

    first, _, _ = fit(4)
    saved = {n: p.detach().clone() for n, p in first.lightning_module.model.named_parameters() if p.requires_grad}
    resumed, batches, played_by = fit(6, ckpt_path=str(tmp_path / "last.ckpt"))
    assert resumed.global_step == 6 and len(batches) == 2  # two more steps, not six
    # the first resumed batch was played by the restored weights (version 4): the worker's copy
    # held them, not the fresh adapter it was built with
    assert {r.policy_version for r in batches[0].records} == {4}
    assert saved and all(torch.equal(played_by[n], p) for n, p in saved.items())
    assert resumed.datamodule.engine.worker.policy_version == 6
    assert resumed.datamodule.engine.batches_played >= first.datamodule.engine.batches_played


@pytest.mark.slow
def test_an_async_league_fit_plays_on_with_the_checkpoints_it_prunes_meanwhile(tmp_path):
    """A checkpoint every step, each leaving the league two steps later, batches played up to
    three ahead: games seated before a prune go on with that checkpoint (its adapter stays served
    until their batch is trained on); then the worker lets it go. (Whether such a game ends
    before or after the prune, and so is rated or counted in ``league/unrated_games``, depends on
    timing: the store's test counts them.)"""
    from sp_lightning import build_from_config, make_trainer
    from sp_lightning.types import PolicyKind

    league_dir = tmp_path / "league"
    module, dm = build_from_config(
        "--config", "configs/tictactoe_league_tiny.yaml", "--data.episodes_per_batch", "16",
        "--data.async_rollouts", '{"enabled": true, "queue_size": 2}',
        "--data.league.dir", str(league_dir), "--data.league.evaluator.every", "0",
        "--data.league.schedule", '{"recent_every": 1, "recent_window": 2, "anchor_every": 1000, "elite": false}')

    class SeatsAndMembers(L.Callback):
        """Per trained batch: the checkpoints its games seated, and the league's members then."""
        def __init__(self):
            self.rows: list[tuple[set[str], set[str]]] = []
            self.members: set[str] = set()

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):  # before the step's prune
            self.members = set(trainer.datamodule.league_callback.store.read().agents)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seated = {p.name for r in pl_module.last_batch.rollouts for p in r.seats.values()
                      if p.kind is PolicyKind.CHECKPOINT}
            self.rows.append((seated, self.members))

    seen = SeatsAndMembers()
    trainer = make_trainer(max_steps=8, limit_val_batches=0, logger=False, enable_checkpointing=False,
                           default_root_dir=str(tmp_path), callbacks=[seen])
    trainer.fit(module, datamodule=dm)
    assert trainer.global_step == 8
    late = [seated - members for seated, members in seen.rows if seated - members]
    assert late, "no batch played a checkpoint that had left the league: the test did not test"
    assert "league/unrated_games" in trainer.callback_metrics  # logged under asynchronous collection
    league = dm.league_callback
    members = set(league.store.read().agents)
    served = set(dm.engine.worker.inner.adapter_paths)
    assert served - members == league.sync.still_served  # let go but for those still in play
    assert all(agent not in members for agent in league.store.departed)
