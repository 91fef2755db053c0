"""Padding token sequences into tensors: shared by generation (the rollout workers) and training
(collation), so that neither imports the other."""

from __future__ import annotations

import torch


def left_pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of ``sequences`` padded on the left to the longest, so
    that every sequence ends at the last column, where generation continues."""
    width = max(map(len, sequences))
    # one tensor from padded Python lists: a tensor per row costs more than the row's copy
    input_ids = torch.tensor([[pad_id] * (width - len(seq)) + list(seq) for seq in sequences], dtype=torch.long)
    attention_mask = torch.tensor([[0] * (width - len(seq)) + [1] * len(seq) for seq in sequences], dtype=torch.long)
    return input_ids, attention_mask
