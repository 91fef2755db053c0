"""What a person watching ``sp-lightning fit`` sees: whether the policy is getting better.

Lightning's default bar shows the step count and the loss, which says little about a self-play
run (the policy-gradient loss hovers around zero whether or not the policy improves). The fit
shows instead, from the metrics the module, the arena and the league already log:

- ``win``: the learner's win rate in this step's training games (all opponents);
- ``val win`` and ``legal``: the last validation's win rate and legal-move rate against the
  evaluation opponent (the number the checkpoint is selected by);
- ``rollout tok/s`` and ``train tok/s``: generation and learning throughput;
- with a league: ``learner``, the learner's rating (TrueSkill mu - 3 sigma), and ``mix``, the
  realised opponent-type shares of the step (mirror / peer / exploitable / baseline).

In a terminal this is a ``rich`` bar (``SelfPlayProgressBar``). When output is not a terminal
(CI, ``nohup``, a pipe) a bar redraws into the log as hundreds of carriage-return lines, so
``ProgressLines`` prints one plain line every ``every`` steps and one per validation instead.
``SelfPlayCLI`` puts one of the two in place of Lightning's default bar; a progress bar named in
the config's callbacks (or ``trainer.enable_progress_bar: false``) is left alone.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.progress.progress_bar import ProgressBar

MIX_LETTERS = {"mirror": "m", "peer": "p", "exploitable": "e", "baseline": "b"}


def _value(metric: Any) -> float:
    return float(metric.item() if hasattr(metric, "item") else metric)


def _mean_of(metrics: Mapping[str, Any], prefix: str, suffix: str) -> float | None:
    """Mean over games of ``prefix<game>suffix`` (one game: its value)."""
    values = [_value(v) for k, v in metrics.items()
              if k.startswith(prefix) and k.endswith(suffix) and k.count("/") == prefix.count("/") + suffix.count("/")]
    return sum(values) / len(values) if values else None


def progress_summary(metrics: Mapping[str, Any]) -> dict[str, str]:
    """The progress fields (see the module docstring) from Lightning's ``callback_metrics``;
    fields whose metrics were not logged (yet) are left out."""
    out: dict[str, str] = {}
    win = _mean_of(metrics, "games/", "/win")
    if win is not None:
        out["win"] = f"{win:.2f}"
    val = _mean_of(metrics, "val/", "/win_rate")
    if val is not None:
        out["val win"] = f"{val:.3f}"
    legal = _mean_of(metrics, "val/", "/legal_move_rate")
    if legal is not None:
        out["legal"] = f"{legal:.3f}"
    for key, name in (("rollout/tokens_per_s", "rollout tok/s"), ("train/tokens_per_s", "train tok/s")):
        if key in metrics:
            out[name] = f"{_value(metrics[key]):,.0f}"
    if "league/learner/rating" in metrics:
        out["learner"] = f"{_value(metrics['league/learner/rating']):.1f}"
    mix = [(letter, metrics.get(f"league/mix/{kind}")) for kind, letter in MIX_LETTERS.items()]
    if any(v is not None for _, v in mix):
        out["mix"] = " ".join(f"{letter}{_value(v):.2f}" for letter, v in mix if v is not None)
    return out


class SelfPlayProgressBar(RichProgressBar):
    """Lightning's rich bar, showing ``progress_summary`` instead of the loss."""

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        return progress_summary(trainer.callback_metrics)


class ProgressLines(ProgressBar):
    """One plain line every ``every`` training steps and one after each validation: readable in
    a log file, where a redrawn bar is not."""

    def __init__(self, every: int = 25, stream=None):
        super().__init__()
        if every < 1:
            raise ValueError(f"ProgressLines.every: expected an int >= 1, got {every!r}")
        self.every = every
        self.stream = stream
        self._enabled = True
        self._due: int | None = None  # a step whose line waits for the step's last callback

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _write(self, text: str) -> None:
        if self._enabled:
            print(text, file=self.stream or sys.stdout, flush=True)

    @staticmethod
    def _fields(metrics: Mapping[str, Any], keys: tuple[str, ...] | None = None) -> str:
        summary = progress_summary(metrics)
        return "  ".join(f"{k} {v}" for k, v in summary.items() if keys is None or k in keys)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.every == 0 or step == trainer.max_steps:
            self._due = step  # written once every callback has logged this step (the league's too)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._write_due(trainer)

    def on_validation_start(self, trainer, pl_module) -> None:
        self._write_due(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self._write_due(trainer)

    def _write_due(self, trainer) -> None:
        if self._due is None:
            return
        fields = self._fields(trainer.callback_metrics, ("win", "rollout tok/s", "train tok/s", "learner", "mix"))
        total = f"/{trainer.max_steps}" if trainer.max_steps > 0 else ""
        self._write(f"step {self._due}{total}  {fields}".rstrip())
        self._due = None

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        fields = self._fields(trainer.callback_metrics, ("val win", "legal"))
        self._write(f"step {trainer.global_step} validation  {fields}".rstrip())


def default_progress_bar(every: int = 25) -> ProgressBar:
    """The rich bar in a terminal, plain lines elsewhere."""
    return SelfPlayProgressBar() if sys.stdout.isatty() else ProgressLines(every)
