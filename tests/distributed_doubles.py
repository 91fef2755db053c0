"""Test doubles for data-parallel fits, imported by the fit processes the tests start (by
class path in their config), so they live in a module of their own.

- :class:`RecordedRecordsArena` is the real arena with its batches replaced by records recorded
  once (scripted outputs into a real component): each rank trains on its share of the same
  records, so a 2-rank run and a 1-rank run can be compared gradient for gradient, and a rank can
  be handed no records or records whose loss is not finite.
- :class:`RankRecorder` is a callback that writes, after every optimizer step, what each rank
  holds (a digest of its trainable weights and gradients, the games it played, its league view)
  to ``<dir>/rank<r>.jsonl``, for the test to compare across ranks.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle

import lightning as L
import torch

from sp_lightning import distributed
from sp_lightning.arena import Arena
from sp_lightning.batch import Batch
from sp_lightning.engine import engine_of
from sp_lightning.types import PolicyKind


class RecordedRecordsArena(Arena):
    """Every batch is the records pickled at ``records`` (a list of TrainingRecord), split over the
    ranks by ``shares`` (one list of record indices per rank; default every world_size-th record
    from the rank's own). ``nonfinite_rank``'s records get a NaN advantage. ``learner_by_step``:
    batch k's records are all learner ``learner_by_step[k]``'s (the last name for later batches)."""

    def __init__(self, records: str = "", shares: list[list[int]] | None = None,
                 nonfinite_rank: int | None = None, learner_by_step: list[str] | None = None, **arena_arguments):
        super().__init__(**arena_arguments)
        with open(records, "rb") as f:
            self.recorded = pickle.load(f)
        self.shares = shares
        self.nonfinite_rank = nonfinite_rank
        self.learner_by_step = learner_by_step

    def step(self, rng=None, size=None, side_episodes=(), side_metrics=None) -> Batch:
        rank, world = distributed.rank(), distributed.world_size()
        indices = self.shares[rank] if self.shares is not None else range(rank, len(self.recorded), world)
        records = [self.recorded[i] for i in indices]
        if rank == self.nonfinite_rank:
            records = [_replace(r, advantage=math.nan) for r in records]
        if self.learner_by_step:
            learner = self.learner_by_step[min(self.steps_done, len(self.learner_by_step) - 1)]
            records = [_replace(r, learner=learner) for r in records]
        self.steps_done += 1
        return Batch(records=records, rollouts=[], metrics={"rollout/records": float(len(records))})


def _replace(record, **fields):
    import dataclasses

    return dataclasses.replace(record, **fields)


def digest(tensors) -> str:
    """A short hash of the tensors' bytes (equal digests: bit-identical tensors)."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().to(torch.float64).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class RankRecorder(L.Callback):
    """Writes one JSON line per optimizer step and rank to ``<dir>/rank<r>.jsonl``, and each
    rank's first gradient to ``<dir>/grad-rank<r>.pt``."""

    def __init__(self, dir: str):
        self.dir = dir
        self.gradient_saved = False

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        if self.gradient_saved:
            return
        self.gradient_saved = True
        grads = {n: p.grad.detach().clone() for n, p in pl_module.named_parameters()
                 if p.requires_grad and p.grad is not None}
        torch.save(grads, os.path.join(self.dir, f"grad-rank{trainer.global_rank}.pt"))

    def on_train_batch_end(self, trainer, pl_module, outputs, _, batch_idx) -> None:
        batch = pl_module.last_batch  # the step reads its batch from the dataloader itself
        trainable = [p for p in pl_module.parameters() if p.requires_grad]
        games = [[(agent, str(policy)) for agent, policy in sorted(r.seats.items())]
                 + [s.completion.text for s in r.steps] for r in batch.rollouts]  # what each seat answered
        line = {"step": trainer.global_step, "weights": digest(trainable), "records": len(batch.records),
                "learner_weights": {name: digest(pl_module.trainable(name)) for name in pl_module.learners.names},
                "games": hashlib.sha256(json.dumps(games).encode()).hexdigest()[:16] if games else None,
                "game_count": len(games), "seats": [[str(p) for _, p in sorted(r.seats.items())] for r in batch.rollouts],
                "sharded": pl_module.sharded,
                "rated_games": sum(1 for r in batch.rollouts
                                   if any(p.kind is not PolicyKind.LEARNER for p in r.seats.values()))}
        league = next((c for c in trainer.callbacks if type(c).__name__ == "LeagueCallback"), None)
        if league is not None:
            line["league"] = sorted(c.id for c in league.sampler.candidates)
            line["evaluator_running"] = league.evaluating
        engine = engine_of(trainer)
        line["adapters"] = sorted(getattr(engine.worker, "adapter_paths", {}) or {})
        with open(os.path.join(self.dir, f"rank{trainer.global_rank}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
