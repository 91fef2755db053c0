"""Chat-loop episodes: roles take turns writing messages into a shared transcript.

A :class:`MultiTurnEpisode` is the engine specification's chat loop. Each turn:

1. the actor's prompt is built from its own view of the transcript: its system prompt, every
   public message (its own as ``assistant`` turns, the others' as ``user`` turns with every
   line signed with the speaker's name, the environment's unsigned: no line a model wrote can
   pass for the referee's or another speaker's), and then its **private observation**
   (``get_observation``), which goes into this prompt only and is never added to the transcript,
   so no other role ever reads it (a negotiator's valuations, a card in hand);
2. the actor's policy answers; the answer is added to the transcript as a public message;
3. ``env_response`` may add a public message of the environment (the referee's "offer accepted",
   a round marker), which every role reads;
4. ``is_done`` ends the episode, or ``next_actor`` names who speaks next; ``max_turns`` model turns
   end it in any case.

Subclasses override the callbacks (``setup``, ``initial_actor``, ``initial_prompt``,
``get_observation``, ``env_response``, ``is_done``, ``next_actor``, ``step_info``,
``legal_actions``, ``metrics``) and give a rubric. Episode-specific state (the valuations, the
topic, the deal on the table) lives in ``ChatState.data``, set up from the episode's seed by
``setup``; the final state is kept on the rollout (``rollout.state``), where ``get_extras`` hands
it to the rubric.

:class:`AlternatingRolesEpisode` is the two-role case (a debate): the roles take turns.

Every message a model wrote reaches other prompts as data: the backends encode every prompt
with ``rollout.chat.encode_chat``, which neutralises special-token strings in untrusted messages.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from sp_lightning.episodes.base import Episode, EpisodeContext
from sp_lightning.rubric import Rubric
from sp_lightning.types import ModelRequest, PolicyRef, Role, Rollout, Step

ENV = "env"
"""The speaker of the environment's public messages (opening prompt, ``env_response``)."""


def signed(speaker: str, text: str) -> str:
    """``text`` with every line signed ``speaker: ``, as it reaches another reader: a message
    whose own lines read ``Referee: ... accepts`` cannot pass for the environment's (unsigned)
    announcement or for another speaker's line."""
    return "\n".join(f"{speaker}: {line}" for line in text.splitlines() or [""])


@dataclass
class Message:
    """One public message of the transcript: who wrote it (a role, or :data:`ENV`) and what."""

    speaker: str
    text: str


@dataclass
class ChatState:
    """A running chat episode: the public transcript, the turn count, and the episode's own data.

    ``rng`` is seeded by the episode's seed: draw every random thing of the episode from it (the
    arena's seeds make batches reproducible and a resumed run replay them)."""

    seed: int
    rng: random.Random
    transcript: list[Message] = field(default_factory=list)
    turn: int = 0
    """Model turns taken so far."""
    data: dict[str, Any] = field(default_factory=dict)
    cut_off: str = ""
    """Why the loop stopped early ("cut_off_prompt": a prompt was longer than the model's context)."""

    def transcript_text(self, names: dict[str, str] | None = None) -> str:
        """The public transcript, one paragraph per message, every line of it signed by its
        speaker (:func:`signed`; the environment's unsigned); ``names`` renames speakers (a judge
        may read "Debater A" for ``pro``)."""
        names = names or {}
        return "\n\n".join(message.text if message.speaker == ENV
                             else signed(names.get(message.speaker, message.speaker), message.text)
                             for message in self.transcript)


@dataclass(kw_only=True)
class MultiTurnEpisode(Episode):
    """A chat loop among ``seats`` (role -> the policy that plays it); see the module docstring.

    Args:
        name: The episode's name (metrics and credit groups go by it).
        rubric: Scores the finished rollout (``get_extras`` gives it ``state`` and ``transcript``).
        seats: Each role and its policy, in speaking order for the default ``next_actor``.
        system_prompts: A system prompt per role (optional).
        max_turns: Model turns after which the episode ends whatever ``is_done`` says.
    """

    name: str
    rubric: Rubric
    seats: dict[str, PolicyRef]
    system_prompts: dict[str, str] = field(default_factory=dict)
    max_turns: int = 10

    def __post_init__(self):
        if not self.seats:
            raise ValueError(f"{type(self).__name__}.seats: expected at least one role, got none")
        if self.max_turns < 1:
            raise ValueError(f"{type(self).__name__}.max_turns: expected >= 1, got {self.max_turns}")
        unknown = sorted(set(self.system_prompts) - set(self.seats))
        if unknown:
            raise ValueError(f"{type(self).__name__}.system_prompts: roles {unknown} have no seat; "
                             f"roles: {list(self.seats)}")

    @property
    def roles(self) -> list[Role]:  # type: ignore[override]
        return [Role(role, self.system_prompts.get(role)) for role in self.seats]

    # ---- the chat-loop callbacks (override) ---------------------------------------------------
    def setup(self, state: ChatState) -> None:
        """Draw the episode's own data into ``state.data`` from ``state.rng``."""

    def initial_actor(self, state: ChatState) -> str:
        """Who speaks first (default: the first seat)."""
        return next(iter(self.seats))

    def initial_prompt(self, state: ChatState) -> str | None:
        """The public opening message every role reads (the topic, the rules); None for none."""
        return None

    def get_observation(self, state: ChatState, role: str) -> str | None:
        """What only ``role`` sees at this turn, appended to its prompt and never to the transcript."""
        return None

    def env_response(self, state: ChatState, role: str, text: str) -> str | None:
        """The environment's public reply to ``role``'s message (None for none): apply the move,
        announce the result. Called after the message joined the transcript."""
        return None

    def is_done(self, state: ChatState) -> bool:
        """Whether the episode has ended (checked after every turn)."""
        return False

    def next_actor(self, state: ChatState, role: str) -> str:
        """Who speaks after ``role`` (default: the next seat, round-robin)."""
        order = list(self.seats)
        return order[(order.index(role) + 1) % len(order)]

    def legal_actions(self, state: ChatState, role: str) -> list[str] | None:
        """The moves ``role`` may make now, where the episode has a list (bots answer from it,
        and the entropy over legal moves reads it); None where answers are free text."""
        return None

    def step_info(self, state: ChatState, role: str, text: str) -> dict[str, Any]:
        """What the step records besides its completion (an ``invalid_move`` flag for a rubric's
        step function, the parsed move); called after ``env_response``."""
        return {}

    def metrics(self, state: ChatState) -> dict[str, float]:
        """Numbers about the finished episode, logged per episode name and given to the rubric."""
        return {}

    # ---- the loop -----------------------------------------------------------------------------
    def prompt_for(self, state: ChatState, role: str, observation: str | None) -> list[dict[str, str]]:
        """``role``'s chat messages: its system prompt, the transcript from its side, then its
        private observation. Consecutive messages on one side are merged (chat templates expect
        turns to alternate), and the prompt always ends on the other side's turn."""
        turns: list[tuple[str, str]] = []
        for message in state.transcript:
            if message.speaker == role:
                turns.append(("assistant", message.text))
            elif message.speaker == ENV:
                turns.append(("user", message.text))
            else:
                turns.append(("user", signed(message.speaker, message.text)))
        if observation:
            turns.append(("user", observation))
        if not turns or turns[-1][0] != "user":
            turns.append(("user", f"Your turn, {role}."))
        merged: list[dict[str, str]] = []
        for side, text in turns:
            if merged and merged[-1]["role"] == side:
                merged[-1]["content"] += "\n\n" + text
            else:
                merged.append({"role": side, "content": text})
        system = self.system_prompts.get(role)
        return ([{"role": "system", "content": system}] if system else []) + merged

    def new_state(self, seed: int) -> ChatState:
        state = ChatState(seed=seed, rng=random.Random(seed))
        self.setup(state)
        opening = self.initial_prompt(state)
        if opening:
            state.transcript.append(Message(ENV, opening))
        return state

    async def rollout(self, ctx: EpisodeContext) -> Rollout:
        state = self.new_state(ctx.seed)
        steps: list[Step] = []
        actor = self.initial_actor(state)
        while state.turn < self.max_turns:
            if actor not in self.seats:
                raise ValueError(f"{self.name}: actor {actor!r} has no seat; seats: {list(self.seats)}")
            legal = self.legal_actions(state, actor)
            request = ModelRequest(role=actor, policy=self.seats[actor], legal_actions=legal,
                                   messages=self.prompt_for(state, actor, self.get_observation(state, actor)))
            completion = await self.generate(ctx, request)
            if completion.refused:
                state.cut_off = "cut_off_prompt"
                break
            state.transcript.append(Message(actor, completion.text))
            reply = self.env_response(state, actor, completion.text)
            if reply:
                state.transcript.append(Message(ENV, reply))
            info = {"legal_actions": legal} if legal is not None else {}
            steps.append(Step(role=actor, completion=completion, info={**info, **self.step_info(state, actor, completion.text)}))
            state.turn += 1
            if self.is_done(state):
                break
            actor = self.next_actor(state, actor)
        rollout = Rollout(episode=self.name, steps=steps, seats=dict(self.seats), state=state)
        rollout.metrics = {"turns": float(state.turn), "cut_off_prompt": float(bool(state.cut_off)),
                           **self.metrics(state)}
        return rollout

    def get_extras(self, rollout: Rollout) -> dict[str, Any]:
        state: ChatState = rollout.state
        return {**rollout.metrics, "state": state, "transcript": state.transcript_text()}


@dataclass(kw_only=True)
class AlternatingRolesEpisode(MultiTurnEpisode):
    """Two roles taking turns, the first seat first: ``max_turns`` = 2 x the rounds."""

    def __post_init__(self):
        super().__post_init__()
        if len(self.seats) != 2:
            raise ValueError(f"{type(self).__name__}.seats: expected exactly two roles, got {list(self.seats)}")

    def next_actor(self, state: ChatState, role: str) -> str:
        first, second = self.seats
        return second if role == first else first
