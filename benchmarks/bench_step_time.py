"""Seconds per training step of a config, this tree against an earlier commit, interleaved.

Each round fits the config for ``--steps`` batches with each tree's own code and own copy of the
config (the same recipe; an older tree may spell its keys differently), one after the other, in a
process of its own with one torch thread, and times every batch from one ``on_train_batch_end``
to the next (``StepEnds``, a callback both trees load from this folder): playing the batch, the
update, the weight sync and every callback, what a user waits for. The first ``--warmup``
batches are left out; the medians of the rest, over every round, and their ratio are printed.
Older trees count ``update_epochs`` optimizer steps per batch in ``max_steps``; the script asks
each for the same number of batches.

    python benchmarks/bench_step_time.py --before de0ae15                 # ~6 min
    python benchmarks/bench_step_time.py --before de0ae15 --rounds 5 --steps 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import lightning as L
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class StepEnds(L.Callback):
    """Appends the time of every ``on_train_batch_end`` to ``path``, one line each."""

    def __init__(self, path: str):
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        with open(self.path, "a") as f:
            f.write(f"{time.perf_counter()}\n")


def step_seconds(tree: str, config: str, batches: int, scratch: str) -> list[float]:
    """Seconds between consecutive batch ends of one fit of ``tree``'s ``config``."""
    path = os.path.join(scratch, f"ends-{os.getpid()}-{time.monotonic_ns()}.txt")
    with open(os.path.join(tree, config)) as f:
        epochs = int(((yaml.safe_load(f) or {}).get("model") or {}).get("update_epochs", 1))
    counted = batches * epochs if not _counts_batches(tree) else batches
    callbacks = f'[{{"class_path": "bench_step_time.StepEnds", "init_args": {{"path": "{path}"}}}}]'
    command = [sys.executable, "-m", "sp_lightning.cli", "fit", "--config", os.path.join(tree, config),
               "--trainer.max_steps", str(counted), "--trainer.val_check_interval", str(10 * batches),
               "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
               "--trainer.enable_progress_bar", "false", "--trainer.callbacks", callbacks,
               "--trainer.default_root_dir", scratch]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, HERE]), "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, cwd=scratch, env=env, capture_output=True)
    with open(path) as f:
        ends = [float(line) for line in f]
    return [b - a for a, b in zip(ends, ends[1:])]


def _counts_batches(tree: str) -> bool:
    """Whether ``tree``'s ``global_step`` counts batches (the update's own module says so)."""
    return os.path.isfile(os.path.join(tree, "sp_lightning", "update.py"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the earlier commit (a git revision)")
    parser.add_argument("--config", default="configs/tictactoe_tiny.yaml")
    parser.add_argument("--steps", type=int, default=24, help="batches per fit")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_step_") as scratch:
        before = os.path.join(scratch, "before")
        subprocess.run(["git", "worktree", "add", "--detach", before, args.before], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            times: dict[str, list[float]] = {"before": [], "after": []}
            for _ in range(args.rounds):
                for name, tree in (("before", before), ("after", ROOT)):
                    times[name] += step_seconds(tree, args.config, args.steps, scratch)[args.warmup:]
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", before], cwd=ROOT, capture_output=True)
    med = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.config}: seconds per training step (batch), one torch thread, medians of "
          f"{len(times['after'])} steps over {args.rounds} interleaved rounds (first {args.warmup} of each fit out)")
    print(f"  before ({args.before}): {med['before']:.4f} s")
    print(f"  after (this tree):  {med['after']:.4f} s")
    print(f"  after / before: {med['after'] / med['before']:.3f}  (below 1: faster)")


if __name__ == "__main__":
    main()
