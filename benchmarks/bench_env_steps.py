"""Env steps per second of every game with bots (suite row 1).

Each game is played by RandomBots in every seat through ``envs.play`` (reset, ``last``, text
observation, ``step`` with a move's text: what the arena does per turn, without a model), for
``--seconds`` per game. Steps are the AEC steps, the terminal ones included.

The baseline, measured in the same run: the raw PettingZoo classic env behind each of our
``pettingzoo:`` adapters, stepped with uniformly random legal action ids from its action mask.
The ratio says what the text layer costs (rendering a text observation, legal moves as text,
parsing the move back) on top of the env it wraps. Our hand-written games have no raw twin.

    python benchmarks/bench_env_steps.py                 # ~1 min
    python benchmarks/bench_env_steps.py --seconds 5 --games tictactoe_v1 pettingzoo:tictactoe_v3
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import time

import numpy as np

from envs import GAMES, RandomBot, make, play

ADAPTED = ["pettingzoo:tictactoe_v3", "pettingzoo:connect_four_v3", "textarena:KuhnPoker-v0"]
RAW_CLASSIC = {"pettingzoo:tictactoe_v3": "pettingzoo.classic.tictactoe_v3",
               "pettingzoo:connect_four_v3": "pettingzoo.classic.connect_four_v3"}


class CountingBot(RandomBot):
    """RandomBot that counts its moves (the env's own step count is not public)."""

    moves = 0

    def act(self, observation, legal_actions):
        CountingBot.moves += 1
        return super().act(observation, legal_actions)


def text_steps_per_second(game_id: str, seconds: float, seed: int = 0) -> tuple[float, float]:
    """(AEC steps/s, games/s) of RandomBots playing ``game_id`` for about ``seconds``."""
    env = make(game_id)
    rng = random.Random(seed)
    bots = {agent: CountingBot(seed=rng.randrange(2**31)) for agent in env.possible_agents}
    policies = {agent: bot.act for agent, bot in bots.items()}
    CountingBot.moves, games, terminal_steps = 0, 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        play(env, policies, seed=rng.randrange(2**31))
        games += 1
        terminal_steps += len(env.possible_agents)  # each seat steps once with None at the end
    elapsed = time.perf_counter() - start
    return (CountingBot.moves + terminal_steps) / elapsed, games / elapsed


def raw_steps_per_second(module_path: str, seconds: float, seed: int = 0) -> tuple[float, float]:
    """The raw PettingZoo env, random legal action ids from its action mask (picked with
    Python's ``random``: numpy's ``choice`` costs ~6 us a call, a tenth of a raw step)."""
    env = importlib.import_module(module_path).env()
    rng = random.Random(seed)
    steps, games = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.reset(seed=rng.randrange(2**31))
        for agent in env.agent_iter():
            observation, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
            else:
                env.step(rng.choice(np.flatnonzero(observation["action_mask"]).tolist()))
            steps += 1
        games += 1
    elapsed = time.perf_counter() - start
    return steps / elapsed, games / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="play time per game and repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--games", nargs="*", default=[*GAMES, *ADAPTED])
    opts = parser.parse_args()
    print(f"RandomBots in every seat, {opts.seconds:g} s per game and repeat, median of {opts.repeats}")
    print(f"{'game':<30}{'steps/s':>10}{'games/s':>10}{'raw PettingZoo steps/s':>24}{'ours / raw':>12}")
    for game_id in opts.games:
        try:
            ours = [text_steps_per_second(game_id, opts.seconds, seed=k) for k in range(opts.repeats)]
        except ImportError as e:  # an adapter's optional package is missing
            print(f"{game_id:<30}  skipped: {e}")
            continue
        steps, games = statistics.median(s for s, _ in ours), statistics.median(g for _, g in ours)
        line = f"{game_id:<30}{steps:>10.0f}{games:>10.0f}"
        if game_id in RAW_CLASSIC:
            raw = statistics.median(raw_steps_per_second(RAW_CLASSIC[game_id], opts.seconds, seed=k)[0]
                                    for k in range(opts.repeats))
            line += f"{raw:>24.0f}{steps / raw:>12.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
