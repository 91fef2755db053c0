"""The key/value cache our own forward loops hand a Hugging Face model.

The rollout sampler (``rollout/sampler.py``) and the shared-prompt forward (``shared_prompts.py``)
call the model themselves with a ``DynamicCache``. Transformers renamed the forward's keyword for
it from ``past_key_values`` to ``cache`` (5.x; the old name warns and goes in 5.40), and we support
versions on both sides of the rename, so the keyword is read from the model's own signature.
"""

from __future__ import annotations

import functools
import inspect


def new_cache(model):
    """An empty ``DynamicCache`` for ``model``."""
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def cache_argument(model, cache) -> dict:
    """``{keyword: cache}`` for a forward of ``model`` (a peft wrapper passes it on to its base)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {_cache_keyword(type(base)): cache}


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_class) -> str:
    parameters = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in parameters and "past_key_values" not in parameters else "past_key_values"
