"""The learner with its LoRA adapter merged into the weights, kept up to date in place.

Unmerged LoRA layers cost a second matmul per projection in every forward; a merged copy serves
learner-only generate calls at the base model's speed. The copy must follow the learner's
weights, which the rollout worker's ``load_weights`` writes after every optimizer step and then
marks this copy stale (:meth:`MergedCopy.mark_stale`). Rebuilding it (a deep copy of the peft
model, then peft's ``merge_and_unload``) costs about as much as a batch of tiny-model games, so
it is built once and afterwards refreshed in place: each merged weight is written as its frozen
base weight plus the adapter's delta (peft's ``get_delta_weight``), and each trainable token row
copied in. Where the adapter holds a trained parameter this does not know how to merge, the copy
is rebuilt instead.
"""

from __future__ import annotations

import copy

import torch

from sp_lightning.learners import DEFAULT_ADAPTER as LEARNER_ADAPTER  # the one unnamed learner's adapter


class MergedCopy:
    """``get()``: the peft ``model``'s learner merged into a plain copy (eval mode), current with
    the learner's weights as of the last :meth:`mark_stale`; ``builds`` and ``refreshes`` count
    the two ways it was made current."""

    def __init__(self, model):
        self.source = model
        self.model = None
        self.builds = 0
        self.refreshes = 0
        self._stale = False
        self._refresh_steps: list | None = None  # None: the copy can only be rebuilt

    def mark_stale(self) -> None:
        """The source's learner weights changed: the next ``get`` makes the copy current."""
        self._stale = True

    def get(self):
        if self.model is None or (self._stale and self._refresh_steps is None):
            self._build()
        elif self._stale:
            self._refresh()
        self._stale = False
        return self.model

    def release(self) -> None:
        """Drop the copy (its memory); the next ``get`` builds it again."""
        self.model, self._refresh_steps = None, None

    def _trained(self) -> list[torch.Tensor]:
        return [p for p in self.source.parameters() if p.requires_grad]

    def _build(self) -> None:
        self.model = None  # the stale copy's memory goes before the new one is made
        # a first learner-only call may come from Lightning's validation, which runs under
        # inference mode: a copy made there would hold inference tensors, which the refresh after
        # the next training step (outside it) may not write in place
        with torch.inference_mode(False), torch.no_grad():
            merged = copy.deepcopy(self.source)
            for name in [n for n in merged.peft_config if n != LEARNER_ADAPTER]:  # league checkpoints
                merged.delete_adapter(name)
            self.model = merged.merge_and_unload().eval()
        self._refresh_steps = self._plan()
        self.builds += 1

    def _plan(self) -> list | None:
        """How to refresh each merged weight from the source in place, or None when a trained
        parameter would be left out (an adapter kind this does not merge)."""
        from peft.tuners.lora import LoraLayer
        from peft.tuners.trainable_tokens.layer import TrainableTokensLayer

        prefix = "base_model.model."
        steps, covered = [], set()
        with torch.no_grad():
            for name, module in self.source.named_modules():
                target_name = name.removeprefix(prefix)
                if isinstance(module, LoraLayer) and LEARNER_ADAPTER in module.scaling:
                    target = self.model.get_submodule(target_name).weight
                    steps.append(("lora", target, module))
                    covered.update(id(p) for p in module.parameters() if p.requires_grad)
                elif isinstance(module, TrainableTokensLayer) and LEARNER_ADAPTER in module.token_indices:
                    # the layer sits in a wrapper (``<embed>.token_adapter``): the merged weight is the wrapper's
                    target = self.model.get_submodule(target_name.removesuffix(".token_adapter")).weight
                    index = torch.tensor(module.token_indices[LEARNER_ADAPTER], device=target.device)
                    owner = module.tied_adapter if getattr(module, "tied_adapter", None) is not None else module
                    steps.append(("tokens", target, (index, owner.trainable_tokens_delta[LEARNER_ADAPTER])))
                    covered.update(id(p) for p in module.parameters() if p.requires_grad)
        if any(id(p) not in covered for p in self._trained()):
            return None
        return steps

    @torch.no_grad()
    def _refresh(self) -> None:
        for kind, target, source in self._refresh_steps:
            if kind == "lora":
                target.copy_(source.get_base_layer().weight + source.get_delta_weight(LEARNER_ADAPTER))
            else:
                index, delta = source
                target.index_copy_(0, index, delta.to(target.dtype))
        self.refreshes += 1
