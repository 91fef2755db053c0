"""Seconds per training step with asynchronous rollout collection against synchronous (suite row 6).

Short fits of one config (default ``configs/tictactoe_tiny.yaml``; ``--config
configs/tictactoe_vllm_tiny.yaml --backend vllm`` in the vLLM environment), two ways:

- **sync** (the baseline): the default loop, the worker (Hugging Face or vLLM) generating from
  its own copy of the weights, which the weight path updates after each step;
- **async**: ``data.async_rollouts`` (queue 1, the default lag bound): the next batch is played
  while the trainer steps.

Each step's wall time is the time between consecutive ``on_train_batch_end`` calls; the first
``--warmup`` steps are left out, and the median of the rest is reported with its ratio to the
baseline. Runs are interleaved over ``--repeats`` so machine noise hits all three alike. On a
2-core CPU both threads compete for the same cores: the gain is bounded by how much of a step is
waiting (vLLM's engine process, a server) rather than computing.

    python benchmarks/bench_async_rollouts.py                      # ~3 min
    . .venv-vllm/bin/activate && python benchmarks/bench_async_rollouts.py \\
        --config configs/tictactoe_vllm_tiny.yaml --backend vllm   # ~6 min
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import lightning as L

ASYNC = '{"enabled": true, "queue_size": 1, "max_policy_lag": null}'


class StepClock(L.Callback):
    def __init__(self):
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.ends.append(time.perf_counter())


def step_seconds(config: str, steps: int, warmup: int, overrides: list[str]) -> list[float]:
    from sp_lightning import build_from_config, make_trainer

    module, dm = build_from_config("--config", config, *overrides)
    clock = StepClock()
    with tempfile.TemporaryDirectory() as root:
        trainer = make_trainer(max_steps=steps, limit_val_batches=0, logger=False, enable_checkpointing=False,
                               enable_progress_bar=False, default_root_dir=root, callbacks=[clock])
        trainer.fit(module, datamodule=dm)
    dm.engine.worker.close()
    return [b - a for a, b in zip(clock.ends[warmup:], clock.ends[warmup + 1:])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/tictactoe_tiny.yaml")
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ways = {f"sync, {args.backend}": [], f"async, {args.backend}": ["--data.async_rollouts", ASYNC]}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, overrides in ways.items():
            times[name] += step_seconds(args.config, args.steps, args.warmup, overrides)
    baseline = statistics.median(times[next(iter(ways))])
    print(f"{args.config}, {args.backend}: median seconds per step over {args.repeats} runs of "
          f"{args.steps} steps (first {args.warmup} left out)")
    print(f"{'way':>22} | {'s/step':>7} | {'vs baseline':>11} | steps timed")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:>22} | {median:7.3f} | {median / baseline:10.2f}x | {len(values)}")


if __name__ == "__main__":
    main()
