"""Debate: two debaters argue a topic for N rounds, a judge picks the winner, zero-sum rewards.

The debaters are the roles ``pro`` (argues for the topic, speaks first) and ``con`` (against),
taking turns in an :class:`~sp_lightning.episodes.AlternatingRolesEpisode`: each reads the topic
and every argument so far, and is reminded privately of its side and the round. When the last
round ends, a :class:`~sp_lightning.judges.Judge` reads the arguments under neutral names,
"Debater A" and "Debater B", assigned to pro and con at random per debate (from the episode's
seed), so that a judge's taste for the first name or the first speaker is no bonus to either
side; it answers ``[0]`` for A or ``[1]`` for B: the winner gets +1 and the loser -1. A verdict
naming neither, or both (a judge that repeats the instruction), is a draw (0 each).
The judge is a model (the base model by default) but not a role: its answer never trains.

Topics come from an :class:`~sp_lightning.stores.ArtifactStore`, given in the config as a list or
a file (one topic per line), sampled uniformly or by weight.

By default the learner argues both sides (mirror self-play) and both sides' arguments train;
``opponent`` seats someone else as ``con`` (``base``, ``checkpoint:<id>``, a bot).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from sp_lightning.episodes import AlternatingRolesEpisode, ChatState
from sp_lightning.episodes.chat import signed
from sp_lightning.judges import Judge
from sp_lightning.prompts import THINK_CLOSE, THINK_OPEN
from sp_lightning.rubric import Rubric
from sp_lightning.sources import EpisodeRequest, EpisodeSource
from sp_lightning.stores import ArtifactStore
from sp_lightning.types import LEARNER, PolicyKind, PolicyRef, Rollout, parse_policy

PRO, CON = "pro", "con"
NAMES = ("Debater A", "Debater B")  # answered as [0] and [1]
_VERDICT = re.compile(r"\[\s*([01])\s*\]")

DEFAULT_TOPICS = (
    "Cities should ban cars from their centres.",
    "Homework should be abolished in primary schools.",
    "Nuclear power is the best way to cut emissions.",
    "Voting should be compulsory.",
    "Social media does more harm than good.",
    "Space exploration is worth its cost.",
    "Remote work is better than office work.",
    "Zoos should be closed.",
)


def _check_free_text_bot(name: str, key: str) -> None:
    """A debate lists no legal moves: only a bot that writes free text can argue (a bot that
    picks among listed moves raised in the middle of the run)."""
    from envs import BOTS

    free = sorted(f"bot:{n}" for n, cls in BOTS.items() if getattr(cls, "free_text", False))
    if name not in BOTS:
        raise ValueError(f"{key}: no bot named {name!r}; a debate takes {', '.join(free)}")
    if not getattr(BOTS[name], "free_text", False):
        raise ValueError(f"{key}: bot:{name} picks among listed legal moves, and a debate lists none; expected "
                         f"learner, base, checkpoint:<id>, remote:<name> or a bot that writes free text "
                         f"({', '.join(free)})")


def verdict_rewards(text: str, rollout: Rollout) -> dict[str, float]:
    """``[0]`` names Debater A, ``[1]`` Debater B (whichever side each was in this debate): the
    one named wins, +1, the other -1; an answer naming neither or both is a draw. A reasoning
    judge's thoughts are not its verdict: only the text after its last ``</think>`` is read (as
    the reasoning template reads a move), and a judge still thinking at its budget's end names
    no one. Never raises."""
    answer = text if isinstance(text, str) else ""
    if THINK_CLOSE in answer:
        answer = answer.rsplit(THINK_CLOSE, 1)[1]
    elif THINK_OPEN in answer:
        answer = answer.split(THINK_OPEN, 1)[0]
    named = {match.group(1) for match in _VERDICT.finditer(answer)}
    if len(named) != 1:
        return {PRO: 0.0, CON: 0.0}
    order = rollout.state.data["order"] if rollout.state is not None else (PRO, CON)
    winner = order[int(named.pop())]
    return {winner: 1.0, (CON if winner == PRO else PRO): -1.0}


def judge_prompt(rollout: Rollout, extras: dict[str, Any]) -> list[dict[str, str]]:
    """The judge reads the topic and the arguments, the debaters under this debate's neutral names."""
    state: ChatState = extras["state"]
    names = dict(zip(state.data["order"], NAMES))
    arguments = "\n\n".join(signed(names[m.speaker], m.text) for m in state.transcript if m.speaker in names)
    return [
        {"role": "system", "content": "You judge debates. Decide who argued better, not who you agree with."},
        {"role": "user", "content": f"Topic: {state.data['topic']}\n\n{arguments}\n\n"
                                    f"Who won? Answer [0] for Debater A or [1] for Debater B."},
    ]


def debate_rubric(judge: str | PolicyRef) -> Rubric:
    """The judge's verdict as the only reward (a bot judge is refused: a Judge calls a model)."""
    return Rubric(outcome=[(Judge(judge_prompt, verdict_rewards, policy=judge), 1.0)])


@dataclass(kw_only=True)
class DebateEpisode(AlternatingRolesEpisode):
    """One debate on ``topic``; ``rounds`` turns for each side (see the module docstring)."""

    topic: str
    rounds: int = 2
    judge: str | PolicyRef = "base"
    name: str = "debate"
    rubric: Rubric = None  # debate_rubric(judge) unless given (a source shares one among its debates)
    seats: dict[str, PolicyRef] = field(default_factory=lambda: {PRO: LEARNER, CON: LEARNER})
    system_prompts: dict[str, str] = field(default_factory=lambda: {
        PRO: "You are a debater. Argue for the topic, briefly and persuasively.",
        CON: "You are a debater. Argue against the topic, briefly and persuasively.",
    })

    def __post_init__(self):
        if self.rounds < 1:
            raise ValueError(f"DebateEpisode.rounds: expected >= 1, got {self.rounds}")
        self.max_turns = 2 * self.rounds
        if self.rubric is None:
            self.rubric = debate_rubric(self.judge)
        super().__post_init__()

    def setup(self, state: ChatState) -> None:
        state.data["topic"] = self.topic
        state.data["order"] = (PRO, CON) if state.rng.random() < 0.5 else (CON, PRO)  # who is A, who is B

    def initial_prompt(self, state: ChatState) -> str:
        return f"Debate topic: {self.topic}\n{PRO} argues for it, {CON} against it, {self.rounds} rounds each."

    def get_observation(self, state: ChatState, role: str) -> str:
        side = "for" if role == PRO else "against"
        return f"Round {state.turn // 2 + 1} of {self.rounds}. You are {role}: argue {side} the topic."

    def metrics(self, state: ChatState) -> dict[str, float]:
        return {"argument_chars": sum(len(m.text) for m in state.transcript if m.speaker in (PRO, CON))
                / max(1, state.turn)}


class Debate(EpisodeSource):
    """Every episode of a batch is one debate on a topic drawn from the store.

    Args:
        topics: The topics: a list of strings, or the path of a file (one per line, or a JSON
            list); None uses a few built-in ones.
        sampling: How topics are drawn: ``uniform`` or ``weighted``.
        rounds: Turns per side.
        judge: Who judges: ``base`` (the base model, adapter off), ``learner``, ``checkpoint:<id>``,
            or ``remote:<name>`` (a model in ``data.remote_models``).
        opponent: Who argues ``con``: ``learner`` (mirror self-play, both sides train), ``base``,
            ``checkpoint:<id>``, ``remote:<name>`` or a bot that writes free text (``bot:chaos``).
    """

    def __init__(self, topics: list[str] | str | None = None, sampling: str = "uniform", rounds: int = 2,
                 judge: str = "base", opponent: str = "learner"):
        if isinstance(topics, str):
            self.topics = ArtifactStore.from_file(topics, sampling=sampling, name="data.episodes.topics")
        else:
            self.topics = ArtifactStore(topics or DEFAULT_TOPICS, sampling=sampling, name="data.episodes.topics")
        if rounds < 1:
            raise ValueError(f"data.episodes.rounds: expected >= 1, got {rounds}")
        self.rounds = rounds
        self.judge = parse_policy(judge)
        self.rubric = debate_rubric(self.judge)  # one for every debate; a bot judge is refused now, not mid-run
        self.opponent = parse_policy(opponent)
        if self.opponent.kind is PolicyKind.BOT:
            _check_free_text_bot(self.opponent.name, "data.episodes.opponent")

    def get_batch(self, rng: random.Random, size: int) -> list[EpisodeRequest]:
        topics = self.topics.sample(rng, size)
        return [EpisodeRequest(DebateEpisode(topic=topic, rounds=self.rounds, judge=self.judge, rubric=self.rubric,
                                             seats={PRO: LEARNER, CON: self.opponent}),
                               rng.randrange(2**31)) for topic in topics]

    def state_dict(self) -> dict[str, Any]:
        return {"topics": self.topics.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "topics" in state:
            self.topics.load_state_dict(state["topics"])
