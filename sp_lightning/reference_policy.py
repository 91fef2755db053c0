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
