"""Best-response opponents: the exact best response to the learner, as a league member.

Why: where a game's exploitability is computed exactly (Kuhn Poker with OpenSpiel, Tic-Tac-Toe
by expectimax over its boards), the computation finds more than a number: it finds the strategy
that beats the learner most, move by move. Training against past checkpoints and fixed bots
teaches the learner to beat them; it says nothing about the lines a player who knows the
learner would choose. Adding that player to the league every few steps is the double oracle
(McMahan et al. 2003) and PSRO's exact-oracle case (Lanctot et al. 2017): the learner meets its
own worst opponent, and PFSP keeps playing the old best responses it still loses to.

A best response is a table: the position's key (Kuhn Poker's information state, Tic-Tac-Toe's
board) -> every move of the highest value there, for both seats. It is stored as JSON in the
league's ``best_responses/`` folder (``<id>.json``), is a league agent of type ``best_response``
whose policy is ``bot:<id>``, and plays as a bot: a move of the table at random among equal ones
(a legal move at random where the table has none). In a run of several games each game that has
one gets its own (``br-<game>-<step>``, tagged ``game:<game>``), seated only in that game's
episodes. The exploiter learners of ``data.league.exploiters`` estimate the same thing by
learning; this is the exact thing, for the games that have it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping

import numpy as np

from sp_lightning.atomic_file import atomic_write


def _kuhn_key(observation: str) -> str:
    from sp_lightning.evaluation.exploitability import observation_key

    return observation_key(observation)


def _tictactoe_key(observation: str) -> str:
    from sp_lightning.evaluation.tictactoe_exploitability import observation_key

    return observation_key(observation)


OBSERVATION_KEYS: dict[str, Callable[[str], str]] = {
    "kuhn_poker_v1": _kuhn_key,
    "tictactoe_v1": _tictactoe_key,
}
"""Game name -> the key of a best-response table that an observation is read as: the games
whose exploitability computation (``sp_lightning.evaluation.strategy.EXPLOITABILITY``) returns
a best response."""

AGENT_TYPE = "best_response"
"""The league type (and PFSP bucket) of best-response members."""
FOLDER = "best_responses"
GAME_TAG = "game:"
"""The tag prefix that names a best response's game in a league of several games (``game:<name>``):
it plays only there, as its table reads only that game's positions."""


def agent_id(step: int, game: str | None = None) -> str:
    """``br-<step>``; in a run of several games ``br-<game>-<step>``, one per game that has one."""
    return f"br-{step:06d}" if game is None else f"br-{game}-{step:06d}"


def tags(game: str | None = None) -> list[str]:
    """A best response's league tags: with several games, the game it plays in (``game_of``)."""
    return ["best_response"] if game is None else ["best_response", f"{GAME_TAG}{game}"]


def game_of(record) -> str | None:
    """The one game a league member (an ``AgentRecord``) plays in, or None: every game."""
    if record.type != AGENT_TYPE:
        return None
    return next((t.removeprefix(GAME_TAG) for t in record.tags if t.startswith(GAME_TAG)), None)


def table_path(league_dir: str, agent: str) -> str:
    return os.path.join(league_dir, FOLDER, f"{agent}.json")


def save_table(path: str, game: str, moves: Mapping[str, list[str]], step: int, exploitability: float) -> None:
    """Write one best response (atomically: a crash leaves the old file or the new one)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_write(path, "w", encoding="utf-8") as f:
        json.dump({"game": game, "step": step, "exploitability": exploitability, "moves": dict(moves)}, f)


def load_table(path: str) -> dict:
    """A saved best response: ``{"game", "step", "exploitability", "moves"}``."""
    with open(path) as f:
        table = json.load(f)
    if not isinstance(table, dict) or not isinstance(table.get("moves"), dict) or table.get("game") not in OBSERVATION_KEYS:
        raise ValueError(f"{path}: expected a best-response table of one of {sorted(OBSERVATION_KEYS)} "
                         f"(keys game, step, exploitability, moves)")
    return table


class BestResponseBot:
    """Plays a best-response table: a move of the table's at the observation's key, at random
    among equal ones; where the table has no legal move (a position the computation did not
    see), a legal move at random. On another game's observation it raises ValueError."""

    def __init__(self, game: str, moves: Mapping[str, list[str]], seed: int | None = None) -> None:
        if game not in OBSERVATION_KEYS:
            raise ValueError(f"best-response bot: game expected one of {sorted(OBSERVATION_KEYS)}, got {game!r}")
        self.game = game
        self.key = OBSERVATION_KEYS[game]
        self.moves = {key: list(moves) for key, moves in moves.items()}
        self.rng = np.random.default_rng(seed)

    def act(self, observation: str, legal_actions: list[str]) -> str:
        if not legal_actions:
            raise ValueError("BestResponseBot.act needs at least one legal action, got an empty list")
        choices = [m for m in self.moves.get(self.key(observation), []) if m in legal_actions] or list(legal_actions)
        return choices[int(self.rng.integers(len(choices)))]

    __call__ = act
