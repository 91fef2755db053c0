"""TextArena games (``textarena==0.7.4``) as PettingZoo AEC text games.

``TextArenaEnv(env_id)`` wraps any TextArena game with two or more players (``num_players``,
default 2) on the text-game contract of ``envs.base``; ``TEXTARENA.md`` lists the games that
work offline. The TextArena game keeps its own rules, turn order, messages and rewards; the
adapter gives each agent its observation as text, the legal moves where it knows them, and
the PettingZoo AEC API.

Players: ``player_k`` is TextArena's player id ``k``; the agent to move is TextArena's
``state.current_player_id``.
What each sees: every message TextArena addressed to that player since the game began (its
prompt first, then game messages and the players' messages as ``<role>: <text>``), mapped
onto the observation charset (ASCII letters, digits, punctuation, space, newline) and, when
too long, shortened by dropping the oldest messages after the prompt. The last line is the
status line of the contract; for a game without a legal-move list the agent to move reads
``Your move: free text; use the action format the rules above ask for.`` instead of
``Legal moves: ...``.
Actions: free text. For a game in ``TEXTARENA_GAMES`` with a legal-move function the move
is the last ``[...]`` token (``envs.base.parse_move``) and must be one of
``infos[agent]["legal_actions"]``; the game is sent that canonical token. For any other
game (``legal_actions == []``) the text itself (clipped to ``action_max_length``) is sent,
and the game's own parser decides; such a text may be echoed to the other players (talk is
part of negotiation games), mapped onto the charset.
Invalid moves: a move outside the legal list, or any action the TextArena game rejects
(``state.set_invalid_move``), is invalid. ``invalid_move="game"`` (default) leaves it to
the game's own rules: TextArena's error allowance (one retry, then the offender loses, in
two-player games). ``"forfeit"`` and ``"retry"`` are the policies of ``envs.base`` (the
game's own allowance is then lifted so that the adapter decides); ``"random"`` plays a
random legal move instead and needs a game with a legal-move function. Where the game's
rules cannot end a run of rejected moves (TextArena's free-for-all state: its elimination
does not end a two-player game) the adapter forfeits the mover after the game's allowance
(or ``MAX_REJECTIONS``) is used up.
Rewards: TextArena's rewards, given on the step that ends the game (or the forfeit rewards).
Facts: ``game_info.name`` is ``"textarena:<env_id>"``; moves, zero-sum and turn bound come
from ``TEXTARENA_GAMES``.
Seeds: ``reset(seed=s)`` seeds ``np_random``, which draws the game's seed. TextArena draws
from Python's global ``random`` (its ``State`` calls ``random.seed``); the adapter gives each
env its own ``random`` state, swapped in around every call into TextArena, so envs do not
disturb each other or the caller, and a seeded episode replays exactly.

Departures from the contract of ``envs.base``:
1. Free-text games echo players' texts (mapped onto the charset, clipped): the talk is the game.
2. A game still running after ``max_turns`` accepted moves is truncated (rewards 0), since
   TextArena does not bound every game.
3. ``invalid_move="game"`` (the default) is a fourth policy, TextArena's own.
4. Rewards are zero-sum only where ``game_info.zero_sum`` says so (two-player games by default).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import random
import unicodedata
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from envs.adapters import ELISION, fit_text
from envs.base import CHARSET, RENDER_MODES, GameInfo, TextGameEnv, parse_move

logger = logging.getLogger(__name__)

INVALID_MOVE_POLICIES = ("game", "forfeit", "retry", "random")
FREE_TEXT_STATUS = "Your move: free text; use the action format the rules above ask for."
GAME_ID = -1  # TextArena's sender id of game messages (textarena.GAME_ID)
NO_ALLOWANCE_LIMIT = 10**9
MAX_REJECTIONS = 10  # rejected moves in a row after which the adapter forfeits the mover

LegalMoves = Callable[[Any], list[str]]
"""``legal_moves(env) -> tokens`` for the player to move, from a TextArena env's ``state``."""


# ---- text onto the observation charset -------------------------------------------------
_CHARSET = frozenset(CHARSET)
_SYMBOLS = {
    "\t": "    ", "\r": "", "\u2014": "-", "\u2013": "-", "\u2212": "-", "\u2018": "'",
    "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2026": "...", "\u2022": "*", "\u00b7": ".",
    "\u2192": "->", "\u2190": "<-", "\u2191": "^", "\u2193": "v", "\u00d7": "x", "\u00a0": " ",
    "\u2660": "S", "\u2664": "S", "\u2665": "H", "\u2661": "H", "\u2666": "D", "\u2662": "D",
    "\u2663": "C", "\u2667": "C", "\u2713": "v", "\u2714": "v", "\u2717": "x", "\u2718": "x",
}


@functools.lru_cache(maxsize=4096)
def _ascii(char: str) -> str:
    if char in _CHARSET:
        return char
    if char in _SYMBOLS:
        return _SYMBOLS[char]
    name = unicodedata.name(char, "")
    if "BOX DRAWINGS" in name:
        horizontal, vertical = "HORIZONTAL" in name, "VERTICAL" in name
        return "-" if horizontal and not vertical else "|" if vertical and not horizontal else "+"
    base = "".join(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c))
    if base and all(c in _CHARSET for c in base):
        return base
    return "" if unicodedata.category(char).startswith(("M", "C")) else "?"


def to_charset(text: str) -> str:
    """Map ``text`` onto ``envs.base.CHARSET``: accents dropped, dashes/quotes/suits/box lines
    to ASCII, tabs to spaces, control characters removed, anything else to ``?``."""
    if all(c in _CHARSET for c in text):
        return text
    return "".join(_ascii(c) for c in text)


def one_line(text: str) -> str:
    """A player's action as the game receives it: its lines joined by spaces.

    Games quote a player's action in their own announcements (LiarsDice: "Player 0 attempted an
    invalid move. ... Submitted action: <the action>"). A multi-line action would then put lines
    of its own into the game's message, where no sender prefix can mark them, and a model could
    write "Game over: you won" as a line of the game. On one line, quoted text stays inside the
    line the game starts. Every separator ``str.splitlines`` knows counts, not only ``\n``.
    """
    return " ".join(text.splitlines())


# ---- per-game facts ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TextArenaGame:
    """What the adapter knows of one TextArena game family (all its ``-v0...`` variants).

    Attributes:
        legal_moves: the legal move tokens for the player to move, read from the game's
            state (each must parse to itself); None: free text, judged by the game.
        moves: the move vocabulary (``GameInfo.moves``); empty when unbounded.
        zero_sum: whether every episode's rewards sum to zero (forfeits included); None:
            True for two players (TextArena's two-player state scores +1/-1/0), else False.
        max_turns: accepted moves after which the adapter ends the game (truncated).
    """

    legal_moves: LegalMoves | None = None
    moves: tuple[str, ...] = ()
    zero_sum: bool | None = None
    max_turns: int = 1000


# Legal-move functions read the game's own state (textarena 0.7.4 internals). A function may
# return [] for a phase of free text (e.g. the talk before a Prisoner's Dilemma decision).
def _gs(env: Any) -> dict:
    return env.state.game_state


def _seat(env: Any) -> int:
    return env.state.current_player_id


def _kuhn_poker(env: Any) -> list[str]:
    tree = _gs(env)["current_legal_action_tree"]
    return [f"[{k}]" for k in tree] if isinstance(tree, dict) else []


def _tictactoe(env: Any) -> list[str]:
    board = _gs(env)["board"]
    return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if board[r][c] == ""]


def _wild_tictactoe(env: Any) -> list[str]:
    return [f"[{mark} {cell[1:-1]}]" for cell in _tictactoe(env) for mark in "xo"]


def _ultimate_tictactoe(env: Any) -> list[str]:
    gs = _gs(env)
    nxt = gs["next_micro_board"]
    if nxt is not None:
        macros = [nxt]
    else:
        macros = [m for m in range(9) if gs["macro_board"][m // 3][m % 3] == " "]
    return [
        f"[{m} {r * 3 + c}]" for m in macros for r in range(3) for c in range(3)
        if gs["board"][m][r][c] == " "
    ]


def _connect_four(env: Any) -> list[str]:
    top = _gs(env)["board"][0]
    return [f"[{c}]" for c in range(len(top)) if top[c] == "."]


def _nim(env: Any) -> list[str]:
    piles = _gs(env)["piles"]
    return [f"[{i} {q}]" for i, size in enumerate(piles) for q in range(1, size + 1)]


def _chopsticks(env: Any) -> list[str]:
    hands, me = _gs(env)["hands"], _seat(env)
    mine, theirs = hands[me], hands[1 - me]
    moves = [f"[attack {m} {o}]" for m in (0, 1) for o in (0, 1) if mine[m] and theirs[o]]
    total = sum(mine)
    splits = [(left, total - left) for left in range(total + 1)]
    moves += [f"[split {left} {right}]" for left, right in splits if [left, right] != list(mine)]
    return moves


def _othello(env: Any) -> list[str]:
    valid = env._valid_moves("B" if _seat(env) == 0 else "W")
    return [f"[{r}, {c}]" for r, c in valid] if valid else ["[pass]"]  # any text skips


def _breakthrough(env: Any) -> list[str]:
    board, me, n = _gs(env)["board"], _seat(env), env.board_size
    piece, enemy, step = ("W", "B", 1) if me == 0 else ("B", "W", -1)
    moves = []
    for r in range(n):
        for c in range(n):
            if board[r][c] != piece or not 0 <= r + step < n:
                continue
            for dc in (-1, 0, 1):
                if 0 <= c + dc < n and board[r + step][c + dc] == ("" if dc == 0 else enemy):
                    moves.append(f"[{chr(97 + c)}{r + 1}{chr(97 + c + dc)}{r + step + 1}]")
    return moves


def _battleship(env: Any) -> list[str]:
    tracking = _gs(env)["tracking_board"][_seat(env)]
    return [
        f"[{chr(97 + r)}{c}]" for r, row in enumerate(tracking) for c, cell in enumerate(row)
        if cell == "~"
    ]


def _pure_strategy(env: Any) -> list[str]:
    faces = {1: "a", 11: "j", 12: "q", 13: "k"}
    return [f"[{faces.get(v, v)}]" for v in _gs(env)["player_hands"][_seat(env)]]


def _prisoners_dilemma(env: Any) -> list[str]:
    return ["[cooperate]", "[defect]"] if _gs(env)["phase"] == "decision" else []


def _constant(*moves: str) -> LegalMoves:
    return lambda env: list(moves)


_DIRECTIONS = ("[up]", "[down]", "[left]", "[right]")
TEXTARENA_GAMES: dict[str, TextArenaGame] = {
    "KuhnPoker": TextArenaGame(_kuhn_poker, ("[check]", "[bet]", "[call]", "[fold]")),
    "TicTacToe": TextArenaGame(_tictactoe, tuple(f"[{i}]" for i in range(9)), max_turns=9),
    "WildTicTacToe": TextArenaGame(
        _wild_tictactoe, tuple(f"[{m} {i}]" for m in "xo" for i in range(9)), max_turns=9
    ),
    "UltimateTicTacToe": TextArenaGame(
        _ultimate_tictactoe, tuple(f"[{m} {i}]" for m in range(9) for i in range(9)), max_turns=81
    ),
    "ConnectFour": TextArenaGame(_connect_four),
    "Nim": TextArenaGame(_nim),
    "Chopsticks": TextArenaGame(_chopsticks),
    "Othello": TextArenaGame(_othello),
    "Breakthrough": TextArenaGame(_breakthrough),
    "Battleship": TextArenaGame(_battleship),
    "GameOfPureStrategy": TextArenaGame(
        _pure_strategy, ("[a]", *(f"[{v}]" for v in range(2, 11)), "[j]", "[q]", "[k]"),
        max_turns=26,
    ),
    "PigDice": TextArenaGame(_constant("[roll]", "[hold]"), ("[roll]", "[hold]")),
    "IteratedRockPaperScissors": TextArenaGame(
        _constant("[rock]", "[paper]", "[scissors]"), ("[rock]", "[paper]", "[scissors]")
    ),
    "IteratedMatchingPennies": TextArenaGame(
        _constant("[heads]", "[tails]"), ("[heads]", "[tails]")
    ),
    "IteratedPrisonersDilemma": TextArenaGame(_prisoners_dilemma, ("[cooperate]", "[defect]")),
    "Snake": TextArenaGame(_constant(*_DIRECTIONS), _DIRECTIONS, zero_sum=False),
    "Surround": TextArenaGame(_constant(*_DIRECTIONS), _DIRECTIONS, zero_sum=False),
    # free-text games on TextArena's free-for-all state: rewards need not sum to zero
    "LiarsDice": TextArenaGame(zero_sum=False),
    "Poker": TextArenaGame(zero_sum=False),
    "PublicGoodsGame": TextArenaGame(zero_sum=False),
    "MarketEntryGame": TextArenaGame(zero_sum=False),
    "SantoriniBaseFixed": TextArenaGame(zero_sum=False),
}
"""Per-family facts, keyed by the id before ``-v`` (``"KuhnPoker"`` for ``KuhnPoker-v0-long``)."""


def family(env_id: str) -> str:
    return env_id.split("-v", 1)[0]


# ---- the rules object --------------------------------------------------------------------
class _RejectionRecorder:
    """``state.set_invalid_move`` that also tells the rules a text was rejected. An object that
    holds the rules and the bound method, not a closure: a deep copy of the game (a snapshot)
    copies it bound to the copy's rules and state (a closure would stay bound to the original's,
    and a move rejected in the copy would count against the original game)."""

    def __init__(self, rules: TextArenaRules, set_invalid_move: Callable[..., Any]) -> None:
        self.rules = rules
        self.set_invalid_move = set_invalid_move

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.rules._rejected = True
        return self.set_invalid_move(*args, **kwargs)


class TextArenaRules:
    """The ``GameRules`` of one TextArena game in progress; moves are the texts it is sent.

    Keeps each player's message log, its own ``random`` state, and records whether the game
    rejected the last text (``apply`` returns it).
    """

    def __init__(
        self,
        env: Any,
        num_players: int,
        seed: int,
        legal_moves: LegalMoves | None,
        error_allowance: int | None,
        max_turns: int,
        clip: int,
    ) -> None:
        self.env = env
        self.num_players = num_players
        self._legal_moves = legal_moves
        self.max_turns = max_turns
        self._clip = clip
        self._random_state = random.Random(seed).getstate()
        self.logs: list[list[str]] = [[] for _ in range(num_players)]
        self.turns = 0
        self.truncated = False
        self._rejected = False
        self._legal: list[str] | None = None
        with self._own_random():
            env.reset(num_players=num_players, seed=seed)
            state = env.state
            # TextArena's elimination (FFA states) does not end a two-player game and loops
            # forever once every player is out, so the adapter always does that job there.
            self.rejection_limit = MAX_REJECTIONS
            if hasattr(state, "elimination_order") and error_allowance is None:
                self.rejection_limit = state.error_allowance + 1
                error_allowance = NO_ALLOWANCE_LIMIT
            if error_allowance is not None and hasattr(state, "error_allowance"):
                state.error_allowance = error_allowance
            state.set_invalid_move = _RejectionRecorder(self, state.set_invalid_move)
            self._collect()

    def reseed(self, seed: int) -> None:
        """The game's own ``random`` state from ``seed`` on (a snapshot's own chance)."""
        self._random_state = random.Random(seed).getstate()

    @contextlib.contextmanager
    def _own_random(self) -> Iterator[None]:
        outside = random.getstate()
        random.setstate(self._random_state)
        try:
            yield
        finally:
            self._random_state = random.getstate()
            random.setstate(outside)

    def _collect(self) -> None:
        """Move the messages TextArena queued for each player into that player's log."""
        state = self.env.state
        for pid in range(self.num_players):
            if pid == state.current_player_id and not state.done:
                _, messages = self.env.get_observation()  # a game may add to it (TwoDollar)
            else:
                messages, state.observations[pid] = state.observations[pid], []
            self.logs[pid].extend(self._format(m) for m in messages)

    def _format(self, message: tuple) -> str:
        sender, text, *_ = message
        text = str(text)
        if sender == GAME_ID:
            return to_charset(text)
        if len(text) > self._clip:
            text = text[: self._clip] + "..."
        role = self.env.state.role_mapping.get(sender, f"Player {sender}")
        # actions reach the game on one line (one_line), but a game may relay text with lines of
        # its own: every line carries its sender, so none passes for a game announcement
        return to_charset("\n".join(f"{role}: {line}" for line in text.splitlines() or [""]))

    @property
    def current_player(self) -> int:
        return int(self.env.state.current_player_id)

    @property
    def is_terminal(self) -> bool:
        return bool(self.env.state.done) or self.truncated

    def legal_moves(self) -> list[str]:
        if self.is_terminal or self._legal_moves is None:
            return []
        if self._legal is None:  # computed once per position
            self._legal = self._legal_moves(self.env)
        return list(self._legal)

    def apply(self, text: str) -> bool:
        """Send ``text`` to the game as the current player's action; return whether the
        game rejected it."""
        self._rejected = False
        self._legal = None
        with self._own_random():
            self.env.step(one_line(text))
            self._collect()
        if not self._rejected:
            self.turns += 1
            if self.turns >= self.max_turns and not self.env.state.done:
                self.truncated = True
        return self._rejected

    def returns(self) -> list[float]:
        rewards = self.env.state.rewards
        if self.truncated and not self.env.state.done:
            return [0.0] * self.num_players
        if rewards is None:
            logger.warning("TextArena game ended without rewards; giving 0 to every player")
            rewards = {}
        return [float(rewards.get(pid, 0.0)) for pid in range(self.num_players)]

    def log_text(self, seat: int, room: int) -> str:
        """``seat``'s messages, oldest dropped after the first (the prompt) to fit ``room``."""
        log = self.logs[seat]
        if not log:
            return ""
        kept: list[str] = []
        used = len(log[0])
        for message in reversed(log[1:]):
            if used + len(message) + 2 > room - len(ELISION):
                break
            kept.append(message)
            used += len(message) + 2
        parts = [log[0]]
        if len(kept) < len(log) - 1:
            parts.append(ELISION.strip())
        parts.extend(reversed(kept))
        return fit_text("\n\n".join(parts), room)


# ---- the env -----------------------------------------------------------------------------
def _import_textarena() -> Any:
    try:
        import textarena
    except ImportError as exc:
        raise ImportError(
            f"TextArenaEnv needs the textarena package ({exc}); run: pip install textarena==0.7.4"
        ) from exc
    return textarena


class TextArenaEnv(TextGameEnv):
    """A TextArena game as a PettingZoo AEC text game; see the module docstring.

    Args:
        env_id: a TextArena id, e.g. ``"KuhnPoker-v0"`` (its wrappers are not used).
        num_players: players to seat (default 2; the game must accept the number).
        invalid_move: ``"game"`` (TextArena's own error allowance), ``"forfeit"``,
            ``"retry"`` or ``"random"`` (needs a legal-move function).
        seed: seed of ``np_random`` until ``reset(seed=...)`` reseeds it.
        max_turns: accepted moves after which the game is ended (default: per game, 1000).
        observation_max_length: longer observations drop their oldest messages.
        render_mode, invalid_move_reward, max_retries: as ``TextGameEnv``.
    """

    action_max_length = 1024

    def __init__(
        self,
        env_id: str,
        num_players: int = 2,
        invalid_move: str = "game",
        seed: int | None = None,
        max_turns: int | None = None,
        observation_max_length: int = 8192,
        render_mode: str | None = None,
        invalid_move_reward: float = -1.0,
        max_retries: int = 2,
    ) -> None:
        ta = _import_textarena()
        if invalid_move not in INVALID_MOVE_POLICIES:
            raise ValueError(
                f"invalid_move must be one of {INVALID_MOVE_POLICIES}, got {invalid_move!r}"
            )
        spec = TEXTARENA_GAMES.get(family(env_id), TextArenaGame())
        if invalid_move == "random" and spec.legal_moves is None:
            raise ValueError(
                f"invalid_move='random' needs legal moves, and {env_id!r} has no legal-move "
                "function in TEXTARENA_GAMES; use 'game', 'forfeit' or 'retry'"
            )
        if isinstance(num_players, bool) or not isinstance(num_players, int) or num_players < 2:
            raise ValueError(f"num_players must be an int >= 2, got {num_players!r}")
        try:
            env = ta.make(env_id)
        except Exception as exc:  # TextArena raises ValueError, ImportError, SyntaxError, ...
            raise ValueError(f"cannot make TextArena env {env_id!r}: {exc}") from exc
        while isinstance(env, ta.Wrapper):
            env = env.env
        self.env_id = env_id
        self.ta_env = env
        self.spec = spec
        self.max_turns = spec.max_turns if max_turns is None else max_turns
        name = f"textarena:{env_id}"
        self.game_info = GameInfo(
            name=name,
            num_players=num_players,
            zero_sum=num_players == 2 if spec.zero_sum is None else spec.zero_sum,
            reward_range=(-1.0, 1.0),
            max_turns=self.max_turns,
            moves=spec.moves,
        )
        self.metadata = {"name": name, "render_modes": list(RENDER_MODES)}
        self.metadata["is_parallelizable"] = False
        self.observation_max_length = observation_max_length
        # base validation runs on a base policy; "game" is this adapter's own
        super().__init__(
            render_mode, "forfeit" if invalid_move == "game" else invalid_move,
            invalid_move_reward, max_retries,
        )
        self.invalid_move = invalid_move
        if seed is not None:
            self.np_random = np.random.default_rng(seed)

    game: TextArenaRules

    # ---- hooks -------------------------------------------------------------------------
    def _new_game(self) -> TextArenaRules:
        return TextArenaRules(
            self.ta_env,
            self.game_info.num_players,
            seed=int(self.np_random.integers(2**31 - 1)),
            legal_moves=self.spec.legal_moves,
            error_allowance=None if self.invalid_move == "game" else NO_ALLOWANCE_LIMIT,
            max_turns=self.max_turns,
            clip=self.action_max_length,
        )

    def snapshot(self, seed: int) -> TextArenaEnv:
        """The copy of the contract (item 9), with the game's own ``random`` state (what a
        TextArena game draws its dice and deals from, swapped in around each call) reseeded from
        ``seed``: a copy would otherwise replay the original's future rolls."""
        twin = super().snapshot(seed)
        twin.game.reseed(seed)
        return twin

    def _view(self, seat: int) -> str:
        return self.game.log_text(seat, self.observation_max_length)

    def _render_text(self) -> str:
        board = ""
        with contextlib.suppress(Exception):  # not every game has a board string
            board = to_charset(str(self.ta_env.get_board_str()))
        if self._game_over():
            status = "Game over: " + ", ".join(
                f"player {self._seat[a]} {r:+g}" for a, r in self.final_rewards.items()
            ) + "."
        else:
            status = f"Player {self.game.current_player} to move."
        return f"TextArena {self.env_id}.\n{board}\n{status}".replace("\n\n", "\n")

    # ---- PettingZoo API ----------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        super().reset(seed=seed, options=options)
        self._rejections = 0

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        legal = self.game.legal_moves()
        move = parse_move(action)
        invalid = bool(legal) and move not in legal
        self.infos[agent] = {**self.infos[agent], "invalid_move": invalid, "parsed_move": move}

        # ---- what the game is sent: a canonical move, a text, or nothing
        if not legal:
            text: str | None = action[: self.action_max_length] if isinstance(action, str) else ""
        elif not invalid:
            text = move
        elif self.invalid_move == "game":
            self._note_invalid(agent, action, move, legal)
            text = move or ""
        else:
            text = self._on_invalid(agent, action, move, legal)  # None: retry or forfeit

        # ---- the game's verdict
        if text is not None:
            rejected = self.game.apply(text)
            if rejected and legal and not invalid and self.invalid_move != "random":
                logger.warning("%s: the game rejected listed legal move %r", self.env_id, text)
            elif not rejected and legal and invalid and self.invalid_move == "game":
                # the game's own rules took it (a default move, or a death in Snake)
                logger.debug("%s: the game accepted %r, not a listed legal move", self.env_id, text)
            if not rejected:
                self._retries = self._rejections = 0
            else:
                # a move rejected on the move that ended the game (SimpleNegotiation checks its
                # turn limit after every move, valid or not) leaves no retry: every policy but
                # "game" forfeits, as it would have one move earlier
                over = self.game.is_terminal
                if not over:
                    self._rejections += 1
                if not invalid:  # judged by the game alone: apply the policy now
                    self.infos[agent] = {**self.infos[agent], "invalid_move": True}
                    self._note_invalid(agent, action, move, legal)
                    if self.invalid_move == "retry" and self._retries < self.max_retries and not over:
                        self._retries += 1
                    elif self.invalid_move != "game":
                        self.forfeited_by = agent
                if not over and self._rejections >= self.game.rejection_limit and self.forfeited_by is None:
                    # the game's own rules do not end a run of rejected moves: the adapter does
                    logger.debug(
                        "%s: %d rejected moves in a row by %s; forfeit",
                        self.env_id, self._rejections, agent,
                    )
                    self.forfeited_by = agent

        if self.game.current_player != self._seat[agent]:
            self._rejections = 0  # a run of rejected moves is one player's
        if self._game_over():
            self._end_game()
            if self.game.truncated and self.forfeited_by is None:
                self.terminations = {a: False for a in self.agents}
                self.truncations = {a: True for a in self.agents}
            self.agent_selection = self.possible_agents[(self._seat[agent] + 1) % self.num_agents]
        else:
            self.agent_selection = self.possible_agents[self.game.current_player]
        self._update_legal_actions()
        self._accumulate_rewards()

    def observe(self, agent: str) -> dict[str, str]:
        if self._game_over():
            status = [self._result_line(agent)]
        elif agent == self.agent_selection:
            status = ["Your last move was invalid; try again."] if self._retries else []
            legal = self.game.legal_moves()
            status.append("Legal moves: " + " ".join(legal) if legal else FREE_TEXT_STATUS)
        else:
            status = [f"Waiting for player {self.game.current_player}."]
        tail = "\n".join(status)
        room = self.observation_max_length - len(tail) - 1
        view = self.game.log_text(self._seat[agent], room)
        return {"text": fit_text(f"{view}\n{tail}", self.observation_max_length)}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ta_env.close()

    # ---- helpers -----------------------------------------------------------------------
    def _note_invalid(self, agent: str, action: Any, move: str | None, legal: list[str]) -> None:
        """Count and log an invalid action that the game's own rules handle."""
        self.invalid_moves[agent] += 1
        shown = repr(action[:80]) if isinstance(action, (str, bytes)) else type(action).__name__
        logger.debug(
            "%s: invalid move by %s (parsed %r, legal %s, action %s); policy %s",
            self.game_info.name, agent, move, legal, shown, self.invalid_move,
        )

    def _result_line(self, agent: str) -> str:
        if self.game.truncated and self.forfeited_by is None:
            return f"Game over: stopped after {self.max_turns} moves; draw (0)."
        return super()._result_line(agent)
