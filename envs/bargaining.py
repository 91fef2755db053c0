"""Bargaining as a text game (``bargaining_v1``): a seller and a buyer haggle over one item.

Players: ``player_0`` is the seller and moves first; ``player_1`` is the buyer. The seller's cost
is drawn from 0..4 and the buyer's value from 4..8 (the env's RNG); each is private, shown only
to its owner. Both know the ranges, so a trade at some price in between usually gains both.
Moves: a price ``[0]`` .. ``[8]`` is an offer to trade at that price (the seller asks, the buyer
bids); ``[accept]`` takes the other side's standing offer (legal only while one stands, i.e.
after the other's offer). The two alternate, at most ``max_offers`` offers in all (default 4: two
each); after the last offer the other side may only ``[accept]`` or ``[reject]``.
End and rewards: an accepted offer at price p pays the seller ``(p - cost) / 8`` and the buyer
``(value - p) / 8``; no deal pays 0 to both. Both can gain, so the game is NOT zero-sum
(``GameInfo.zero_sum`` is False); rewards lie in [-1, 1] (accepting a price beyond one's own
limit is legal and loses). Observation of the agent to move::

    Bargaining over one item. You are the buyer (player 1). Your value (private): 7.
    The seller's cost is 0-4, your value 4-8; at most 4 offers.
    History: seller [6]
    Standing offer: the seller asks 6.
    Legal moves: [0] [1] [2] [3] [4] [5] [6] [7] [8] [accept]

After the game a line such as ``Deal at 5: the seller's cost was 2, the buyer's value 7.``
(or ``No deal.``) precedes ``Game over: ...``.
Actions: free text; the move is the last ``[...]`` token (``envs.base.parse_move``).
Invalid moves: the env's ``invalid_move`` policy (forfeit, retry, random); see envs.base.
"""

from __future__ import annotations

import dataclasses
import re

from .base import GameInfo, TextGameEnv

PRICES = tuple(f"[{p}]" for p in range(9))
ACCEPT, REJECT = "[accept]", "[reject]"
ROLES = ("seller", "buyer")
COSTS, VALUES = (0, 4), (4, 8)  # inclusive ranges, known to both
SCALE = 8.0  # the largest gain: a price of 8 at cost 0, or of 0 at value 8


class BargainingRules:
    """Pure rules of one haggle: ``cost`` (the seller's), ``value`` (the buyer's), the moves so far."""

    def __init__(self, cost: int, value: int, max_offers: int = 4) -> None:
        if not (COSTS[0] <= cost <= COSTS[1] and VALUES[0] <= value <= VALUES[1]):
            raise ValueError(f"cost must be in {COSTS} and value in {VALUES}, got {cost}, {value}")
        self.cost, self.value, self.max_offers = int(cost), int(value), int(max_offers)
        self.moves: list[str] = []

    @property
    def current_player(self) -> int:
        return len(self.moves) % 2

    @property
    def offers(self) -> list[int]:
        return [int(m[1:-1]) for m in self.moves if m in PRICES]

    @property
    def is_terminal(self) -> bool:
        return bool(self.moves) and self.moves[-1] in (ACCEPT, REJECT)

    @property
    def price(self) -> int | None:
        """The agreed price, once a deal is struck."""
        return self.offers[-1] if self.moves[-1:] == [ACCEPT] else None

    def legal_moves(self) -> list[str]:
        if self.is_terminal:
            return []
        answer = [ACCEPT] if self.moves else []
        if len(self.offers) >= self.max_offers:
            return answer + [REJECT]
        return list(PRICES) + answer

    def apply(self, move: str) -> None:
        if move not in self.legal_moves():
            raise ValueError(f"illegal move {move!r}; expected one of {self.legal_moves()}")
        self.moves.append(move)

    def returns(self) -> list[float]:
        price = self.price
        if price is None:
            return [0.0, 0.0]
        return [(price - self.cost) / SCALE, (self.value - price) / SCALE]


class BargainingEnv(TextGameEnv):
    """Two-player bargaining over one item; see the module docstring for rules and texts."""

    game_info = GameInfo(
        name="bargaining_v1",
        num_players=2,
        zero_sum=False,
        reward_range=(-1.0, 1.0),
        max_turns=5,
        moves=PRICES + (ACCEPT, REJECT),
    )
    observation_max_length = 512

    game: BargainingRules

    def __init__(
        self,
        max_offers: int = 4,
        render_mode: str | None = None,
        invalid_move: str = "forfeit",
        invalid_move_reward: float = -1.0,
        max_retries: int = 2,
        *,
        list_legal_moves: bool = True,
    ) -> None:
        if isinstance(max_offers, bool) or not isinstance(max_offers, int) or max_offers < 1:
            raise ValueError(f"max_offers must be an int >= 1, got {max_offers!r}")
        self.max_offers = max_offers
        self.game_info = dataclasses.replace(type(self).game_info, max_turns=max_offers + 1)
        super().__init__(render_mode, invalid_move, invalid_move_reward, max_retries,
                         list_legal_moves=list_legal_moves)

    def _new_game(self) -> BargainingRules:
        cost = int(self.np_random.integers(COSTS[0], COSTS[1] + 1))
        value = int(self.np_random.integers(VALUES[0], VALUES[1] + 1))
        return BargainingRules(cost, value, self.max_offers)

    def _view(self, seat: int) -> str:
        g = self.game
        private = f"Your cost (private): {g.cost}." if seat == 0 else f"Your value (private): {g.value}."
        lines = [
            f"Bargaining over one item. You are the {ROLES[seat]} (player {seat}). {private}",
            f"The seller's cost is {COSTS[0]}-{COSTS[1]}, the buyer's value {VALUES[0]}-{VALUES[1]}; "
            f"at most {g.max_offers} offers.",
            _history(g),
        ]
        if g.is_terminal:
            lines.append(_outcome(g))
        elif g.offers and g.moves[-1] in PRICES:
            who = ROLES[1 - g.current_player]
            verb = "asks" if who == "seller" else "bids"
            lines.append(f"Standing offer: the {who} {verb} {g.offers[-1]}.")
        return "\n".join(lines)

    def _render_text(self) -> str:
        g = self.game
        lines = [f"Bargaining (spectator view). Seller's cost {g.cost}, buyer's value {g.value}.", _history(g)]
        if self.forfeited_by is not None:
            lines.append(f"the {ROLES[self._seat[self.forfeited_by]]} forfeited (invalid move).")
        elif g.is_terminal:
            lines.append(_outcome(g))
        else:
            lines.append(f"the {ROLES[g.current_player]} to move.")
        return "\n".join(lines)


def _history(rules: BargainingRules) -> str:
    moves = ", ".join(f"{ROLES[i % 2]} {m}" for i, m in enumerate(rules.moves))
    return f"History: {moves or 'none'}"


def _outcome(rules: BargainingRules) -> str:
    reveal = f"the seller's cost was {rules.cost}, the buyer's value {rules.value}."
    return f"Deal at {rules.price}: {reveal}" if rules.price is not None else f"No deal: {reveal}"


class BargainerBot:
    """A scripted trader for ``bargaining_v1``, the fixed reference the two roles are measured
    against. It reads its own cost or value from its observation and concedes one step per offer
    from the extreme price toward its limit (a seller asks 8, 7, ... down to cost + 1; a buyer bids
    0, 1, ... up to value - 1); it accepts a standing offer that gains it at least 1, and on the
    last answer it accepts any offer that does not lose. Registered as ``bot:bargainer``; on
    another game's observation it raises ValueError."""

    def __init__(self, seed: int | None = None) -> None:
        del seed  # bots are built with a seed; this one is deterministic

    def act(self, observation: str, legal_actions: list[str]) -> str:
        if not legal_actions:
            raise ValueError("BargainerBot.act needs at least one legal action, got an empty list")
        seat, limit, history, standing = _read(observation)
        mine = sum(move in PRICES for move in history[seat::2])  # its own offers so far
        if standing is not None:
            gain = standing - limit if seat == 0 else limit - standing
            if gain >= 1 or (REJECT in legal_actions and gain >= 0):
                return ACCEPT
        if REJECT in legal_actions:
            return REJECT
        price = max(limit + 1, 8 - mine) if seat == 0 else min(limit - 1, mine)
        return f"[{min(max(price, 0), 8)}]"

    __call__ = act


def _read(observation: str) -> tuple[int, int, list[str], int | None]:
    """(seat, own cost or value, moves so far, the other's standing offer) from an observation."""
    head = re.search(r"You are the (seller|buyer) \(player (\d)\)\. Your (cost|value) \(private\): (\d)\.", observation)
    history = re.search(r"History: (.*)", observation)
    if head is None or history is None:
        raise ValueError(f"expected a bargaining_v1 observation, got {observation[:120]!r}")
    moves = [] if history.group(1).strip() == "none" else [m.split()[-1] for m in history.group(1).split(", ")]
    standing = re.search(r"Standing offer: the \w+ (?:asks|bids) (\d)\.", observation)
    return int(head.group(2)), int(head.group(4)), moves, int(standing.group(1)) if standing else None
