"""The benchmark suite, one benchmark after another, each in its own process.

    pip install -e ".[bench]"   # trl==1.16.0        # benchmark 3-4's baseline
    python benchmarks/suite.py       # ~6 min on 2 cores; run it with nothing else on the machine

1. env steps/s per game with bots, against the raw PettingZoo envs behind our adapters
   (bench_env_steps.py);
2. rollout turns/s and tokens/s at 1 / 8 / 64 / 256 concurrent games, as a share of raw batched
   ``model.generate`` on the same prompt batches (bench_rollout_share.py), and the fixes that
   raised it, each against what it replaced (bench_rollout_fixes.py);
3. and 4. training tokens/s and seconds per step against TRL's GRPOTrainer on the same work
   (bench_trl.py);
5. peak resident memory of the default tiny run (bench_peak_memory.py);
6. seconds per step with asynchronous collection against synchronous (bench_async_rollouts.py,
   Hugging Face backend; its vLLM variant runs in the vLLM environment, see its docstring);
7. the bytes and milliseconds of one weight sync, trainer to rollout backend (bench_weight_sync.py),
   and those of Qwen3-1.7B's LoRA, computed;
9. seconds to score a policy's whole Tic-Tac-Toe strategy (exploitability's 4,520 boards) against
   the way it was scored before (bench_exploitability_scoring.py).

``bench_step_time.py --before <commit>`` (seconds per training step of this tree against an
earlier commit, interleaved) needs a commit to compare with and is run by hand.

Each prints its own table, with the command that reproduces it; the suite adds each one's wall
time and the total. ``--only 2 5`` runs a subset.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = {
    "1": ("env steps/s", ["bench_env_steps.py", "--seconds", "1.5"]),
    "2": ("rollout share of raw generate", ["bench_rollout_share.py"]),
    "2b": ("the rollout fixes one by one", ["bench_rollout_fixes.py"]),
    "3-4": ("training throughput and seconds per step vs TRL", ["bench_trl.py"]),
    "5": ("peak memory of the default tiny run", ["bench_peak_memory.py"]),
    "6": ("seconds per step, asynchronous collection vs synchronous", ["bench_async_rollouts.py"]),
    "7": ("bytes and milliseconds of one weight sync", ["bench_weight_sync.py"]),
    "9": ("scoring a whole Tic-Tac-Toe strategy", ["bench_exploitability_scoring.py"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS), default=list(BENCHMARKS))
    opts = parser.parse_args()
    total = time.perf_counter()
    for key in opts.only:
        title, args = BENCHMARKS[key]
        print(f"\n=== benchmark {key}: {title}   (python benchmarks/{' '.join(args)})", flush=True)
        start = time.perf_counter()
        # stderr (warnings, progress bars) is kept back, and shown only when a benchmark fails
        done = subprocess.run([sys.executable, os.path.join(HERE, args[0]), *args[1:]], stderr=subprocess.PIPE,
                              text=True)
        if done.returncode:
            print(done.stderr[-3000:], flush=True)
        print(f"--- benchmark {key}: {time.perf_counter() - start:.0f} s"
              + ("" if done.returncode == 0 else f", FAILED (exit {done.returncode})"), flush=True)
    print(f"\nsuite: {time.perf_counter() - total:.0f} s", flush=True)


if __name__ == "__main__":
    main()
