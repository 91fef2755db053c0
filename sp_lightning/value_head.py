"""The value head of credit that learns values (``credit.GAE``): V of a decision's position.

PPO's actor-critic for language models puts a scalar head on the policy's own last hidden state
(TRL's ``AutoModelForCausalLMWithValueHead``, OpenRLHF's critic share the idea): the features that
choose the move are the ones the value is read from, and with a LoRA policy the adapter is the
trunk both train. Here the hidden state is taken at the position that predicts the completion's
first token, the end of the decision's prompt, which is the state the value is of.

The hidden states are the output embedding's input, caught by a forward hook
(:func:`capture_final_hidden`) during the forward pass the loss already runs: no second
forward for training the value, on the plain and the shared-prompt layouts alike (the shared
layout's last output-embedding call is its completion pass, which holds the same columns).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


class ValueHeads(torch.nn.Module):
    """One linear value head per learner (``""``, the one unnamed learner, is ``default``), zero at
    the start: the first advantages are the returns, and the value grows from there."""

    def __init__(self, learners: list[str], hidden_size: int):
        super().__init__()
        self.heads = torch.nn.ModuleDict({key_of(name): torch.nn.Linear(hidden_size, 1) for name in learners})
        for head in self.heads.values():
            torch.nn.init.zeros_(head.weight)
            torch.nn.init.zeros_(head.bias)

    def forward(self, learner: str, hidden: torch.Tensor) -> torch.Tensor:
        """(B,) values of (B, H) hidden states."""
        head = self.heads[key_of(learner)]
        return head(hidden.to(head.weight.dtype)).squeeze(-1)

    def params_of(self, learner: str) -> list[torch.nn.Parameter]:
        return list(self.heads[key_of(learner)].parameters())


def key_of(learner: str) -> str:
    """A learner's key in :class:`ValueHeads` (module names cannot be empty)."""
    return learner or "default"


def hidden_size_of(model) -> int:
    """The width of the hidden state ``model``'s output embedding reads (its LM head's input, which
    the value head reads too; not always ``config.hidden_size``: OPT projects it down first)."""
    head = model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if weight is None:
        raise ValueError(f"data.credit GAE: {type(model).__name__} has no output embedding weight to size its "
                         f"value head by")
    return int(weight.shape[-1])


@contextmanager
def capture_final_hidden(model):
    """Within the block, ``captured["hidden"]`` is the input of the last call of ``model``'s output
    embedding (its LM head): the final, normalised hidden states of the columns whose logits were
    kept, (B, kept, H)."""
    head = model.get_output_embeddings()
    if head is None:
        raise ValueError(f"data.credit GAE: {type(model).__name__} has no output embedding to read the value's "
                         f"hidden state from")
    captured: dict[str, torch.Tensor] = {}

    def hook(_module, args, _output):
        captured["hidden"] = args[0]

    handle = head.register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


def prompt_end_hidden(hidden: torch.Tensor, value_column: torch.Tensor) -> torch.Tensor:
    """(B, H): each row's hidden state at ``value_column`` (B,), a column of the kept window
    (B, K+1, H): the one that predicts the row's first completion token."""
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    return hidden[rows, value_column.to(hidden.device)]


class ValueLoss:
    """The value head's loss term: ``coef * 0.5 * (V - target)**2`` summed over the micro-batch's rows
    with a trained token, over the learner's records on every rank; ``train_trunk`` false trains
    the head alone on the policy's features (the adapter gets no gradient from it). Logs the mean
    squared error as ``value_error``. The term of ``credit.GAE``, which owns the heads it reads."""

    def __init__(self, heads: ValueHeads, coef: float, train_trunk: bool):
        self.heads, self.coef, self.train_trunk = heads, coef, train_trunk

    def __call__(self, batch, out) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        tensors = batch.tensors
        hidden = prompt_end_hidden(out.hidden, tensors.value_column)
        values = self.heads(batch.learner, hidden if self.train_trunk else hidden.detach())  # (B,)
        rows = (tensors.loss_mask.sum(-1) > 0).float()  # (B,)
        squared = (values.float() - batch.value_targets) ** 2 * rows  # (B,)
        loss = self.coef * 0.5 * squared.sum() / max(batch.num_records, 1.0)
        return loss, {"value_error": squared.detach().sum() / rows.sum().clamp(min=1)}
