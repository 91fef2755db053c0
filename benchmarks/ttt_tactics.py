"""Where a Tic-Tac-Toe policy loses its games: one-move tactics, measured position by position.

    python benchmarks/ttt_tactics.py --config configs/tictactoe_league_tiny.yaml \
        --checkpoint runs/tictactoe_league_tiny/checkpoints/best.ckpt --games 400 --seed 7

A win rate against RandomBot says how strong a policy is. It does not say what it lacks. This
script takes every position of ``--games`` RandomBot games (the imitation probe's ``positions``),
and compares the policy's greedy move there (the most likely legal move, as ``evaluate`` plays it
at temperature 0) with three things:

- **win taken**: where the mover has a move that wins at once, the share of positions where the
  policy plays one;
- **block**: where there is no such win and the opponent threatens one, the share of positions
  where the policy blocks it (these two are the imitation teacher's ``win`` / ``block`` labels);
- **best vs random**: the share of all positions where the policy's move is among the best
  against a uniformly random opponent. "Best" is by exact expected payoff, computed by searching
  every continuation.

Each share is printed with its 95% Wilson interval. The policy reads each position as training
renders it (the config's env settings and prompt template).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from envs.tictactoe import LINES, parse_board  # noqa: E402
from ttt_imitation_ceiling import positions, teacher  # noqa: E402

Board = tuple  # parse_board's cells as a tuple: None, 0 (X) or 1 (O)


def _won(board: Board, mark: int) -> bool:
    return any(all(board[i] == mark for i in line) for line in LINES)


@functools.lru_cache(maxsize=None)
def value_vs_random(board: Board, me: int, to_move: int) -> float:
    """Expected payoff for mark ``me`` playing best against a uniformly random opponent."""
    if _won(board, me) or _won(board, 1 - me):
        return 1.0 if _won(board, me) else -1.0
    empty = [i for i in range(9) if board[i] is None]
    if not empty:
        return 0.0
    values = [value_vs_random(board[:i] + (to_move,) + board[i + 1:], me, 1 - to_move) for i in empty]
    return max(values) if to_move == me else sum(values) / len(values)


def best_moves(board: Board, me: int) -> set[int]:
    values = {i: value_vs_random(board[:i] + (me,) + board[i + 1:], me, 1 - me)
              for i in range(9) if board[i] is None}
    top = max(values.values())
    return {i for i, v in values.items() if v >= top - 1e-9}


def main() -> None:
    import torch

    from sp_lightning import build_from_config
    from sp_lightning.evaluation.stats import wilson_interval
    from sp_lightning.rollout.chat import encode_chat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/tictactoe_league_tiny.yaml")
    parser.add_argument("--checkpoint", help="Lightning .ckpt or adapter dir; none: the untrained policy")
    parser.add_argument("--games", type=int, default=400, help="RandomBot games whose positions are judged")
    parser.add_argument("--seed", type=int, default=7, help="seed of the first game (and of RandomBot)")
    args = parser.parse_args()

    module, dm = build_from_config("--config", args.config)
    if args.checkpoint:
        module.load_policy_weights(args.checkpoint)
    (game,) = [g for g in dm.build_engine(module).games if g.id == "tictactoe_v1"]
    model, tokenizer = module.model.eval(), module.tokenizer
    move_ids = [tokenizer.convert_tokens_to_ids(f"[{i}]") for i in range(9)]
    counts = {"win taken": [0, 0], "block": [0, 0], "best vs random": [0, 0]}
    seen = positions(args.seed, args.games, env=game.make_env())
    with torch.no_grad():
        for agent, text in seen:
            board, me = parse_board(text)
            legal = [i for i in range(9) if board[i] is None]
            ids = encode_chat(tokenizer, game.prompt_template.messages(text, agent))
            logits = model(torch.tensor([ids])).logits[0, -1]
            move = max(legal, key=lambda cell: logits[move_ids[cell]].item())
            cells, kind = teacher(text)
            if kind in ("win", "block"):
                name = "win taken" if kind == "win" else "block"
                counts[name][0] += move in cells
                counts[name][1] += 1
            counts["best vs random"][0] += move in best_moves(tuple(board), me)
            counts["best vs random"][1] += 1
    print(f"{args.checkpoint or 'untrained'} ({args.config}), {len(seen)} positions of {args.games} RandomBot "
          f"games, seed {args.seed}:")
    for name, (hits, total) in counts.items():
        low, high = wilson_interval(hits, total)
        print(f"  {name:15s} {hits / max(total, 1):.3f} [{low:.3f}, {high:.3f}]  ({hits}/{total})")


if __name__ == "__main__":
    main()
