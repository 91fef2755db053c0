"""Compute each distinct prompt of a micro-batch once: the forward of GRPO groups, shared.

GRPO samples a group of completions per prompt (often eight or sixteen),
and a plain forward runs every row's prompt through the model again: with short completions
(game moves, answers) the prompt is most of the tokens, so most of the training compute is the
same prompt computed eight times. Here the model runs in two passes instead:

1. **prompts**: each distinct prompt once, without its last token, keeping the keys and values
   (a Hugging Face ``DynamicCache``; autograd records through it);
2. **completions**: per row, the prompt's last token and the completion, reading the cached
   keys and values of its own prompt (the cache is gathered row by row with
   ``Cache.reorder_cache``), so gradients flow back into the prompt pass summed over the
   group, as they would through separate copies.

The logits of the completion window are those of the plain forward (the test holds them within
1e-5 and the gradients within 1e-4 relative, with LoRA dropout 0: with dropout the prompt pass
draws one mask per distinct prompt, not one per row); the prompt's last token goes with the completions because its
logits predict the first completion token. The rows' suffixes are left-padded like the plain
layout, so the (B, K) window, targets and masks line up the same way.

``collate_shared`` is used only where it pays: the shared layout's token count (distinct
prompts x their width + rows x the suffix width) must be at most ``MAX_SHARED_FRACTION`` of
the plain layout's. In GRPO batches (many completions per prompt) the shared layout is a small
fraction of the plain one and the update is correspondingly faster (benchmarks/bench_trl.py
measures it); in game batches where every record has its own board it falls back to the plain
layout.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from sp_lightning.kv_cache import cache_argument, new_cache
from sp_lightning.padding import left_pad

MAX_SHARED_FRACTION = 0.75
"""Share prompts only when it leaves at most this fraction of the plain layout's tokens: a
second forward pass and the cache gather cost something, so a small saving is not worth it."""


@dataclass
class SharedPrompts:
    """The distinct prompts of a micro-batch, each without its last token, left-padded."""

    input_ids: torch.Tensor  # (G, P)
    attention_mask: torch.Tensor  # (G, P)
    position_ids: torch.Tensor  # (G, P)
    row_prompt: torch.Tensor  # (B,) which prompt each row continues

    def to(self, device) -> SharedPrompts:
        return SharedPrompts(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))


def group_by_prompt(records: list) -> list:
    """``records`` reordered so that records with the same prompt are adjacent (in the order
    their prompts first appear), so that micro-batches keep groups together."""
    groups: dict[tuple[int, ...], list] = {}
    for record in records:
        groups.setdefault(tuple(record.prompt_ids), []).append(record)
    return [record for group in groups.values() for record in group]


def collate_shared(records: list, pad_id: int):
    """``(suffix input_ids, suffix attention_mask, suffix position_ids, SharedPrompts)`` of
    ``records``, or None where the shared layout does not pay (see the module docstring) or
    does not apply (a prompt of one token has nothing to share)."""
    distinct: dict[tuple[int, ...], int] = {}
    row_prompt = [distinct.setdefault(tuple(r.prompt_ids), len(distinct)) for r in records]
    prompts = list(distinct)
    if any(len(p) < 2 for p in prompts) or not any(r.completion_ids for r in records):
        return None  # nothing before the last prompt token to share / no completion column to score
    prefix_width = max(len(p) - 1 for p in prompts)
    suffix_width = 1 + max(len(r.completion_ids) for r in records)
    plain = len(records) * max(len(r.prompt_ids) + len(r.completion_ids) for r in records)
    if len(prompts) * prefix_width + len(records) * suffix_width > MAX_SHARED_FRACTION * plain:
        return None
    prefix_ids, prefix_mask = left_pad([list(p[:-1]) for p in prompts], pad_id)
    prefix_positions = (prefix_mask.cumsum(-1) - 1).clamp(min=0)
    suffix_ids, suffix_mask = left_pad([[r.prompt_ids[-1]] + list(r.completion_ids) for r in records], pad_id)
    # each suffix continues its prompt: positions from the prompt's length minus one
    offsets = torch.tensor([len(prompts[g]) - 1 for g in row_prompt]).unsqueeze(1)
    suffix_positions = offsets + (suffix_mask.cumsum(-1) - 1).clamp(min=0)
    shared = SharedPrompts(prefix_ids, prefix_mask, prefix_positions, torch.tensor(row_prompt))
    return suffix_ids, suffix_mask, suffix_positions, shared


def shared_window_logits(model, input_ids, attention_mask, position_ids, shared: SharedPrompts,
                         logits_to_keep: int) -> torch.Tensor:
    """The logits of the last ``logits_to_keep`` suffix columns, the prompts computed once."""
    cache = new_cache(model)
    model(input_ids=shared.input_ids, attention_mask=shared.attention_mask, position_ids=shared.position_ids,
          use_cache=True, logits_to_keep=1, **cache_argument(model, cache))
    if cache.get_seq_length() != shared.input_ids.shape[1]:
        raise RuntimeError(f"{type(model).__name__} kept no key/value cache of the prompt pass; "
                           f"set model.share_prompts: false")
    cache.reorder_cache(shared.row_prompt)  # (G, ...) -> (B, ...): each row its prompt's
    mask = torch.cat([shared.attention_mask[shared.row_prompt], attention_mask], dim=1)
    return model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=True,
                 logits_to_keep=logits_to_keep, **cache_argument(model, cache)).logits
