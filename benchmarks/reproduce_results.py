"""Reproduce every learning figure that docs/results.md and the README quote.

For each shipped recipe and each training seed: ``sp-lightning fit`` alone (in a directory of its
own, so the config's ``runs/...`` paths land there), then ``sp-lightning evaluate`` of the checkpoint
the config's own rule chose (``best.ckpt``), 1000 games per seat on an evaluation seed that no
validation saw, played the way the config's ``data.eval`` plays (greedy or sampled), against each
yardstick; for Kuhn Poker also the learner's exact exploitability at that checkpoint and the mean of
the validated exploitabilities over the last quarter of the run (the last iterates, not only the
best one), read from the run's TensorBoard events.

    python benchmarks/reproduce_results.py                      # every recipe, seeds 0 1 2 (hours)
    python benchmarks/reproduce_results.py --recipes tictactoe_tiny --seeds 0 --out /tmp/r

Prints one Markdown table per recipe (with the commit, seeds and games) and writes
``results-<seeds>.json`` beside the runs (one process per seed can share ``--out``: the figures
that do not depend on the training seed are measured once). A fit is timed as it runs; on a shared machine, note the load.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import time

from pinned_recipes import KUHN_LEAGUE_RAE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = [sys.executable, "-m", "sp_lightning.cli"]
EVAL_SEED = 20261121  # never a validation seed (those are data.eval.seed, 12345 by default)

# recipe -> (config, yardsticks evaluated with --opponent, whether exploitability is exact, bars)
RECIPES = {
    "tictactoe_tiny": {
        "config": "configs/tictactoe_tiny.yaml",
        "opponents": ["bot:random", "bot:tictactoe_perfect"],
        "game": "tictactoe_v1",
        "bars": "fit <= 15 min; >= 0.85 wins vs bot:random with >= 99.5% legal moves; >= 60% draws vs the perfect player",
    },
    "kuhn_poker_league_tiny": {
        "config": "configs/kuhn_poker_league_tiny.yaml",
        "opponents": ["bot:random"],
        "game": "kuhn_poker_v1",
        "exploitability": "val/kuhn_poker_v1/exploitability",
        "bars": "exploitability <= 0.05 at the result checkpoint and <= 0.08 averaged over the last quarter",
    },
    # the league recipe starting from an equilibrium player's games, then held near that policy
    "kuhn_poker_league_tiny_warm_start": {
        "config": "configs/kuhn_poker_league_tiny.yaml",
        "overlays": ["configs/overlays/kuhn_poker_warm_start.yaml"],
        "opponents": ["bot:random", "bot:kuhn_poker_nash"],
        "game": "kuhn_poker_v1",
        "exploitability": "val/kuhn_poker_v1/exploitability",
        "warm_start": True,
        "bars": "exploitability <= 0.04 at the result checkpoint and <= 0.05 averaged over the last quarter",
    },
    # the league recipe with an average policy (sp_lightning.imitation) beside the learner: the
    # result is the average's checkpoint with the lowest exploitability, and the average plays
    "kuhn_poker_average_tiny": {
        "config": "configs/kuhn_poker_average_tiny.yaml",
        "opponents": ["bot:random", "bot:kuhn_poker_nash"],
        "game": "kuhn_poker_v1",
        "learner": "average",
        "exploitability": "val/kuhn_poker_v1/average/exploitability",
        "bars": "exploitability <= 0.04 at the result checkpoint and <= 0.05 averaged over the last quarter",
    },
    # SPIRAL's comparison: supervised fine-tuning on an expert's games against self-play from the
    # same start, as many games and steps (400 x 128); the result by kuhn_poker_tiny's own rule
    "kuhn_poker_tiny_sft": {
        "config": "configs/kuhn_poker_tiny.yaml",
        "overlays": ["configs/overlays/kuhn_poker_sft.yaml"],
        "opponents": ["bot:random", "bot:kuhn_poker_nash"],
        "game": "kuhn_poker_v1",
        "exploitability": "val/kuhn_poker_v1/exploitability",
        "bars": "the comparison with kuhn_poker_tiny_selfplay (same seeds, steps and games)",
    },
    "kuhn_poker_tiny_selfplay": {
        "config": "configs/kuhn_poker_tiny.yaml",
        "fit_flags": ["--trainer.val_check_interval", "25", "--data.eval.exploitability", "true"],
        "opponents": ["bot:random", "bot:kuhn_poker_nash"],
        "game": "kuhn_poker_v1",
        "exploitability": "val/kuhn_poker_v1/exploitability",
        "bars": "the comparison with kuhn_poker_tiny_sft",
    },
    "tictactoe_tiny_sft": {
        "config": "configs/tictactoe_tiny.yaml",
        "overlays": ["configs/overlays/tictactoe_warm_start.yaml"],
        "fit_flags": ["--data.warm_start.steps", "400"],
        "opponents": ["bot:random", "bot:tictactoe_perfect"],
        "game": "tictactoe_v1",
        "bars": "the comparison with tictactoe_tiny (same seeds, steps and games)",
    },
    "tictactoe_tiny_warm_start": {
        "config": "configs/tictactoe_tiny.yaml",
        "overlays": ["configs/overlays/tictactoe_warm_start.yaml"],
        "opponents": ["bot:random", "bot:tictactoe_perfect"],
        "game": "tictactoe_v1",
        "warm_start": True,
        "bars": ">= 0.90 wins vs bot:random, every move legal, >= 90% draws vs the perfect player; self-play "
                "closes at least half the warm start's gap to 100% draws",
    },
    # the recipe it replaced (2026-11-27): outcome credit (RAE) and the baselines in the training mix
    "kuhn_poker_league_tiny_rae": {
        "config": "configs/kuhn_poker_league_tiny.yaml",
        "fit_flags": KUHN_LEAGUE_RAE,
        "opponents": ["bot:random"],
        "game": "kuhn_poker_v1",
        "exploitability": "val/kuhn_poker_v1/exploitability",
        "bars": "the comparison for kuhn_poker_league_tiny (same seeds, same machine)",
    },
    # the same league on 2 DDP ranks (gloo) with the same total episodes per step (64 per rank):
    # its exploitability should sit within the one-rank runs' seed-to-seed spread
    "kuhn_poker_league_tiny_ddp2": {
        "config": "configs/kuhn_poker_league_tiny.yaml",
        "fit_flags": ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.strategy", "ddp",
                      "--data.episodes_per_batch", "64", *KUHN_LEAGUE_RAE],  # measured on the recipe before GAE
        "opponents": ["bot:random"],
        "game": "kuhn_poker_v1",
        "exploitability": "val/kuhn_poker_v1/exploitability",
        "bars": "within the one-rank runs' spread (2 ranks x 64 episodes against 1 rank x 128)",
    },
    # two learners, one per seat (model.learners): each seat's payoff is its learner's, against
    # RandomBot, at the end of the run and untrained, 2000 games in its seat
    "kuhn_poker_two_learners_tiny": {
        "config": "configs/kuhn_poker_two_learners_tiny.yaml",
        "opponents": ["bot:random"],
        "game": "kuhn_poker_v1",
        "checkpoint": "last",
        "games_per_seat": 2000,
        "per_seat": {"player_0": "first", "player_1": "second"},
        "bars": "each learner's payoff in its seat above its untrained payoff, intervals apart",
    },
    # a seller and a buyer (model.learners), each against the scripted bot:bargainer in its seat
    "bargaining_two_learners_tiny": {
        "config": "configs/bargaining_two_learners_tiny.yaml",
        "opponents": ["bot:bargainer"],
        "game": "bargaining_v1",
        "checkpoint": "last",
        "games_per_seat": 2000,
        "per_seat": {"player_0": "seller", "player_1": "buyer"},
        "bars": "each learner's payoff in its seat above its untrained payoff, intervals apart",
    },
    # AlphaStar's main exploiter as the strength measure where no exact one exists: the league
    # recipe with configs/overlays/exploiters.yaml; league/exploitability_estimate is the
    # exploiter's moving payoff against the main agent (read from the run's TensorBoard events)
    "liars_dice_league_tiny_exploiters": {
        "config": "configs/liars_dice_league_tiny.yaml",
        "overlays": ["configs/overlays/exploiters.yaml"],
        "opponents": ["bot:random"],
        "game": "liars_dice_v1",
        "estimate": "league/exploitability_estimate",
        "bars": "none (what the estimate reads)",
    },
    # ... and on Tic-Tac-Toe, with the main agent's exact exploitability (an expectimax best
    # response) logged beside the estimate every 50 steps
    "tictactoe_league_tiny_exploiters": {
        "config": "configs/tictactoe_league_tiny.yaml",
        "overlays": ["configs/overlays/exploiters.yaml"],
        "fit_flags": ["--data.league.exploitability_every", "50"],
        "opponents": ["bot:random", "bot:tictactoe_perfect"],
        "game": "tictactoe_v1",
        "estimate": "league/exploitability_estimate",
        "exact": "league/exploitability/learner",
        "bars": "none (what the estimate reads)",
    },
    # the Tic-Tac-Toe league as shipped, its exact exploitability logged every 50 steps: what the
    # best-response recipe below is compared with
    "tictactoe_league_tiny": {
        "config": "configs/tictactoe_league_tiny.yaml",
        "fit_flags": ["--data.league.exploitability_every", "50"],
        "opponents": ["bot:random", "bot:tictactoe_perfect"],
        "game": "tictactoe_v1",
        "exact": "league/exploitability/learner",
        "bars": "none (the comparison for the best-response recipe)",
    },
    # the exact best response to the learner joins the league every 50 steps
    # (configs/overlays/best_responses.yaml); the exact exploitability is logged at the same steps
    "kuhn_poker_league_tiny_best_responses": {
        "config": "configs/kuhn_poker_league_tiny.yaml",
        "overlays": ["configs/overlays/best_responses.yaml"],
        "fit_flags": KUHN_LEAGUE_RAE,  # measured on the recipe before GAE
        "opponents": ["bot:random"],
        "game": "kuhn_poker_v1",
        "exploitability": "val/kuhn_poker_v1/exploitability",
        "bars": "exploitability <= 0.05 at the result checkpoint and <= 0.08 averaged over the last quarter",
    },
    "tictactoe_league_tiny_best_responses": {
        "config": "configs/tictactoe_league_tiny.yaml",
        "overlays": ["configs/overlays/best_responses.yaml"],
        "opponents": ["bot:random", "bot:tictactoe_perfect"],
        "game": "tictactoe_v1",
        "exact": "league/exploitability/learner",
        "bars": ">= 0.85 wins vs bot:random; >= 60% draws vs the perfect player",
    },
    # seven-power Diplomacy: the learner as one power (each in turn) against six planners and
    # against six random powers, beside the untrained policy and the planner itself in the same
    # seats; the run's last checkpoint (no selection); 286 games per seat = 2002 games
    "diplomacy_league_tiny": {
        "config": "configs/diplomacy_league_tiny.yaml",
        "opponents": ["bot:diplomacy_planner", "bot:random"],
        "game": "diplomacy_v1",
        "checkpoint": "last",
        "games_per_seat": 286,
        "untrained": True,
        "players": ["bot:diplomacy_planner"],
        "scores": ["centres"],
        "league": "runs/diplomacy_league_tiny/league/league.json",
        "bars": "fit <= 20 min; the trained hero's mean centres above the untrained policy's, intervals apart",
    },
    "diplomacy_league_tiny_warm_start": {  # the same league, the hero first imitating the planner
        "config": "configs/diplomacy_league_tiny.yaml",
        "overlays": ["configs/overlays/diplomacy_warm_start.yaml"],
        "opponents": ["bot:diplomacy_planner", "bot:random"],
        "game": "diplomacy_v1",
        "checkpoint": "last",
        "games_per_seat": 286,
        "untrained": True,
        "warm_start": True,
        "players": ["bot:diplomacy_planner"],
        "scores": ["centres"],
        "league": "runs/diplomacy_league_tiny/league/league.json",
        "bars": "fit <= 20 min; the trained hero's mean centres above the untrained policy's and the warm start's",
    },
}
CHECKS = {  # --recipes names that run a benchmark of their own, once: (script, its flags, takes --out)
    "exploiter_check": ("exploiter_check.py", ["--game", "kuhn_poker"], True),
    "exploiter_check_tictactoe": ("exploiter_check.py", ["--game", "tictactoe"], True),
    "proposer_solver_check": ("proposer_solver_check.py", [], True),  # seeds 0 1 2
    "bargaining_reference": ("bargaining_reference.py", [], False),
}


def commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("+uncommitted" if dirty else "")
    except OSError:
        return "unknown"


def scalars(run_dir: str, tag: str) -> list[tuple[int, float]]:
    """(step, value) of a scalar from every TensorBoard event file under ``run_dir``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points = {}
    for path in glob.glob(os.path.join(run_dir, "**", "events.out.tfevents.*"), recursive=True):
        events = EventAccumulator(path, size_guidance={"scalars": 0})
        events.Reload()
        if tag in events.Tags().get("scalars", []):
            points.update({e.step: e.value for e in events.Scalars(tag)})
    return sorted(points.items())


def last_quarter_mean(curve: list[tuple[int, float]]) -> float:
    """Mean of a curve's points in the last quarter of the run (its steps from 3/4 of the last)."""
    last_step = max(step for step, _ in curve)
    quarter = [v for step, v in curve if step >= 0.75 * last_step]
    return sum(quarter) / len(quarter)


def policy_flags(fit_flags: list[str]) -> list[str]:
    """The ``--model.policy...`` flags among ``fit_flags`` (``--key value`` or ``--key=value``):
    they change the model a checkpoint belongs to, so every evaluation of the run passes them too
    (a checkpoint of another model is refused)."""
    found = []
    for k, flag in enumerate(fit_flags):
        if flag.startswith("--model.policy"):
            takes_value = "=" not in flag and k + 1 < len(fit_flags) and not fit_flags[k + 1].startswith("--")
            found += [flag, fit_flags[k + 1]] if takes_value else [flag]
    return found


def run_recipe(name: str, spec: dict, seed: int, out: str, games_per_seat: int, threads: int,
               fit_flags: list[str]) -> dict:
    work = os.path.join(out, name, f"seed{seed}")
    os.makedirs(work, exist_ok=True)
    config = os.path.join(ROOT, spec["config"])
    configs = [flag for overlay in spec.get("overlays", []) for flag in ("--config", os.path.join(ROOT, overlay))]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.time()
    with open(os.path.join(work, "fit.log"), "w") as log:
        subprocess.run([*CLI, "fit", "--config", config, *configs, "--seed_everything", str(seed),
                        "--trainer.enable_progress_bar", "false", *spec.get("fit_flags", []), *fit_flags],
                       cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    fit_seconds = time.time() - start
    kept = spec.get("checkpoint", "best")
    best = glob.glob(os.path.join(work, "runs", "*", "checkpoints", f"{kept}.ckpt"))
    if not best:
        raise RuntimeError(f"{name} seed {seed}: no {kept}.ckpt under {work}/runs (see {work}/fit.log)")
    import torch

    games_per_seat = games_per_seat or spec.get("games_per_seat", 1000)  # the flag wins (a smoke run)
    model_flags = policy_flags(fit_flags)  # the model the fit built is the one its checkpoints fit
    chosen_at = torch.load(best[0], map_location="cpu", weights_only=False)["global_step"]
    result = {"recipe": name, "seed": seed, "fit_seconds": round(fit_seconds, 1), "result_step": chosen_at,
              "eval_seed": EVAL_SEED, "games_per_seat": games_per_seat, "against": {}}
    # with per-seat learners, the untrained policy is the baseline each learner improves on; a
    # yardstick bot played in the same seats (``players``) gives the figures beside them
    untrained = spec.get("per_seat") or spec.get("untrained")
    checkpoints = {"": best[0], "untrained": None} if untrained else {"": best[0]}
    if spec.get("warm_start"):  # the policy the warm start handed to self-play, evaluated alike
        warm = glob.glob(os.path.join(work, "runs", "*", "checkpoints", "warm_start.ckpt"))
        if not warm:
            raise RuntimeError(f"{name} seed {seed}: no warm_start.ckpt under {work}/runs")
        checkpoints["warm_start"] = warm[0]
    checkpoints.update({player: player for player in spec.get("players", [])})
    for label, checkpoint in checkpoints.items():
        for opponent in spec["opponents"]:
            name_of = f"eval-{label.replace(':', '_')}{opponent.replace(':', '_')}"
            path = os.path.join(work, f"{name_of}.json")
            shared_figure = label and label != "warm_start"
            if shared_figure:  # the untrained policy (the config's own seed) and a bot: the same games for every seed
                # another model's figures kept apart: the flags' digest in the name
                variant = "-" + hashlib.sha1(" ".join(model_flags).encode()).hexdigest()[:8] if model_flags else ""
                shared = os.path.join(os.path.dirname(work), "shared",
                                      f"{name_of}-{games_per_seat}x{EVAL_SEED}{variant}.json")
                path = shared
            exact = spec.get("exploitability") or spec.get("exact")
            flags = (["--exploitability", "true"] if exact and opponent == spec["opponents"][0]
                     and label in ("", "warm_start") else [])
            if spec.get("learner") and label in ("", "warm_start"):  # the result policy among the run's learners
                flags += ["--learner", spec["learner"]]
            if label in spec.get("players", []):
                flags += ["--player", checkpoint]
            elif checkpoint:
                flags += ["--checkpoint", checkpoint]
            if shared_figure:  # measured once: by the first process to claim it, if several run
                os.makedirs(os.path.dirname(path), exist_ok=True)
                try:
                    os.close(os.open(path + ".claimed", os.O_CREAT | os.O_EXCL))
                    measure = True
                except FileExistsError:
                    measure = False
            else:
                measure = True
            if measure:
                subprocess.run([*CLI, "evaluate", "--config", config, *configs, "--opponent", opponent,
                                "--games_per_seat", str(games_per_seat), "--seed", str(EVAL_SEED),
                                "--held_out", "false",  # the recipe's figures are the trained game's
                                "--output", path + ".partial", *model_flags, *flags], cwd=work, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=True)
                os.replace(path + ".partial", path)
            while not os.path.exists(path):  # another process measures it
                time.sleep(5)
            with open(path) as f:
                metrics = json.load(f)[spec["game"]]
            game = spec["game"]
            figures = {k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith(game + "/")}
            figures["games"] = metrics["games"]
            result["against" if not label else label + "_against"] = {
                **result.get("against" if not label else label + "_against", {}), opponent: figures}
    runs = os.path.join(work, "runs")
    if spec.get("league"):  # the league's ratings at the end of the run
        with open(os.path.join(work, spec["league"])) as f:
            agents = json.load(f)["agents"]
        result["league_ratings"] = {a: {"elo": round(r["elo"], 1), "mu": round(r["mu"], 2), "sigma": round(r["sigma"], 2)}
                                    for a, r in sorted(agents.items(), key=lambda item: -item[1]["elo"])}
    if spec.get("exploitability"):
        result["exploitability_curve"] = curve = scalars(runs, spec["exploitability"])
        result["exploitability_last_quarter_mean"] = last_quarter_mean(curve)
        result["exploitability_at_result"] = result["against"][spec["opponents"][0]]["exploitability"]
    if spec.get("estimate"):
        result["estimate_curve"] = curve = scalars(runs, spec["estimate"])
        result["estimate_last"] = curve[-1][1]
        result["estimate_last_quarter_mean"] = last_quarter_mean(curve)
        for tag in ("successes", "resets"):
            points = scalars(runs, f"league/exploiter/main/{tag}")
            result[f"exploiter_{tag}"] = points[-1][1] if points else 0
    if spec.get("exact"):  # the league's exact readings of the learner during the run
        result["exact_curve"] = curve = scalars(runs, spec["exact"])
        result["exact_last"] = curve[-1][1]
        result["exact_last_quarter_mean"] = last_quarter_mean(curve)
        result["exact_at_result"] = result["against"][spec["opponents"][0]]["exploitability"]
    return result


def table(name: str, spec: dict, results: list[dict], sha: str) -> str:
    games = results[0]["against"][spec["opponents"][0]]["games"] if results else 0  # every seat's
    overlays = " ".join(f"+ `{o}`" for o in spec.get("overlays", []))
    lines = [f"### `{spec['config']}` {overlays} {' '.join(spec.get('fit_flags', []))}", "",
             f"Commit {sha}; training seeds {', '.join(str(r['seed']) for r in results)}; {games} games per "
             f"yardstick on evaluation seed {EVAL_SEED}, played as `data.eval` plays; 95% intervals. Bars: {spec['bars']}.", ""]
    head = "| seed | fit | result step |"
    rule = "|---|---|---|"
    for opponent in spec["opponents"]:
        head += f" wins vs {opponent} | draws vs {opponent} | legal moves |"
        rule += "---|---|---|"
    if spec.get("warm_start"):
        for opponent in spec["opponents"]:
            head += f" warm start: wins vs {opponent} | draws |"
            rule += "---|---|"
    if spec.get("exploitability"):
        head += " exploitability at result | mean over last quarter |"
        rule += "---|---|"
    if spec.get("estimate"):
        head += " exploitability estimate, last | mean over last quarter | exploiter successes | resets |"
        rule += "---|---|---|---|"
    if spec.get("exact"):
        head += " exact exploitability at result | last | mean over last quarter |"
        rule += "---|---|---|"
    if spec.get("per_seat"):
        for seat, learner in spec["per_seat"].items():
            head += f" {learner} ({seat}) payoff vs {spec['opponents'][0]} | untrained |"
            rule += "---|---|"
    if spec.get("scores"):
        labels = ["trained", *(["untrained"] if spec.get("untrained") else []), *spec.get("players", [])]
        head += "".join(f" {key} ({label}) vs {opponent} |" for opponent in spec["opponents"]
                        for label in labels for key in spec["scores"])
        rule += "---|" * (len(spec["opponents"]) * len(labels) * len(spec["scores"]))
    lines += [head, rule]
    for r in results:
        row = f"| {r['seed']} | {r['fit_seconds'] / 60:.1f} min | {r['result_step']} |"
        for opponent in spec["opponents"]:
            m = r["against"][opponent]
            row += (f" {m['win_rate']:.3f} [{m['win_rate_ci_low']:.3f}, {m['win_rate_ci_high']:.3f}] |"
                    f" {m['draw_rate']:.3f} | {m['legal_move_rate']:.3f} |")
        if spec.get("warm_start"):
            for opponent in spec["opponents"]:
                m = r["warm_start_against"][opponent]
                row += f" {m['win_rate']:.3f} | {m['draw_rate']:.3f} |"
        if spec.get("exploitability"):
            row += f" {r['exploitability_at_result']:.3f} | {r['exploitability_last_quarter_mean']:.3f} |"
        if spec.get("estimate"):
            row += (f" {r['estimate_last']:+.3f} | {r['estimate_last_quarter_mean']:+.3f} |"
                    f" {r['exploiter_successes']:.0f} | {r['exploiter_resets']:.0f} |")
        if spec.get("exact"):
            row += f" {r['exact_at_result']:.3f} | {r['exact_last']:.3f} | {r['exact_last_quarter_mean']:.3f} |"
        if spec.get("scores"):
            runs = {"trained": "against", "untrained": "untrained_against",
                    **{player: player + "_against" for player in spec.get("players", [])}}
            labels = ["trained", *(["untrained"] if spec.get("untrained") else []), *spec.get("players", [])]
            for opponent in spec["opponents"]:
                for label in labels:
                    for key in spec["scores"]:
                        m = r[runs[label]][opponent]
                        row += f" {m[key]:.2f} [{m[key + '_ci_low']:.2f}, {m[key + '_ci_high']:.2f}] |"
        for seat in spec.get("per_seat", {}):
            for m in (r["against"][spec["opponents"][0]], r["untrained_against"][spec["opponents"][0]]):
                row += (f" {m[f'payoff_{seat}']:+.3f} [{m[f'payoff_{seat}_ci_low']:+.3f}, "
                        f"{m[f'payoff_{seat}_ci_high']:+.3f}] |")
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", nargs="+", default=[*RECIPES, *CHECKS], choices=[*RECIPES, *CHECKS],
                        help="besides the recipes: exploiter_check[_tictactoe] (benchmarks/exploiter_check.py: a "
                             "learned exploiter against a league's agents beside their exact exploitability), "
                             "proposer_solver_check, bargaining_reference; each once")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--games_per_seat", type=int, default=None,
                        help="games per seat of every evaluation (default: the recipe's, else 1000)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "reproduce"), type=os.path.abspath)
    parser.add_argument("--fit_flags", nargs=argparse.REMAINDER, default=[],
                        help="appended to every fit (a smoke run: --fit_flags --trainer.max_steps 4 ...)")
    args = parser.parse_args()
    sha = commit()
    everything = {"commit": sha, "results": []}
    for name in args.recipes:
        if name in CHECKS:
            script, flags, takes_out = CHECKS[name]
            if takes_out:
                flags = [*flags, "--threads", str(args.threads), "--out", os.path.join(args.out, name)]
            subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *flags], check=True)
            continue
        results = []
        for seed in args.seeds:
            results.append(run_recipe(name, RECIPES[name], seed, args.out, args.games_per_seat, args.threads,
                                      args.fit_flags))
            everything["results"].append(results[-1])
            with open(os.path.join(args.out, f"results-{'-'.join(map(str, args.seeds))}.json"), "w") as f:
                json.dump(everything, f, indent=1)
            print(f"{name} seed {seed}: {json.dumps({k: v for k, v in results[-1].items() if not k.endswith('_curve')})}",
                  flush=True)
        print(table(name, RECIPES[name], results, sha), flush=True)


if __name__ == "__main__":
    main()
