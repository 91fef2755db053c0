"""The few collective operations a data-parallel run needs, and a no-op on one process.

Lightning's DDP strategy starts the processes and the process group; these helpers are what the
module, the engine and the league callback use on top of it. Every rank must call each of them
in the same order (a collective that one rank skips waits forever), which is why the training
step calls them unconditionally: a rank with no records still takes part, with zeros.

On one process (no process group) every helper returns its input: the same code path, so the
one-process run is the N-process run with N = 1.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch


def _group_ready() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def world_size() -> int:
    return torch.distributed.get_world_size() if _group_ready() else 1


def rank() -> int:
    return torch.distributed.get_rank() if _group_ready() else 0


def sum_floats(values: Iterable[float]) -> list[float]:
    """Each value summed over every rank (one collective for all of them)."""
    values = [float(v) for v in values]
    if not _group_ready():
        return values
    tensor = torch.tensor(values, dtype=torch.float64)
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.SUM)
    return tensor.tolist()


def max_int(value: int) -> int:
    """The largest of the ranks' ``value``."""
    if not _group_ready():
        return int(value)
    tensor = torch.tensor([int(value)], dtype=torch.int64)
    torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
    return int(tensor.item())


def sum_gradients(parameters: Iterable[torch.Tensor]) -> None:
    """Every parameter's gradient replaced by its sum over the ranks, in one flat collective (a
    parameter without a gradient counts as zeros, so a rank that trained on nothing takes part)."""
    if not _group_ready():
        return
    parameters = list(parameters)
    for p in parameters:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in parameters])
    torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM)
    offset = 0
    for p in parameters:
        n = p.grad.numel()
        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
        offset += n


def local_backward(strategy):
    """A context in which backward passes leave the gradients alone on each rank: Lightning's
    ``block_backward_sync`` (DistributedDataParallel's ``no_sync``) under a data-parallel
    strategy, nothing otherwise. The training step sums the gradients itself, once per optimizer
    step (:func:`sum_gradients`); with DDP's own hooks every backward pass would be a collective,
    and ranks with different numbers of micro-batches (or none) would wait on each other forever.
    Lightning turns the hooks back on after every training step, so the step enters this context
    each time."""
    block = getattr(strategy, "block_backward_sync", None)
    return block() if block is not None else contextlib.nullcontext()


def gather(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (picklable), in rank order, on every rank."""
    if not _group_ready():
        return [obj]
    out: list[Any] = [None] * world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def broadcast(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank."""
    if not _group_ready():
        return obj
    box = [obj]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    if _group_ready():
        torch.distributed.barrier()


def sum_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric summed over the ranks that have it (the union of their keys: a rank that
    trained on nothing has none), in one collective."""
    if not _group_ready():
        return dict(metrics)
    sums: dict[str, float] = {}
    for part in gather({k: float(v) for k, v in metrics.items()}):
        for key, value in part.items():
            sums[key] = sums.get(key, 0.0) + value
    return sums


def mean_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric averaged over the ranks that logged it (the union of the ranks' keys: a
    per-game figure exists only where that game was played), in one collective."""
    if not _group_ready():
        return dict(metrics)
    sums: dict[str, list[float]] = {}
    for part in gather({k: float(v) for k, v in metrics.items()}):
        for key, value in part.items():
            sums.setdefault(key, []).append(value)
    return {key: sum(values) / len(values) for key, values in sums.items()}
