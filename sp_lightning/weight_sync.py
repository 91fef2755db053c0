"""The weight path: the one owner that sends the trainer's weights to the rollout backend.

A real run's rollout engine holds a copy of the policy of its own (vLLM in-process, a fleet of
servers, and the Hugging Face worker too): after every optimizer step the learners' trainable
tensors must reach it, or it plays with stale weights. That boundary is where RL trainers break
(an adapter never delivered, a colocated engine that hangs), so it is one path here, the same on
every backend and in every run, tiny ones included: :class:`WeightSync` builds a
:class:`~sp_lightning.rollout.base.WeightUpdate` from the module and hands it to
``RolloutWorker.load_weights``.

Why a callback owned by the data side, not the module: data flows one way, DataModule (engine)
-> records -> LightningModule -> weights -> worker. The module only trains and never reads the
engine; the DataModule owns the engine, so it installs this callback, which reads the module's
weights (as every callback may) and writes them to its engine's worker. It sends:

- when training starts (a resumed run's restored weights, before the first batch is played);
- after every training step (``on_train_batch_end``: the first of the data block's callbacks,
  before the league's, which sends again when it resets an exploiter, and before any checkpoint
  is written);
- when validation starts (a standalone ``validate``, a sanity check before the first step, a
  worker closed meanwhile), except right after a training step's send: the validation inside a
  fit follows the step whose weights were just sent, and vLLM and the servers would write and
  load the same adapter again.

A worker that does not train (a remote model being evaluated) is sent nothing. Each send is
timed and counted: ``rollout/weight_sync_ms`` and ``rollout/weight_sync_bytes``. Under
asynchronous collection the producer thread cannot generate while this runs on the trainer's
thread: it plays only while it holds the arena's baton, which ``EngineHooks`` (the Trainer's first
callback) took back at ``on_train_batch_end``; and the worker copies or writes the tensors before
returning, so no generation reads weights mid-update.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import lightning as L

from sp_lightning.learners import learner_names, trainable_state
from sp_lightning.rollout.base import RolloutWorker, WeightUpdate


def update_of(model, version: int, learners: list[str] | None = None) -> WeightUpdate:
    """The :class:`WeightUpdate` of ``model``: each learner's trainable tensors (``learners``, by
    default every learner adapter the model holds), where the model lives and the dtype of its
    frozen weights."""
    names = learners if learners is not None else (learner_names(model) or [""])
    first = next(model.parameters())
    frozen = next((p for p in model.parameters() if not p.requires_grad), None)
    return WeightUpdate({name: trainable_state(model, name) for name in names}, version, device=first.device,
                        base_dtype=frozen.dtype if frozen is not None else None)


class WeightSync(L.Callback):
    """Sends the module's weights (``SelfPlayModule.weight_update``) to the worker that
    ``worker()`` returns: the engine's, built at setup."""

    def __init__(self, worker: Callable[[], RolloutWorker]):
        self.worker = worker
        self.last_ms = 0.0
        self.last_bytes = 0
        self._sent_after_step: int | None = None  # the global_step whose on_train_batch_end sent

    def send(self, pl_module, version: int) -> WeightUpdate | None:
        """One update of every learner's weights, stamped ``version``, into the worker (None, and
        nothing sent, for a worker that does not train)."""
        worker = self.worker()
        if not worker.trains:
            return None
        start = time.perf_counter()
        update = pl_module.weight_update(version)
        worker.load_weights(update)
        self.last_ms = 1000 * (time.perf_counter() - start)
        self.last_bytes = update.nbytes
        return update

    def on_train_start(self, trainer, pl_module) -> None:
        self.send(pl_module, trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.send(pl_module, trainer.global_step)
        self._sent_after_step = trainer.global_step
        pl_module.log_dict({"rollout/weight_sync_ms": self.last_ms,
                            "rollout/weight_sync_bytes": float(self.last_bytes)}, batch_size=1)

    def on_validation_start(self, trainer, pl_module) -> None:
        if (trainer.state.fn == "fit" and not trainer.sanity_checking
                and self._sent_after_step == trainer.global_step):
            return
        self.send(pl_module, trainer.global_step)

    def on_train_end(self, trainer, pl_module) -> None:
        self._sent_after_step = None  # a validate after this fit sends again (teardown closes the worker)
