"""Kuhn Poker as a text game (``kuhn_poker_v1``), as OpenSpiel's ``kuhn_poker``.

Players: ``player_0`` and ``player_1``. Deck of three cards J < Q < K; each hand deals one
card to each player (the third stays hidden), each antes 1 chip, and there is one bet size
of 1 chip.
Betting: the first actor may ``[check]`` or ``[bet]``. After a check the other may
``[check]`` (showdown, pot 2) or ``[bet]``; facing a bet a player may ``[call]`` (showdown,
pot 4) or ``[fold]`` (the bettor wins the pot without a showdown). At a showdown the higher
card wins the pot. The winner's reward for a hand is what the loser put in: +1 after
check-check or a fold, +2 after a call; the loser's is its negative (zero-sum).
Hands: ``num_hands`` (default 1) hands per episode, each dealt fresh from the env's RNG.
``player_0`` acts first in hands 1, 3, 5, ... and ``player_1`` in hands 2, 4, ...; with
``num_hands=1`` ``player_0`` acts first, as in OpenSpiel. The reward, given at the end of
the episode, is the sum of chips won over all hands.
What each player sees: its own card, the betting history and pot of the current hand, and
for finished hands their betting, the cards only if they went to showdown, and the winner.
The opponent's card is never shown before a showdown. Observation of the agent to move::

    Kuhn Poker. You are player 1. Your card: K.
    History: player 0 [bet]
    Pot: 3
    Legal moves: [call] [fold]

With ``num_hands > 1`` the first line reads ``Kuhn Poker, hand 2 of 3. You are ...`` and
finished hands appear above the history, e.g. ``Hand 1: player 0 [bet], player 1 [call].
Showdown: player 0 Q, player 1 K. player 1 wins 2.``, followed by ``Your chips: -2.``.
Actions: free text; the move is the last ``[...]`` token (``envs.base.parse_move``).
Invalid moves: the env's ``invalid_move`` policy (forfeit, retry, random); see envs.base.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .base import GameInfo, TextGameEnv

CARDS = "JQK"
MOVES = ("[check]", "[bet]", "[call]", "[fold]")


@dataclasses.dataclass
class KuhnHand:
    """One hand: ``cards[seat]`` is 0 (J), 1 (Q) or 2 (K); ``first`` is the seat acting first."""

    cards: tuple[int, int]
    first: int
    moves: list[str] = dataclasses.field(default_factory=list)

    def actor(self, i: int) -> int:
        """Seat that made (or makes) the i-th move of the hand."""
        return self.first if i % 2 == 0 else 1 - self.first

    @property
    def to_act(self) -> int:
        return self.actor(len(self.moves))

    @property
    def is_over(self) -> bool:
        return self.moves == ["[check]", "[check]"] or self.moves[-1:] in (["[call]"], ["[fold]"])

    @property
    def showdown(self) -> bool:
        return self.is_over and self.moves[-1] != "[fold]"

    def legal_moves(self) -> list[str]:
        if self.is_over:
            return []
        if self.moves[-1:] == ["[bet]"]:
            return ["[call]", "[fold]"]
        return ["[check]", "[bet]"]

    def apply(self, move: str) -> None:
        if move not in self.legal_moves():
            raise ValueError(f"illegal move {move!r}; expected one of {self.legal_moves()}")
        self.moves.append(move)

    def contributions(self) -> list[int]:
        """Chips each seat has put in: the ante plus any bet or call."""
        paid = [1, 1]
        for i, move in enumerate(self.moves):
            if move in ("[bet]", "[call]"):
                paid[self.actor(i)] += 1
        return paid

    @property
    def pot(self) -> int:
        return sum(self.contributions())

    @property
    def winner(self) -> int:
        if not self.is_over:
            raise ValueError("the hand is not over")
        if self.moves[-1] == "[fold]":
            return 1 - self.actor(len(self.moves) - 1)
        return 0 if self.cards[0] > self.cards[1] else 1

    def payoffs(self) -> list[float]:
        won = float(self.contributions()[1 - self.winner])
        return [won if seat == self.winner else -won for seat in (0, 1)]


class KuhnPokerRules:
    """Pure rules of a match of ``len(deals)`` hands; ``deals[h][seat]`` is a card index."""

    def __init__(self, deals: Sequence[Sequence[int]]) -> None:
        if not deals:
            raise ValueError("deals must hold at least one hand, got none")
        for deal in deals:
            if len(deal) != 2 or len(set(deal)) != 2 or not set(deal) <= {0, 1, 2}:
                raise ValueError(f"each deal must be two different cards in 0..2, got {deal!r}")
        self.hands = [
            KuhnHand(cards=(int(d[0]), int(d[1])), first=h % 2) for h, d in enumerate(deals)
        ]

    @property
    def hand_index(self) -> int:
        """Index of the hand being played; ``len(hands)`` once the match is over."""
        return next((h for h, hand in enumerate(self.hands) if not hand.is_over), len(self.hands))

    @property
    def is_terminal(self) -> bool:
        return self.hand_index == len(self.hands)

    @property
    def current_player(self) -> int:
        return self.hands[self.hand_index].to_act

    def legal_moves(self) -> list[str]:
        return [] if self.is_terminal else self.hands[self.hand_index].legal_moves()

    def apply(self, move: str) -> None:
        if self.is_terminal:
            raise ValueError(f"illegal move {move!r}: the match is over")
        self.hands[self.hand_index].apply(move)

    def deal_later_hands(self, deals: Sequence[Sequence[int]]) -> None:
        """The hands after the current one dealt ``deals`` instead (a snapshot's own chance)."""
        start = self.hand_index + 1
        for h, deal in enumerate(deals, start):
            self.hands[h] = KuhnHand(cards=(int(deal[0]), int(deal[1])), first=h % 2)

    def returns(self) -> list[float]:
        totals = [0.0, 0.0]
        for hand in self.hands:
            if hand.is_over:
                totals = [t + p for t, p in zip(totals, hand.payoffs())]
        return totals


def _history(hand: KuhnHand) -> str:
    return ", ".join(f"player {hand.actor(i)} {m}" for i, m in enumerate(hand.moves)) or "none"


def _hand_result(number: int, hand: KuhnHand) -> str:
    line = f"Hand {number}: {_history(hand)}."
    if hand.showdown:
        line += f" Showdown: player 0 {CARDS[hand.cards[0]]}, player 1 {CARDS[hand.cards[1]]}."
    won = hand.payoffs()[hand.winner]
    return f"{line} player {hand.winner} wins {won:g}."


class KuhnPokerEnv(TextGameEnv):
    """Kuhn Poker over ``num_hands`` hands; see the module docstring for rules and texts."""

    game_info = GameInfo(
        name="kuhn_poker_v1",
        num_players=2,
        zero_sum=True,
        reward_range=(-2.0, 2.0),
        max_turns=3,
        moves=MOVES,
    )

    game: KuhnPokerRules

    def __init__(
        self,
        num_hands: int = 1,
        render_mode: str | None = None,
        invalid_move: str = "forfeit",
        invalid_move_reward: float = -1.0,
        max_retries: int = 2,
        *,
        list_legal_moves: bool = True,
    ) -> None:
        if isinstance(num_hands, bool) or not isinstance(num_hands, int) or num_hands < 1:
            raise ValueError(f"num_hands must be an int >= 1, got {num_hands!r}")
        self.num_hands = num_hands
        # Facts of this configuration: rewards and turns scale with the number of hands.
        self.game_info = dataclasses.replace(
            type(self).game_info,
            reward_range=(-2.0 * num_hands, 2.0 * num_hands),
            max_turns=3 * num_hands,
        )
        self.observation_max_length = 256 + 128 * num_hands
        super().__init__(
            render_mode, invalid_move, invalid_move_reward, max_retries,
            list_legal_moves=list_legal_moves,
        )

    def _new_game(self) -> KuhnPokerRules:
        deals = [self.np_random.permutation(3)[:2].tolist() for _ in range(self.num_hands)]
        return KuhnPokerRules(deals)

    def snapshot(self, seed: int) -> KuhnPokerEnv:
        """The copy of the contract (item 9), and the hands not yet dealt dealt again from
        ``seed``: every hand's cards are drawn at reset, so a copy would otherwise replay the
        original's future deals (known to a continuation)."""
        twin = super().snapshot(seed)
        later = len(twin.game.hands) - twin.game.hand_index - 1
        twin.game.deal_later_hands([twin.np_random.permutation(3)[:2] for _ in range(max(later, 0))])
        return twin

    def _view(self, seat: int) -> str:
        g = self.game
        current = min(g.hand_index, self.num_hands - 1)
        hand = g.hands[current]
        title = "Kuhn Poker."
        if self.num_hands > 1:
            title = f"Kuhn Poker, hand {current + 1} of {self.num_hands}."
        lines = [f"{title} You are player {seat}. Your card: {CARDS[hand.cards[seat]]}."]
        done = [h for h in g.hands if h.is_over]
        lines += [_hand_result(i + 1, h) for i, h in enumerate(done)]
        if self.num_hands > 1 and done:
            chips = sum(h.payoffs()[seat] for h in done)
            lines.append(f"Your chips: {chips:+g}." if chips else "Your chips: 0.")
        if not hand.is_over:
            lines += [f"History: {_history(hand)}", f"Pot: {hand.pot}"]
        return "\n".join(lines)

    def _render_text(self) -> str:
        lines = ["Kuhn Poker (spectator view)."]
        for i, hand in enumerate(self.game.hands[: self.game.hand_index + 1]):
            cards = f"player 0 {CARDS[hand.cards[0]]}, player 1 {CARDS[hand.cards[1]]}"
            if hand.is_over:
                reveal = "" if hand.showdown else f" (Cards: {cards}.)"
                lines.append(_hand_result(i + 1, hand) + reveal)
            else:
                lines.append(f"Hand {i + 1}: {_history(hand)}. Cards: {cards}. Pot: {hand.pot}.")
        return "\n".join(lines)


# the equilibrium family of two-player Kuhn Poker (Kuhn 1950), as the probability of the
# aggressive move (bet or call) in each information state: card, then the betting so far
# ("" first to act, "p" after a check, "b" facing a bet, "pb" check then bet), for alpha in
# [0, 1/3]: the first actor bluffs J with alpha, bets K with 3 alpha, calls with Q at alpha + 1/3;
# the second bets K, bluffs J at 1/3 after a check, calls with Q at 1/3, folds J to a bet
def nash_bet_probabilities(alpha: float = 1 / 6) -> dict[tuple[str, str], float]:
    """(card, history) -> probability of ``[bet]``/``[call]`` of a Nash equilibrium (alpha in [0, 1/3])."""
    if not 0.0 <= alpha <= 1 / 3:
        raise ValueError(f"alpha: expected in [0, 1/3], got {alpha!r}")
    return {("J", ""): alpha, ("Q", ""): 0.0, ("K", ""): 3 * alpha,
            ("J", "pb"): 0.0, ("Q", "pb"): alpha + 1 / 3, ("K", "pb"): 1.0,
            ("J", "b"): 0.0, ("Q", "b"): 1 / 3, ("K", "b"): 1.0,
            ("J", "p"): 1 / 3, ("Q", "p"): 0.0, ("K", "p"): 1.0}


class NashBot:
    """Plays a Nash equilibrium of one-hand Kuhn Poker (``nash_bet_probabilities``, alpha 1/6):
    exploitability 0, so nothing beats it on average; a yardstick and a teacher to imitate.
    Registered as ``bot:kuhn_poker_nash``; on another game's observation (or a hand of several)
    it raises ValueError."""

    def __init__(self, seed: int | None = None, alpha: float = 1 / 6) -> None:
        self.rng = np.random.default_rng(seed)
        self.bet = nash_bet_probabilities(alpha)

    def act(self, observation: str, legal_actions: list[str]) -> str:
        card, history = _information_state(observation)
        aggressive, passive = ("[call]", "[fold]") if history.endswith("b") else ("[bet]", "[check]")
        move = aggressive if self.rng.random() < self.bet[(card, history)] else passive
        if move not in legal_actions:
            raise ValueError(f"NashBot: {move} is not among the legal moves {legal_actions}")
        return move

    __call__ = act


def _information_state(observation: str) -> tuple[str, str]:
    """(card, betting so far as "", "p", "b" or "pb") of a one-hand ``kuhn_poker_v1`` observation."""
    lines = observation.splitlines()
    if not lines or not lines[0].startswith("Kuhn Poker. You are player") or "Your card: " not in lines[0]:
        raise ValueError(f"NashBot plays one-hand kuhn_poker_v1; got {observation[:80]!r}")
    card = lines[0].split("Your card: ")[1][0]
    history = next((line[len("History: "):] for line in lines if line.startswith("History: ")), None)
    if history is None:
        raise ValueError(f"NashBot: no betting history in {observation[:120]!r}")
    moves = [] if history == "none" else [part.rsplit(" ", 1)[1] for part in history.split(", ")]
    return card, "".join("p" if m == "[check]" else "b" for m in moves)
