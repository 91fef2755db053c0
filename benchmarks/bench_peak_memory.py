"""Peak resident memory of the default tiny run (suite row 5).

``sp-lightning fit --config configs/tictactoe_tiny.yaml`` for ``--steps`` optimizer steps (one
validation included: it plays ``data.eval.games`` games at once), each in its own process; the
peak resident set size the kernel reports for that process (``ru_maxrss`` of ``wait4``), so
nothing of this script's own memory is counted. Runs side by side:

- **default**: the config as shipped (micro-batches cut at ``model.micro_batch_tokens``, 4096
  padded tokens by default);
- **baseline**: the same run with every record of a step in one forward and backward
  (``micro_batch_size: 512``, no token budget), as the config ran before the budget existed.

Medians of ``--repeats`` runs, interleaved; the seconds per run show what the budget costs.

    python benchmarks/bench_peak_memory.py               # 60 steps, 1 repeat (~2 min)
    python benchmarks/bench_peak_memory.py --repeats 3 --steps 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = {
    "default (micro_batch_tokens 4096)": [],
    "baseline (micro_batch_size 512, no token budget)": ["--model.micro_batch_size", "512",
                                                         "--model.micro_batch_tokens", "null"],
}


def peak_rss_mib(args: list[str]) -> tuple[float, float]:
    """Peak RSS (MiB) and wall seconds of ``python -m sp_lightning.cli fit <args>``."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-m", "sp_lightning.cli", "fit", *args],
                                stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not all children's
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            log.seek(0)
            raise RuntimeError(f"fit failed ({proc.returncode}):\n{log.read().decode()[-3000:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - start  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/tictactoe_tiny.yaml")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=1)
    opts = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    for _ in range(opts.repeats):
        for name, extra in VARIANTS.items():
            with tempfile.TemporaryDirectory() as root:
                args = ["--config", opts.config, "--trainer.max_steps", str(opts.steps),
                        "--trainer.default_root_dir", root, "--trainer.logger", "false",
                        "--trainer.callbacks", "[]", "--trainer.enable_checkpointing", "false",
                        "--trainer.enable_progress_bar", "false", *extra]
                results[name].append(peak_rss_mib(args))
    print(f"{opts.config}, {opts.steps} steps, median of {opts.repeats}:")
    for name, runs in results.items():
        rss = statistics.median(r for r, _ in runs)
        secs = statistics.median(s for _, s in runs)
        print(f"  {name:<50} peak RSS {rss:7.0f} MiB   {secs:6.1f} s")
    base = statistics.median(r for r, _ in results[list(VARIANTS)[1]])
    ours = statistics.median(r for r, _ in results[list(VARIANTS)[0]])
    print(f"  default / baseline peak RSS: {ours / base:.2f}   target: default < 800 MiB")


if __name__ == "__main__":
    main()
