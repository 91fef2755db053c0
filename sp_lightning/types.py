"""The records that flow from a game to an optimizer step.

Token in, token out: a :class:`Completion` keeps the exact prompt and completion token ids and
the sampler's processed logprobs, so training never re-tokenizes text. Every step records which
policy (and which version of it) produced it, for ratings and staleness checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class PolicyKind(str, Enum):
    """What plays a seat. Each rollout backend maps a kind to what serves it in one place."""

    LEARNER = "learner"
    """The policy being trained."""
    BASE = "base"
    """The base model with the learner's adapter disabled."""
    CHECKPOINT = "checkpoint"
    """A saved adapter; the reference's ``name`` is its id."""
    BOT = "bot"
    """A scripted player (``random``, ``chaos``...); ``name`` is the bot's name."""
    REMOTE = "remote"
    """A model behind an OpenAI-compatible server; ``name`` is its key in ``data.remote_models``."""

    def __str__(self) -> str:
        return self.value


LEARNER_ID = PolicyKind.LEARNER.value
"""The learner's one name: its policy spec, its league agent id and type, its metrics' prefix."""


@dataclass(frozen=True)
class PolicyRef:
    """Who plays a seat: a :class:`PolicyKind` and, for checkpoints, bots and remote models, a name.

    Written as a spec string in configs and on the command line: ``learner``, ``base``,
    ``checkpoint:<id>``, ``bot:<name>``, ``remote:<name>`` (:func:`parse_policy`).
    """

    kind: PolicyKind
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", PolicyKind(self.kind))  # a spec's string kind, checked

    @property
    def is_model(self) -> bool:
        return self.kind is not PolicyKind.BOT

    @property
    def is_learner(self) -> bool:
        return self.kind is PolicyKind.LEARNER

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.name}" if self.name else self.kind.value


LEARNER = PolicyRef(PolicyKind.LEARNER)

_NAMED = (PolicyKind.BOT, PolicyKind.CHECKPOINT, PolicyKind.REMOTE)


def parse_policy(spec: str, what: str = "policy") -> PolicyRef:
    """``learner`` | ``learner:<name>`` | ``base`` | ``bot:<name>`` | ``checkpoint:<id>`` |
    ``remote:<name>`` -> PolicyRef; ``what`` names the spec in the error (``opponent``...).
    ``learner:<name>`` is one of a run's several learners (``model.learners``)."""
    kind, _, name = spec.partition(":")
    if kind in (PolicyKind.LEARNER.value, PolicyKind.BASE.value) and not name:
        return PolicyRef(PolicyKind(kind))
    if kind in {k.value for k in (*_NAMED, PolicyKind.LEARNER)} and name:
        return PolicyRef(PolicyKind(kind), name)
    raise ValueError(
        f"{what} {spec!r}: expected 'learner', 'learner:<name>', 'base', 'bot:<name>', 'checkpoint:<id>' or "
        f"'remote:<name>'"
    )


def as_policy(spec: str | PolicyRef) -> PolicyRef:
    """A policy given as a spec string or as a PolicyRef, as a PolicyRef."""
    return spec if isinstance(spec, PolicyRef) else parse_policy(spec)


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
    """The rollout worker's weight version when a learner request was sent (set by the arena):
    the completion was sampled from that version. Other policies' weights never change."""
    sampling: Any = None
    """The ``SamplingSettings`` it is sampled with (set by the scheduler from the run's
    ``sp_lightning.sampling.SamplingPlan``: its role's and its policy's own); None: the settings
    the backend's ``generate`` call was given."""


@dataclass
class Completion:
    """What a policy answered, with the tokens and logprobs the sampler actually used."""

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # processed (post-temperature) logprobs
    policy: PolicyRef = LEARNER
    policy_version: int = 0
    temperature: float = 1.0
    """The sampling temperature it was drawn at: training scales its logits alike."""
    logprobs_from_trainer: bool = False
    """Whether ``logprobs`` are the trainer's own computation on the weights that played (the
    Hugging Face backend's copy runs the trainer's forward): the loss then needs no importance
    correction for them. Another engine's (vLLM, a server) differ by its kernels."""
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
        return (self.in_trainable_episode and self.completion.policy.is_learner
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
    results: dict[str, str] = field(default_factory=dict)
    """The game's own verdict per role (``win``, ``draw``, ``loss``) where its env gives one in
    the final info (``info["result"]``: Diplomacy's win is its bonus's); elsewhere the sign of
    the outcome is the verdict."""
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per role, the scores the env gives beside the reward in its final info (``info["scores"]``:
    Diplomacy's supply centres and sum-of-squares score); evaluations report their means."""
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
    learner: str = ""
    """The learner that trains on it (``model.learners``; "" the one unnamed learner)."""
    trajectory: str = ""
    """Which role's decisions in which rollout of the batch it belongs to (``"<rollout id>/<role>"``):
    credit that learns values (``credit.GAE``) chains a trajectory's records by ``turn``."""
    turn: int = 0
    """Its position among its trajectory's records."""
    step_reward: float = 0.0
    """The step's own immediate reward (an invalid move's penalty); ``reward`` minus it is the
    role's episode reward."""
    temperature: float = 1.0
    """The temperature its completion was sampled at (``Completion.temperature``)."""
    logprobs_from_trainer: bool = False
    """Whether its behaviour logprobs are the trainer's own computation (``Completion.logprobs_from_trainer``)."""
    invalid_move: bool = False
    """The game refused its move (``Step.info["invalid_move"]``); logged with the record, so that
    logged games taken as a teacher (``imitation.LoggedMoves``) leave it out."""
    imitation: bool = False
    """A teacher's move to imitate (``sp_lightning.imitation``): trained by cross-entropy, not by policy
    gradient (it has no advantage or behaviour logprobs)."""


GenerateResult = Rollout
"""The engine specification's name for a finished episode's result tree (a Rollout and its
``children``)."""
