"""Step time of the default tiny run alone and beside a busy process, with our thread defaults and
with torch's own (the baseline), measured in the same run.

    python benchmarks/bench_shared_cpu.py [--steps 12] [--busy 1]

Each case runs ``sp-lightning fit --config configs/tictactoe_tiny.yaml`` for ``--steps`` steps in
a fresh process (thread settings are read when torch loads) and reports the median of
``train/step_seconds`` (playing the batch + the update) over the steps after the first two.
"Busy" starts ``--busy`` processes that each keep one core busy (a Python loop) for the whole
case. Baseline: ``SP_LIGHTNING_THREADS=torch`` (torch's thread count, GNU OpenMP's spin-waiting);
ours: the defaults of ``sp_lightning.threads`` (threads from the affinity mask and CPU quota,
passive waiting). A user's ``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY`` would override both, so
they are removed from the cases' environment. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "tictactoe_tiny.yaml")
BUSY_LOOP = "import time\nend = time.time() + 3600\nwhile time.time() < end: pass\n"


def step_seconds(logdir: str) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = sorted(glob.glob(os.path.join(logdir, "tb", "version_*")))[-1]
    events = EventAccumulator(run, size_guidance={"scalars": 0})
    events.Reload()
    return [e.value for e in events.Scalars("train/step_seconds")]


def fit_step_seconds(steps: int, env: dict[str, str], extra: tuple[str, ...] = (),
                     config: str = CONFIG) -> tuple[float, list[float]]:
    """Run ``sp-lightning fit`` of ``config`` for ``steps`` steps in a fresh process (no
    callbacks, no checkpoints, no validation); return its wall time and every step's seconds."""
    with tempfile.TemporaryDirectory() as root:
        overlay = os.path.join(root, "overlay.yaml")
        with open(overlay, "w") as f:
            f.write("trainer:\n  callbacks: []\n  enable_checkpointing: false\n")
        exe = os.path.join(os.path.dirname(sys.executable), "sp-lightning")
        cmd = [exe, "fit", "--config", config, "--config", overlay, "--trainer.max_steps", str(steps),
               "--trainer.val_check_interval", str(10 * steps), "--trainer.default_root_dir", root,
               "--trainer.logger.init_args.save_dir", root, "--trainer.enable_progress_bar", "false", *extra]
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - start, step_seconds(root)


def run_case(steps: int, busy: int, ours: bool) -> tuple[float, list[float]]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "SP_LIGHTNING_THREADS")}
    if not ours:
        env["SP_LIGHTNING_THREADS"] = "torch"
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
    try:
        return fit_step_seconds(steps, env)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--busy", type=int, default=1, help="busy processes beside the run (one core each)")
    args = parser.parse_args()
    from sp_lightning.threads import usable_cpus

    print(f"usable CPUs: {usable_cpus()}, busy processes: {args.busy}, steps per case: {args.steps}")
    results = {}
    for busy in (0, args.busy):
        for ours in (False, True):
            wall, steps = run_case(args.steps, busy, ours)
            median = statistics.median(steps[2:] or steps)
            results[(busy, ours)] = median
            label = f"{'busy' if busy else 'alone'}, {'ours' if ours else 'torch defaults (baseline)'}"
            print(f"{label:40s} median step {median:6.2f} s  (steps {min(steps):.2f}-{max(steps):.2f} s, "
                  f"fit {wall:.0f} s)", flush=True)
    print(f"alone: ours / baseline = {results[(0, True)] / results[(0, False)]:.2f}")
    print(f"busy:  ours / baseline = {results[(args.busy, True)] / results[(args.busy, False)]:.2f}  "
          f"(baseline slowed x{results[(args.busy, False)] / results[(0, False)]:.1f} by the busy process, "
          f"ours x{results[(args.busy, True)] / results[(0, True)]:.1f})")


if __name__ == "__main__":
    main()
