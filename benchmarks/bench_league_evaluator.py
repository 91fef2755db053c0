"""Training steps per second of league training with the background evaluator running, beside the
same run without it (the baseline, measured in the same invocation).

    OMP_NUM_THREADS=1 python benchmarks/bench_league_evaluator.py [--steps 60] [--repeats 3]

Each run is a fresh `sp-lightning fit` of configs/tictactoe_league_tiny.yaml for --steps steps
(its callbacks list is replaced by the overlay's, which keeps the config's baselines); the
evaluator (when on) starts a tournament every 10 steps, 25 games per seat. Steps/s counts the training loop's
wall time from the first to the last optimizer step (model build and start-up excluded). Medians
over the repeats, and the ratio on/off; beside them, with the evaluator on, the tournaments
played and the CPU seconds of the evaluator's process (``RUSAGE_CHILDREN``: the processes this one
started and waited for, the evaluator the only one), in all and per tournament.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import sys
import statistics
import tempfile
import time

import lightning as L

sys.path.insert(0, os.path.dirname(__file__))  # StepClock by class path

from sp_lightning.cli import main


class StepClock(L.Callback):
    last: StepClock

    def __init__(self):
        self.times = []
        StepClock.last = self

    def on_train_batch_end(self, trainer, *args):
        self.times.append(time.perf_counter())


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(steps: int, evaluator_every: int) -> tuple[float, int, float]:
    """Steps/s, tournaments played, and the evaluator's CPU seconds of one fit."""
    root = tempfile.mkdtemp()
    cpu = _children_cpu()
    overlay = f"{root}/overlay.yaml"
    with open(overlay, "w") as f:
        f.write(
            f"trainer:\n  max_steps: {steps}\n  val_check_interval: {steps * 10}\n  logger: false\n"
            f"  enable_checkpointing: false\n  enable_progress_bar: false\n  default_root_dir: {root}\n"
            f"  callbacks:\n    - class_path: bench_league_evaluator.StepClock\n"
            f"data:\n  league: {{dir: {root}/league, baselines: [random_bot, tictactoe_tactical_bot],\n"
            f"           evaluator: {{every: {evaluator_every}, games_per_seat: 25}}}}\n"
        )
    main(["fit", "--config", "configs/tictactoe_league_tiny.yaml", "--config", overlay])
    t = StepClock.last.times
    tournaments = len(glob.glob(f"{root}/league/evaluations/*.result.json"))
    return (len(t) - 1) / (t[-1] - t[0]), tournaments, _children_cpu() - cpu


if __name__ == "__main__":
    from bench_league_evaluator import StepClock  # noqa: F811 (the class LightningCLI instantiates)

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    a = parser.parse_args()
    off, on, played, cpu = [], [], [], []
    for _ in range(a.repeats):
        off.append(run(a.steps, 0)[0])
        rate, tournaments, seconds = run(a.steps, 10)
        on.append(rate)
        played.append(tournaments)
        cpu.append(seconds)
    off_m, on_m = statistics.median(off), statistics.median(on)
    print(f"steps/s without evaluator: median {off_m:.3f} ({', '.join(f'{x:.3f}' for x in off)})")
    print(f"steps/s with evaluator every 10 steps: median {on_m:.3f} ({', '.join(f'{x:.3f}' for x in on)})")
    print(f"ratio with/without: {on_m / off_m:.2f}")
    per = [c / n for c, n in zip(cpu, played) if n]
    print(f"evaluator: tournaments {', '.join(map(str, played))}; CPU s median {statistics.median(cpu):.1f} "
          f"({', '.join(f'{x:.1f}' for x in cpu)}), per tournament median "
          f"{statistics.median(per) if per else float('nan'):.1f}")
