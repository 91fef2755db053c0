"""Tic-Tac-Toe as a text game (``tictactoe_v1``).

Players: ``player_0`` plays X and moves first; ``player_1`` plays O.
Board: 3x3 cells numbered 0..8 row-major. An empty cell is shown as its own move token, so
a legal move is a token copied from the prompt. Observation of the agent to move::

    Tic-Tac-Toe. You are O.
    X [1] O
    [3] [4] [5]
    [6] X [8]
    Legal moves: [1] [3] [4] [5] [6] [8]

Every legal move is on the board, so ``list_legal_moves=False`` (see envs.base) loses nothing: the
last line is then ``Your move.``, and the prompt 17 tokens shorter on the tiny tokenizer.
The other agent sees the same board with ``Waiting for player 0.`` as the last line; after
the game the last line is ``Game over: you won (+1).`` (or lost / draw). There is no private
information.
Actions: free text; the move is the last ``[n]`` token (``envs.base.parse_move``), legal
when cell n is empty.
End and rewards: three in a row (row, column or diagonal) wins: +1 to the winner, -1 to the
loser; a full board without a line is a draw, 0 each. At most 9 moves.
Invalid moves: the env's ``invalid_move`` policy (forfeit, retry, random); see envs.base.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from .base import GameInfo, TextGameEnv

MOVES = tuple(f"[{i}]" for i in range(9))
MARKS = ("X", "O")
LINES = (
    (0, 1, 2), (3, 4, 5), (6, 7, 8),  # rows
    (0, 3, 6), (1, 4, 7), (2, 5, 8),  # columns
    (0, 4, 8), (2, 4, 6),  # diagonals
)
LINES_THROUGH = tuple(tuple(line for line in LINES if cell in line) for cell in range(9))
"""The lines through each cell: a move can only complete one of those."""


@functools.lru_cache(maxsize=None)  # at most 3**9 boards; every observation shows one
def _board_text(board: tuple[int | None, ...]) -> str:
    cells = [MOVES[i] if c is None else MARKS[c] for i, c in enumerate(board)]
    return "\n".join(" ".join(cells[r * 3 : r * 3 + 3]) for r in range(3))


class TicTacToeRules:
    """Pure Tic-Tac-Toe rules: ``board[i]`` is None, 0 (X) or 1 (O)."""

    def __init__(self) -> None:
        self.board: list[int | None] = [None] * 9
        self.current_player = 0
        self.winner: int | None = None
        self._legal: list[str] = list(MOVES)  # of the position as it stands (the env asks often)

    @property
    def is_terminal(self) -> bool:
        return not self._legal

    def legal_moves(self) -> list[str]:
        return list(self._legal)

    def apply(self, move: str) -> None:
        if move not in self._legal:
            raise ValueError(f"illegal move {move!r}; expected one of {self.legal_moves()}")
        cell = MOVES.index(move)
        board, mark = self.board, self.current_player
        board[cell] = mark
        if any(board[a] == mark and board[b] == mark and board[c] == mark for a, b, c in LINES_THROUGH[cell]):
            self.winner = mark
        self.current_player = 1 - mark
        self._legal = [] if self.winner is not None else [m for m in self._legal if m != move]

    def returns(self) -> list[float]:
        if self.winner is None:
            return [0.0, 0.0]
        return [1.0 if p == self.winner else -1.0 for p in (0, 1)]

    def board_text(self) -> str:
        return _board_text(tuple(self.board))


class TicTacToeEnv(TextGameEnv):
    """Tic-Tac-Toe; see the module docstring for rules and texts."""

    game_info = GameInfo(
        name="tictactoe_v1",
        num_players=2,
        zero_sum=True,
        reward_range=(-1.0, 1.0),
        max_turns=9,
        moves=MOVES,
    )
    observation_max_length = 256

    game: TicTacToeRules

    def _new_game(self) -> TicTacToeRules:
        return TicTacToeRules()

    def _view(self, seat: int) -> str:
        return f"Tic-Tac-Toe. You are {MARKS[seat]}.\n{self.game.board_text()}"

    def _render_text(self) -> str:
        g = self.game
        if self.forfeited_by is not None:
            status = f"{MARKS[self._seat[self.forfeited_by]]} forfeited (invalid move)."
        elif g.winner is not None:
            status = f"{MARKS[g.winner]} wins."
        elif g.is_terminal:
            status = "Draw."
        else:
            status = f"{MARKS[g.current_player]} to move."
        return f"Tic-Tac-Toe.\n{g.board_text()}\n{status}"


_YOU_ARE = re.compile(r"You are ([XO])\.")


def parse_board(observation: str) -> tuple[list[int | None], int]:
    """``(board, me)`` from a player's observation: ``board[i]`` is None, 0 (X) or 1 (O) and
    ``me`` is the observer's mark. Raises ValueError on text that is not a Tic-Tac-Toe view."""
    lines = observation.splitlines()
    header = next(((k, m) for k, line in enumerate(lines) if (m := _YOU_ARE.search(line))), None)
    cells = [c for row in lines[header[0] + 1 : header[0] + 4] for c in row.split()] if header else []
    board = [None if cell == MOVES[i] else MARKS.index(cell) if cell in MARKS else -1
             for i, cell in enumerate(cells)]
    if header is None or len(board) != 9 or -1 in board:
        raise ValueError(f"expected a tictactoe_v1 observation ('You are X.' and a 3x3 board), got {observation[:120]!r}")
    return board, MARKS.index(header[1].group(1))


def completing_moves(board: list[int | None], mark: int) -> list[int]:
    """Empty cells that would give ``mark`` three in a row."""
    return sorted({i for line in LINES for i in line
                   if board[i] is None and sum(board[j] == mark for j in line) == 2})


class TacticalBot:
    """A Tic-Tac-Toe baseline stronger than RandomBot: it takes a winning move if it has one,
    else blocks the opponent's winning move, else plays a random legal move.

    Against it a missed win or a missed block is always punished, so a policy trained with it in
    its league gets a strong signal for exactly those two skills (against RandomBot a missed win
    often goes unpunished). It does not look further ahead (no forks), so it can be beaten.
    Registered as ``bot:tictactoe_tactical``; on another game's observation it raises ValueError.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observation: str, legal_actions: list[str]) -> str:
        if not legal_actions:
            raise ValueError("TacticalBot.act needs at least one legal action, got an empty list")
        board, me = parse_board(observation)
        for mark in (me, 1 - me):
            moves = [MOVES[i] for i in completing_moves(board, mark) if MOVES[i] in legal_actions]
            if moves:
                return moves[int(self.rng.integers(len(moves)))]
        return legal_actions[int(self.rng.integers(len(legal_actions)))]

    __call__ = act


def line_owner(board: tuple[int | None, ...] | list[int | None]) -> int | None:
    """The mark with three in a row on ``board``, None if neither has one."""
    for a, b, c in LINES:
        if board[a] is not None and board[a] == board[b] == board[c]:
            return board[a]
    return None


@functools.lru_cache(maxsize=None)
def minimax_value(board: tuple[int | None, ...], to_move: int) -> int:
    """The game's value for ``to_move`` under perfect play from ``board`` (+1 win, 0 draw, -1
    loss). Every position is solved once (memoised; 5,478 reachable positions)."""
    owner = line_owner(board)
    if owner is not None:
        return 1 if owner == to_move else -1
    empty = [i for i, c in enumerate(board) if c is None]
    if not empty:
        return 0
    return max(-minimax_value(board[:i] + (to_move,) + board[i + 1:], 1 - to_move) for i in empty)


def perfect_moves(board: list[int | None], to_move: int) -> list[int]:
    """The empty cells whose value under perfect play is the position's value: every optimal move."""
    values = {i: -minimax_value(tuple(board[:i] + [to_move] + board[i + 1:]), 1 - to_move)
              for i, c in enumerate(board) if c is None}
    best = max(values.values())
    return [i for i, value in values.items() if value == best]


@functools.lru_cache(maxsize=None)
def pressing_score(board: tuple[int | None, ...], to_move: int, me: int) -> float:
    """``me``'s expected score (+1 win, 0 draw, -1 loss) from ``board`` with ``to_move`` to play,
    when ``me`` plays ``pressing_moves`` and the other player picks uniformly among the empty
    cells (what RandomBot does). Memoised, as ``minimax_value``."""
    owner = line_owner(board)
    if owner is not None:
        return 1.0 if owner == me else -1.0
    empty = [i for i, c in enumerate(board) if c is None]
    if not empty:
        return 0.0
    cells = perfect_moves(list(board), me) if to_move == me else empty
    scores = [pressing_score(board[:i] + (to_move,) + board[i + 1:], 1 - to_move, me) for i in cells]
    return max(scores) if to_move == me else sum(scores) / len(scores)


def pressing_moves(board: list[int | None], to_move: int) -> list[int]:
    """The perfect moves (``perfect_moves``) that score best against a uniformly random opponent:
    never a worse result against a perfect player, and the most wins against one who errs."""
    scores = {i: pressing_score(tuple(board[:i] + [to_move] + board[i + 1:]), 1 - to_move, to_move)
              for i in perfect_moves(board, to_move)}
    best = max(scores.values())
    return [i for i, score in scores.items() if score >= best - 1e-12]


class PerfectBot:
    """A perfect Tic-Tac-Toe player: a move of the highest minimax value, random among equal ones.

    It never loses: against it, a perfect opponent draws every game, so the draw rate against it
    measures how close a policy plays to perfect (a win rate against RandomBot cannot: RandomBot
    makes every mistake at once). Registered as ``bot:tictactoe_perfect``; on another game's
    observation it raises ValueError.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    choose = staticmethod(perfect_moves)  # the cells it picks among, at random

    def act(self, observation: str, legal_actions: list[str]) -> str:
        if not legal_actions:
            raise ValueError(f"{type(self).__name__}.act needs at least one legal action, got an empty list")
        board, me = parse_board(observation)
        moves = [MOVES[i] for i in self.choose(board, me) if MOVES[i] in legal_actions]
        moves = moves or list(legal_actions)  # a board the env would not show: any legal move
        return moves[int(self.rng.integers(len(moves)))]

    __call__ = act


class PressingBot(PerfectBot):
    """A perfect Tic-Tac-Toe player that presses for the win: among the perfect moves, one that
    wins most often against a player who picks at random (``pressing_moves``), random among equal
    ones.

    It never loses, as PerfectBot, but against RandomBot it wins 0.995 as X and 0.916 as O (exact)
    where PerfectBot, indifferent among perfect moves, wins 0.968 and 0.777: a teacher for a
    policy that must both never lose against a perfect player and win against a weak one, where
    imitating PerfectBot caps the second. Registered as ``bot:tictactoe_pressing``.
    """

    choose = staticmethod(pressing_moves)
