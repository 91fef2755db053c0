"""Liar's Dice as a text game (``liars_dice_v1``), two players, one round.

Players: ``player_0`` and ``player_1``; ``player_0`` moves first. Each rolls
``dice_per_player`` (default 2) six-sided dice, drawn from the env's RNG, and sees only its
own; N = 2 * ``dice_per_player`` dice are in play.
Bids: a bid ``[QxF]`` (quantity Q in 1..N, face F in 1..6) claims that at least Q of all N
dice show face F. 1s are NOT wild: only dice showing F count towards a bid on F. The
players alternate; each move is either a strictly higher bid than the last one (a higher
quantity, or the same quantity and a higher face: ``[1x1] < [1x2] < ... < [1x6] < [2x1] <
...``) or ``[liar]``, a call on the last bid, which is not legal as the first move. After
the highest bid ``[Nx6]`` only ``[liar]`` remains, so a game lasts at most 6N + 1 moves.
End and rewards: a call ends the game and reveals all dice. If the last bid is met (at least
Q dice show F) the caller loses, otherwise the bidder loses: +1 to the winner, -1 to the
loser (zero-sum).
What each player sees: its own dice, the number of dice in play, the move history, and
after a call every player's dice. The opponent's dice are never shown before the call.
Observation of the agent to move (2 dice each)::

    Liar's Dice, 4 dice in play. You are player 1. Your dice: 2 5.
    History: player 0 [3x4]
    Legal moves: [3x5] [3x6] [4x1] [4x2] [4x3] [4x4] [4x5] [4x6] [liar]

After the call the history ends with the call and a line such as ``Reveal: player 0 has
3 4, player 1 has 2 5. Dice showing 4: 1 (bid [3x4] not met); player 0 loses.`` precedes
``Game over: you won (+1).``.
Actions: free text; the move is the last ``[...]`` token (``envs.base.parse_move``), so
``[3X4]`` is the bid ``[3x4]``.
Invalid moves: the env's ``invalid_move`` policy (forfeit, retry, random); see envs.base.
A forfeit ends the game without a reveal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .base import GameInfo, TextGameEnv

FACES = 6
LIAR = "[liar]"


def bid_moves(total_dice: int) -> tuple[str, ...]:
    """Every bid with ``total_dice`` dice in play, lowest first: ``[1x1] .. [1x6] [2x1] ..``."""
    return tuple(f"[{q}x{f}]" for q in range(1, total_dice + 1) for f in range(1, FACES + 1))


def parse_bid(move: str) -> tuple[int, int]:
    """``"[3x4]"`` -> ``(3, 4)``: (quantity, face)."""
    quantity, face = move[1:-1].split("x")
    return int(quantity), int(face)


class LiarsDiceRules:
    """Pure rules of one round: ``dice[seat]`` holds that seat's faces, each in 1..6."""

    def __init__(self, dice: Sequence[Sequence[int]]) -> None:
        ok = len(dice) == 2 and len(dice[0]) == len(dice[1]) >= 1
        if not ok or not all(1 <= int(x) <= FACES for d in dice for x in d):
            raise ValueError(
                f"dice must be two equal, non-empty lists of faces in 1..{FACES}, got {dice!r}"
            )
        self.dice = tuple(tuple(sorted(int(x) for x in d)) for d in dice)
        self.bids = bid_moves(2 * len(self.dice[0]))
        self.moves: list[str] = []

    @property
    def current_player(self) -> int:
        return len(self.moves) % 2

    @property
    def is_terminal(self) -> bool:
        return self.moves[-1:] == [LIAR]

    @property
    def last_bid(self) -> str | None:
        bids = [m for m in self.moves if m != LIAR]
        return bids[-1] if bids else None

    def legal_moves(self) -> list[str]:
        if self.is_terminal:
            return []
        last = self.last_bid
        start = 0 if last is None else self.bids.index(last) + 1
        return list(self.bids[start:]) + ([LIAR] if self.moves else [])

    def apply(self, move: str) -> None:
        if move not in self.legal_moves():
            raise ValueError(f"illegal move {move!r}; expected one of {self.legal_moves()}")
        self.moves.append(move)

    def count(self, face: int) -> int:
        """How many of all the dice show ``face`` (1s are not wild)."""
        return sum(x == face for d in self.dice for x in d)

    @property
    def bid_met(self) -> bool:
        quantity, face = parse_bid(self.last_bid)
        return self.count(face) >= quantity

    @property
    def loser(self) -> int:
        """The caller if the called bid is met, else the bidder; only once terminal."""
        if not self.is_terminal:
            raise ValueError("the round is not over: no one has called [liar]")
        caller = (len(self.moves) - 1) % 2
        return caller if self.bid_met else 1 - caller

    def returns(self) -> list[float]:
        return [-1.0 if seat == self.loser else 1.0 for seat in (0, 1)]


def _dice_text(dice: Sequence[int]) -> str:
    return " ".join(str(x) for x in dice)


def _history(rules: LiarsDiceRules) -> str:
    moves = ", ".join(f"player {i % 2} {m}" for i, m in enumerate(rules.moves))
    return f"History: {moves or 'none'}"


def _reveal(rules: LiarsDiceRules) -> str:
    bid = rules.last_bid
    face = parse_bid(bid)[1]
    met = "met" if rules.bid_met else "not met"
    return (
        f"Reveal: player 0 has {_dice_text(rules.dice[0])}, player 1 has "
        f"{_dice_text(rules.dice[1])}. Dice showing {face}: {rules.count(face)} "
        f"(bid {bid} {met}); player {rules.loser} loses."
    )


class LiarsDiceEnv(TextGameEnv):
    """Two-player Liar's Dice; see the module docstring for rules and texts."""

    game_info = GameInfo(
        name="liars_dice_v1",
        num_players=2,
        zero_sum=True,
        reward_range=(-1.0, 1.0),
        max_turns=6 * 4 + 1,
        moves=bid_moves(4) + (LIAR,),
    )

    game: LiarsDiceRules

    def __init__(
        self,
        dice_per_player: int = 2,
        render_mode: str | None = None,
        invalid_move: str = "forfeit",
        invalid_move_reward: float = -1.0,
        max_retries: int = 2,
        *,
        list_legal_moves: bool = True,
    ) -> None:
        d = dice_per_player
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise ValueError(f"dice_per_player must be an int >= 1, got {d!r}")
        self.dice_per_player = d
        total = 2 * d
        # Facts of this configuration: the bids and the longest game grow with the dice.
        self.game_info = dataclasses.replace(
            type(self).game_info, max_turns=FACES * total + 1, moves=bid_moves(total) + (LIAR,)
        )
        # History plus legal moves hold at most 6N + 1 moves of <= 18 characters each.
        self.observation_max_length = 384 + 128 * total
        super().__init__(
            render_mode, invalid_move, invalid_move_reward, max_retries,
            list_legal_moves=list_legal_moves,
        )

    def _new_game(self) -> LiarsDiceRules:
        rolls = self.np_random.integers(1, FACES + 1, size=(2, self.dice_per_player))
        return LiarsDiceRules(rolls.tolist())

    def _view(self, seat: int) -> str:
        g = self.game
        lines = [
            f"Liar's Dice, {2 * self.dice_per_player} dice in play. You are player {seat}. "
            f"Your dice: {_dice_text(g.dice[seat])}.",
            _history(g),
        ]
        if g.is_terminal:
            lines.append(_reveal(g))
        return "\n".join(lines)

    def _render_text(self) -> str:
        g = self.game
        dice = f"player 0 {_dice_text(g.dice[0])}, player 1 {_dice_text(g.dice[1])}"
        lines = [f"Liar's Dice (spectator view). Dice: {dice}.", _history(g)]
        if self.forfeited_by is not None:
            lines.append(f"player {self._seat[self.forfeited_by]} forfeited (invalid move).")
        elif g.is_terminal:
            lines.append(_reveal(g))
        else:
            lines.append(f"player {g.current_player} to move.")
        return "\n".join(lines)
