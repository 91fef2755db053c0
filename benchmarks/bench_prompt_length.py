"""Step time of the default Tic-Tac-Toe run with and without the "Legal moves:" line, measured in
the same run.

    python benchmarks/bench_prompt_length.py [--steps 30] [--repeats 2]

Tic-Tac-Toe shows every legal move on its board (an empty cell is its own move token), so
``env_kwargs: {list_legal_moves: false}`` drops a line that repeats it: 41 prompt tokens instead
of 58 on the tiny tokenizer. Each case runs ``configs/tictactoe_tiny.yaml`` (64 games a step,
half against RandomBot) for ``--steps`` steps in a fresh process, the cases alternating
``--repeats`` times, and reports the median of ``train/step_seconds`` (playing the batch + the
update) over every step after each run's first two. Baseline: the config as shipped (legal moves
listed). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from bench_shared_cpu import fit_step_seconds

GAME = {"id": "tictactoe_v1", "opponents": {"learner": 0.5, "bot:random": 0.5},
        "reward": {"outcome": "payoff", "invalid_move_penalty": 3.0}}
CASES = {
    "legal moves listed (baseline)": {"invalid_move": "random"},
    "list_legal_moves: false": {"invalid_move": "random", "list_legal_moves": False},
}


def first_prompt_tokens(env_kwargs: dict) -> int:
    """Prompt tokens of the first move (empty board) under the tiny tokenizer and the game's template."""
    from envs import make
    from sp_lightning.games import GameSettings
    from sp_lightning.model import TinyModelSettings, build_tiny_tokenizer
    from sp_lightning.rollout.chat import encode_chat

    env = make("tictactoe_v1", **env_kwargs)
    env.reset(seed=0)
    observation = env.observe(env.agent_selection)["text"]
    template = GameSettings(id="tictactoe_v1").prompt_template
    return len(encode_chat(build_tiny_tokenizer(TinyModelSettings()), template.messages(observation, env.agent_selection)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    env = dict(os.environ)
    steps: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.repeats):
        for name, env_kwargs in CASES.items():
            games = json.dumps([{**GAME, "env_kwargs": env_kwargs}])
            _, seconds = fit_step_seconds(args.steps, env, ("--data.games", games))
            steps[name] += seconds[2:]
    medians = {name: statistics.median(values) for name, values in steps.items()}
    for name, median in medians.items():
        print(f"{name:32s} median step {median:.3f} s over {len(steps[name])} steps, "
              f"{first_prompt_tokens(CASES[name])} prompt tokens at the first move")
    baseline, shorter = medians.values()
    print(f"list_legal_moves: false / baseline = {shorter / baseline:.2f}")


if __name__ == "__main__":
    main()
