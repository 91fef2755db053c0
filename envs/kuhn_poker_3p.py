"""Three-player Kuhn Poker as a text game (``kuhn_poker_3p_v1``), as OpenSpiel's
``kuhn_poker`` with ``players=3``.

Players: ``player_0``, ``player_1`` and ``player_2``. Deck of four cards J < Q < K < A; one
hand deals one card to each player (the fourth stays hidden), each antes 1 chip, and there
is one bet size of 1 chip.
Betting: one round; the players act in seat order, ``player_0`` first. Until someone bets a
player may ``[check]`` or ``[bet]``; if all three check the hand goes to showdown (pot 3).
After a bet every other player acts once more, in seat order after the bettor, and may
``[call]`` (put in 1 chip) or ``[fold]`` (give up the hand); then the hand is over. At the
showdown the highest card among the players who did not fold wins the pot; if everyone else
folded the bettor wins it without a showdown. The winner's reward is the pot minus what it
put in; every other player's reward is minus what it put in (zero-sum): from -2 (called and
lost) to +4 (bet and was called twice).
What each player sees: its own card, the betting history and the pot; after the hand, the
cards of the players who went to showdown (never those of a player who folded) and the
winner. Another player's card is never shown before the showdown. Observation of the agent
to move::

    Kuhn Poker, 3 players. You are player 2. Your card: A.
    History: player 0 [check], player 1 [bet]
    Pot: 4
    Legal moves: [call] [fold]

After the hand the pot line is replaced by e.g. ``Showdown: player 1 Q, player 2 A. player 2
wins the pot of 5.``, followed by ``Game over: you won (+3).``.
Actions: free text; the move is the last ``[...]`` token (``envs.base.parse_move``).
Invalid moves: the env's ``invalid_move`` policy (forfeit, retry, random); see envs.base.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import GameInfo, TextGameEnv

CARDS = "JQKA"
MOVES = ("[check]", "[bet]", "[call]", "[fold]")
NUM_PLAYERS = 3


class KuhnPoker3Rules:
    """Pure rules of one hand: ``cards[seat]`` is 0 (J), 1 (Q), 2 (K) or 3 (A).

    Seats act in turn, so the i-th move of the hand is always made by seat ``i % 3``: a bet
    by seat b is answered by b+1 and b+2 (mod 3), exactly the next two moves.
    """

    def __init__(self, cards: Sequence[int]) -> None:
        distinct = len(set(cards)) == len(cards) == NUM_PLAYERS
        if not distinct or not set(cards) <= {0, 1, 2, 3}:
            raise ValueError(f"cards must be three different cards in 0..3, got {cards!r}")
        self.cards = tuple(int(c) for c in cards)
        self.moves: list[str] = []

    @staticmethod
    def actor(i: int) -> int:
        """Seat that made (or makes) the i-th move of the hand."""
        return i % NUM_PLAYERS

    @property
    def bet_index(self) -> int | None:
        """Index of the bet in ``moves``, or None before anyone bets."""
        return self.moves.index("[bet]") if "[bet]" in self.moves else None

    @property
    def current_player(self) -> int:
        return self.actor(len(self.moves))

    @property
    def is_terminal(self) -> bool:
        if self.bet_index is None:
            return len(self.moves) == NUM_PLAYERS  # everyone checked
        return len(self.moves) == self.bet_index + NUM_PLAYERS

    def legal_moves(self) -> list[str]:
        if self.is_terminal:
            return []
        return ["[check]", "[bet]"] if self.bet_index is None else ["[call]", "[fold]"]

    def apply(self, move: str) -> None:
        if move not in self.legal_moves():
            expected = self.legal_moves() or "nothing: the hand is over"
            raise ValueError(f"illegal move {move!r}; expected one of {expected}")
        self.moves.append(move)

    def contributions(self) -> list[int]:
        """Chips each seat has put in: the ante plus any bet or call."""
        paid = [1] * NUM_PLAYERS
        for i, move in enumerate(self.moves):
            if move in ("[bet]", "[call]"):
                paid[self.actor(i)] += 1
        return paid

    @property
    def pot(self) -> int:
        return sum(self.contributions())

    @property
    def in_hand(self) -> list[int]:
        """Seats that have not folded, in seat order."""
        folded = {self.actor(i) for i, m in enumerate(self.moves) if m == "[fold]"}
        return [seat for seat in range(NUM_PLAYERS) if seat not in folded]

    @property
    def showdown(self) -> bool:
        return self.is_terminal and len(self.in_hand) > 1

    @property
    def winner(self) -> int:
        if not self.is_terminal:
            raise ValueError("the hand is not over")
        return max(self.in_hand, key=lambda seat: self.cards[seat])

    def returns(self) -> list[float]:
        paid = self.contributions()
        return [float(self.pot - p if s == self.winner else -p) for s, p in enumerate(paid)]


def _history(rules: KuhnPoker3Rules) -> str:
    return ", ".join(f"player {rules.actor(i)} {m}" for i, m in enumerate(rules.moves)) or "none"


def _result(rules: KuhnPoker3Rules) -> str:
    line = f"player {rules.winner} wins the pot of {rules.pot}."
    if rules.showdown:
        shown = ", ".join(f"player {s} {CARDS[rules.cards[s]]}" for s in rules.in_hand)
        line = f"Showdown: {shown}. {line}"
    return line


class KuhnPoker3Env(TextGameEnv):
    """Three-player Kuhn Poker, one hand; see the module docstring for rules and texts."""

    game_info = GameInfo(
        name="kuhn_poker_3p_v1",
        num_players=NUM_PLAYERS,
        zero_sum=True,
        reward_range=(-2.0, 4.0),
        max_turns=5,  # check, check, bet, then two answers
        moves=MOVES,
    )
    observation_max_length = 320

    game: KuhnPoker3Rules

    def _new_game(self) -> KuhnPoker3Rules:
        return KuhnPoker3Rules(self.np_random.permutation(len(CARDS))[:NUM_PLAYERS].tolist())

    def _view(self, seat: int) -> str:
        g = self.game
        lines = [
            f"Kuhn Poker, 3 players. You are player {seat}. Your card: {CARDS[g.cards[seat]]}.",
            f"History: {_history(g)}",
        ]
        lines.append(_result(g) if g.is_terminal else f"Pot: {g.pot}")
        return "\n".join(lines)

    def _render_text(self) -> str:
        g = self.game
        cards = ", ".join(f"player {s} {CARDS[c]}" for s, c in enumerate(g.cards))
        status = _result(g) if g.is_terminal else f"Pot: {g.pot}."
        title = f"Kuhn Poker, 3 players (spectator view). Cards: {cards}."
        return f"{title}\nHistory: {_history(g)}\n{status}"
