"""The text-game contract and the base class every game in ``envs/`` subclasses.

The contract (kept by every game; usable with PettingZoo alone):

1. Agents are ``player_0 .. player_{n-1}``; seats are 0-based and the text calls them
   ``player 0 .. player n-1``.
2. ``observe(agent)`` returns ``{"text": str}``: that agent's own view. Private information (a
   card) appears only in its owner's observation, never in another's. The text ends with one
   status line: ``Legal moves: [a] [b]`` for the agent to move (``Your move.`` when the env is
   built with ``list_legal_moves=False``, for games whose view already shows every legal move,
   such as Tic-Tac-Toe's empty cells: a shorter prompt is a cheaper one), ``Waiting for player
   k.`` for the others, ``Game over: ...`` once the game has ended. The text never echoes an agent's
   raw action, only canonical moves, so it always lies inside the observation space.
3. ``infos[agent]`` always holds ``legal_actions`` (the moves legal now for the agent to move;
   ``[]`` for every other agent and after the game), ``invalid_move`` (whether that agent's
   last action was invalid; False until it acts) and ``parsed_move`` (what ``parse_move``
   made of its last action, or None).
4. The action is free text. ``parse_move`` extracts the move: the LAST ``[...]`` token
   (at most 32 characters inside, no brackets or newline), inner surrounding whitespace
   stripped, lowercased. The text is never evaluated or executed. Any object is accepted:
   a non-str action (None, bytes, ...) is an invalid move, never a crash. ``action_space``
   describes typical actions for samplers; it is not enforced.
5. An action whose parsed move is not in ``legal_actions`` is invalid. The constructor's
   ``invalid_move`` policy decides what follows:
   - ``"forfeit"``: the game ends at once; the offender gets ``invalid_move_reward``
     (default -1.0) and every other agent gets an equal share of ``-invalid_move_reward``
     (zero-sum). This outcome replaces whatever the game had scored so far.
   - ``"retry"``: the offender stays to move, with a line asking it to try again. It may
     retry ``max_retries`` (default 2) times per turn; the next invalid action forfeits.
   - ``"random"``: a uniformly random legal move (drawn from the env's seeded RNG) is played
     in its place.
   Every invalid action sets ``infos[agent]["invalid_move"] = True`` until that agent acts
   again, is counted in ``env.invalid_moves[agent]`` and is logged at DEBUG. Penalties for
   invalid moves under "retry"/"random" belong to the trainer's rubric, not to the env.
6. Rewards are the game's outcome per agent, all given on the step that ends the game
   (zero-sum for every game here); ``env.final_rewards`` keeps them after the episode.
   There is no truncation: every game ends within ``game_info.max_turns`` legal moves
   (plus retries).
7. Game facts are data: ``game_info`` (``GameInfo``) names the game, its players, whether
   it is zero-sum, the reward range, the most legal moves an episode can take and the full
   move vocabulary. ``metadata`` is derived from it.
8. ``reset(seed=...)`` seeds ``np_random`` (a ``numpy.random.Generator``) that drives all
   chance in the game (deals) and the "random" policy; ``options`` is accepted and unused.
   ``render()`` is a spectator view (it may show private information): returned for
   ``render_mode="ansi"``, printed for ``"human"``.
9. ``snapshot(seed)`` returns an independent copy of the env in its current state (the game so
   far, whose turn it is, every info and counter), whose chance from then on draws from a new
   stream seeded by ``seed``: play it on and the original is untouched. Continuations of a
   position (per-decision credit) are played on snapshots. A wrapped game that cannot be copied
   raises ``NotImplementedError`` naming the game.

A game subclasses ``TextGameEnv``, sets ``game_info``, and implements ``_new_game`` (a
rules object, see ``GameRules``), ``_view`` (the game part of an agent's observation) and
``_render_text``. The rules object holds the pure rules, testable without the env.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import math
import re
import string
from typing import Any, Protocol

import gymnasium
import numpy as np
from gymnasium.spaces import Dict, Text
from pettingzoo import AECEnv

logger = logging.getLogger(__name__)

CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"
"""Characters of every observation (and of sampled actions)."""

INVALID_MOVE_POLICIES = ("forfeit", "retry", "random")
RENDER_MODES = ("ansi", "human")
YOUR_MOVE = "Your move."
"""The status line of the agent to move when the env does not list its legal moves."""
MOVE_PATTERN = re.compile(r"\[[^\[\]\n]{1,32}\]")


def parse_move(text: Any) -> str | None:
    """Return the last ``[...]`` move token of ``text``, normalised, or None if there is none.

    The content between the brackets is stripped of surrounding whitespace and lowercased:
    ``"I'll go [ Bet ]"`` -> ``"[bet]"``; ``"[4] no, [7]"`` -> ``"[7]"``; ``"bet"`` -> None.
    A whitespace-only token parses to ``"[]"``, which no game accepts. Never raises; any
    non-str (None, bytes, ...) gives None.
    """
    if not isinstance(text, str):
        return None
    last = None
    for last in MOVE_PATTERN.finditer(text):
        pass
    if last is None:
        return None
    return "[" + last.group()[1:-1].strip().lower() + "]"


@dataclasses.dataclass(frozen=True)
class GameInfo:
    """Facts about a game, declared as data (OpenSpiel ``GameType`` style).

    Attributes:
        name: game id, e.g. ``"tictactoe_v1"``; also ``metadata["name"]``.
        num_players: number of agents (``player_0 ..``).
        zero_sum: whether the rewards of every episode sum to zero.
        reward_range: (lowest, highest) reward of one agent in one episode, forfeits aside.
        max_turns: the most legal moves one episode can take.
        moves: the full move vocabulary; each token must parse to itself.
    """

    name: str
    num_players: int
    zero_sum: bool
    reward_range: tuple[float, float]
    max_turns: int
    moves: tuple[str, ...]

    def __post_init__(self) -> None:
        bad = [m for m in self.moves if parse_move(m) != m]
        if bad:
            raise ValueError(f"GameInfo.moves must be canonical move tokens, got {bad}")
        if self.num_players < 1:
            raise ValueError(f"GameInfo.num_players must be >= 1, got {self.num_players}")


class GameRules(Protocol):
    """The pure rules of one game in progress, driven by canonical move strings."""

    @property
    def current_player(self) -> int: ...  # seat to move; undefined once terminal

    @property
    def is_terminal(self) -> bool: ...

    def legal_moves(self) -> list[str]: ...

    def apply(self, move: str) -> None: ...  # raises ValueError on an illegal move

    def returns(self) -> list[float]: ...  # per seat, once terminal


class TextGameEnv(AECEnv[str, dict[str, str], Any]):
    """Base PettingZoo AEC env for text games; see the module docstring for the contract."""

    game_info: GameInfo
    metadata: dict[str, Any] = {"render_modes": list(RENDER_MODES), "is_parallelizable": False}
    observation_max_length: int = 1024
    action_max_length: int = 256

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "game_info" in cls.__dict__:
            cls.metadata = {
                "name": cls.game_info.name,
                "render_modes": list(RENDER_MODES),
                "is_parallelizable": False,
            }

    def __init__(
        self,
        render_mode: str | None = None,
        invalid_move: str = "forfeit",
        invalid_move_reward: float = -1.0,
        max_retries: int = 2,
        *,
        list_legal_moves: bool = True,
    ) -> None:
        super().__init__()
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(
                f"render_mode must be None or one of {RENDER_MODES}, got {render_mode!r}"
            )
        if invalid_move not in INVALID_MOVE_POLICIES:
            raise ValueError(
                f"invalid_move must be one of {INVALID_MOVE_POLICIES}, got {invalid_move!r}"
            )
        penalty = invalid_move_reward
        is_number = isinstance(penalty, (int, float)) and not isinstance(penalty, bool)
        if not (is_number and math.isfinite(penalty) and penalty <= 0):
            raise ValueError(
                f"invalid_move_reward must be a finite number <= 0 (a penalty), got {penalty!r}"
            )
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.render_mode = render_mode
        self.invalid_move = invalid_move
        self.invalid_move_reward = float(invalid_move_reward)
        self.max_retries = max_retries
        if not isinstance(list_legal_moves, bool):
            raise ValueError(f"list_legal_moves must be true or false, got {list_legal_moves!r}")
        self.list_legal_moves = list_legal_moves

        self.possible_agents = [f"player_{i}" for i in range(self.game_info.num_players)]
        self._seat = {agent: i for i, agent in enumerate(self.possible_agents)}
        self.np_random = np.random.default_rng()
        self.agents: list[str] = []

    # ---- hooks for games -------------------------------------------------------------
    def _new_game(self) -> GameRules:
        """Start a new game; draw any chance events from ``self.np_random``."""
        raise NotImplementedError

    def _view(self, seat: int) -> str:
        """The game part of ``seat``'s observation (its private information only)."""
        raise NotImplementedError

    def _render_text(self) -> str:
        """A spectator view of the whole game state."""
        raise NotImplementedError

    # ---- PettingZoo API ----------------------------------------------------------------
    # The spaces are built on first use, not in __init__: a gymnasium ``Text`` space indexes its
    # charset when made (a cost per env that adds up at the arena's rate), and the arena makes an env per game and never reads
    # them. Each env still gets its own spaces (and so its own space RNG for ``sample()``).
    @functools.cached_property
    def observation_spaces(self) -> dict[str, gymnasium.spaces.Space]:
        text = Text(max_length=self.observation_max_length, charset=CHARSET)
        return {a: Dict({"text": text}) for a in self.possible_agents}

    @functools.cached_property
    def action_spaces(self) -> dict[str, gymnasium.spaces.Space]:
        action = Text(max_length=self.action_max_length, charset=CHARSET)
        return {a: action for a in self.possible_agents}

    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.game = self._new_game()
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {
            a: {"legal_actions": [], "invalid_move": False, "parsed_move": None} for a in self.agents
        }
        self.invalid_moves = {a: 0 for a in self.agents}
        self.forfeited_by: str | None = None
        self.final_rewards: dict[str, float] = {}
        self._retries = 0
        self._skip_agent_selection = None
        self.agent_selection = self.possible_agents[self.game.current_player]
        self._update_legal_actions()

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        legal = self.game.legal_moves()
        move = parse_move(action)
        invalid = not self.is_legal(move, legal)
        # infos are replaced, never mutated, so an info dict already handed out stays as it was
        self.infos[agent] = {**self.infos[agent], "invalid_move": invalid, "parsed_move": move}
        if invalid:
            move = self._on_invalid(agent, action, move, legal)
        if move is not None:
            self.game.apply(move)
            self._retries = 0
        self._finish_turn(agent)

    def _finish_turn(self, agent: str) -> None:
        """After ``agent``'s action: the game ends (rewards, terminations) or passes to the next
        agent to move; infos and rewards follow. (A game whose action is not one move, such as a
        power's orders in Diplomacy, steps by its own reading and ends here too.)"""
        if self.forfeited_by is not None or self.game.is_terminal:
            self._end_game()
            self.agent_selection = self.possible_agents[(self._seat[agent] + 1) % self.num_agents]
        else:
            self.agent_selection = self.possible_agents[self.game.current_player]
        self._update_legal_actions()
        self._accumulate_rewards()

    def observe(self, agent: str) -> dict[str, str]:
        lines = [self._view(self._seat[agent])]
        if self._game_over():
            lines.append(self._result_line(agent))
        elif agent == self.agent_selection:
            if self._retries:
                lines.append("Your last move was invalid; try again.")
            if self.list_legal_moves:
                lines.append("Legal moves: " + " ".join(self.game.legal_moves()))
            else:
                lines.append(YOUR_MOVE)
        else:
            lines.append(f"Waiting for player {self.game.current_player}.")
        return {"text": "\n".join(lines)}

    def render(self) -> str | None:
        if self.render_mode is None:
            gymnasium.logger.warn(
                "render() called without a render_mode; pass render_mode='ansi' or 'human'."
            )
            return None
        text = self._render_text()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        pass

    def snapshot(self, seed: int) -> TextGameEnv:
        """An independent copy of this env as it stands, its chance reseeded with ``seed`` (see
        the contract, item 9). The lazily built spaces are not copied: the copy builds its own; nor
        is the random generator, which the copy replaces (copying a numpy Generator was three
        quarters of a Tic-Tac-Toe snapshot's time, and exploitability takes ~16,000 of them)."""
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("observation_spaces", "action_spaces", "np_random")}
        twin = object.__new__(type(self))
        twin.__dict__.update(copy.deepcopy(state))
        twin.np_random = np.random.default_rng(seed)
        return twin

    # ---- helpers -----------------------------------------------------------------------
    def _game_over(self) -> bool:
        return self.forfeited_by is not None or self.game.is_terminal

    def is_legal(self, move: str | None, legal: list[str]) -> bool:
        """Whether a parsed move may be played now: by default, one of the listed legal moves.
        A game with an open move grammar (offers) overrides this to accept unlisted moves."""
        return move in legal

    def _on_invalid(
        self, agent: str, action: Any, move: str | None, legal: list[str]
    ) -> str | None:
        """Apply the invalid-move policy; return the move to play instead, if any."""
        self.invalid_moves[agent] += 1
        shown = repr(action[:80]) if isinstance(action, (str, bytes)) else type(action).__name__
        logger.debug(
            "%s: invalid move by %s (parsed %r, legal %s, action %s); policy %s",
            self.game_info.name, agent, move, legal, shown, self.invalid_move,
        )
        if self.invalid_move == "random":
            return legal[int(self.np_random.integers(len(legal)))]
        if self.invalid_move == "retry" and self._retries < self.max_retries:
            self._retries += 1
            return None
        self.forfeited_by = agent
        return None

    def _end_game(self) -> None:
        if self.forfeited_by is not None:
            share = -self.invalid_move_reward / max(self.num_agents - 1, 1)
            self.rewards = {a: share for a in self.agents}
            self.rewards[self.forfeited_by] = self.invalid_move_reward
        else:
            returns = self.game.returns()
            self.rewards = {a: float(returns[self._seat[a]]) for a in self.agents}
        self.final_rewards = dict(self.rewards)
        self.terminations = {a: True for a in self.agents}

    def _update_legal_actions(self) -> None:
        over = self._game_over()
        for agent in self.agents:
            legal = self.game.legal_moves() if not over and agent == self.agent_selection else []
            self.infos[agent] = {**self.infos[agent], "legal_actions": legal}

    def _result_line(self, agent: str) -> str:
        reward = self.final_rewards[agent]
        if reward == 0:
            outcome = "draw (0)"
        else:
            outcome = f"you {'won' if reward > 0 else 'lost'} ({reward:+g})"
        forfeit = ""
        if self.forfeited_by is not None:
            who = "you" if self.forfeited_by == agent else f"player {self._seat[self.forfeited_by]}"
            forfeit = f"{who} forfeited (invalid move); "
        return f"Game over: {forfeit}{outcome}."
