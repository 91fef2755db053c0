"""Per-decision credit against outcome-only credit: its price and its gain, side by side.

    python benchmarks/bench_credit.py --config configs/tictactoe_tiny.yaml --seeds 0 1 --minutes 10
    python benchmarks/bench_credit.py --config configs/kuhn_poker_league_tiny.yaml --seeds 0 --minutes 5

For each seed and each credit assigner (``--credits``: ``rae``, the outcome-only RAE the
league configs ship, and ``continuations``, ``sp_lightning.credit.ContinuationCredit``; or
``config``, whatever the config names), one ``sp-lightning fit`` of the config runs for
``--minutes`` of wall time, everything else as the config says, one after the other (run it
alone: the times belong to this machine). A callback of this file records, at every
validation, the wall time since the fit started, the optimizer step and the training games
played so far. The table then gives, per run:

- seconds per step (median), training games per second, and the share of a step spent playing;
- the validation figure the config's checkpoint rule watches (win rate against its evaluation
  opponent, or exploitability), and the draw rate against ``also_against`` opponents where the
  config asks, against wall time (at a quarter, half and all of the budget) and against training
  games played (at fixed game counts), so that the cheaper method's extra games count.

Validation figures are the config's own (``data.eval.games`` games on the validation seed), not
2000-game evaluations on fresh seeds: read them as curves, not as results.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import lightning as L

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CREDITS = {
    "rae": {"class_path": "sp_lightning.credit.RAE", "init_args": {"decay": 0.95}},
    "continuations": {"class_path": "sp_lightning.credit.ContinuationCredit", "init_args": {"continuations": 4}},
    "gae": {"class_path": "sp_lightning.credit.GAE", "init_args": {"lam": 0.95}},
}


class ValidationClock(L.Callback):
    """Writes, at every validation end, a JSON line: step, seconds since fit start, training
    games played, and every ``val/`` figure; and every step's seconds (for the medians)."""

    def __init__(self, path: str, episodes_per_batch: int):
        self.path, self.episodes = path, episodes_per_batch
        self.start = time.perf_counter()
        self.steps: list[dict] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        metrics = pl_module.last_batch.metrics
        self._write({"kind": "step", "step": trainer.global_step, "seconds": time.perf_counter() - self.start,
                     "games": trainer.global_step * self.episodes, "rollout_seconds": metrics.get("rollout/seconds", 0.0)})

    def on_validation_end(self, trainer, pl_module):
        figures = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
        self._write({"kind": "validation", "step": trainer.global_step, "seconds": time.perf_counter() - self.start,
                     "games": trainer.global_step * self.episodes, "figures": figures})

    def _write(self, row: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")


def run(config: str, credit: str, seed: int, minutes: float, root: str, extra: list[str]) -> list[dict]:
    """One fit of ``config`` with ``credit`` for ``minutes``; its recorded rows."""
    import yaml

    data = yaml.safe_load(open(config)).get("data", {})
    episodes = int(data.get("episodes_per_batch", 64))
    log = os.path.join(root, "clock.jsonl")
    callbacks = [{"class_path": "bench_credit.ValidationClock", "init_args": {"path": log, "episodes_per_batch": episodes}}]
    command = [os.path.join(os.path.dirname(sys.executable), "sp-lightning"), "fit", "--config", os.path.abspath(config),
               "--seed_everything", str(seed), "--trainer.default_root_dir", root, "--trainer.logger", "false",
               "--trainer.enable_progress_bar", "false", "--trainer.callbacks", json.dumps(callbacks),
               "--trainer.max_steps", "1000000", "--trainer.max_time", _duration(minutes)]
    if credit != "config":
        command += ["--data.credit", json.dumps(CREDITS[credit])]
    if "league" in data:
        command += ["--data.league.dir", os.path.join(root, "league")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([*command, *extra], cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{credit} seed {seed}: fit failed:\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in open(log)]


def _duration(minutes: float) -> str:
    seconds = int(minutes * 60)
    return f"00:{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def watched(rows: list[dict]) -> tuple[str, str]:
    """The validation figure to follow: exploitability where it is computed, else the win rate
    against the evaluation opponent; and 'min' or 'max'."""
    names = {k for r in rows if r["kind"] == "validation" for k in r["figures"]}
    exploit = sorted(n for n in names if n.endswith("/exploitability"))
    if exploit:
        return exploit[0], "min"
    return sorted(n for n in names if n.count("/") == 2 and n.endswith("/win_rate"))[0], "max"


def at(points: list[tuple[float, float]], x: float) -> float | None:
    """The last point at or before ``x`` (None before the first)."""
    earlier = [value for where, value in points if where <= x]
    return earlier[-1] if earlier else None


def summarize(label: str, rows: list[dict], minutes: float, game_marks: list[int]) -> dict:
    steps = [r for r in rows if r["kind"] == "step"]
    validations = [r for r in rows if r["kind"] == "validation"]
    metric, _ = watched(rows)
    gaps = [b["seconds"] - a["seconds"] for a, b in zip(steps, steps[1:])]
    step_seconds = statistics.median(gaps) if gaps else float("nan")
    play_share = statistics.median(s["rollout_seconds"] for s in steps[1:]) / step_seconds if gaps else float("nan")
    by_time = [(v["seconds"], v["figures"].get(metric)) for v in validations]
    by_games = [(v["games"], v["figures"].get(metric)) for v in validations]
    draws = sorted(k for v in validations for k in v["figures"] if k.endswith("/draw_rate") and "/vs/" in k)
    out = {"run": label, "metric": metric, "steps": steps[-1]["step"] if steps else 0,
           "step_seconds": step_seconds,
           "games_per_second": steps[-1]["games"] / steps[-1]["seconds"] if steps else 0.0,
           "play_share": play_share,
           "by_time": {f"{q:.2f}": at(by_time, q * minutes * 60) for q in (0.25, 0.5, 1.0)},
           "by_games": {str(g): at(by_games, g) for g in game_marks},
           "best": (min if metric.endswith("exploitability") else max)(v for _, v in by_time if v is not None)
           if by_time else None}
    if draws:
        out["draws_at_end"] = {k: validations[-1]["figures"].get(k) for k in dict.fromkeys(draws)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/tictactoe_tiny.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--credits", nargs="+", default=["rae", "continuations"], choices=[*CREDITS, "config"])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--games", type=int, nargs="+", default=[5000, 10000, 20000, 40000],
                        help="training-game counts at which to read the curve")
    parser.add_argument("--output", help="write every run's rows and summary as JSON here")
    args, extra = parser.parse_known_args()
    results = []
    for seed in args.seeds:
        for credit in args.credits:
            with tempfile.TemporaryDirectory(prefix=f"bench_credit_{credit}_{seed}_") as root:
                rows = run(args.config, credit, seed, args.minutes, root, extra)
            summary = summarize(f"{credit} seed {seed}", rows, args.minutes, args.games)
            results.append({"summary": summary, "rows": rows})
            print(json.dumps(summary), file=sys.stderr, flush=True)
    metric = results[0]["summary"]["metric"]
    print(f"{args.config}, {args.minutes:g} min each, alone on this machine; figure: {metric} "
          f"(validation: the config's data.eval games on its validation seed)")
    header = (f"{'run':<22} {'steps':>6} {'s/step':>7} {'games/s':>8} {'play':>5} | "
              + " ".join(f"{'t=' + q:>7}" for q in ("0.25", "0.50", "1.00")) + " | "
              + " ".join(f"{'g=' + str(g):>8}" for g in args.games) + f" | {'best':>6}")
    print(header)
    print("-" * len(header))

    def cell(value, width):
        return f"{value:>{width}.3f}" if value is not None else f"{'-':>{width}}"

    for r in results:
        s = r["summary"]
        print(f"{s['run']:<22} {s['steps']:>6} {s['step_seconds']:>7.2f} {s['games_per_second']:>8.1f} "
              f"{s['play_share']:>5.2f} | " + " ".join(cell(s["by_time"][q], 7) for q in ("0.25", "0.50", "1.00"))
              + " | " + " ".join(cell(s["by_games"][str(g)], 8) for g in args.games) + f" | {cell(s['best'], 6)}")
        for name, value in s.get("draws_at_end", {}).items():
            print(f"{'':<22} {name} at the end: {value:.3f}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
