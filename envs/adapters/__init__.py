"""Adapters that put games from other libraries on the text-game contract (``envs.base``).

- ``ClassicTextEnv`` (``envs.adapters.pettingzoo_classic``): any PettingZoo AEC env with a
  ``Discrete`` action space and an ``action_mask`` in its observation (PettingZoo classic:
  ``tictactoe_v3``, ``connect_four_v3``, ``leduc_holdem_v4``, ...). Needs the game's own
  extras, e.g. ``pip install "pettingzoo[classic]"``.
- ``TextArenaEnv`` (``envs.adapters.textarena``): any TextArena game with two or more
  players. Needs ``pip install textarena==0.7.4``; see ``TEXTARENA.md`` for the games that
  work offline.

Both are imported lazily, so ``import envs.adapters`` needs neither library::

    from envs.adapters import ClassicTextEnv, TextArenaEnv
    env = ClassicTextEnv("connect_four_v3", invalid_move="retry")
    env = TextArenaEnv("KuhnPoker-v0", invalid_move="game")
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ClassicTextEnv": "pettingzoo_classic",
    "ClassicGame": "pettingzoo_classic",
    "CLASSIC_GAMES": "pettingzoo_classic",
    "TextArenaEnv": "textarena",
    "TextArenaGame": "textarena",
    "TEXTARENA_GAMES": "textarena",
}
ELISION = "\n(...)\n"


def fit_text(text: str, max_length: int) -> str:
    """Clip ``text`` to ``max_length`` characters, keeping its head and (mostly) its tail.

    The tail holds the status line of an observation, so three quarters of the room go to it.
    """
    if len(text) <= max_length:
        return text
    room = max_length - len(ELISION)
    head = room // 4
    return text[:head] + ELISION + text[len(text) - (room - head) :]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["fit_text", *_LAZY]
