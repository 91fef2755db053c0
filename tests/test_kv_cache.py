"""Our forward loops hand the model its key/value cache under the keyword its forward takes."""

import inspect
import warnings

import torch

from sp_lightning.kv_cache import _cache_keyword, cache_argument, new_cache
from sp_lightning.rollout.base import SamplingSettings
from sp_lightning.padding import left_pad
from sp_lightning.rollout.sampler import sample


class ModelOfTheOldName(torch.nn.Module):
    """A forward that knows only ``past_key_values`` (transformers before the rename)."""

    def forward(self, input_ids=None, past_key_values=None, use_cache=None):
        return None


def test_the_keyword_is_the_one_the_forward_takes(tiny_policy):
    model, _ = tiny_policy
    base = model.get_base_model()
    expected = "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"
    cache = new_cache(model)
    assert cache_argument(model, cache) == {expected: cache}  # the peft wrapper: its base model's keyword
    assert cache_argument(base, cache) == {expected: cache}
    assert _cache_keyword(ModelOfTheOldName) == "past_key_values"


def test_the_sampler_fills_the_cache_without_a_deprecation_warning(tiny_policy):
    model, tok = tiny_policy
    model.eval()
    input_ids, attention_mask = left_pad([tok.encode("[3]"), tok.encode("Legal moves: [1] [2]")], tok.pad_token_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        tokens, _ = sample(model, input_ids, attention_mask, SamplingSettings(max_new_tokens=3, temperature=1.0),
                           tok.eos_token_id, tok.pad_token_id)
    assert tokens.shape[0] == 2 and 1 <= tokens.shape[1] <= 3
