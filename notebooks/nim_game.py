"""Nim as a text game (``nim_v1``): the example of notebooks/wrap_your_own_game.ipynb.

Players: ``player_0`` moves first; ``player_1`` second.
Pile: one pile of N stones, N drawn uniformly from 5..15 at each reset by the env's seeded RNG.
Moves: take 1, 2 or 3 stones (``[1]`` ``[2]`` ``[3]``), at most what is left.
End and rewards: whoever takes the last stone wins: +1 to the winner, -1 to the loser. At most
15 moves. (A pile that is a multiple of 4 is lost for the player to move.)
Observation of the agent to move::

    Nim. You are player 1. 7 stones left.
    Take 1, 2 or 3; whoever takes the last stone wins.
    Legal moves: [1] [2] [3]

The other agent sees ``Waiting for player 1.`` as the last line; after the game the last line
is ``Game over: you won (+1).`` (or lost). There is no private information.
Actions: free text; the move is the last ``[n]`` token (``envs.base.parse_move``).
Invalid moves: the env's ``invalid_move`` policy (forfeit, retry, random); see envs.base.
"""

from __future__ import annotations

from envs.base import GameInfo, TextGameEnv

MOVES = ("[1]", "[2]", "[3]")
MIN_PILE, MAX_PILE = 5, 15


class NimRules:
    """Pure Nim rules: ``stones`` left in the pile; ``winner`` is the seat that took the last."""

    def __init__(self, stones: int) -> None:
        self.stones = stones
        self.current_player = 0
        self.winner: int | None = None

    @property
    def is_terminal(self) -> bool:
        return self.stones == 0

    def legal_moves(self) -> list[str]:
        return [m for take, m in enumerate(MOVES, start=1) if take <= self.stones]

    def apply(self, move: str) -> None:
        if move not in self.legal_moves():
            raise ValueError(f"illegal move {move!r}; expected one of {self.legal_moves()}")
        self.stones -= MOVES.index(move) + 1
        if self.stones == 0:
            self.winner = self.current_player
        self.current_player = 1 - self.current_player

    def returns(self) -> list[float]:
        return [1.0 if seat == self.winner else -1.0 for seat in (0, 1)]


class NimEnv(TextGameEnv):
    """Nim; see the module docstring for rules and texts."""

    game_info = GameInfo(
        name="nim_v1",
        num_players=2,
        zero_sum=True,
        reward_range=(-1.0, 1.0),
        max_turns=MAX_PILE,
        moves=MOVES,
    )
    observation_max_length = 256

    game: NimRules

    def _new_game(self) -> NimRules:
        return NimRules(int(self.np_random.integers(MIN_PILE, MAX_PILE + 1)))

    def _view(self, seat: int) -> str:
        return (
            f"Nim. You are player {seat}. {self.game.stones} stones left.\n"
            "Take 1, 2 or 3; whoever takes the last stone wins."
        )

    def _render_text(self) -> str:
        g = self.game
        if self.forfeited_by is not None:
            status = f"player {self._seat[self.forfeited_by]} forfeited (invalid move)."
        elif g.winner is not None:
            status = f"player {g.winner} took the last stone and wins."
        else:
            status = f"player {g.current_player} to move."
        return f"Nim. {g.stones} stones left. {status}"
