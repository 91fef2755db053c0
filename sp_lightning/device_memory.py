"""Peak accelerator memory of one phase of a step (playing a batch, learning from it).

Sizing a run on one GPU means knowing what each phase holds at its peak: generation (weights,
KV cache of every row in flight) and the update (weights, adapter and optimizer state,
activations of a micro-batch). torch's allocator keeps one running maximum per device; a phase
resets it when it starts and reads it when it ends. Everything resident during the phase counts
(the trainer's weights are in the generation figure too: they are on the device meanwhile), so
the figures answer "does this phase fit", not "what does this phase own". On a CPU, and under
asynchronous collection (two phases at once on two threads, one running maximum), there is no
figure: ``PeakMemory.bytes`` stays None.
"""

from __future__ import annotations

import torch


class PeakMemory:
    """``with PeakMemory() as peak: ...`` then ``peak.bytes``: the most bytes torch's allocator
    held on the current CUDA device during the block (None without CUDA)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and torch.cuda.is_available()
        self.bytes: int | None = None

    def __enter__(self) -> PeakMemory:
        if self.enabled:
            torch.cuda.reset_peak_memory_stats()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.bytes = torch.cuda.max_memory_allocated()
