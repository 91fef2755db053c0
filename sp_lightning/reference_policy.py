"""The KL term's reference policy when it is not the base model: the policy a warm start handed over.

RLHF regularises toward the supervised model it started from, not toward the pretrained base;
after ``data.warm_start`` that model is the learner as the warm start left it
(``model.loss.kl.reference: warm_start``). Its weights are the learner's trainable tensors at the
end of step ``data.warm_start.steps``, copied once (an adapter's worth for LoRA, the whole model
for a run that trains every weight). The reference's forward puts them into the model's own
parameters, runs, and puts the learner's back: one model in memory, any layout the trainer uses
(LoRA or not, several learners), and the run's checkpoints keep the copy under their own key so
that a resumed run regularises toward the same policy. The swap is in place, so the reference's
forward must come before the policy's forward builds its graph (``update.PolicyUpdate`` does so).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from sp_lightning.errors import UserError

REFERENCES = ("base", "warm_start")
"""What ``loss.kl.reference`` may name: the base model (adapter off) or the warm start's policy."""


class ReferenceWeights:
    """A frozen copy of the model's trainable tensors, taken once, swapped in for a forward pass."""

    CHECKPOINT_KEY = "reference_policy"
    """Where a run's checkpoint keeps the copy (its ``state_dict`` keeps only trained weights)."""

    def __init__(self):
        self.tensors: dict[str, torch.Tensor] | None = None

    @property
    def ready(self) -> bool:
        return self.tensors is not None

    def capture(self, model: torch.nn.Module) -> None:
        """Copy every trainable tensor of ``model`` as it is now (every learner's adapter)."""
        self.tensors = {name: param.detach().clone() for name, param in model.named_parameters()
                        if param.requires_grad}

    @contextmanager
    def swapped_into(self, model: torch.nn.Module):
        """``model`` holding the reference's weights inside the block, its own again after it
        (bit for bit); no gradient is taken inside. Nothing may hold an autograd graph of these
        parameters across the block: their values change in place."""
        params = dict(model.named_parameters())
        own = {}
        with torch.no_grad():
            try:
                for name, tensor in self.tensors.items():
                    own[name] = params[name].detach().clone()
                    params[name].copy_(tensor)
                yield model
            finally:
                for name, tensor in own.items():
                    params[name].copy_(tensor)

    def state_dict(self) -> dict[str, torch.Tensor] | None:
        return self.tensors

    def load_state_dict(self, state: dict[str, torch.Tensor] | None, model: torch.nn.Module, source: str) -> None:
        """The copy a checkpoint kept (None: the warm start had not ended when it was written). One
        that does not match the model's trainable tensors is refused naming ``source``."""
        if state is None:
            self.tensors = None
            return
        params = {name: param for name, param in model.named_parameters() if param.requires_grad}
        wrong = sorted(name for name, tensor in state.items()
                       if name not in params or tuple(params[name].shape) != tuple(tensor.shape))
        if wrong or set(state) != set(params):
            raise UserError(f"{source}: its {self.CHECKPOINT_KEY} (the KL term's warm-start reference) does not fit "
                            f"the model's trainable weights ({len(wrong)} differ, e.g. "
                            f"{(wrong or sorted(set(params) - set(state)))[:1]}): the checkpoint is another config's")
        self.tensors = {name: tensor.to(params[name].device, params[name].dtype) for name, tensor in state.items()}
