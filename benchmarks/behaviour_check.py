"""Does a run still compute what it computed? The first steps of two configs (the shipped
recipes as they were when the reference was recorded), on one thread, compared figure by figure
with a reference recorded on an earlier commit.

    python benchmarks/behaviour_check.py                       # record now, compare with the reference
    python benchmarks/behaviour_check.py record --out now.json # record only
    python benchmarks/behaviour_check.py compare a.json b.json # compare two recordings

A recording is, for each config, every logged figure of the first ``--steps`` optimizer steps
(losses, gradient norms, the games' rates, credit statistics) and of the validations at steps
``--val_every``, 2 x ``--val_every``, ... (win rates with their intervals, legal moves,
exploitability). Timings are left out: they are the only figures allowed to move. League figures
are compared by value under the learner's name (older recordings call it ``hero``).

Each fit runs as ``sp-lightning fit`` in a scratch directory (the configs' relative ``runs/``
paths land there), with ``OMP_NUM_THREADS=1``: on one thread a run is bit-for-bit repeatable,
so "unchanged" means equal to the last digit, and the comparison says where it is not.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = ["configs/tictactoe_tiny.yaml", "configs/kuhn_poker_league_tiny.yaml"]
"""The configs' names in recordings; what runs is their copy in ``results/behaviour_configs``, the
recipes as the reference recorded them, so that a change of a shipped recipe is not read as a
change of what the code computes."""
FROZEN = os.path.join(HERE, "results", "behaviour_configs")
REFERENCE = os.path.join(HERE, "results", "behaviour_reference.json")
TIMING = ("seconds", "tokens_per_s", "/lr", "wait_", "queue_depth", "running_requests", "adapter_load", "_ms",
          "peak_memory")
"""Figures that measure time or the machine, not what the run computed."""


def record_config(config: str, steps: int, val_every: int) -> dict[str, dict[str, float]]:
    """``{metric: {step: value}}`` of the first ``steps`` steps of ``config``, fit on one thread."""
    config_path = os.path.join(FROZEN, os.path.basename(config))
    with tempfile.TemporaryDirectory(prefix="behaviour-") as scratch:
        command = [
            os.path.join(os.path.dirname(sys.executable), "sp-lightning"), "fit", "--config", config_path,
            "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(val_every),
            "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
            "--trainer.logger.save_dir", os.path.join(scratch, "csv"),
            "--trainer.enable_progress_bar", "false",
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
        start = time.perf_counter()
        done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{config}: fit failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        print(f"{config}: {steps} steps in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        files = [os.path.join(root, f) for root, _, names in os.walk(os.path.join(scratch, "csv"))
                 for f in names if f == "metrics.csv"]
        if len(files) != 1:
            raise RuntimeError(f"{config}: expected one metrics.csv, found {files}")
        figures: dict[str, dict[str, float]] = {}
        with open(files[0]) as f:
            for row in csv.DictReader(f):
                step = row.pop("step")
                row.pop("epoch", None)
                for name, value in row.items():
                    if value == "" or any(t in name for t in TIMING):
                        continue
                    figures.setdefault(name.replace("/hero", "/learner"), {})[step] = float(value)
        return figures


def record(steps: int, val_every: int) -> dict:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    from importlib.metadata import version

    libraries = {name: version(name) for name in ("torch", "transformers", "peft", "lightning")}
    return {"commit": commit, "steps": steps, "val_every": val_every, "threads": 1, "libraries": libraries,
            "configs": {config: record_config(config, steps, val_every) for config in CONFIGS}}


def compare(before: dict, after: dict, out=sys.stdout) -> bool:
    """Print, per config, the loss and validation figures side by side and every figure that
    differs; True when every figure both recordings hold is equal."""
    print(f"before: commit {before['commit']}; after: commit {after['commit']}; "
          f"{after['steps']} steps, validation every {after['val_every']}, {after['threads']} thread", file=out)
    same = True
    for config in CONFIGS:
        old, new = before["configs"][config], after["configs"][config]
        print(f"\n== {config}", file=out)
        losses_old, losses_new = old.get("train/loss", {}), new.get("train/loss", {})
        print(f"{'step':>5}  {'loss before':>14}  {'loss after':>14}", file=out)
        for step in sorted(set(losses_old) | set(losses_new), key=int):
            a, b = losses_old.get(step, math.nan), losses_new.get(step, math.nan)
            print(f"{step:>5}  {a:>14.9f}  {b:>14.9f}{'' if a == b else '  <-- differs'}", file=out)
        for name in sorted(n for n in set(old) | set(new) if n.startswith("val/") and "_ci_" not in n):
            a, b = old.get(name, {}), new.get(name, {})
            cells = ", ".join(f"step {s}: {a.get(s, math.nan):.4f} / {b.get(s, math.nan):.4f}"
                              for s in sorted(set(a) | set(b), key=int))
            print(f"{name}: {cells}", file=out)
        differing, missing, added = [], [], []
        for name in sorted(set(old) | set(new)):
            if name not in new:  # a recorded figure the code no longer gives: a change
                missing.append(name)
                continue
            if name not in old:  # a figure the code gives now beside every recorded one: not a change
                added.append(name)
                continue
            for step in sorted(set(old[name]) | set(new[name]), key=int):
                a, b = old[name].get(step), new[name].get(step)
                if a != b:
                    differing.append(f"{name} at step {step}: {a} -> {b}")
        compared = len(set(old) & set(new))
        print(f"\n{compared} figures compared at every step: {len(differing)} differ", file=out)
        for line in differing[:40]:
            print(f"  {line}", file=out)
        if missing:
            print(f"recorded but no longer logged: {', '.join(missing)}", file=out)
        if added:
            print(f"logged now beside the recorded figures (new, not compared): {', '.join(added)}", file=out)
        same = same and not differing and not missing
    print(f"\n{'UNCHANGED' if same else 'CHANGED'}", file=out)
    return same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    rec = sub.add_parser("record", help="record the figures of this checkout")
    rec.add_argument("--out", required=True)
    cmp_ = sub.add_parser("compare", help="compare two recordings")
    cmp_.add_argument("before")
    cmp_.add_argument("after")
    for p in (parser, rec):
        p.add_argument("--steps", type=int, default=20)
        p.add_argument("--val_every", type=int, default=10)
    parser.add_argument("--reference", default=REFERENCE)
    args = parser.parse_args()
    if args.command == "record":
        with open(args.out, "w") as f:
            json.dump(record(args.steps, args.val_every), f, indent=1)
        return
    if args.command == "compare":
        with open(args.before) as a, open(args.after) as b:
            sys.exit(0 if compare(json.load(a), json.load(b)) else 1)
    with open(args.reference) as f:
        before = json.load(f)
    sys.exit(0 if compare(before, record(before["steps"], before["val_every"])) else 1)


if __name__ == "__main__":
    main()
