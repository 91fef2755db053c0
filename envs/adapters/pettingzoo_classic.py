"""Any PettingZoo AEC env with a ``Discrete`` action space and an ``action_mask`` as a text game.

``ClassicTextEnv(env_id_or_env)`` wraps a PettingZoo env (``"tictactoe_v3"``,
``"classic/connect_four-v3"`` or an ``AECEnv`` instance) on the text-game contract of
``envs.base``:

Players: ``player_0 .. player_{n-1}`` in the order of the wrapped env's ``possible_agents``
(``tictactoe_v3``'s ``player_1`` is our ``player_0``).
What each sees: ``observe(agent)`` renders the wrapped env's observation of that agent (and
only that one, so private cards stay private) as text. ``CLASSIC_GAMES`` holds per-game
renderers; any other game gets ``render_array``, a generic dump of the observation array.
Observation of the agent to move in ``connect_four_v3``::

    Connect Four. You are player 1 (O).
    [0] [1] [2] [3] [4] [5] [6]
     .   .   .   .   .   .   .
     ...
     .   X   .   O   X   .   .
    Legal moves: [0] [1] [2] [3] [4] [5] [6]

Actions: free text; the move is the last ``[...]`` token (``envs.base.parse_move``). The
legal moves are the actions the wrapped env's ``action_mask`` allows, named ``[k]`` for
action index ``k`` unless the game names them (``leduc_holdem_v4``: ``[call] [raise]
[fold] [check]``); the move is mapped back to its index and played.
Rewards: the wrapped env's rewards, summed over the episode and given on the step that ends
the game. Invalid moves never reach the wrapped env: the env's ``invalid_move`` policy
(forfeit, retry, random; see ``envs.base``) handles them.
Seeds: ``reset(seed=s)`` seeds ``np_random``, which draws the seed of the wrapped env's
``reset`` on every reset (so unseeded resets after a seeded one are reproducible too).
Facts: ``game_info.name`` is ``"pettingzoo:<name>"`` (``"pettingzoo:tictactoe_v3"``); the
moves, turn bound and reward range come from ``CLASSIC_GAMES`` (generic defaults otherwise).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.spaces import Discrete
from pettingzoo import AECEnv

from envs.adapters import fit_text
from envs.base import RENDER_MODES, GameInfo, TextGameEnv

Renderer = Callable[[Any, int], str]
"""``render(observation, seat) -> text``: the wrapped env's observation of seat's agent."""

MARKS = ("X", "O")


def _array(observation: Any) -> np.ndarray:
    return np.asarray(observation["observation"] if isinstance(observation, dict) else observation)


def _number(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    return f"{value:g}" if isinstance(value, (float, np.floating)) else str(value)


def render_array(observation: Any, seat: int) -> str:
    """Generic text of an observation array: all values when small (up to 2-D, 256 values),
    else the nonzero entries as ``index=value``. The ``action_mask`` is left out."""
    array = _array(observation)
    if array.ndim <= 2 and array.size <= 256:
        rows = np.atleast_2d(array)
        lines = [" ".join(_number(v) for v in row) for row in rows]
        return f"Observation, shape {tuple(array.shape)}:\n" + "\n".join(lines)
    entries = [
        ",".join(str(int(i)) for i in index) + "=" + _number(array[tuple(index)])
        for index in np.argwhere(array)
    ]
    return (
        f"Observation, shape {tuple(array.shape)}, {len(entries)} nonzero entries "
        "(index=value):\n" + " ".join(entries)
    )


def render_tictactoe(observation: Any, seat: int) -> str:
    """``tictactoe_v3``: planes (mine, theirs) of a 3x3 board indexed [column, row]; action
    ``k`` is column ``k // 3``, row ``k % 3``. Empty cells show their move token."""
    planes = _array(observation)
    mine, theirs = MARKS[seat], MARKS[1 - seat]
    rows = []
    for r in range(3):
        cells = [
            mine if planes[c, r, 0] else theirs if planes[c, r, 1] else f"[{3 * c + r}]"
            for c in range(3)
        ]
        rows.append(" ".join(cells))
    return f"You are {mine}.\n" + "\n".join(rows)


def render_connect_four(observation: Any, seat: int) -> str:
    """``connect_four_v3``: planes (mine, theirs) of a 6x7 board, top row first; action ``k``
    drops a disc in column ``k``."""
    planes = _array(observation)
    mine, theirs = MARKS[seat], MARKS[1 - seat]
    lines = [f"You are {mine}. Drop a disc: the move is the column."]
    lines.append(" ".join(f"[{c}]" for c in range(7)))
    for row in planes:
        marks = (mine if cell[0] else theirs if cell[1] else "." for cell in row)
        lines.append(" ".join(f" {mark} " for mark in marks))
    return "\n".join(lines)


def render_leduc(observation: Any, seat: int) -> str:
    """``leduc_holdem_v4``: one-hot vector of 36: hand (J, Q, K), public card (J, Q, K),
    own chips in the pot (0..14), opponent's chips in the pot (0..14)."""
    obs = _array(observation)
    cards = "JQK"
    hand = "".join(cards[i] for i in np.flatnonzero(obs[0:3])) or "?"
    public = "".join(cards[i] for i in np.flatnonzero(obs[3:6])) or "none yet"
    own = ",".join(str(i) for i in np.flatnonzero(obs[6:21]))
    other = ",".join(str(i) for i in np.flatnonzero(obs[21:36]))
    return (
        f"Your card: {hand}. Public card: {public}.\n"
        f"Chips in the pot: yours {own}, opponent's {other}."
    )


@dataclasses.dataclass(frozen=True)
class ClassicGame:
    """Per-game text for a wrapped env: a title, a renderer and (optionally) move names.

    Attributes:
        title: shown first in every observation.
        render: the board text of one seat's observation.
        move_names: move token per action index (canonical ``[...]`` tokens); None: ``[k]``.
        max_turns: the most moves an episode can take (``GameInfo.max_turns``).
        reward_range: (lowest, highest) episode reward of one agent.
        zero_sum: whether the rewards of every episode sum to zero.
    """

    title: str
    render: Renderer = render_array
    move_names: tuple[str, ...] | None = None
    max_turns: int = 10_000
    reward_range: tuple[float, float] = (-1.0, 1.0)
    zero_sum: bool = True


CLASSIC_GAMES: dict[str, ClassicGame] = {
    "tictactoe_v3": ClassicGame("Tic-Tac-Toe", render_tictactoe, max_turns=9),
    "connect_four_v3": ClassicGame("Connect Four", render_connect_four, max_turns=42),
    "leduc_holdem_v4": ClassicGame(
        "Leduc Hold'em",
        render_leduc,
        move_names=("[call]", "[raise]", "[fold]", "[check]"),
        max_turns=12,
        # blinds 1 and 2; two raises a round, of 2 then of 4: at most 2 + 4 + 8 = 14 chips each,
        # and rlcard pays chips / big blind (the 6.5 declared before came from an ante of 1)
        reward_range=(-7.0, 7.0),
    ),
}
"""Per-game renderers and move names, keyed by the wrapped env's ``metadata["name"]``."""


def make_pettingzoo_env(env_id: str) -> AECEnv:
    """Build an AEC env from PettingZoo's registry: ``"tictactoe_v3"`` (a classic game) or a
    registry id such as ``"classic/tictactoe-v3"``."""
    import pettingzoo

    match = re.fullmatch(r"([a-z0-9_]+)_v(\d+)", env_id)
    registry_id = f"classic/{match[1]}-v{match[2]}" if match else env_id
    if registry_id not in pettingzoo.aec_registry:
        known = ", ".join(sorted(k for k in pettingzoo.aec_registry if k.startswith("classic/")))
        raise ValueError(
            f"unknown PettingZoo env {env_id!r}: expected e.g. 'tictactoe_v3' or a registry id "
            f"({known}), or pass an AECEnv instance"
        )
    return pettingzoo.make("aec", registry_id)


class ClassicRules:
    """The ``GameRules`` of a wrapped AEC env: moves are names of its discrete actions."""

    def __init__(self, env: AECEnv, move_names: tuple[str, ...], seed: int) -> None:
        self.env = env
        self.move_names = move_names
        self.seed = seed
        self.history: list[str] = []  # the moves applied since the reset, in order
        self._index = {name: k for k, name in enumerate(move_names)}
        env.reset(seed=seed)
        self._seat = {agent: i for i, agent in enumerate(env.possible_agents)}
        self.totals = [0.0] * len(env.possible_agents)
        self._legal: list[str] | None = None  # of the current position

    @property
    def current_player(self) -> int:
        return self._seat[self.env.agent_selection]

    @property
    def is_terminal(self) -> bool:
        env = self.env
        return not env.agents or any(env.terminations[a] or env.truncations[a] for a in env.agents)

    def legal_moves(self) -> list[str]:
        if self.is_terminal:
            return []
        if self._legal is None:
            mask = self.env.observe(self.env.agent_selection)["action_mask"]
            self._legal = [self.move_names[k] for k in np.flatnonzero(mask)]
        return list(self._legal)

    def apply(self, move: str) -> None:
        if move not in self.legal_moves():
            raise ValueError(f"illegal move {move!r}; expected one of {self.legal_moves()}")
        self.env.step(self._index[move])
        self.history.append(move)
        self._legal = None
        for agent, reward in self.env.rewards.items():
            self.totals[self._seat[agent]] += float(reward)

    def returns(self) -> list[float]:
        return list(self.totals)

    def replayed_on(self, env: AECEnv) -> ClassicRules:
        """These rules on a fresh ``env`` of the same game: reset with the same seed and the same
        moves replayed (PettingZoo envs copy as new, unplayed ones, so a copy is a replay)."""
        twin = ClassicRules(env, self.move_names, self.seed)
        for move in self.history:
            twin.apply(move)
        return twin

    def observation(self, seat: int) -> Any:
        return self.env.observe(self.env.possible_agents[seat])


class ClassicTextEnv(TextGameEnv):
    """A PettingZoo AEC env with discrete, masked actions as a text game; see the module
    docstring.

    Args:
        env_id_or_env: a PettingZoo classic id (``"tictactoe_v3"``), a registry id
            (``"classic/tictactoe-v3"``) or an ``AECEnv`` instance (owned by this env).
        render_text: ``render(observation, seat) -> str``; default: from ``CLASSIC_GAMES``,
            else ``render_array``.
        move_names: a move token per action index; default: from ``CLASSIC_GAMES``, else
            ``[0] .. [n-1]``.
        render_mode, invalid_move, invalid_move_reward, max_retries: as ``TextGameEnv``.
        observation_max_length: observations longer than this are clipped in the middle.
    """

    def __init__(
        self,
        env_id_or_env: str | AECEnv,
        render_text: Renderer | None = None,
        move_names: tuple[str, ...] | None = None,
        render_mode: str | None = None,
        invalid_move: str = "forfeit",
        invalid_move_reward: float = -1.0,
        max_retries: int = 2,
        observation_max_length: int = 4096,
    ) -> None:
        self.env_id = env_id_or_env if isinstance(env_id_or_env, str) else None  # what a snapshot rebuilds
        if isinstance(env_id_or_env, str):
            inner = make_pettingzoo_env(env_id_or_env)
        elif isinstance(env_id_or_env, AECEnv):
            inner = env_id_or_env
        else:
            got = type(env_id_or_env).__name__
            raise ValueError(f"env_id_or_env must be a PettingZoo id or an AECEnv, got {got}")
        name = inner.metadata.get("name", type(inner.unwrapped).__name__)
        agent = inner.possible_agents[0]
        space = inner.action_space(agent)
        if not isinstance(space, Discrete):
            raise ValueError(f"{name}: expected a Discrete action space, got {space}")
        obs_space = inner.observation_space(agent)
        if not (hasattr(obs_space, "spaces") and "action_mask" in obs_space.spaces):
            raise ValueError(
                f"{name}: expected an observation dict with an 'action_mask', got {obs_space}"
            )
        spec = CLASSIC_GAMES.get(name, ClassicGame(title=name))
        names = move_names or spec.move_names or tuple(f"[{k}]" for k in range(int(space.n)))
        if len(names) != int(space.n):
            raise ValueError(f"{name}: expected {int(space.n)} move names, got {len(names)}")
        self.inner = inner
        self.title = spec.title
        self.move_names = tuple(names)
        self.render_board = render_text or spec.render
        self.game_info = GameInfo(
            name=f"pettingzoo:{name}",
            num_players=len(inner.possible_agents),
            zero_sum=spec.zero_sum,
            reward_range=spec.reward_range,
            max_turns=spec.max_turns,
            moves=self.move_names,
        )
        self.metadata = {"name": self.game_info.name, "render_modes": list(RENDER_MODES)}
        self.metadata["is_parallelizable"] = False
        self.observation_max_length = observation_max_length
        super().__init__(render_mode, invalid_move, invalid_move_reward, max_retries)

    game: ClassicRules

    def _new_game(self) -> ClassicRules:
        seed = int(self.np_random.integers(2**31 - 1))
        return ClassicRules(self.inner, self.move_names, seed)

    def _view(self, seat: int) -> str:
        board = self.render_board(self.game.observation(seat), seat)
        return f"{self.title}. You are player {seat}.\n{board}"

    def _render_text(self) -> str:
        views = [
            f"Player {seat} sees:\n{self.render_board(self.game.observation(seat), seat)}"
            for seat in range(len(self.possible_agents))
        ]
        if self._game_over():
            status = "Game over: " + ", ".join(
                f"player {self._seat[a]} {r:+g}" for a, r in self.final_rewards.items()
            ) + "."
        else:
            status = f"Player {self.game.current_player} to move."
        return f"{self.title}.\n" + "\n".join(views) + "\n" + status

    def observe(self, agent: str) -> dict[str, str]:
        return {"text": fit_text(super().observe(agent)["text"], self.observation_max_length)}

    def close(self) -> None:
        self.inner.close()

    def snapshot(self, seed: int) -> ClassicTextEnv:
        """A copy on a fresh wrapped env with the game so far replayed (see ``ClassicRules``);
        the wrapped game's own chance is its reset seed's, so a copy's future deals are the
        original's. Needs the env built from its id."""
        if self.env_id is None:
            raise NotImplementedError(f"{self.game_info.name}: built from an AECEnv instance, which cannot be "
                                      f"copied; build it from its id (e.g. 'pettingzoo:tictactoe_v3') to play "
                                      f"continuations of its positions")
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("inner", "game", "observation_spaces", "action_spaces")}
        twin = object.__new__(type(self))
        twin.__dict__.update(copy.deepcopy(state))
        twin.inner = make_pettingzoo_env(self.env_id)
        twin.game = self.game.replayed_on(twin.inner)
        twin.np_random = np.random.default_rng(seed)
        return twin

    def __deepcopy__(self, memo) -> ClassicTextEnv:
        """``copy.deepcopy``: the snapshot's replay on a fresh wrapped env (a deep copy of the
        wrapped PettingZoo env itself breaks at the game's end), with this env's random stream
        copied rather than reseeded."""
        twin = self.snapshot(seed=0)
        twin.np_random = copy.deepcopy(self.np_random, memo)
        return twin
