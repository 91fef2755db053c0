"""Bots that play any game of the text-game contract (see envs.base) without a model.

A bot is called as ``bot.act(observation_text, legal_actions) -> action_text`` (or simply
``bot(observation_text, legal_actions)``), so it can be a policy for ``envs.play``.
"""

from __future__ import annotations

import string

import numpy as np

from .bargaining import BargainerBot  # game-specific bots live with their game
from .diplomacy import DiplomacyRandomBot, PlannerBot
from .kuhn_poker import NashBot
from .tictactoe import PerfectBot, PressingBot, TacticalBot

_PRINTABLE = string.printable
_EXOTIC = "éßøЖж中文🙂\u200b\u00a0\t\r\x00\\\"'`{}<>"
_FAKE_MOVES = (
    "[]", "[ ]", "[raise]", "[99]", "[-1]", "[pass]", "[" + "x" * 40 + "]", "[b\net]", "[[", "]]",
)


class RandomBot:
    """Plays a uniformly random legal move."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observation: str, legal_actions: list[str]) -> str:
        if not legal_actions:
            raise ValueError("RandomBot.act needs at least one legal action, got an empty list")
        return legal_actions[int(self.rng.integers(len(legal_actions)))]

    __call__ = act


class ChaosBot:
    """Sends random text, mostly invalid, to fuzz a game's move parsing and invalid-move policy.

    With probability ``legal_prob`` the text is a legal move (with random case and padding
    inside the brackets) between two bracket-free noise strings, so it parses to that move.
    Otherwise it is one of: random printable noise (which may contain brackets), exotic
    unicode, an empty string, a long string, or fake move tokens; these can happen to
    contain a legal move, rarely.
    """

    free_text = True
    """It answers a turn that lists no legal moves (a chat, a debate); other bots pick among them."""

    def __init__(self, seed: int | None = None, legal_prob: float = 0.1) -> None:
        if not 0.0 <= legal_prob <= 1.0:
            raise ValueError(f"legal_prob must be in [0, 1], got {legal_prob!r}")
        self.rng = np.random.default_rng(seed)
        self.legal_prob = legal_prob

    def _noise(self, chars: str, max_len: int) -> str:
        n = int(self.rng.integers(max_len + 1))
        return "".join(chars[i] for i in self.rng.integers(len(chars), size=n))

    def act(self, observation: str, legal_actions: list[str]) -> str:
        if legal_actions and self.rng.random() < self.legal_prob:
            move = legal_actions[int(self.rng.integers(len(legal_actions)))]
            inner = move[1:-1].upper() if self.rng.random() < 0.5 else move[1:-1]
            pad = " " * int(self.rng.integers(3))
            quiet = _PRINTABLE.replace("[", "").replace("]", "")
            return self._noise(quiet, 40) + f"[{pad}{inner}{pad}]" + self._noise(quiet, 40)
        kind = int(self.rng.integers(5))
        if kind == 0:
            return self._noise(_PRINTABLE, 80)
        if kind == 1:
            return self._noise(_EXOTIC + _PRINTABLE, 40)
        if kind == 2:
            return ""
        if kind == 3:
            return self._noise(_PRINTABLE, 2000)
        fakes = [_FAKE_MOVES[i] for i in self.rng.integers(len(_FAKE_MOVES), size=3)]
        return " ".join(fakes)

    __call__ = act


BOTS = {"random": RandomBot, "chaos": ChaosBot, "tictactoe_tactical": TacticalBot, "tictactoe_perfect": PerfectBot,
        "tictactoe_pressing": PressingBot, "bargainer": BargainerBot, "diplomacy_planner": PlannerBot, "diplomacy_random": DiplomacyRandomBot,
        "kuhn_poker_nash": NashBot}
"""``bot:<name>`` -> class; every bot is built as ``cls(seed=...)``. Bots named after a game
play only that game."""


def make_bots(seed: int | None = None) -> dict[str, object]:
    """One of every bot, ``bot:<name>`` -> instance, all seeded with ``seed``."""
    return {name: cls(seed=seed) for name, cls in BOTS.items()}
