"""The trainer's forward of a micro-batch: the completion window's logits and logprobs.

Only the columns that predict completion tokens are computed through the LM head
(``logits_to_keep``), on the plain layout or on the shared-prompt one (each distinct prompt of a
micro-batch computed once, ``sp_lightning.shared_prompts``); each row's logits are divided by the
temperature its sampler drew at, so the logprobs are those the sampler's were. A value head's
hidden states are caught on the way (``value_head.capture_final_hidden``), the reference policy
is the same model with its adapter off (or holding a warm start's weights, ``reference_policy``), and a sharded rank that has run out of micro-batches runs
a stand-in pass (every pass of a sharded model is a collective).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from sp_lightning.collate import TrainBatch
from sp_lightning.losses import gather_logprobs
from sp_lightning.reference_policy import ReferenceWeights
from sp_lightning.shared_prompts import shared_window_logits
from sp_lightning.value_head import capture_final_hidden


class PolicyForward:
    """Forward passes of ``model`` (a peft model, or a plain causal LM) over collated micro-batches."""

    def __init__(self, model, pad_id: int):
        self.model = model
        self.pad_id = pad_id

    def __call__(self, batch: TrainBatch, disable_adapter: bool = False, hidden: bool = False):
        """``(logprobs, logits, hidden)``: (B, K) logprob of each target token under the policy (or
        the base model with ``disable_adapter``), the (B, K, V) logits behind it, and with ``hidden``
        the final hidden states of the kept columns (else None)."""
        ctx = self.model.disable_adapter() if disable_adapter else nullcontext()
        window = batch.targets.shape[1]
        with ctx, capture_final_hidden(self.model) if hidden else nullcontext({}) as captured:
            if batch.shared is not None:
                logits = shared_window_logits(self.model, batch.input_ids, batch.attention_mask,
                                              batch.position_ids, batch.shared, logits_to_keep=window + 1)
            else:
                logits = self.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                    position_ids=batch.position_ids, logits_to_keep=window + 1).logits
        logits = logits[:, :-1]  # (B, K, V) the columns that predict the last K tokens
        if batch.temperatures is not None:  # the sampler's logprobs were taken after temperature
            logits = logits / batch.temperatures.to(logits.device, logits.dtype)[:, None, None]
        return gather_logprobs(logits, batch.targets), logits, captured.get("hidden")

    def reference(self, batch: TrainBatch, weights: ReferenceWeights | None = None) -> torch.Tensor:
        """(B, K) the reference policy's logprobs, without gradients: the base model (adapter off),
        or the model holding ``weights`` (the policy a warm start handed over)."""
        with torch.no_grad():
            if weights is None:
                return self(batch, disable_adapter=True)[0]
            with weights.swapped_into(self.model):
                return self(batch)[0]

    def filler(self) -> torch.Tensor:
        """The policy's forward on two padding tokens (a sharded rank's stand-in pass); its logits."""
        device = next(self.model.parameters()).device
        ids = torch.full((1, 2), self.pad_id, dtype=torch.long, device=device)
        return self.model(input_ids=ids, logits_to_keep=1).logits

    def can_share_prompts(self) -> bool:
        """Whether the shared-prompt layout may be used: not under gradient checkpointing (Hugging
        Face models keep no key/value cache there)."""
        checkpointing = getattr(self.model, "is_activation_checkpointing", None)  # transformers >= 5
        if checkpointing is None:
            checkpointing = getattr(self.model, "is_gradient_checkpointing", False)
        return not checkpointing
