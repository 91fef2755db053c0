"""Rollout workers: turn batches of model requests into completions with tokens and logprobs."""

from sp_lightning.rollout.base import (
    RetrySettings,
    RolloutFailed,
    RolloutWorker,
    SamplingSettings,
    TransientRolloutError,
)
from sp_lightning.rollout.hf import HFRolloutWorker
from sp_lightning.rollout.vllm import VLLMRolloutWorker  # imports vllm only when an engine starts

__all__ = [
    "HFRolloutWorker", "RetrySettings", "RolloutFailed", "RolloutWorker", "SamplingSettings", "TransientRolloutError",
    "VLLMRolloutWorker",
]
