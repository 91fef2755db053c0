"""Connect Four as a text game (``connect_four_v1``).

Players: ``player_0`` plays X and moves first; ``player_1`` plays O.
Board: 6 rows by 7 columns, numbered 0..6 left to right. A move drops the mover's disc into
a column, where it falls to the lowest empty cell; a column is legal while it is not full.
Observation of the agent to move (rows top to bottom, ``.`` for an empty cell, then the
column numbers)::

    Connect Four. You are O.
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . . . . .
    . . . O . . .
    . . X X . . .
    0 1 2 3 4 5 6
    Legal moves: [0] [1] [2] [3] [4] [5] [6]

The other agent sees the same board with ``Waiting for player 1.`` as the last line; after
the game the last line is ``Game over: you won (+1).`` (or lost / draw). There is no private
information.
Actions: free text; the move is the last ``[c]`` token (``envs.base.parse_move``), legal
when column c is not full.
End and rewards: four discs of one player in a row (horizontal, vertical or diagonal) win:
+1 to the winner, -1 to the loser; a full board without four in a row is a draw, 0 each.
At most 42 moves.
Invalid moves: the env's ``invalid_move`` policy (forfeit, retry, random); see envs.base.
"""

from __future__ import annotations

from .base import GameInfo, TextGameEnv

ROWS, COLS = 6, 7
MOVES = tuple(f"[{c}]" for c in range(COLS))
MARKS = ("X", "O")
EMPTY = "."
DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))  # horizontal, vertical, both diagonals


class ConnectFourRules:
    """Pure Connect Four rules: ``board[r][c]`` is None, 0 (X) or 1 (O); row 0 is the top."""

    def __init__(self) -> None:
        self.board: list[list[int | None]] = [[None] * COLS for _ in range(ROWS)]
        self.current_player = 0
        self.winner: int | None = None
        self.num_moves = 0

    @property
    def is_terminal(self) -> bool:
        return self.winner is not None or self.num_moves == ROWS * COLS

    def legal_moves(self) -> list[str]:
        if self.is_terminal:
            return []
        return [MOVES[c] for c in range(COLS) if self.board[0][c] is None]

    def apply(self, move: str) -> None:
        if move not in self.legal_moves():
            raise ValueError(f"illegal move {move!r}; expected one of {self.legal_moves()}")
        col = MOVES.index(move)
        row = max(r for r in range(ROWS) if self.board[r][col] is None)
        self.board[row][col] = self.current_player
        self.num_moves += 1
        if self._makes_four(row, col):
            self.winner = self.current_player
        self.current_player = 1 - self.current_player

    def _makes_four(self, row: int, col: int) -> bool:
        """Whether the disc at (row, col) lies on four or more of its owner's in a line."""
        player = self.board[row][col]
        for dr, dc in DIRECTIONS:
            run = 1
            for sign in (1, -1):
                r, c = row + sign * dr, col + sign * dc
                while 0 <= r < ROWS and 0 <= c < COLS and self.board[r][c] == player:
                    run += 1
                    r, c = r + sign * dr, c + sign * dc
            if run >= 4:
                return True
        return False

    def returns(self) -> list[float]:
        if self.winner is None:
            return [0.0, 0.0]
        return [1.0 if p == self.winner else -1.0 for p in (0, 1)]

    def board_text(self) -> str:
        rows = [" ".join(EMPTY if c is None else MARKS[c] for c in row) for row in self.board]
        return "\n".join(rows + [" ".join(str(c) for c in range(COLS))])


class ConnectFourEnv(TextGameEnv):
    """Connect Four; see the module docstring for rules and texts."""

    game_info = GameInfo(
        name="connect_four_v1",
        num_players=2,
        zero_sum=True,
        reward_range=(-1.0, 1.0),
        max_turns=ROWS * COLS,
        moves=MOVES,
    )
    observation_max_length = 256

    game: ConnectFourRules

    def _new_game(self) -> ConnectFourRules:
        return ConnectFourRules()

    def _view(self, seat: int) -> str:
        return f"Connect Four. You are {MARKS[seat]}.\n{self.game.board_text()}"

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
        return f"Connect Four.\n{g.board_text()}\n{status}"
