"""Several policies learning at once: one LoRA adapter per learner on one base model.

A run names its learners in ``model.learners`` (absent: one unnamed learner, the peft adapter
``default``, as always). Each named learner is its own adapter of the same base model, with its
own LoRA shape, optimizer settings and loss terms where they differ from the model's, and the
roles it plays::

    model:
      policy: {model: tiny, lora: {r: 16, alpha: 32}}
      learners:
        proposer: {roles: [proposer]}
        solver: {roles: [solver], optimizer: {lr: 0.001}, lora: {r: 8, alpha: 16}}

Episodes keep asking for "the learner" in a role (``ModelRequest(role, ..., LEARNER)``); the
scheduler resolves each such request to the learner that plays the role (:meth:`Learners.resolve`),
so every episode source works with several learners unchanged, and an explicit
``learner:<name>`` (an opponent spec, a seat) names one directly. Completions carry the resolved
policy, records the learner that trains on them (``TrainingRecord.learner``).

This module is the one place a learner's name maps to its peft adapter, and the one place the
adapters' trainable flags are restored after peft's ``set_adapter`` (which marks only the active
adapter trainable).
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any

from sp_lightning.types import PolicyKind, PolicyRef, parse_policy

DEFAULT_ADAPTER = "default"  # peft's name for the adapter get_peft_model creates: the unnamed learner
_PREFIX = "learner__"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def adapter_of(learner: str) -> str:
    """The peft adapter of the learner named ``learner`` ("" is the unnamed learner)."""
    return DEFAULT_ADAPTER if not learner else _PREFIX + learner


def learner_adapters(model) -> list[str]:
    """The learners' adapters in ``model`` (a peft model), in the order they were made; league
    checkpoints loaded beside them for rollouts are not among them."""
    return [n for n in getattr(model, "peft_config", {}) if n == DEFAULT_ADAPTER or n.startswith(_PREFIX)]


def learner_names(model) -> list[str]:
    """The names of the learners whose adapters ``model`` holds ("" the one unnamed learner)."""
    return ["" if n == DEFAULT_ADAPTER else n.removeprefix(_PREFIX) for n in learner_adapters(model)]


def trainable_again(model) -> None:
    """Every learner's adapter trainable again and the first one active, after anything that
    switched adapters with peft's ``set_adapter`` (it marks only the active adapter trainable,
    and a checkpoint's adapter loaded beside the learners changes which one is)."""
    names = learner_adapters(model)
    if names:
        model.base_model.set_adapter(names[0])
        _all_trainable(model, names)


def activate(model, learner: str) -> None:
    """``learner``'s adapter active for the forward passes that follow (its gradients flow),
    every learner's adapter still trainable."""
    names = learner_adapters(model)
    if len(names) > 1:
        model.base_model.set_adapter(adapter_of(learner))
        _all_trainable(model, names)


def _all_trainable(model, names: list[str]) -> None:
    if len(names) == 1:
        return  # set_adapter made the one adapter trainable
    marks = tuple(f".{name}." for name in names)
    for param_name, param in model.named_parameters():
        if any(mark in param_name + "." for mark in marks):
            param.requires_grad_(True)


def trainable_state(model, learner: str) -> dict:
    """Learner ``learner``'s trainable tensors (its LoRA weights, trainable token rows; never the
    frozen base), named as peft saves an adapter (the adapter's name left out:
    ``...q_proj.lora_A.weight``), or by parameter name for a policy trained whole (no LoRA). The
    live tensors, not copies: what the weight path sends to a rollout backend, which copies them
    before the next optimizer step (``RolloutWorker.load_weights``)."""
    adapter = adapter_of(learner)
    if not learner_adapters(model):
        return {name: p for name, p in model.named_parameters() if p.requires_grad}
    return {saved_name(name, adapter): p for name, p in model.named_parameters() if _of_adapter(name, adapter)}


def saved_name(parameter: str, adapter: str) -> str:
    """A parameter's name in a saved adapter: peft's rule, the adapter's name taken out."""
    return parameter.replace(f".{adapter}", "")


def _of_adapter(parameter: str, adapter: str) -> bool:
    return f".{adapter}." in parameter + "."


def state_targets(model, learner: str) -> dict:
    """The parameters of ``model`` that :func:`trainable_state`'s names of learner ``learner`` are
    written into (another copy of the same policy: a rollout backend's)."""
    adapter = adapter_of(learner)
    if not learner_adapters(model):
        return dict(model.named_parameters())
    return {saved_name(name, adapter): p for name, p in model.named_parameters() if _of_adapter(name, adapter)}


def save_learner_adapter(model, path: str, learner: str = "") -> str:
    """Write learner ``learner``'s adapter ("" the one unnamed learner: peft's ``default``) to
    ``path``, a plain adapter directory that an engine, ``PeftModel.from_pretrained`` or
    ``checkpoint:<dir>`` loads; returns ``path``."""
    import os
    import shutil

    adapter = adapter_of(learner)
    model.save_pretrained(path, selected_adapters=[adapter])
    nested = os.path.join(path, adapter)  # peft nests every adapter but ``default`` in a folder
    if os.path.isdir(nested):
        for name in os.listdir(nested):
            os.replace(os.path.join(nested, name), os.path.join(path, name))
        shutil.rmtree(nested)
    return path


def params_of(model, learner: str) -> list:
    """The trainable parameters of ``learner``'s adapter (all trainable ones for a run with one)."""
    names = learner_adapters(model)
    if len(names) <= 1:
        return [p for p in model.parameters() if p.requires_grad]
    mark = f".{adapter_of(learner)}."
    return [p for n, p in model.named_parameters() if p.requires_grad and mark in n + "."]


SAMPLINGS = ("reservoir", "recent")
LOG_TEACHER = "log:"
"""The prefix of a teacher that is a file of logged moves rather than a policy of the run."""


@dataclass(frozen=True)
class LoggedGames:
    """A teacher that is a file of logged moves (``log:<path>``, ``imitation.LoggedMoves`` reads it):
    the records of an earlier run's episode log (``data.episode_log.records``) or any JSONL of
    prompts and completions."""

    path: str
    min_reward: float | None = None
    """Only the lines whose logged ``reward`` is at least this (None: every valid line)."""

    def __str__(self) -> str:
        return LOG_TEACHER + self.path


@dataclass
class ImitationSettings:
    """``model.learners.<name>.imitate`` (``sp_lightning.imitation``): whose moves the learner imitates and how they are kept."""

    teacher: str = ""
    """The policy imitated: ``learner:<name>`` (another learner of the run), ``bot:<name>``,
    ``checkpoint:<id>`` or ``base``, which must play in the training games; or ``log:<path>``,
    a JSONL file of logged moves (``imitation.LoggedMoves``)."""
    size: int = 50_000
    """Moves the buffer keeps."""
    batch: int = 256
    """Moves drawn (with replacement) for each training step; fewer while the buffer holds fewer."""
    sampling: str = "reservoir"
    """reservoir | recent: every move seen equally likely to be kept (the teacher's average over
    the run), or the last ``size`` moves."""
    anticipatory: float | None = None
    """NFSP's eta: the teacher's second seats are the teacher's with this probability and this
    learner's otherwise (None: this learner never plays in training)."""
    min_reward: float | None = None
    """With a ``log:`` teacher, imitate only the lines whose logged ``reward`` is at least this
    (the moves of games won, as rejection sampling keeps them; an episode log's records carry the
    role's reward); None: every valid line."""

    def check(self, key: str) -> PolicyRef | LoggedGames:
        """The teacher, a policy or a file of logged moves; raises naming ``key`` on a bad setting."""
        if not self.teacher:
            raise ValueError(f"{key}.teacher: required: the policy whose moves are imitated (learner:<name>, "
                             f"bot:<name>, checkpoint:<id> or base) or log:<path> (a file of logged moves)")
        teacher = self._teacher(key)
        policy = teacher if isinstance(teacher, PolicyRef) else None
        if policy is not None and policy.kind is PolicyKind.REMOTE:
            raise ValueError(f"{key}.teacher: a remote model answers with text only; imitate a learner, a bot, a "
                             f"checkpoint or the base model")
        if policy is not None and policy.kind is PolicyKind.LEARNER and not policy.name:
            raise ValueError(f"{key}.teacher: name the learner imitated (learner:<name>)")
        if not (isinstance(self.size, int) and self.size >= 1):
            raise ValueError(f"{key}.size: expected an int >= 1, got {self.size!r}")
        if not (isinstance(self.batch, int) and self.batch >= 1):
            raise ValueError(f"{key}.batch: expected an int >= 1, got {self.batch!r}")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"{key}.sampling: expected one of {', '.join(SAMPLINGS)}, got {self.sampling!r}")
        if self.min_reward is not None:
            if policy is not None:
                raise ValueError(f"{key}.min_reward: filters logged moves by the reward logged with them; the teacher "
                                 f"here is {self.teacher}, whose moves are all imitated")
            if isinstance(self.min_reward, bool) or not isinstance(self.min_reward, (int, float)):
                raise ValueError(f"{key}.min_reward: expected a number or null, got {self.min_reward!r}")
        if self.anticipatory is not None:
            if policy is None or policy.kind is not PolicyKind.LEARNER:
                raise ValueError(f"{key}.anticipatory: the seats it shares are a learner teacher's; the teacher "
                                 f"here is {self.teacher}")
            if not 0.0 <= self.anticipatory < 1.0:
                raise ValueError(f"{key}.anticipatory: expected a probability in [0, 1), got {self.anticipatory!r}")
        return teacher

    def _teacher(self, key: str) -> PolicyRef | LoggedGames:
        if not str(self.teacher).startswith(LOG_TEACHER):
            return parse_policy(self.teacher, f"{key}.teacher")
        path = self.teacher[len(LOG_TEACHER):]
        if not os.path.isfile(path):
            raise ValueError(f"{key}.teacher: no file {path!r}; log:<path> names a JSONL file of logged moves (the "
                             f"data.episode_log.records of an earlier run, or lines of prompt and completion)")
        return LoggedGames(path, self.min_reward)


@dataclass
class LearnerSettings:
    """One learner of ``model.learners``: the roles it plays and how it differs from the model's
    settings (each a partial override: only the keys given change)."""

    roles: list[str] = field(default_factory=list)
    """The roles (or a game's seats: ``player_0``...) whose "learner" requests it answers; ``"*"``:
    every role no other learner claims (a league's main agent); none: only where a spec names it
    (``learner:<name>``: an exploiter, seated by the league)."""
    lora: dict[str, Any] | None = None
    """Overrides of ``model.policy.lora`` for this adapter (``r``, ``alpha``...)."""
    optimizer: dict[str, Any] | None = None
    """Overrides of ``model.optimizer`` (``lr``, ``grad_clip``, ``warmup_steps``...)."""
    loss: dict[str, Any] | None = None
    """Overrides of ``model.loss`` (``clip_high``, ``entropy: {coef: ...}``, ``kl: {coef: ...}``...)."""
    imitate: ImitationSettings | None = None
    """Train this learner by cross-entropy on another policy's moves instead of by policy gradient
    (``sp_lightning.imitation``: the teacher, the buffer of its moves, NFSP's anticipatory mix)."""


def overridden(base, overrides: dict[str, Any] | None, key: str):
    """``base`` (a settings dataclass) with ``overrides`` applied, a dict over a nested settings
    block overriding only the keys it names; an unknown key is refused by its full config key."""
    if not overrides:
        return base
    known = {f.name for f in dataclasses.fields(base)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"{key}.{unknown[0]}: not a setting of {type(base).__name__} (expected one of "
                         f"{sorted(known)})")
    changes = {}
    for name, value in overrides.items():
        current = getattr(base, name)
        nested = isinstance(value, dict) and dataclasses.is_dataclass(current) and not isinstance(current, type)
        changes[name] = overridden(current, value, f"{key}.{name}") if nested else value
    try:
        return dataclasses.replace(base, **changes)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{key}: {error}") from error


class Learners:
    """The run's learners by name and the role each plays; empty for a run with one unnamed
    learner (then every learner request is the unnamed learner's, as always)."""

    def __init__(self, settings: dict[str, LearnerSettings] | None = None):
        settings = dict(settings or {})
        self.roles: dict[str, str] = {}
        self.every_role: str | None = None  # the learner of roles: ["*"]
        for name, learner in settings.items():
            if not _NAME.match(name) or name in (PolicyKind.LEARNER.value, DEFAULT_ADAPTER):
                raise ValueError(f"model.learners.{name}: a learner's name is a letter then letters, digits or "
                                 f"'_', and not 'learner' or 'default'")
            if not isinstance(learner, LearnerSettings):
                raise ValueError(f"model.learners.{name}: expected a learner's settings (roles, lora, optimizer, "
                                 f"loss), got {learner!r}")
            for role in learner.roles:
                if role == "*":
                    if self.every_role is not None:
                        raise ValueError(f"model.learners.{name}.roles: '*' (every other role) is already "
                                         f"learner {self.every_role!r}'s")
                    self.every_role = name
                    continue
                if role in self.roles:
                    raise ValueError(f"model.learners.{name}.roles: role {role!r} is already played by learner "
                                     f"{self.roles[role]!r}")
                self.roles[role] = name
        _check_imitation(settings)
        if len(settings) == 1:
            raise ValueError(f"model.learners: name two learners or more (one learner needs no name: drop "
                             f"model.learners); got {sorted(settings)}")
        self.settings = settings

    @property
    def names(self) -> list[str]:
        """The learners' names in config order; ``[""]`` for the one unnamed learner."""
        return list(self.settings) or [""]

    def imitates(self, name: str) -> bool:
        """Whether learner ``name`` learns by imitation (``imitate``) rather than by policy gradient."""
        return name in self.settings and self.settings[name].imitate is not None

    @property
    def imitating(self) -> list[str]:
        """The imitation learners, in config order."""
        return [name for name in self.settings if self.imitates(name)]

    def __bool__(self) -> bool:
        return bool(self.settings)

    def ref(self, name: str) -> PolicyRef:
        return PolicyRef(PolicyKind.LEARNER, name)

    def whole(self) -> PolicyRef | None:
        """The learner that plays every role (a whole-game strategy: what exploitability reads):
        the one unnamed learner, the learner of ``roles: ["*"]``, or None when each role has its
        own learner."""
        if not self.settings:
            return PolicyRef(PolicyKind.LEARNER)
        return self.ref(self.every_role) if self.every_role is not None else None

    def resolve(self, policy: PolicyRef, role: str) -> PolicyRef:
        """The learner that answers a request of ``policy`` in ``role``: an unnamed learner request
        goes to the learner playing the role; anything else is returned as it is."""
        if not self.settings or policy.kind is not PolicyKind.LEARNER:
            return policy
        if policy.name:
            if policy.name not in self.settings:
                raise ValueError(f"policy {policy}: no learner {policy.name!r} in model.learners "
                                 f"({', '.join(self.settings)})")
            return policy
        name = self.roles.get(role, self.every_role)
        if name is None:
            raise ValueError(f"model.learners: role {role!r} asked for the learner, and no learner plays it; "
                             f"expected it among the roles of one of {', '.join(self.settings)}")
        return self.ref(name)


def _check_imitation(settings: dict[str, LearnerSettings]) -> None:
    """An imitation learner plays no role of its own, keeps the loss its learning is (cross-entropy),
    and imitates a learner of the run that learns by policy gradient, where its teacher is one."""
    for name, learner in settings.items():
        if learner.imitate is None:
            continue
        key = f"model.learners.{name}"
        if not isinstance(learner.imitate, ImitationSettings):
            raise ValueError(f"{key}.imitate: expected {{teacher, size, batch, sampling, anticipatory}}, got "
                             f"{learner.imitate!r}")
        teacher = learner.imitate.check(f"{key}.imitate")
        if learner.roles:
            raise ValueError(f"{key}.roles: an imitation learner plays where it is seated (imitate.anticipatory, an "
                             f"opponent spec learner:{name}); give it no roles (got {learner.roles})")
        if learner.loss:
            raise ValueError(f"{key}.loss: an imitation learner's loss is the cross-entropy of its teacher's moves; "
                             f"drop loss (got {sorted(learner.loss)})")
        if isinstance(teacher, PolicyRef) and teacher.kind is PolicyKind.LEARNER:
            other = settings.get(teacher.name)
            if other is None or teacher.name == name:
                raise ValueError(f"{key}.imitate.teacher: {learner.imitate.teacher} is not another learner of "
                                 f"model.learners ({', '.join(n for n in settings if n != name)})")
            if other.imitate is not None:
                raise ValueError(f"{key}.imitate.teacher: learner {teacher.name!r} imitates too; imitate a learner "
                                 f"that plays its own moves")


# ---- adapter surgery: reset, copy, load ---------------------------------------------------------

def reset_adapter(model, learner: str, seed: int) -> None:
    """Learner ``learner``'s adapter made fresh again: LoRA A drawn anew from ``seed`` (on forked
    random streams, so every rank draws the same adapter and the run's own streams are untouched),
    B zero, and the trainable token rows the base model's own (peft's ``trainable_tokens_delta``
    holds the rows that replace the embedding's, not a difference to it): the base model's policy."""
    import torch
    from peft.tuners.lora import LoraLayer
    from peft.tuners.trainable_tokens.layer import TrainableTokensLayer

    adapter = adapter_of(learner)
    device = next(model.parameters()).device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type), \
            torch.no_grad():
        torch.manual_seed(seed)
        for module in model.modules():
            if isinstance(module, LoraLayer) and adapter in module.lora_A:
                module.reset_lora_parameters(adapter, True)
            elif isinstance(module, TrainableTokensLayer) and adapter in module.trainable_tokens_delta:
                module.trainable_tokens_delta[adapter].copy_(module.trainable_tokens_original[adapter])


def adapter_twins(model, source: str, target: str) -> list:
    """Each weight of learner ``target``'s adapter paired with ``source``'s same weight; raises
    when the two adapters differ in shape (what ``reset_to: main`` needs; the league checks it
    when training starts)."""
    mine, theirs = f".{adapter_of(target)}.", f".{adapter_of(source)}."
    params = dict(model.named_parameters())
    pairs = []
    for name, param in params.items():
        if mine not in name + ".":
            continue
        twin = (name + ".").replace(mine, theirs)[:-1]
        if twin not in params or params[twin].shape != param.shape:
            raise ValueError(f"data.league.exploiters.reset_to: main needs learner {target!r}'s adapter shaped "
                             f"as {source!r}'s (model.learners.<name>.lora); {name} has no twin")
        pairs.append((param, params[twin]))
    return pairs


def copy_adapter(model, source: str, target: str) -> None:
    """``target``'s adapter weights set to ``source``'s (same LoRA shape required)."""
    import torch

    with torch.no_grad():
        for param, twin in adapter_twins(model, source, target):
            param.copy_(twin)


def load_adapter_dir(model, path: str) -> None:
    """The weights of the peft adapter directory ``path`` into ``model``'s adapter (``default``)."""
    import os

    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(os.path.join(path, "adapter_model.safetensors")))

