"""From training records to the tensors of one micro-batch: collation, the split into
micro-batches, and the legal-move masks some loss terms read.

Records carry everything training needs to know about them (token ids, behaviour logprobs, the
temperature they were sampled at, whether those logprobs are the trainer's own computation, the
legal moves of their position): nothing here reads the engine that played them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from sp_lightning.padding import left_pad
from sp_lightning.shared_prompts import SharedPrompts, collate_shared
from sp_lightning.types import TrainingRecord


@dataclass
class TrainBatch:
    """Collated tensors of one micro-batch.

    Sequences are LEFT-padded, so every row's completion ends at the last column and the
    completion tensors are right-aligned in a (B, K) window, K the longest kept completion. The
    model then computes logits for the last K+1 columns only (``logits_to_keep``): the LM head and
    log-softmax never run over prompt positions, which are most of the tokens.

    With ``shared`` (see ``sp_lightning.shared_prompts``) the distinct prompts are there, each
    computed once, and ``input_ids`` / ``attention_mask`` / ``position_ids`` hold each row's
    suffix only (its prompt's last token and its completion), laid out the same way.
    """

    input_ids: torch.Tensor  # (B, W)
    attention_mask: torch.Tensor  # (B, W)
    position_ids: torch.Tensor  # (B, W) 0 at each row's first real token
    targets: torch.Tensor  # (B, K) the last K tokens of each row
    loss_mask: torch.Tensor  # (B, K) 1 on trained completion tokens
    old_logprobs: torch.Tensor  # (B, K) the behaviour policy's (the sampler's)
    advantages: torch.Tensor  # (B,)
    shared: SharedPrompts | None = None
    value_column: torch.Tensor | None = None  # (B,) the column of each row's last prompt token among the K+1 kept
    temperatures: torch.Tensor | None = None  # (B,) each row's sampling temperature; None: all 1 (or 0)

    def to(self, device) -> TrainBatch:
        return TrainBatch(*(None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
                            for f in dataclasses.fields(self)))


def kept_tokens(record: TrainingRecord, max_tokens: int | None) -> int:
    """How many of ``record``'s completion tokens are trained on when its prompt+completion is
    cut at ``max_tokens`` (``model.max_train_tokens``; None: all)."""
    length = len(record.prompt_ids) + len(record.completion_ids)
    kept = min(length, max_tokens) if max_tokens else length
    return max(0, min(len(record.completion_ids), kept - len(record.prompt_ids)))


def trained_tokens(record: TrainingRecord, max_tokens: int | None) -> int:
    """The tokens of ``record`` its loss counts: its action mask over the completion tokens kept."""
    return int(sum(record.action_mask[:kept_tokens(record, max_tokens)]))


def collate(records: list[TrainingRecord], pad_id: int, max_tokens: int | None = None,
            share_prompts: bool = False) -> TrainBatch:
    """Left-padded prompt+completion sequences, cut at ``max_tokens`` (no training past it).
    ``share_prompts``: the shared-prompt layout where it pays and no sequence is cut."""
    seqs, kept = [], []
    for r in records:
        ids = list(r.prompt_ids) + list(r.completion_ids)
        if max_tokens:
            ids = ids[:max_tokens]
        seqs.append(ids)
        kept.append(kept_tokens(r, max_tokens))
    uncut = all(len(ids) == len(r.prompt_ids) + len(r.completion_ids) for ids, r in zip(seqs, records))
    shared = collate_shared(records, pad_id) if share_prompts and uncut else None
    if shared is not None:
        input_ids, attention_mask, position_ids, prompts = shared
    else:
        input_ids, attention_mask = left_pad(seqs, pad_id)
        position_ids, prompts = (attention_mask.cumsum(-1) - 1).clamp(min=0), None
    width = input_ids.shape[1]
    window = max(1, max(kept))
    loss_mask = torch.zeros((len(records), window))
    old_logprobs = torch.zeros((len(records), window))
    for row, (r, k) in enumerate(zip(records, kept)):
        if k:
            loss_mask[row, window - k :] = torch.tensor(r.action_mask[:k], dtype=torch.float)
            old_logprobs[row, window - k :] = torch.tensor(r.logprobs[:k])
    advantages = torch.tensor([r.advantage for r in records], dtype=torch.float)
    value_column = window - torch.tensor(kept, dtype=torch.long)  # (B,) K - k: predicts the first completion token
    return TrainBatch(input_ids, attention_mask, position_ids, input_ids[:, width - window :],
                      loss_mask, old_logprobs, advantages, prompts, value_column, _temperatures(records))


def _temperatures(records: list[TrainingRecord]) -> torch.Tensor | None:
    """(B,) the temperature each row's logits are divided by, as its sampler's were: its own,
    or 1 for a greedy one (0: its logprobs were the raw ones); None when every row's is 1."""
    scales = [r.temperature if r.temperature not in (0.0, 1.0) else 1.0 for r in records]
    return None if all(t == 1.0 for t in scales) else torch.tensor(scales, dtype=torch.float)


def split_micro_batches(records: list[TrainingRecord], max_records: int, max_tokens: int | None,
                        max_train_tokens: int | None = None) -> list[list[TrainingRecord]]:
    """``records`` cut, in order, into runs of at most ``max_records`` whose padded size (count x
    the longest sequence, as ``collate`` pads them) stays within ``max_tokens``."""
    chunks: list[list[TrainingRecord]] = []
    current: list[TrainingRecord] = []
    longest = 0  # of the records in ``current``
    for r in records:
        length = len(r.prompt_ids) + len(r.completion_ids)
        if max_train_tokens:
            length = min(length, max_train_tokens)
        full = len(current) >= max_records
        if current and (full or (max_tokens and (len(current) + 1) * max(longest, length) > max_tokens)):
            chunks.append(current)
            current, longest = [], 0
        current.append(r)
        longest = max(longest, length)
    if current:
        chunks.append(current)
    return chunks


@dataclass
class MicroBatch:
    """One micro-batch of a training step: its records, their collated tensors, the count of
    trained tokens (counted on the CPU, so no pass waits on the device for it), and what the first
    pass over it leaves for the later ones (the legal-move masks, the trainer's logprobs under the
    weights that played, the value targets)."""

    records: list[TrainingRecord]
    tensors: TrainBatch
    trained_tokens: float
    legal: tuple | None = None
    trainer_logprobs: torch.Tensor | None = None
    """(B, K) the trainer's logprobs under the weights that played (the first pass's, detached)."""
    sampler_mismatch: torch.Tensor | None = None
    value_targets: torch.Tensor | None = None
    """(B,) what the value head learns toward (credit that learns values; None otherwise)."""

    @classmethod
    def collated(cls, records: list[TrainingRecord], pad_id: int, max_tokens: int | None, device,
                 share_prompts: bool = False) -> MicroBatch:
        tensors = collate(records, pad_id, max_tokens, share_prompts)
        return cls(records, tensors.to(device), float(tensors.loss_mask.sum()))

    @property
    def logprobs_from_trainer(self) -> bool:
        return all(r.logprobs_from_trainer for r in self.records)


class LegalMoves:
    """The legal-move masks of micro-batches, from the records' legal moves and ``tokenizer`` (each
    move's token looked up once)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._move_token_ids: dict[str, int | None] = {}

    def masks(self, records: list[TrainingRecord], batch: TrainBatch, vocab: int) -> tuple:
        """(first_position (B,), legal_mask (B, V), known (B,)) of a micro-batch: the column of
        each row's first trained token, the tokens of its legal moves (all True where unknown),
        and which rows' legal moves are known. The mask is built on the CPU in one indexed write
        and moved to the device once."""
        legal_mask = torch.ones(len(records), vocab, dtype=torch.bool)
        known_rows, rows, columns = [], [], []
        for row, record in enumerate(records):
            ids = self.token_ids(record.legal_actions)
            if ids is not None:
                known_rows.append(row)
                rows.extend([row] * len(ids))
                columns.extend(ids)
        legal_mask[known_rows] = False
        legal_mask[rows, columns] = True
        known = torch.zeros(len(records), dtype=torch.bool)
        known[known_rows] = True
        device = batch.loss_mask.device
        trained = batch.loss_mask.sum(-1) > 0  # a row with no trained token has no move column
        first_position = (batch.loss_mask != 0).float().argmax(-1)  # (B,)
        return first_position, legal_mask.to(device), known.to(device) & trained

    def token_ids(self, actions: list[str] | None) -> list[int] | None:
        """The token of each legal move, or None unless every move is one token and they differ
        (moves spelled over several tokens have no single choice point to score). One legal move
        gives an entropy of 0 there: a forced move needs no exploring."""
        if not actions:
            return None
        ids = []
        for action in actions:
            if action not in self._move_token_ids:
                encoded = self.tokenizer.encode(action, add_special_tokens=False)
                self._move_token_ids[action] = encoded[0] if len(encoded) == 1 else None
            ids.append(self._move_token_ids[action])
        if None in ids or len(set(ids)) < len(ids):
            return None
        return ids
