"""Text games as PettingZoo AEC envs, usable with PettingZoo alone.

The text-game contract is written down in ``envs.base``. Games are registered by id in
``GAMES``; ``make`` builds one by id or by dotted class path, and ``play`` runs one episode
with a policy per agent::

    from envs import make, play, RandomBot
    env = make("kuhn_poker_v1", num_hands=3, invalid_move="retry")
    play(env, {"player_0": RandomBot(0), "player_1": RandomBot(1)}, seed=0)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from pettingzoo import AECEnv

from .bargaining import BargainingEnv
from .base import GameInfo, TextGameEnv, parse_move
from .bots import BOTS, ChaosBot, RandomBot, make_bots
from .connect_four import ConnectFourEnv
from .diplomacy import DiplomacyEnv
from .kuhn_poker import KuhnPokerEnv
from .kuhn_poker_3p import KuhnPoker3Env
from .liars_dice import LiarsDiceEnv
from .negotiation import SimpleNegotiationEnv
from .tictactoe import TicTacToeEnv

GAMES: dict[str, type[TextGameEnv]] = {
    cls.game_info.name: cls
    for cls in (TicTacToeEnv, KuhnPokerEnv, ConnectFourEnv, LiarsDiceEnv, KuhnPoker3Env, SimpleNegotiationEnv,
                BargainingEnv, DiplomacyEnv)
}

ADAPTERS = {"textarena": "TextArenaEnv", "pettingzoo": "ClassicTextEnv"}
"""Prefixes of adapted game ids: 'textarena:KuhnPoker-v0', 'pettingzoo:tictactoe_v3'."""

Policy = Callable[[str, list[str]], str]


def make(game_id_or_class_path: str, **kwargs: Any) -> AECEnv:
    """Build a game from a registered id (``"tictactoe_v1"``) or a class path
    (``"my_pkg.my_module.MyGameEnv"``, an ``AECEnv`` subclass); kwargs go to its constructor."""
    name = game_id_or_class_path
    if name in GAMES:
        return GAMES[name](**kwargs)
    prefix, sep, adapted_id = name.partition(":")
    if sep and prefix in ADAPTERS:  # adapters load their optional packages only when used
        from . import adapters

        return getattr(adapters, ADAPTERS[prefix])(adapted_id, **kwargs)
    known = ", ".join(sorted(GAMES))
    module_name, _, class_name = name.rpartition(".")
    if not module_name:
        raise ValueError(
            f"unknown game {name!r}: expected a registered id ({known}), an adapted game "
            "('textarena:<TextArena id>', 'pettingzoo:<classic env id>') or a dotted class path "
            "like 'my_pkg.my_module.MyGameEnv'"
        )
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(
            f"cannot load game class {name!r} ({exc}); registered ids are: {known}"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, AECEnv)):
        raise ValueError(
            f"{name!r} is not a pettingzoo.AECEnv subclass; registered ids are: {known}"
        )
    return cls(**kwargs)


def play_turns(env: AECEnv, policies: dict[str, Policy], seed: int | None, totals: dict[str, float]):
    """The loop of :func:`play` as a generator, from ``env.reset(seed=seed)``, adding each agent's
    rewards to ``totals``: a seat without a policy is asked through the generator, which yields
    its legal actions and plays the move sent back (a person's seat, one move at a time)."""
    env.reset(seed=seed)
    for agent in env.agent_iter():
        observation, reward, terminated, truncated, info = env.last()
        totals[agent] += float(reward)
        if terminated or truncated:
            env.step(None)
        elif agent in policies:
            env.step(policies[agent](observation["text"], info["legal_actions"]))
        else:
            env.step((yield info["legal_actions"]))


def play(env: AECEnv, policies: dict[str, Policy], seed: int | None = None) -> dict[str, float]:
    """Run one episode from ``env.reset(seed=seed)`` and return each agent's total reward.

    ``policies[agent](observation_text, legal_actions)`` returns the agent's action text;
    bots (``RandomBot(seed).act``, or the bot itself) fit.
    """
    totals = {agent: 0.0 for agent in env.possible_agents}
    for _ in play_turns(env, policies, seed, totals):
        raise KeyError(f"play: no policy for seat {env.agent_selection!r}; policies: {sorted(policies)}")
    return totals


__all__ = [
    "play_turns",
    "BOTS",
    "make_bots",
    "GAMES",
    "ChaosBot",
    "ConnectFourEnv",
    "DiplomacyEnv",
    "GameInfo",
    "KuhnPoker3Env",
    "KuhnPokerEnv",
    "LiarsDiceEnv",
    "RandomBot",
    "SimpleNegotiationEnv",
    "TextGameEnv",
    "TicTacToeEnv",
    "make",
    "parse_move",
    "play",
]
