"""Which sampling serves each model request: the run's, a role's own, a policy's own.

The engine specification gives a role its own temperature and length; a run wants a judge at
temperature 0 beside players at 1, a terse proposer beside a long-thinking solver, an opponent
sampled greedily. Three keys of the ``data`` block say it, each override naming only the settings
it changes (``max_new_tokens``, ``temperature``, ``top_p``, ``top_k``)::

    data:
      sampling: {max_new_tokens: 24, temperature: 1.0}      # every request's, unless overridden
      sampling_by_role: {judge: {temperature: 0.0, max_new_tokens: 2}}
      sampling_by_policy: {base: {temperature: 0.0}, "learner:solver": {max_new_tokens: 64}}

A request's settings are the run's, then its role's override, then its policy's (the exact spec,
``checkpoint:ckpt_3`` or ``learner:solver``, else its kind, ``checkpoint`` or ``learner``): the
policy's wins where both set a key. Evaluation plays every request at the evaluation temperature
(``data.eval.temperature``) when one is set, except those whose role or policy sets a temperature
of its own: a judge at 0 judges at 0 in evaluation too. The scheduler resolves each request once
(``ModelRequest.sampling``); backends take per-request settings (vLLM and servers in one call, the
Hugging Face worker one call per distinct settings), and each completion carries the temperature
it was drawn at, which training divides its logits by.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from sp_lightning.learners import overridden
from sp_lightning.rollout.base import SamplingSettings
from sp_lightning.types import ModelRequest


def checked_overrides(overrides: dict[str, dict[str, Any]] | None, key: str) -> dict[str, dict[str, Any]]:
    """``overrides`` (name -> partial sampling settings), each checked by building it over the
    defaults: an unknown setting or a bad value names its full key."""
    overrides = dict(overrides or {})
    for name, values in overrides.items():
        if not isinstance(values, dict):
            raise ValueError(f"{key}.{name}: expected a mapping of sampling settings (max_new_tokens, temperature, "
                             f"top_p, top_k), got {values!r}")
        overridden(SamplingSettings(), values, f"{key}.{name}")
    return overrides


@dataclass
class SamplingPlan:
    """The sampling of every request of a run (see the module docstring)."""

    default: SamplingSettings = field(default_factory=SamplingSettings)
    by_role: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_policy: dict[str, dict[str, Any]] = field(default_factory=dict)
    temperature: float | None = None
    """Every request's temperature (evaluation) unless its role or policy sets its own; None: the
    run's."""

    def __post_init__(self):
        self._cache: dict[tuple[str, str], SamplingSettings] = {}

    @classmethod
    def of(cls, sampling: SamplingSettings | SamplingPlan | None) -> SamplingPlan:
        """``sampling`` as a plan: a plan as it is, settings as the plan that applies them to all."""
        if isinstance(sampling, SamplingPlan):
            return sampling
        return cls(sampling or SamplingSettings())

    def at_temperature(self, temperature: float | None) -> SamplingPlan:
        """This plan with every request at ``temperature`` (None: this plan)."""
        if temperature is None:
            return self
        return dataclasses.replace(self, temperature=temperature)

    def for_request(self, request: ModelRequest) -> SamplingSettings:
        """The settings ``request`` is sampled with (its role's and its policy's overrides)."""
        spec = str(request.policy)
        cached = self._cache.get((request.role, spec))
        if cached is None:
            cached = self._cache[(request.role, spec)] = self._resolve(request.role, request.policy)
        return cached

    def _resolve(self, role: str, policy) -> SamplingSettings:
        settings = self.default
        changes = {**self.by_role.get(role, {}),
                   **self.by_policy.get(str(policy), self.by_policy.get(policy.kind.value, {}))}
        if changes:
            settings = dataclasses.replace(settings, **changes)
        if self.temperature is not None and "temperature" not in changes:
            settings = dataclasses.replace(settings, temperature=self.temperature)
        return settings

    def fewest_new_tokens(self, role: str) -> tuple[int, str]:
        """The fewest new tokens a request of ``role`` may be given, by any policy, and the config
        key that gives it (to check that an answer can hold a move)."""
        role_limit = self.by_role.get(role, {}).get("max_new_tokens")
        candidates = [(role_limit, f"data.sampling_by_role.{role}.max_new_tokens") if role_limit is not None
                      else (self.default.max_new_tokens, "data.sampling.max_new_tokens")]
        candidates += [(changes["max_new_tokens"], f"data.sampling_by_policy.{spec}.max_new_tokens")
                       for spec, changes in self.by_policy.items() if "max_new_tokens" in changes]
        return min(candidates, key=lambda candidate: candidate[0])

    def plain(self) -> SamplingSettings:
        """The run's settings at this plan's temperature, without the roles' and policies' own: for
        a consumer that takes one setting for every request (the league's evaluator process, whose
        tournaments seat checkpoints and baselines alike)."""
        if self.temperature is None:
            return self.default
        return dataclasses.replace(self.default, temperature=self.temperature)
