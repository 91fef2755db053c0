"""Shared test doubles and runners.

``ScriptedWorker`` is a test double of the rollout backend only: it answers model calls with
scripted text (so the arena, episodes, rubrics, credit and records under test are the real ones)
and keeps every generate call, so tests can count how requests were batched.
``fit_batches`` runs a real ``fit`` of a shipped config on the tiny model and returns the batches
it trained on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import lightning as L

from sp_lightning.rollout.base import RolloutWorker
from sp_lightning.types import Completion, ModelRequest


class ScriptedWorker(RolloutWorker):
    """Test double: answers each request with ``answer`` (None: the request's first legal move;
    a string; or a function of the request), as the tokens ``completion_ids`` (a list, or a
    function of the request), and records every generate call."""

    def __init__(self, answer: str | Callable[[ModelRequest], str] | None = None,
                 completion_ids: Sequence[int] | Callable[[ModelRequest], list[int]] = (3, 4)):
        self.calls: list[list[ModelRequest]] = []
        self.answer = answer
        self.completion_ids = completion_ids

    def _text(self, request: ModelRequest) -> str:
        if self.answer is None:
            return request.legal_actions[0]
        return self.answer(request) if callable(self.answer) else self.answer

    def generate(self, requests, sampling):
        self.calls.append(list(requests))
        out = []
        for r in requests:
            ids = list(self.completion_ids(r) if callable(self.completion_ids) else self.completion_ids)
            out.append(Completion(text=self._text(r), prompt_ids=[1, 2], completion_ids=ids,
                                  logprobs=[-0.5] * len(ids), policy=r.policy))
        return out


class KeepBatches(L.Callback):
    """Keeps every training step's Batch (records, rollouts, metrics)."""

    def __init__(self):
        self.batches = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches.append(pl_module.last_batch)


def fit_batches(config: str, tmp_path, steps: int, *overrides: str):
    """``fit`` ``config`` (with command-line ``overrides``) for ``steps`` optimizer steps, without
    validation, logger or checkpoints; returns (trainer, the batches trained on)."""
    from sp_lightning.cli import build_from_config, make_trainer

    module, dm = build_from_config("--config", config, *overrides)
    keep = KeepBatches()
    trainer = make_trainer(max_steps=steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
                           default_root_dir=str(tmp_path), callbacks=[keep])
    trainer.fit(module, datamodule=dm)
    return trainer, keep.batches
