"""A person plays a game against a policy or a bot: in the terminal (``sp-lightning play``,
``sp_lightning.cli.play``) or a move per notebook cell (:class:`GameSession`).

The person sees exactly what a model in their seat is shown: their own observation (their card,
never the other's) and nothing of the other seats' texts beyond what the game itself reports.
They type a move as free text; as for a model, the move is the last ``[...]`` token, so ``4`` is
read as ``[4]`` for convenience when the game lists its moves. A move that is not legal is
refused and asked again (it never reaches the env, so the person never forfeits by a typo).
End of input (Ctrl-D) or ``quit`` leaves the game.

The other seats are served as in training and evaluation: ``learner`` (the config's policy, with
``--checkpoint`` loaded), ``base`` (the adapter disabled), ``checkpoint:<adapter dir>``, or
``bot:<name>``; model answers are read by the game's prompt template, so a malformed answer is an
invalid move handled by the env's ``invalid_move`` policy, as in training.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envs import parse_move, play_turns
from envs.bots import BOTS, make_bots
from sp_lightning.evaluation.matches import serve_policy
from sp_lightning.games import GameSettings
from sp_lightning.rollout.base import RolloutWorker, SamplingSettings
from sp_lightning.sampling import SamplingPlan
from sp_lightning.types import ModelRequest, PolicyKind, PolicyRef, as_policy

QUIT = ("quit", "exit", "resign")


def refusal(text: str, legal: list[str]) -> str:
    """What a person is told when ``text`` is not a legal move."""
    return f"{text!r} is not a legal move; legal: {' '.join(legal)}"


def read_move(text: str, legal_actions: list[str]) -> str | None:
    """A person's move: ``[4]``, or ``4`` where the game lists its moves; None when it is not one
    of ``legal_actions``. In a free-text game (no list) the text itself."""
    if not legal_actions:
        return text.strip()
    move = parse_move(text) or parse_move(f"[{text.strip()}]")
    return move if move in legal_actions else None


def format_result(totals: dict[str, float]) -> str:
    return "Result: " + ", ".join(f"{agent} {reward:+g}" for agent, reward in totals.items())


def require_bot(spec: PolicyRef, key: str = "opponent") -> None:
    """Refuse a ``bot:<name>`` no bot answers to, naming ``key``."""
    if spec.kind is PolicyKind.BOT and spec.name not in BOTS:
        raise ValueError(f"{key} bot:{spec.name}: no such bot; known: {', '.join(sorted(BOTS))}")


class PlayerQuit(Exception):
    """The person left the game (end of input, or ``quit``)."""


class HumanPlayer:
    """A policy (``envs.play`` style) that shows the observation and reads a move.

    ``read(prompt) -> str`` and ``write(text)`` default to ``input`` and ``print``; tests and
    notebooks pass their own.
    """

    def __init__(self, read: Callable[[str], str] = input, write: Callable[[str], None] = print):
        self.read = read
        self.write = write

    def __call__(self, observation: str, legal_actions: list[str]) -> str:
        self.write("\n" + observation)
        while True:
            try:
                text = self.read("your move> ").strip()
            except EOFError:
                raise PlayerQuit from None
            if text.lower() in QUIT:
                raise PlayerQuit
            move = read_move(text, legal_actions)
            if move is not None:
                return move
            self.write(refusal(text, legal_actions))


class ModelPlayer:
    """A policy served by a rollout worker, prompted and read as the arena does it."""

    def __init__(self, worker: RolloutWorker, game: GameSettings, policy: PolicyRef,
                 sampling: SamplingSettings | SamplingPlan, role: str):
        self.worker, self.game, self.policy, self.role = worker, game, policy, role
        self.sampling = SamplingPlan.of(sampling)

    def __call__(self, observation: str, legal_actions: list[str]) -> str | None:
        template = self.game.prompt_template
        request = ModelRequest(self.role, template.messages(observation, self.role), self.policy, legal_actions)
        request.sampling = self.sampling.for_request(request)
        return template.parse(self._answer(request)).action_text  # None: an invalid move

    def _answer(self, request: ModelRequest) -> str:
        return self.worker.generate([request], request.sampling)[0].text


class RemotePlayer(ModelPlayer):
    """A model of ``data.remote_models`` (``remote:<name>``), prompted and read as the arena
    does it; its answer is text, asked of its server."""

    def __init__(self, remote, game: GameSettings, policy: PolicyRef, sampling: SamplingSettings | SamplingPlan,
                 role: str):
        super().__init__(None, game, policy, sampling, role)
        self.remote = remote

    def _answer(self, request: ModelRequest) -> str:
        return self.remote.complete(request.messages, request.sampling)


def announced(player: Callable[[str, list[str]], str | None], agent: str, write: Callable[[str], None]):
    """``player``, saying what it played: the person's next view may not show it (a board does
    not say which cell is new)."""

    def act(observation: str, legal_actions: list[str]) -> str | None:
        action = player(observation, legal_actions)
        if not legal_actions:  # a free-text game: the text is the move
            write(f"{agent} says {str(action)[:200]!r}")
            return action
        move = parse_move(action) if action is not None else None
        write(f"{agent} plays {move if move in legal_actions else repr(action) + ' (not a legal move)'}")
        return action

    return act


def opponent_players(game: GameSettings, human: str, opponent: str | PolicyRef, worker: RolloutWorker | None,
                     sampling: SamplingSettings | SamplingPlan | None = None,
                     seed: int | None = None, remotes: dict | None = None) -> dict[str, Any]:
    """A player for every seat but ``human``'s, all of them ``opponent``: ``bot:<name>`` (seeded
    as the arena seeds its bots), ``remote:<name>`` (a model of ``remotes``, the run's
    ``data.remote_models``), or a model policy served by ``worker`` (``learner``, ``base``,
    ``checkpoint:<name>`` of an adapter the worker holds, or ``checkpoint:<adapter dir>``, which
    is registered under the directory's name)."""
    spec = as_policy(opponent)
    seats = [agent for agent in game.agents if agent != human]
    if spec.kind is PolicyKind.REMOTE:
        from sp_lightning.engine import check_remote

        check_remote(spec, remotes or {}, f"opponent {opponent}")
        return {agent: RemotePlayer(remotes[spec.name], game, spec, sampling or SamplingSettings(), agent) for agent in seats}
    if spec.kind is PolicyKind.BOT:
        require_bot(spec)
        bot = make_bots(seed)[spec.name]
        return {agent: bot.act for agent in seats}
    if worker is None:
        raise ValueError(f"opponent {opponent}: a model policy needs a rollout worker")
    spec = serve_policy(worker, spec)  # an adapter directory: registered under its name
    sampling = sampling or SamplingSettings()
    return {agent: ModelPlayer(worker, game, spec, sampling, agent) for agent in seats}


class GameSession:
    """One game played a move at a time from code (a notebook cell per move): the person holds
    ``human``'s seat and the other seats answer at once, as in ``sp-lightning play``.

        session = GameSession(game, opponent_players(game, "player_0", "learner", worker), seed=3)
        print(session.observation)      # what the person's seat sees, as a model in it would
        print(session.move("[bet]"))    # the move, the others' replies, and the new view

    A move that is not legal is refused with the legal ones listed and changes nothing; the game
    runs the loop of ``envs.play`` (``envs.play_turns``), so a session and a scripted game agree
    move for move.
    """

    def __init__(self, game: GameSettings, players: dict[str, Any], seed: int | None = None):
        missing = [agent for agent in game.agents if agent not in players]
        if len(missing) != 1:
            raise ValueError(f"GameSession: players must fill every seat of {game.name} but the "
                             f"person's one, got seats {sorted(players)}")
        self.human = missing[0]
        self.env = game.make_env()
        self.totals = {agent: 0.0 for agent in self.env.possible_agents}
        self._turns = play_turns(self.env, players, seed, self.totals)
        self._legal: list[str] = next(self._turns, None) or []

    @property
    def observation(self) -> str:
        """The person's view now (the last line says whose move it is, or the result)."""
        return self.env.observe(self.human)["text"]

    @property
    def done(self) -> bool:
        return not self.env.agents

    @property
    def legal_moves(self) -> list[str]:
        return list(self._legal)  # empty once the game is over

    def move(self, text: str) -> str:
        """Play ``text`` (``[4]``, or ``4`` where the game lists its moves) and return the view
        once it is the person's turn again or the game is over."""
        if self.done:
            return f"The game is over. {self.result()}"
        move = read_move(text, self._legal)
        if move is None:
            return f"{refusal(text, self._legal)}\n\n{self.observation}"
        try:
            self._legal = self._turns.send(move)
        except StopIteration:
            self._legal = []
        return self.observation + (f"\n{self.result()}" if self.done else "")

    def result(self) -> str:
        return format_result(self.totals)
