"""Do both learners of the proposer/solver recipe improve? Each measured against a fixed reference.

``configs/proposer_solver_two_learners_tiny.yaml`` trains two LoRA adapters of one tiny model at
once: ``proposer`` writes a question (``[d]``: pick the largest of d + 1 numbers) and ``solver``
answers it. Their rewards depend on each other (the proposer is paid for questions the solver
passes half the time), so a training curve cannot say whether either got better. This fits the
recipe on each seed and then measures, on seeds no training saw, at the last checkpoint and for
the untrained policy (the same base model, fresh adapters):

- **the proposer** with a fixed solver: the scripted ``bot:largest_solver`` (each comparison right
  with probability 0.85) answers its questions, 4 times each; the proposer's mean reward
  (1 - 2|pass rate - 0.5|, -1 for no question) over ``--episodes`` proposals, and the mean
  number of terms it asks for;
- **the solver** on a fixed question set: ``--episodes`` questions, lengths 1 to 9 in turn,
  numbers drawn as the task draws them (a window of five within 0-8) from the evaluation seed;
  its accuracy (Wilson interval), beside the best constant answer's (a solver that ignores the
  question).

Both play as training plays them (sampled at temperature 1).

    python benchmarks/proposer_solver_check.py                 # seeds 0 1 2, ~15 min on 2 cores
    python benchmarks/proposer_solver_check.py --seeds 0 --episodes 200 --fit_flags --trainer.max_steps 5
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CLI = [sys.executable, "-m", "sp_lightning.cli"]
CONFIG = os.path.join(ROOT, "configs", "proposer_solver_two_learners_tiny.yaml")
EVAL_SEED = 20261121  # never a training seed


def measure(checkpoint: str | None, episodes: int) -> dict:
    """The proposer's reward with the scripted solver and the solver's accuracy, for the policy
    at ``checkpoint`` (None: untrained)."""
    from sp_lightning import build_from_config
    from sp_lightning.episodes import SingleTurnEpisode
    from sp_lightning.evaluation.stats import bootstrap_mean_interval, wilson_interval
    from sp_lightning.protocols.proposer_solver import SOLVER, ProposerEpisode, answered_correctly
    from sp_lightning.rubric import Rubric
    from sp_lightning.types import LEARNER, parse_policy

    module, datamodule = build_from_config("--config", CONFIG)
    if checkpoint:
        module.load_policy_weights(checkpoint)
    engine = datamodule.build_engine(module)
    engine.start()
    try:
        source = engine.arena.source
        fixed = ProposerEpisode(source.episode.solvers, source.episode.target, parse_policy("bot:largest_solver"),
                                solver_trains=False, task="largest")
        seeds = [EVAL_SEED + i for i in range(episodes)]
        proposals = engine.arena.play([fixed] * episodes, seeds, trainable=[False] * episodes)
        rewards = [r.rewards["proposer"] for r in proposals]
        terms = [r.metrics.get("terms", 0.0) for r in proposals]

        rng = random.Random(EVAL_SEED)
        rubric = Rubric(outcome=[(answered_correctly, 1.0)])
        questions = []
        for i in range(episodes):
            low = rng.randint(0, 4)  # as the task draws them: a window of five within 0-8
            text, answer = fixed.question_text([rng.randint(low, low + 4) for _ in range(i % 9 + 1)])
            questions.append(SingleTurnEpisode(name="solver", messages=[{"role": "user", "content": text}],
                                               rubric=rubric, role=SOLVER, policy=LEARNER, extras={"answer": answer}))
        answers = engine.arena.play(questions, seeds, trainable=[False] * episodes)
        correct = [r.rewards[SOLVER] for r in answers]
        targets = [q.extras["answer"] for q in questions]
    finally:
        engine.close()
    _, (low, high) = bootstrap_mean_interval(rewards)
    right = int(sum(correct))
    return {"proposer_reward": sum(rewards) / len(rewards), "proposer_ci": [low, high],
            "proposer_terms": sum(terms) / len(terms), "invalid_questions": sum(t == 0 for t in terms) / len(terms),
            "solver_accuracy": right / len(correct), "solver_ci": list(wilson_interval(right, len(correct))),
            # a solver that ignores the question: the best single answer's accuracy on these questions
            "best_constant_accuracy": max(targets.count(n) for n in range(9)) / len(targets),
            "episodes": episodes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(ROOT, "runs", "proposer_solver_check"), type=os.path.abspath)
    parser.add_argument("--fit_flags", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    untrained = measure(None, args.episodes)
    print("untrained:", json.dumps(untrained), flush=True)
    rows = []
    for seed in args.seeds:
        work = os.path.join(args.out, f"seed{seed}")
        os.makedirs(work, exist_ok=True)
        start = time.time()
        with open(os.path.join(work, "fit.log"), "w") as log:
            subprocess.run([*CLI, "fit", "--config", CONFIG, "--seed_everything", str(seed),
                            "--trainer.enable_progress_bar", "false", *args.fit_flags],
                           cwd=work, stdout=log, stderr=subprocess.STDOUT, check=True)
        fit_seconds = time.time() - start
        (last,) = glob.glob(os.path.join(work, "runs", "*", "checkpoints", "last.ckpt"))
        rows.append({"seed": seed, "fit_seconds": round(fit_seconds, 1), **measure(last, args.episodes)})
        print(json.dumps(rows[-1]), flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"commit": sha, "eval_seed": EVAL_SEED, "untrained": untrained, "rows": rows}, f, indent=1)
    print(f"\nCommit {sha}; {os.path.relpath(CONFIG, ROOT)}, last checkpoint; {args.episodes} proposals (answered "
          f"4 times each by bot:largest_solver) and {args.episodes} questions (lengths 1-9) on seed {EVAL_SEED}, "
          f"sampled; 95% intervals. The best constant answer passes {untrained['best_constant_accuracy']:.3f} of "
          "these questions.\n")
    print("| seed | fit | proposer's reward with the fixed solver | terms asked | no question | "
          "solver's accuracy on the fixed questions |")
    print("|---|---|---|---|---|---|")
    for label, r in [("untrained", {**untrained, "fit_seconds": 0})] + [(str(r["seed"]), r) for r in rows]:
        print(f"| {label} | {r['fit_seconds'] / 60:.1f} min | {r['proposer_reward']:+.3f} [{r['proposer_ci'][0]:+.3f}, "
              f"{r['proposer_ci'][1]:+.3f}] | {r['proposer_terms']:.2f} | {r['invalid_questions']:.3f} | "
              f"{r['solver_accuracy']:.3f} [{r['solver_ci'][0]:.3f}, {r['solver_ci'][1]:.3f}] |")


if __name__ == "__main__":
    main()
