"""The records that flow from a game to an optimizer step.

Token in, token out: a :class:`Completion` keeps the exact prompt and completion token ids and
the sampler's processed logprobs, so training never re-tokenizes text. Every step records which
policy (and which version of it) produced it, for ratings and staleness checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PolicyRef:
    """Who plays a seat.

    ``kind`` is one of ``"learner"`` (the policy being trained), ``"base"`` (the base model with
    the adapter disabled), ``"checkpoint"`` (a saved adapter, ``name`` is its id), ``"bot"``
    (a scripted player such as ``random`` or ``chaos``; ``name`` is the bot's name), or
    ``"remote"`` (a model behind an OpenAI-compatible server; ``name`` is its key in
    ``data.remote_models``).
    """

    kind: str
    name: str = ""

    @property
    def is_model(self) -> bool:
        return self.kind != "bot"

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}" if self.name else self.kind


LEARNER = PolicyRef("learner")


@dataclass(frozen=True)
class Role:
    """A trainable entity: a seat in a game, a proposer, a solver. A judge is not a role."""

    name: str
    system_prompt: str | None = None
    trainable: bool = True


@dataclass
class ModelRequest:
    """One pending model call of an episode."""

    role: str
    messages: list[dict[str, str]]
    policy: PolicyRef
    legal_actions: list[str] | None = None  # lets bots answer without a model
    policy_version: int | None = None
    """The rollout worker's weight version when a ``learner`` request was sent (set by the arena):
    the completion was sampled from that version. Other policies' weights never change."""


@dataclass
class Completion:
    """What a policy answered, with the tokens and logprobs the sampler actually used."""

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # processed (post-temperature) logprobs
    policy: PolicyRef = LEARNER
    policy_version: int = 0
    refused: str = ""
    """Why the backend did not generate at all (empty: it did): ``PROMPT_TOO_LONG`` when the
    prompt and the completion budget would not fit the model's context. A refused completion
    has no tokens, so it never trains; a game that gets one is cut off (see GameEpisode)."""


PROMPT_TOO_LONG = "prompt_too_long"


@dataclass
class Step:
    """One move of one role: the request, the completion, and what the game made of it."""

    role: str
    completion: Completion
    reward: float = 0.0  # immediate reward from the rubric's step functions (e.g. invalid move)
    info: dict[str, Any] = field(default_factory=dict)
    advantage: float | None = None
    in_trainable_episode: bool = True
    """False for a step of a sub-episode requested as not trainable (``ctx.run(...,
    trainable=False)``): it informs its parent's reward and never trains."""

    @property
    def trainable(self) -> bool:
        """Only steps played by the learning policy with real tokens, in an episode that trains,
        become training records."""
        return (self.in_trainable_episode and self.completion.policy.kind == "learner"
                and bool(self.completion.completion_ids))


@dataclass
class Rollout:
    """A finished episode: its steps, who sat where, the outcome and the rubric's rewards.

    ``group`` tells credit assignment which rollouts compete with each other (GRPO groups);
    ``level`` is the depth in a hierarchy of episodes (0 for top level).
    """

    episode: str
    steps: list[Step] = field(default_factory=list)
    seats: dict[str, PolicyRef] = field(default_factory=dict)
    outcome: dict[str, float] = field(default_factory=dict)  # raw game payoffs per role
    rewards: dict[str, float] = field(default_factory=dict)  # rubric rewards per role
    metrics: dict[str, float] = field(default_factory=dict)
    group: str | None = None
    level: int = 0
    children: list[Rollout] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    """What the episode's ``get_extras`` gave when the rollout was scored: the rubric read it,
    and its numbers are the batch's per-episode metrics."""
    state: Any = None
    """The episode's own final state where it keeps one (a chat episode's ``ChatState``), for
    its ``get_extras``; never trained on or logged as is."""
    judgements: list[dict[str, Any]] = field(default_factory=list)
    """Verdicts of the judges that scored this rollout (see ``sp_lightning.judges``): judge,
    policy, text, rewards. A judge is not a role: its completions are never steps."""

    @property
    def trainable(self) -> bool:
        """False when a parent requested this sub-episode as not trainable: its steps then
        never train (``Step.in_trainable_episode``, the one flag every walker reads)."""
        return all(step.in_trainable_episode for step in self.steps)

    def steps_of(self, role: str) -> list[Step]:
        return [s for s in self.steps if s.role == role]

    def walk(self):
        """This rollout and every nested sub-rollout, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class TrainingRecord:
    """One trainable completion, ready to collate: token ids in, advantage out."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]  # behaviour policy's logprob per completion token
    advantage: float
    reward: float
    action_mask: list[int]  # 1 where a completion token is trained on
    policy_version: int = 0
    legal_actions: list[str] | None = None  # the moves the game allowed here (for the entropy term)


GenerateResult = Rollout
"""The engine specification's name for a finished episode's result tree (a Rollout and its
``children``)."""
