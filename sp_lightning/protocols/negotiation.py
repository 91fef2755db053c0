"""Negotiation with private valuations, as a chat: each side sees only its own values.

Two traders (``player_0`` speaks first, then ``player_1``, ``max_turns`` messages in all) hold
public inventories of five resources and value each unit privately. The rules are those of the
``simple_negotiation_v1`` game (``envs.negotiation.NegotiationRules``): a message's last ``[...]``
token is its move (``[offer: 2 wood -> 1 ore]``, ``[accept]``, ``[deny]``, ``[pass]``); an offer
stands for the other side's next message only.

Unlike the PettingZoo game, this is a :class:`~sp_lightning.episodes.MultiTurnEpisode`: what a
trader writes around its move (its pitch, a bluff) goes into the shared transcript and the other
side reads it, while its valuations reach only its own prompt, through ``get_observation``,
never the transcript. The referee announces each move's effect publicly (``env_response``); a
message without a legal move counts as a pass and is flagged ``invalid_move`` (penalised on that
step by the rubric).

Reward at the end: each side's gain (the value of its final inventory minus its starting one,
under its own values) divided by the largest possible gain, so within [-1, 1]; or, with
``win_bonus``, +1 to the larger gain and -1 to the smaller (zero-sum, 0 each on a tie).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from envs.base import parse_move
from envs.negotiation import (
    MAX_GAIN, MAX_UNITS, MAX_VALUE, OFFER_HELP, RESOURCES, NegotiationRules, inventory_text, parse_offer,
    values_text,
)
from sp_lightning.episodes import AlternatingRolesEpisode, ChatState
from sp_lightning.rubric import Rubric, invalid_move
from sp_lightning.sources import EpisodeRequest, EpisodeSource
from sp_lightning.types import LEARNER, PolicyRef, Rollout, parse_policy

SEATS = ("player_0", "player_1")


@dataclass(kw_only=True)
class NegotiationEpisode(AlternatingRolesEpisode):
    """One negotiation (see the module docstring)."""

    win_bonus: bool = False
    invalid_move_penalty: float = 0.1
    name: str = "negotiation"
    rubric: Rubric = None  # built from win_bonus and invalid_move_penalty
    seats: dict[str, PolicyRef] = field(default_factory=lambda: {seat: LEARNER for seat in SEATS})
    system_prompts: dict[str, str] = field(default_factory=lambda: {
        seat: "You are a trader. End each message with one move in brackets." for seat in SEATS})

    def __post_init__(self):
        if self.rubric is None:
            step = [(invalid_move, self.invalid_move_penalty)] if self.invalid_move_penalty else []
            self.rubric = Rubric(outcome=[(self.final_rewards, 1.0)], step=step)
        super().__post_init__()
        if tuple(self.seats) != SEATS:
            raise ValueError(f"NegotiationEpisode.seats: expected the roles {list(SEATS)}, got {list(self.seats)}")

    def rules(self, state: ChatState) -> NegotiationRules:
        return state.data["rules"]

    def setup(self, state: ChatState) -> None:
        draw = state.rng
        inventories = [[draw.randint(0, MAX_UNITS) for _ in RESOURCES] for _ in SEATS]
        values = [[draw.randint(1, MAX_VALUE) for _ in RESOURCES] for _ in SEATS]
        state.data["rules"] = NegotiationRules(inventories, values, self.max_turns, self.win_bonus)
        state.data["invalid"] = 0  # invalid moves, both seats
        state.data["last_move"] = None

    def initial_prompt(self, state: ChatState) -> str:
        rules = self.rules(state)
        inventories = "\n".join(f"{seat} holds {inventory_text(rules.inventories[i])}." for i, seat in enumerate(SEATS))
        return (f"A negotiation of {self.max_turns} messages. Each trader values the resources privately; "
                f"trade to raise the value of what you hold.\n{inventories}\n{OFFER_HELP} "
                f"Or answer an offer with [accept] or [deny], or [pass].")

    def get_observation(self, state: ChatState, role: str) -> str:
        rules = self.rules(state)
        seat = SEATS.index(role)
        gain = rules.gains()[seat]
        lines = [f"Message {rules.turn + 1} of {rules.max_turns}. You are {role}.",
                 f"You hold {inventory_text(rules.inventories[seat])} ({gain:+d} in value so far).",
                 f"Your values (private): {values_text(rules.values[seat])}.",
                 f"Legal moves include: {' '.join(rules.legal_moves())}"]
        return "\n".join(lines)

    def legal_actions(self, state: ChatState, role: str) -> list[str]:
        return self.rules(state).legal_moves()

    def env_response(self, state: ChatState, role: str, text: str) -> str:
        rules = self.rules(state)
        move = parse_move(text)
        legal = move is not None and rules.is_legal(move)
        if not legal:
            state.data["invalid"] += 1
            move = "[pass]"
        pending = rules.pending
        rules.apply(move)
        state.data["last_move"] = (move, not legal)
        other = SEATS[1 - SEATS.index(role)]
        if not legal:
            return f"Referee: {role} made no legal move; it passes."
        if move == "[accept]":
            return (f"Referee: {role} accepts; {other} gives {inventory_text(pending.give)} for {inventory_text(pending.get)}. "
                    f"{role} now holds {inventory_text(rules.inventories[SEATS.index(role)])}; "
                    f"{other} holds {inventory_text(rules.inventories[SEATS.index(other)])}.")
        offer = parse_offer(move)
        if offer is not None:
            return f"Referee: {role} offers {inventory_text(offer.give)} for {other}'s {inventory_text(offer.get)}."
        return f"Referee: {role} {'denies' if move == '[deny]' else 'passes'}."

    def step_info(self, state: ChatState, role: str, text: str) -> dict[str, Any]:
        move, invalid = state.data["last_move"]
        return {"invalid_move": invalid, "parsed_move": move}

    def is_done(self, state: ChatState) -> bool:
        return self.rules(state).is_terminal

    def final_rewards(self, rollout: Rollout, extras: dict[str, Any]) -> dict[str, float]:
        rules = self.rules(extras["state"])
        returns = rules.returns()
        scale = 1.0 if self.win_bonus else MAX_GAIN
        return {seat: returns[i] / scale for i, seat in enumerate(SEATS)}

    def metrics(self, state: ChatState) -> dict[str, float]:
        rules = self.rules(state)
        trades = sum(move == "[accept]" for _, move in rules.history)
        gains = rules.gains()
        return {"trades": float(trades), "gain_total": float(sum(gains)),
                "invalid_move_rate": state.data["invalid"] / max(1, state.turn)}


class Negotiation(EpisodeSource):
    """Every episode of a batch is one negotiation with fresh inventories and valuations.

    Args:
        max_turns: Messages in all (both sides).
        win_bonus: Zero-sum rewards (+1 / -1 by who gained more) instead of the scaled gains.
        invalid_move_penalty: Subtracted from a message without a legal move, on that step.
        opponent: Who plays ``player_1``: ``learner`` (mirror self-play), ``base``,
            ``checkpoint:<id>`` or ``bot:<name>`` (``bot:random`` picks a listed legal move).
    """

    def __init__(self, max_turns: int = 6, win_bonus: bool = False, invalid_move_penalty: float = 0.1,
                 opponent: str = "learner"):
        if max_turns < 1:
            raise ValueError(f"data.episodes.max_turns: expected >= 1, got {max_turns}")
        if invalid_move_penalty < 0:
            raise ValueError(f"data.episodes.invalid_move_penalty: expected >= 0, got {invalid_move_penalty}")
        self.opponent = parse_policy(opponent)
        # one episode serves every request: a negotiation's state lives in its ChatState
        self.episode = NegotiationEpisode(max_turns=max_turns, win_bonus=win_bonus,
                                          invalid_move_penalty=invalid_move_penalty,
                                          seats={SEATS[0]: LEARNER, SEATS[1]: self.opponent})

    def get_batch(self, rng: random.Random, size: int) -> list[EpisodeRequest]:
        return [EpisodeRequest(self.episode, rng.randrange(2**31)) for _ in range(size)]
