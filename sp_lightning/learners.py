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
import re
from dataclasses import dataclass, field
from typing import Any

from sp_lightning.types import PolicyKind, PolicyRef

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


def params_of(model, learner: str) -> list:
    """The trainable parameters of ``learner``'s adapter (all trainable ones for a run with one)."""
    names = learner_adapters(model)
    if len(names) <= 1:
        return [p for p in model.parameters() if p.requires_grad]
    mark = f".{adapter_of(learner)}."
    return [p for n, p in model.named_parameters() if p.requires_grad and mark in n + "."]


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
    """Overrides of ``model.loss`` (``entropy_coef``, ``kl_coef``...)."""


def overridden(base, overrides: dict[str, Any] | None, key: str):
    """``base`` (a settings dataclass) with ``overrides`` applied; an unknown key is refused by
    its full config key."""
    if not overrides:
        return base
    known = {f.name for f in dataclasses.fields(base)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"{key}.{unknown[0]}: not a setting of {type(base).__name__} (expected one of "
                         f"{sorted(known)})")
    try:
        return dataclasses.replace(base, **overrides)
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
        if len(settings) == 1:
            raise ValueError(f"model.learners: name two learners or more (one learner needs no name: drop "
                             f"model.learners); got {sorted(settings)}")
        self.settings = settings

    @property
    def names(self) -> list[str]:
        """The learners' names in config order; ``[""]`` for the one unnamed learner."""
        return list(self.settings) or [""]

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
            raise ValueError(f"role {role!r} asked for the learner, and no learner plays it: add it to the roles "
                             f"of one of model.learners ({', '.join(self.settings)})")
        return self.ref(name)
