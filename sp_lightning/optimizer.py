"""``model.optimizer``: AdamW on the learners' trainable weights, one parameter group per learner,
with a learning-rate schedule in training steps (one step per batch of games)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sp_lightning.errors import check_int


@dataclass
class OptimizerSettings:
    """AdamW on the trainable weights."""

    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = 1.0
    """Clip the gradient's global norm to this value; null disables clipping."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up over this many training steps."""
    schedule: str = "constant"
    """After warm-up: "constant", or "cosine" decay to min_lr_ratio * lr at trainer.max_steps."""
    min_lr_ratio: float = 0.1
    max_nonfinite_steps: int = 5
    """A step whose loss or gradient is NaN or inf is skipped (no weight changes) and logged;
    this many such steps in a row stop the run with an error."""

    def __post_init__(self):
        def number(value) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

        if not number(self.lr) or self.lr <= 0:  # a negative lr would climb the loss, without a word
            raise ValueError(f"optimizer.lr: expected a number > 0, got {self.lr!r}")
        if not number(self.weight_decay) or self.weight_decay < 0:
            raise ValueError(f"optimizer.weight_decay: expected a number >= 0, got {self.weight_decay!r}")
        betas = list(self.betas) if isinstance(self.betas, (list, tuple)) else None
        if betas is None or len(betas) != 2 or not all(number(b) and 0 <= b < 1 for b in betas):
            raise ValueError(f"optimizer.betas: expected two numbers in [0, 1), got {self.betas!r}")
        if self.grad_clip is not None and (not number(self.grad_clip) or self.grad_clip <= 0):
            raise ValueError(f"optimizer.grad_clip: expected a number > 0 or null (no clipping), got "
                             f"{self.grad_clip!r}")
        check_int(self.warmup_steps, "optimizer.warmup_steps", 0)
        if not number(self.min_lr_ratio) or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"optimizer.min_lr_ratio: expected a number in [0, 1], got {self.min_lr_ratio!r}")
        if self.max_nonfinite_steps < 1:
            raise ValueError(f"optimizer.max_nonfinite_steps: expected >= 1, got {self.max_nonfinite_steps}")
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"optimizer.schedule: expected 'constant' or 'cosine', got {self.schedule!r}")

    def lr_factor(self, step: float, total_steps: int) -> float:
        """Multiplier of lr at training step ``step`` (a fraction between two steps: a later pass
        over the same batch): linear warm-up, then constant or cosine decay."""
        if step < self.warmup_steps:  # at most the peak: a later pass of step w - 1 sits past it
            return min(1.0, (step + 1) / self.warmup_steps)
        if self.schedule == "constant" or total_steps <= self.warmup_steps:
            return 1.0
        progress = min(1.0, (step - self.warmup_steps) / (total_steps - self.warmup_steps))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_optimizer(groups: list[tuple[list, OptimizerSettings]], total_steps: int, passes_per_step: int):
    """One AdamW with a parameter group per ``(params, settings)`` (one optimizer step per pass,
    whatever the number of learners), and a LambdaLR stepped once per pass, each group on its own
    settings' schedule: the ``k``-th pass is at training step ``k / passes_per_step``."""
    opt = torch.optim.AdamW([{"params": params, "lr": s.lr, "betas": tuple(s.betas), "weight_decay": s.weight_decay}
                             for params, s in groups])
    factors = [lambda k, s=s: s.lr_factor(k / passes_per_step if passes_per_step > 1 else k, total_steps)
               for _, s in groups]
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factors)
