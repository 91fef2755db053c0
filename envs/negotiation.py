"""Simple Negotiation as a text game (``simple_negotiation_v1``), in the spirit of TextArena's
SimpleNegotiation.

Players: ``player_0`` and ``player_1`` move in turn, ``player_0`` first, ``max_turns`` moves
in all (default 10: five each); then the game ends. Resources: wheat, wood, sheep, brick, ore.
Each player starts with 0..5 units of each resource (public: both inventories are shown to
both players) and values one unit of each at 1..10 (private: shown only to its owner), all
drawn from the env's RNG.
Moves: ``[offer: ... -> ...]`` proposes a trade (what you give -> what you get); ``[accept]``
executes the pending offer and ``[deny]`` rejects it, both legal only while an offer made by
the other player is pending; ``[pass]`` does nothing. An offer is pending for exactly one
move, the other player's next one: any move but ``[accept]`` (a denial, a pass, a
counter-offer) drops it, and an offer made on the last turn expires unanswered.
Offer grammar, applied to the move as ``parse_move`` returns it (lowercased, stripped)::

    offer := "offer" ":" side "->" side        (what you give -> what you get)
    side  := item ("," item)*                  item := count resource
    count := a positive integer                resource := wheat | wood | sheep | brick | ore

Spaces around ``:``, ``,`` and ``->`` and between count and resource are optional; items may
come in any order; a resource appears at most once in an offer and both sides are non-empty.
The canonical form, used in every text, has one space after ``:`` and ``,``, spaces around
``->`` and resources in the order above: ``[offer: 2 wood, 1 ore -> 3 wheat]``. A move token
holds at most 32 characters (``parse_move``), so long offers drop the optional spaces:
``[offer:2wood,1ore->1sheep,1brick]`` (its canonical form, longer, appears only in texts). An
offer is legal when it is well formed, you hold what you give and the other player holds what
you ask for.
Legal moves: offers are an open grammar, so ``GameInfo.moves`` holds only the fixed moves
(``[accept] [deny] [pass]``) and ``infos[agent]["legal_actions"]`` lists the fixed moves legal
now plus up to three one-for-one example offers (rotating with the turn). Any legal offer is
a valid move, listed or not: the env's ``is_legal`` (the rules' ``is_legal``) accepts every
legal offer (grammar and inventories), not only the listed ones.
Rewards, at the end: a player's gain is the value of its final inventory minus that of its
starting inventory, under its own values. By default the reward is the gain, from -250 to
+250; both players can gain, so this mode is NOT zero-sum (``GameInfo.zero_sum`` is False).
With ``win_bonus=True`` the player with the larger gain gets +1 and the other -1 (0 each on
equal gains): zero-sum. Observation of the agent to move (last line cut here)::

    Simple Negotiation, turn 2 of 10. You are player 1.
    Your inventory: 0 wheat, 4 wood, 5 sheep, 1 brick, 1 ore (value 60, +0 so far).
    Your values (private): wheat 5, wood 7, sheep 6, brick 1, ore 1.
    Player 0's inventory: 2 wheat, 3 wood, 4 sheep, 5 brick, 0 ore.
    History: player 0 [offer: 1 wheat -> 1 brick]
    Pending: player 0 gives 1 wheat for your 1 brick.
    Offers: [offer: <n> <resource>, ... -> <n> <resource>, ...], you give -> you get.
    Legal moves: [accept] [deny] [pass] [offer: 1 sheep -> 1 wheat] [offer: 1 sheep -> ...

The other player's view shows its own values instead and ``Pending: you give ... for ...``;
after the game the ``Pending`` and ``Offers`` lines go and ``Game over: ...`` ends the text.
Actions: free text; the move is the last ``[...]`` token (``envs.base.parse_move``).
Invalid moves: the env's ``invalid_move`` policy (forfeit, retry, random); see envs.base.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from .base import GameInfo, TextGameEnv

RESOURCES = ("wheat", "wood", "sheep", "brick", "ore")
MOVES = ("[accept]", "[deny]", "[pass]")
MAX_UNITS = 5  # starting units of one resource: 0..MAX_UNITS
MAX_VALUE = 10  # value of one unit: 1..MAX_VALUE
MAX_GAIN = float(MAX_UNITS * MAX_VALUE * len(RESOURCES))
NUM_EXAMPLES = 3
OFFER = re.compile(r"\[offer\s*:(.+)->(.+)\]")
ITEM = re.compile(r"\s*([0-9]+)\s*([a-z]+)\s*")
OFFER_HELP = "Offers: [offer: <n> <resource>, ... -> <n> <resource>, ...], you give -> you get."


@dataclasses.dataclass(frozen=True)
class Offer:
    """A proposed trade: units per resource (in ``RESOURCES`` order) given and asked for."""

    give: tuple[int, ...]
    get: tuple[int, ...]

    @property
    def token(self) -> str:
        """The canonical move token, e.g. ``[offer: 2 wood, 1 ore -> 3 wheat]``."""
        return f"[offer: {_items(self.give)} -> {_items(self.get)}]"

    def fits(self, mine: Sequence[int], theirs: Sequence[int]) -> bool:
        """Whether the offerer holds what it gives and the other holds what is asked."""
        holds = all(n <= m for n, m in zip(self.give, mine))
        return holds and all(n <= t for n, t in zip(self.get, theirs))


def _items(units: Sequence[int]) -> str:
    return ", ".join(f"{n} {r}" for n, r in zip(units, RESOURCES) if n)


def _side(text: str) -> tuple[int, ...] | None:
    units = [0] * len(RESOURCES)
    for item in text.split(","):
        match = ITEM.fullmatch(item)
        if not match or match.group(2) not in RESOURCES or int(match.group(1)) < 1:
            return None
        index = RESOURCES.index(match.group(2))
        if units[index]:
            return None  # the same resource twice
        units[index] = int(match.group(1))
    return tuple(units)


def parse_offer(move: str) -> Offer | None:
    """The offer a normalised move token states, or None if it is not a well-formed offer."""
    match = OFFER.fullmatch(move)
    if not match:
        return None
    give, get = _side(match.group(1)), _side(match.group(2))
    if give is None or get is None or any(g and r for g, r in zip(give, get)):
        return None  # malformed, or a resource on both sides
    return Offer(give, get)


class NegotiationRules:
    """Pure rules: ``inventories[seat][r]`` units and private ``values[seat][r]`` per resource."""

    def __init__(
        self,
        inventories: Sequence[Sequence[int]],
        values: Sequence[Sequence[int]],
        max_turns: int = 10,
        win_bonus: bool = False,
    ) -> None:
        for name, rows in (("inventories", inventories), ("values", values)):
            if len(rows) != 2 or any(len(row) != len(RESOURCES) or min(row) < 0 for row in rows):
                raise ValueError(
                    f"{name} must be 2 rows of {len(RESOURCES)} integers >= 0, got {rows!r}"
                )
        self.start = [tuple(int(n) for n in row) for row in inventories]
        self.inventories = [list(row) for row in self.start]
        self.values = [tuple(int(v) for v in row) for row in values]
        self.max_turns = max_turns
        self.win_bonus = win_bonus
        self.turn = 0
        self.history: list[tuple[int, str]] = []  # (seat, canonical move)
        self.pending: Offer | None = None  # made by the other player on the previous turn

    @property
    def current_player(self) -> int:
        return self.turn % 2

    @property
    def is_terminal(self) -> bool:
        return self.turn >= self.max_turns

    def example_offers(self) -> list[str]:
        """Up to ``NUM_EXAMPLES`` one-for-one legal offers, rotating with the turn."""
        mine, theirs = self.inventories[self.turn % 2], self.inventories[1 - self.turn % 2]
        n = len(RESOURCES)
        pairs = [(g, r) for g in range(n) for r in range(n) if g != r and mine[g] and theirs[r]]
        start = NUM_EXAMPLES * self.turn
        chosen = [pairs[(start + k) % len(pairs)] for k in range(min(NUM_EXAMPLES, len(pairs)))]
        return [f"[offer: 1 {RESOURCES[g]} -> 1 {RESOURCES[r]}]" for g, r in chosen]

    def legal_moves(self) -> list[str]:
        if self.is_terminal:
            return []
        fixed = ["[accept]", "[deny]", "[pass]"] if self.pending is not None else ["[pass]"]
        return fixed + self.example_offers()

    def is_legal(self, move: object) -> bool:
        """A listed move, or any well-formed offer within both players' inventories of now."""
        if self.is_terminal:
            return False
        if move in self.legal_moves():
            return True
        offer = parse_offer(move) if isinstance(move, str) else None
        seat = self.current_player
        return offer is not None and offer.fits(self.inventories[seat], self.inventories[1 - seat])

    def apply(self, move: str) -> None:
        if self.is_terminal:
            raise ValueError(f"illegal move {move!r}: the game is over")
        if not self.is_legal(move):
            raise ValueError(
                f"illegal move {move!r}; expected one of {self.legal_moves()} or another offer "
                "within the inventories"
            )
        seat = self.current_player
        if move == "[accept]":
            giver, taker = self.inventories[1 - seat], self.inventories[seat]
            for r, (give, get) in enumerate(zip(self.pending.give, self.pending.get)):
                giver[r] += get - give
                taker[r] += give - get
        offer = parse_offer(move)
        self.history.append((seat, offer.token if offer else move))
        self.pending = offer
        self.turn += 1

    def value(self, seat: int, inventory: Sequence[int] | None = None) -> int:
        """Value of ``inventory`` (default: ``seat``'s current one) under ``seat``'s values."""
        inventory = self.inventories[seat] if inventory is None else inventory
        return sum(n * v for n, v in zip(inventory, self.values[seat]))

    def gains(self) -> list[int]:
        return [self.value(s) - self.value(s, self.start[s]) for s in (0, 1)]

    def returns(self) -> list[float]:
        gains = self.gains()
        if not self.win_bonus:
            return [float(g) for g in gains]
        if gains[0] == gains[1]:
            return [0.0, 0.0]
        return [1.0, -1.0] if gains[0] > gains[1] else [-1.0, 1.0]


class SimpleNegotiationEnv(TextGameEnv):
    """Simple Negotiation; see the module docstring for rules, grammar and texts."""

    game_info = GameInfo(
        name="simple_negotiation_v1",
        num_players=2,
        zero_sum=False,
        reward_range=(-MAX_GAIN, MAX_GAIN),
        max_turns=10,
        moves=MOVES,
    )

    game: NegotiationRules

    def __init__(
        self,
        max_turns: int = 10,
        win_bonus: bool = False,
        render_mode: str | None = None,
        invalid_move: str = "forfeit",
        invalid_move_reward: float = -1.0,
        max_retries: int = 2,
        *,
        list_legal_moves: bool = True,
    ) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r}")
        if not isinstance(win_bonus, bool):
            raise ValueError(f"win_bonus must be a bool, got {win_bonus!r}")
        self.max_turns = max_turns
        self.win_bonus = win_bonus
        # Facts of this configuration: the game length, and win_bonus makes it zero-sum.
        self.game_info = dataclasses.replace(
            type(self).game_info,
            max_turns=max_turns,
            zero_sum=win_bonus,
            reward_range=(-1.0, 1.0) if win_bonus else (-MAX_GAIN, MAX_GAIN),
        )
        self.observation_max_length = 640 + 64 * max_turns  # a history entry is < 64 chars
        super().__init__(
            render_mode, invalid_move, invalid_move_reward, max_retries,
            list_legal_moves=list_legal_moves,
        )

    def is_legal(self, move: str | None, legal: list[str]) -> bool:
        return self.game.is_legal(move)

    def _new_game(self) -> NegotiationRules:
        size = (2, len(RESOURCES))
        inventories = self.np_random.integers(0, MAX_UNITS + 1, size=size).tolist()
        values = self.np_random.integers(1, MAX_VALUE + 1, size=size).tolist()
        return NegotiationRules(inventories, values, self.max_turns, self.win_bonus)

    def _view(self, seat: int) -> str:
        g = self.game
        other = 1 - seat
        worth = g.value(seat)
        gain = worth - g.value(seat, g.start[seat])
        turn = min(g.turn + 1, g.max_turns)
        lines = [
            f"Simple Negotiation, turn {turn} of {g.max_turns}. You are player {seat}.",
            f"Your inventory: {inventory_text(g.inventories[seat])} (value {worth}, {gain:+d} so far).",
            f"Your values (private): {values_text(g.values[seat])}.",
            f"Player {other}'s inventory: {inventory_text(g.inventories[other])}.",
            f"History: {_history(g)}",
        ]
        if not self._game_over():
            if g.pending is not None:
                give, get = _items(g.pending.give), _items(g.pending.get)
                mine = g.current_player != seat  # the offer is by the player not to move
                who = "you give" if mine else f"player {other} gives"
                lines.append(f"Pending: {who} {give} for {'' if mine else 'your '}{get}.")
            lines.append(OFFER_HELP)
        return "\n".join(lines)

    def _render_text(self) -> str:
        g = self.game
        lines = [f"Simple Negotiation (spectator view), {g.turn} of {g.max_turns} turns played."]
        for seat, gain in enumerate(g.gains()):
            inventory = inventory_text(g.inventories[seat])
            lines.append(f"player {seat}: {inventory}; values {values_text(g.values[seat])}; gain {gain:+d}.")
        lines.append(f"History: {_history(g)}")
        if g.pending is not None and not g.is_terminal:
            lines.append(f"Pending: {g.pending.token} by player {1 - g.current_player}.")
        return "\n".join(lines)


def inventory_text(units: Sequence[int]) -> str:
    """Units per resource, every resource named: ``2 wheat, 0 wood, ...``."""
    return ", ".join(f"{n} {r}" for n, r in zip(units, RESOURCES))


def values_text(values: Sequence[int]) -> str:
    """A player's value per unit of each resource: ``wheat 3, wood 1, ...``."""
    return ", ".join(f"{r} {v}" for r, v in zip(RESOURCES, values))


def _history(rules: NegotiationRules) -> str:
    return "; ".join(f"player {seat} {move}" for seat, move in rules.history) or "none"
