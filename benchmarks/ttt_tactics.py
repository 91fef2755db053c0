"""Where a Tic-Tac-Toe policy loses its games: one-move tactics, measured position by position.

    python benchmarks/ttt_tactics.py --config configs/tictactoe_league_tiny.yaml \
        --checkpoint runs/tictactoe_league_tiny/checkpoints/best.ckpt --positions 3000 --seed 7

A win rate against RandomBot says how strong a policy is. It does not say what it lacks. This
script plays uniformly random games, and for each position it compares the policy's greedy move
(the most likely legal move, as ``evaluate`` plays it at temperature 0) with three things:

- **win taken**: where the mover has a move that wins at once, the share of positions where the
  policy plays one;
- **block**: where there is no such win and the opponent threatens one, the share of positions
  where the policy blocks it;
- **best vs random**: the share of all positions where the policy's move is among the best
  against a uniformly random opponent. "Best" is by exact expected payoff, computed by searching
  every continuation.

Each share is printed with its 95% Wilson interval. The policy reads each position's prompt
exactly as training renders it (the config's env settings and prompt template).
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def winner(board: tuple[int, ...]) -> int:
    for a, b, c in LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return board[a]
    return 0


@functools.lru_cache(maxsize=None)
def value_vs_random(board: tuple[int, ...], me: int, to_move: int) -> float:
    """Expected payoff for ``me`` (1 or 2) playing best against a uniformly random opponent."""
    won = winner(board)
    if won:
        return 1.0 if won == me else -1.0
    empty = [i for i in range(9) if not board[i]]
    if not empty:
        return 0.0
    values = [value_vs_random(board[:i] + (to_move,) + board[i + 1:], me, 3 - to_move) for i in empty]
    return max(values) if to_move == me else sum(values) / len(values)


def immediate_wins(board: tuple[int, ...], player: int) -> set[int]:
    return {i for i in range(9) if not board[i] and winner(board[:i] + (player,) + board[i + 1:]) == player}


def best_moves(board: tuple[int, ...], me: int) -> set[int]:
    values = {i: value_vs_random(board[:i] + (me,) + board[i + 1:], me, 3 - me) for i in range(9) if not board[i]}
    top = max(values.values())
    return {i for i, v in values.items() if v >= top - 1e-9}


def random_positions(game, count: int, rng: random.Random):
    """(observation text, agent, board, mover, legal cells) of positions from uniformly random
    games of ``game`` (a GameSettings: its env settings, so its prompts)."""
    env = game.make_env()
    positions = []
    while len(positions) < count:
        env.reset(seed=rng.randrange(2**31))
        board = [0] * 9
        for agent in env.agent_iter(max_iter=20):
            observation, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            mover = 1 if agent == "player_0" else 2
            legal = [int(move.strip("[]")) for move in info["legal_actions"]]
            positions.append((observation["text"], agent, tuple(board), mover, legal))
            cell = rng.choice(legal)
            board[cell] = mover
            env.step(f"[{cell}]")
    return positions[:count]


def main() -> None:
    import torch

    from sp_lightning.cli import build_from_config, load_checkpoint
    from sp_lightning.evaluation.stats import wilson_interval
    from sp_lightning.rollout.chat import encode_chat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/tictactoe_league_tiny.yaml")
    parser.add_argument("--checkpoint", help="Lightning .ckpt or adapter dir; none: the untrained policy")
    parser.add_argument("--positions", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    module, dm = build_from_config("--config", args.config)
    (game,) = [g for g in dm.games if g.id == "tictactoe_v1"]
    if args.checkpoint:
        load_checkpoint(module, args.checkpoint)
    model, tokenizer = module.model.eval(), module.tokenizer
    move_ids = [tokenizer.convert_tokens_to_ids(f"[{i}]") for i in range(9)]
    counts = {"win taken": [0, 0], "block": [0, 0], "best vs random": [0, 0]}
    with torch.no_grad():
        for text, agent, board, mover, legal in random_positions(game, args.positions, random.Random(args.seed)):
            ids = encode_chat(tokenizer, game.prompt_template.messages(text, agent))
            logits = model(torch.tensor([ids])).logits[0, -1]
            move = max(legal, key=lambda cell: logits[move_ids[cell]].item())
            wins, threats = immediate_wins(board, mover), immediate_wins(board, 3 - mover)
            if wins:
                counts["win taken"][0] += move in wins
                counts["win taken"][1] += 1
            elif threats:
                counts["block"][0] += move in threats
                counts["block"][1] += 1
            counts["best vs random"][0] += move in best_moves(board, mover)
            counts["best vs random"][1] += 1
    print(f"{args.checkpoint or 'untrained'} ({args.config}), {args.positions} positions from random play, "
          f"seed {args.seed}:")
    for name, (hits, total) in counts.items():
        low, high = wilson_interval(hits, total)
        print(f"  {name:15s} {hits / max(total, 1):.3f} [{low:.3f}, {high:.3f}]  ({hits}/{total})")


if __name__ == "__main__":
    main()
