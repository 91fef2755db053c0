"""Sampling for the Hugging Face backend: prefill, then one token at a time, with a KV cache.

``model.generate`` is general (beam search, assistants, streamers, dozens of processors), and
its set-up costs about 4 ms per call on the tiny model, more than the forward of a small batch:
a one-token move of a batch of 64 games is a single forward pass. The arena makes one call per
turn of every game in flight, so that set-up is paid every turn. :func:`sample` does only what
the rollout needs: temperature, top-k and top-p as transformers' processors do them, in their
order, then ``torch.multinomial`` (or argmax) on the same probabilities, so that it draws the
tokens ``generate`` draws from the same random state; rows that ended (end-of-turn) get the
pad token after it. It returns the processed logprob of every drawn token, which is what
training's ratio needs (``generate``'s ``output_scores``).

What it leaves out on purpose: the processors a model's own ``generation_config`` may ask for
(repetition penalty, min-p, suppressed tokens...). Training recomputes each token's logprob
from the logits divided by the temperature and could not reproduce those, so a sampler that
applied them would hand the ratio logprobs of another distribution. :func:`sample` warns once
when a model's config sets one of them.
"""

from __future__ import annotations

import logging

import torch

from sp_lightning.kv_cache import cache_argument, new_cache
from sp_lightning.rollout.base import SamplingSettings

log = logging.getLogger(__name__)


def processed_logits(logits: torch.Tensor, sampling: SamplingSettings) -> torch.Tensor:
    """(B, V) float logits as the sampler draws from them: greedy leaves them as they are; else
    divided by the temperature, then top-k, then top-p (the tokens outside them at -inf), in the
    order and with the tie rules of transformers' ``TemperatureLogitsWarper``,
    ``TopKLogitsWarper`` and ``TopPLogitsWarper``."""
    if sampling.temperature == 0:
        return logits
    if sampling.temperature != 1.0:
        logits = logits / sampling.temperature
    if sampling.top_k and sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k)[0][..., -1, None]
        logits = logits.masked_fill(logits < kth, -float("inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cumulative <= (1 - sampling.top_p)
        remove[..., -1:] = False  # the most likely token always stays
        logits = logits.masked_fill(remove.scatter(1, order, remove), -float("inf"))
    return logits


IGNORED_GENERATION_SETTINGS = {"repetition_penalty": 1.0, "min_p": None, "no_repeat_ngram_size": 0,
                               "suppress_tokens": None, "begin_suppress_tokens": None, "min_new_tokens": None,
                               "bad_words_ids": None, "encoder_repetition_penalty": 1.0}
"""Settings of a ``generation_config`` that ``generate`` would apply and :func:`sample` does not,
with their neutral values."""
_warned: set[int] = set()


def _warn_about_ignored_settings(model) -> None:
    config = getattr(model, "generation_config", None)
    if config is None or id(config) in _warned:
        return
    _warned.add(id(config))
    ignored = {k: getattr(config, k, neutral) for k, neutral in IGNORED_GENERATION_SETTINGS.items()
               if getattr(config, k, neutral) not in (neutral, None, [], 0)}
    if ignored:
        log.warning("the rollout sampler ignores %s of the model's generation_config: training could not reproduce "
                     "the logprobs of a distribution they change (set data.sampling for temperature, top_p, top_k)",
                     ignored)


@torch.inference_mode()  # no autograd bookkeeping at all: 5% of a tiny model's one-token move
def sample(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, sampling: SamplingSettings,
           eos_token_id: int | None, pad_token_id: int, **model_kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens, logprobs)``, both (B, N) with N <= ``sampling.max_new_tokens``: the completion
    tokens of each left-padded prompt row (the pad token after a row's end-of-turn token) and the
    processed logprob of each. ``model_kwargs`` go to every forward (peft's ``adapter_names``)."""
    _warn_about_ignored_settings(model)
    cache = new_cache(model)
    cache_kwargs = cache_argument(model, cache)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, P)
    ids, mask = input_ids, attention_mask
    ongoing = torch.ones(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)  # (B,)
    tokens, logprobs = [], []
    for _ in range(sampling.max_new_tokens):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                       logits_to_keep=1, **cache_kwargs, **model_kwargs).logits[:, -1].float()  # (B, V)
        scores = processed_logits(logits, sampling)
        if sampling.temperature == 0:
            token = scores.argmax(dim=-1)  # (B,)
        else:
            token = torch.multinomial(scores.softmax(dim=-1), num_samples=1).squeeze(1)  # (B,)
        logprobs.append(torch.log_softmax(scores, dim=-1).gather(-1, token[:, None]).squeeze(1))
        token = torch.where(ongoing, token, torch.full_like(token, pad_token_id))
        tokens.append(token)
        if eos_token_id is not None:
            ongoing = ongoing & (token != eos_token_id)
        if not bool(ongoing.any()):
            break
        if cache.get_seq_length() != mask.shape[1]:  # the model ignored the cache: decoding would read one token
            raise RuntimeError(f"{type(model).__name__} kept no key/value cache of its prompt; the rollout sampler "
                               f"needs one")
        ids = token[:, None]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
    return torch.stack(tokens, dim=1), torch.stack(logprobs, dim=1)
