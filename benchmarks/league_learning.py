"""Does a recipe learn? One timed `sp-lightning fit`, then its checkpoints evaluated on fresh seeds.

    python benchmarks/league_learning.py --config configs/tictactoe_league_tiny.yaml --seed 0
    python benchmarks/league_learning.py --config configs/kuhn_poker_league_tiny.yaml --seed 0
    python benchmarks/league_learning.py --config configs/tictactoe_tiny.yaml --seed 0   # today's recipe

For one config and one ``seed_everything``:

1. runs ``sp-lightning fit`` in a subprocess, its outputs under ``--root`` (the config's own
   ``runs/<name>`` paths are moved there), and reports its wall time (start-up included);
2. evaluates ``checkpoints/best.ckpt`` (the checkpoint the config's validation rule chose) and
   ``checkpoints/last.ckpt`` (the last iterate) with ``sp-lightning evaluate`` against the
   config's evaluation opponent, ``--games_per_seat`` games per seat on ``--eval_seed``, which
   must differ from the config's ``data.eval.seed`` (the seeds the validation rule used), plus
   the exact exploitability where the config asks for it;
3. reads the run's TensorBoard log: the validation metric over steps, its best value, the mean of
   the validations in the last quarter of the run, and (league runs) the learner's exploitability
   and the league mixture's, and the learner's rating beside every baseline's at the end.

Everything is printed and written to ``<root>/report.json``. ``--skip_fit`` re-reads a finished
run. Wall time belongs to this machine: run it alone (or say what ran beside it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

import yaml

from sp_lightning.data import EvalSettings


def monitored_metric(config: dict) -> tuple[str, str] | None:
    """(metric, mode) of the ModelCheckpoint that writes best.ckpt."""
    for cb in config.get("trainer", {}).get("callbacks", []) or []:
        args = cb.get("init_args", {})
        if cb.get("class_path", "").endswith("ModelCheckpoint") and args.get("monitor"):
            return args["monitor"], args.get("mode", "min")
    return None


def relocate(config_path: str, root: str, seed: int) -> tuple[str, dict]:
    """A copy of the config whose run directory is ``root``, with ``seed_everything`` set."""
    text = open(config_path).read()
    config = yaml.safe_load(text)
    old_root = config["trainer"]["default_root_dir"]
    text = text.replace(old_root, root)
    config = yaml.safe_load(text)
    config["seed_everything"] = seed
    path = os.path.join(root, "config.yaml")
    os.makedirs(root, exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return path, config


def scalars(root: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: dict[str, list[tuple[int, float]]] = {}
    for directory in sorted(glob.glob(os.path.join(root, "tb", "version_*"))):
        acc = EventAccumulator(directory, size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            series.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return {tag: sorted(dict(values).items()) for tag, values in series.items()}


def curve_report(series: dict, metric: str, mode: str, max_steps: int) -> dict:
    values = series.get(metric, [])
    if not values:
        return {}
    best_step, best = (max if mode == "max" else min)(values, key=lambda sv: sv[1])
    last_quarter = [v for s, v in values if s >= 0.75 * max_steps] or [values[-1][1]]
    return {"metric": metric, "curve": values, "best": best, "best_step": best_step,
            "last_quarter_mean": statistics.fmean(last_quarter), "last_quarter_n": len(last_quarter)}


def evaluate(config_path: str, checkpoint: str, games_per_seat: int, seed: int, exploitability: bool,
             output: str) -> dict:
    cmd = [sys.executable, "-m", "sp_lightning.cli", "evaluate", "--config", config_path,
           "--checkpoint", checkpoint, "--games_per_seat", str(games_per_seat), "--seed", str(seed),
           "--exploitability", str(exploitability).lower(), "--output", output]
    subprocess.run(cmd, check=True)
    with open(output) as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--seed", type=int, default=0, help="seed_everything of the fit")
    parser.add_argument("--root", help="run directory (default runs/league_learning/<config>_s<seed>)")
    parser.add_argument("--games_per_seat", type=int, default=1000)
    parser.add_argument("--eval_seed", type=int, default=20261121)
    parser.add_argument("--skip_fit", action="store_true")
    parser.add_argument("--exploitability", choices=("auto", "true", "false"), default="auto",
                        help="also compute exact exploitability (auto: when the config's data.eval asks)")
    args = parser.parse_args()

    name = os.path.splitext(os.path.basename(args.config))[0]
    root = os.path.abspath(args.root or f"runs/league_learning/{name}_s{args.seed}")
    config_path, config = relocate(args.config, root, args.seed)
    data = config.get("data", {})
    if data.get("eval", {}).get("seed", EvalSettings.seed) == args.eval_seed:
        raise SystemExit(f"--eval_seed {args.eval_seed} is the validation rule's data.eval.seed: pick another")
    report: dict = {"config": args.config, "seed": args.seed, "root": root, "eval_seed": args.eval_seed}
    if not args.skip_fit:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sp_lightning.cli", "fit", "--config", config_path], check=True)
        report["fit_seconds"] = time.perf_counter() - start
        print(f"fit: {report['fit_seconds']:.0f} s")
    exploit = (bool(data.get("eval", {}).get("exploitability", False)) if args.exploitability == "auto"
               else args.exploitability == "true")
    max_steps = config["trainer"]["max_steps"]
    for which in ("best", "last"):
        ckpt = os.path.join(root, "checkpoints", f"{which}.ckpt")
        if os.path.exists(ckpt):
            report[which] = evaluate(config_path, ckpt, args.games_per_seat, args.eval_seed, exploit,
                                     os.path.join(root, f"eval_{which}.json"))
    series = scalars(root)
    monitored = monitored_metric(config)
    if monitored:
        report["validation"] = curve_report(series, *monitored, max_steps)
        v = report["validation"]
        if v:
            print(f"validation {v['metric']}: best {v['best']:.4f} at step {v['best_step']}; mean of the "
                  f"{v['last_quarter_n']} validations in the last quarter {v['last_quarter_mean']:.4f}")
            print("  curve: " + " ".join(f"{s}:{x:.3f}" for s, x in v["curve"]))
    for tag in ("league/exploitability/learner", "league/exploitability/mixture"):
        if tag in series:  # logged at every step, recomputed every exploitability_every: keep the changes
            report[tag] = [sv for i, sv in enumerate(series[tag]) if i == 0 or sv[1] != series[tag][i - 1][1]]
            print(f"{tag}: " + " ".join(f"{s}:{x:.3f}" for s, x in report[tag]))
    for kind in ("rating", "elo"):
        final = {tag: values[-1][1] for tag, values in series.items()
                 if tag.startswith("league/") and tag.endswith(f"/{kind}") and tag.count("/") <= 3}
        if final:
            report[f"final_{kind}"] = final
            label = "TrueSkill mu - 3 sigma" if kind == "rating" else "Elo"
            print(f"final {label}: " + ", ".join(f"{t}={v:.2f}" for t, v in sorted(final.items())))
    with open(os.path.join(root, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    print(f"report: {os.path.join(root, 'report.json')}")


if __name__ == "__main__":
    main()
