"""The KL term's reference policy when it is not the base model: the policy a warm start handed over.

RLHF regularises toward the supervised model it started from, not toward the pretrained base;
after ``data.warm_start`` that model is the learner as the warm start left it
(``model.loss.kl.reference: warm_start``). Its weights are the learner's trainable tensors at the
start of the first self-play step, copied once (an adapter's worth for LoRA, the whole model for
a run that trains every weight). The reference's forward points the model's parameters at the
copy, runs, and points them back: one model in memory, any layout the trainer uses (LoRA or not,
several learners), and the run's checkpoints keep the copy under their own key so that a resumed
run regularises toward the same policy. The parameters change under the forward, so it must come
before the policy's forward builds its graph (``update.PolicyUpdate`` does so).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import contextmanager

import torch

from sp_lightning.errors import UserError
from sp_lightning.learners import Learners, params_of

REFERENCES = ("base", "warm_start")
"""What ``loss.kl.reference`` may name: the base model (adapter off) or the warm start's policy."""


class ReferenceWeights:
    """A frozen copy of one learner's trainable tensors, taken once, swapped in for a forward pass."""

    CHECKPOINT_KEY = "reference_policy"
    """Where a run's checkpoint keeps the copy (its ``state_dict`` keeps only trained weights)."""

    def __init__(self):
        self.tensors: dict[str, torch.Tensor] | None = None

    @property
    def ready(self) -> bool:
        return self.tensors is not None

    def capture(self, named_params: Iterable[tuple[str, torch.nn.Parameter]]) -> None:
        """Copy these parameters as they are now (the warmed learner's adapter, by name in the model)."""
        self.tensors = {name: param.detach().clone() for name, param in named_params}

    @contextmanager
    def swapped_into(self, model: torch.nn.Module):
        """``model`` holding the reference's weights inside the block and its own after it: each
        parameter's storage is pointed at the copy and back, so nothing is copied and the
        model's own weights are untouched. No gradient is taken inside; nothing may hold an
        autograd graph of these parameters across the block."""
        params = dict(model.named_parameters())
        own = {}
        with torch.no_grad():
            try:
                for name, tensor in self.tensors.items():
                    param = params[name]
                    if tensor.device != param.device or tensor.dtype != param.dtype:  # a resumed run's copy
                        tensor = self.tensors[name] = tensor.to(param.device, param.dtype)  # (read on the CPU)
                    own[name] = param.data
                    param.data = tensor
                yield model
            finally:
                for name, data in own.items():
                    params[name].data = data

    def state_dict(self) -> dict[str, torch.Tensor] | None:
        return self.tensors

    def load_state_dict(self, state: dict[str, torch.Tensor] | None,
                        named_params: Iterable[tuple[str, torch.nn.Parameter]], source: str) -> None:
        """The copy a checkpoint kept (None: the warm start had not ended when it was written). One
        that does not match ``named_params`` (the learner's, as ``capture`` took them) is refused
        naming ``source``."""
        if state is None:
            self.tensors = None
            return
        params = dict(named_params)
        wrong = sorted(name for name, tensor in state.items()
                       if name not in params or tuple(params[name].shape) != tuple(tensor.shape))
        if wrong or set(state) != set(params):
            raise UserError(f"{source}: its {self.CHECKPOINT_KEY} (the KL term's warm-start reference) does not fit "
                            f"the learner's trainable weights ({len(wrong)} differ, e.g. "
                            f"{(wrong or sorted(set(params) - set(state)))[:1]}): the checkpoint is another config's")
        self.tensors = dict(state)


class WarmStartReference:
    """A run's warm-start reference: the learner it holds (the one the warm start warmed: the
    learner that plays every role), whether any loss asks for it, when its copy is taken (the
    first batch in which that learner plays and learns by policy gradient, so a warm-start step
    skipped for a non-finite loss cannot shift it), and the copy itself (:class:`ReferenceWeights`)."""

    def __init__(self, model: torch.nn.Module, learners: Learners, loss_of: dict, uses_adapter: bool,
                 warm_start_steps: int):
        whole = learners.whole()
        self.warmed = None if whole is None else whole.name or ""
        check_references(loss_of, learners, uses_adapter, warm_start_steps, self.warmed)
        self.model = model
        self.wanted = bool(warm_start_steps) and any(
            settings.needs_reference and settings.kl.reference == "warm_start" and not learners.imitates(name)
            for name, settings in loss_of.items())
        self.weights = ReferenceWeights()

    @property
    def ready(self) -> bool:
        return self.weights.ready

    def take_when_due(self, records) -> None:
        """Copy the warmed learner's weights before the first update on its own moves."""
        if self.wanted and not self.ready and any(r.learner == self.warmed and not r.imitation for r in records):
            self.weights.capture(self._params())

    def _params(self) -> list[tuple[str, torch.nn.Parameter]]:
        """The warmed learner's trainable parameters by name in the model."""
        mine = {id(p) for p in params_of(self.model, self.warmed)}
        return [(name, p) for name, p in self.model.named_parameters() if id(p) in mine]

    def state_dict(self) -> dict[str, torch.Tensor] | None:
        return self.weights.state_dict()

    def save(self, checkpoint: dict) -> None:
        """Into a run's checkpoint, once taken (its ``state_dict`` keeps only trained weights)."""
        if self.ready:
            checkpoint[ReferenceWeights.CHECKPOINT_KEY] = self.state_dict()

    def load(self, checkpoint: dict, source: str) -> None:
        """From a run's checkpoint: the copy it kept, or none yet (written before the first self-play step)."""
        state = checkpoint.get(ReferenceWeights.CHECKPOINT_KEY)
        self.weights.load_state_dict(state, self._params() if state is not None else [], source)


def check_references(loss_of: dict, learners: Learners, uses_adapter: bool, warm_start_steps: int,
                     warmed: str | None) -> None:
    """Each learner's KL reference can be had: the base model needs an adapter to switch off, the
    warm start's policy a warm start, and only the learner it warmed has one (an exploiter that
    inherits ``model.loss`` must say its own). An imitation learner's loss has no KL term."""
    for name, settings in loss_of.items():
        if not settings.needs_reference or learners.imitates(name):
            continue
        key = f"model.learners.{name}.loss" if name else "model.loss"
        if settings.kl.reference == "base" and not uses_adapter:
            raise ValueError(f"{key}: the reference the KL penalty (kl.coef) or an extra term reads is the base "
                             f"model with the adapter off; set model.policy.lora, use kl.reference: warm_start "
                             f"after a warm start, or drop the term")
        if settings.kl.reference == "warm_start" and not warm_start_steps:
            raise ValueError(f"{key}.kl.reference: 'warm_start' regularises toward the policy a warm start hands "
                             f"over; set data.warm_start (steps > 0), or use reference: base")
        if settings.kl.reference == "warm_start" and name != warmed:
            raise ValueError(f"model.learners.{name}.loss.kl.reference: 'warm_start' holds the learner the warm start "
                             f"warmed ({warmed!r}), and {name} is another; give it its own "
                             f"loss.kl (e.g. {{coef: 0}} or reference: base)")
