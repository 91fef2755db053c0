"""Rollout workers: turn batches of model requests into completions with tokens and logprobs."""

from sp_lightning.rollout.base import (
    RetrySettings,
    RolloutFailed,
    RolloutWorker,
    SamplingSettings,
    TransientRolloutError,
)
from sp_lightning.rollout.hf import HFRolloutWorker
from sp_lightning.rollout.remote import RemoteRolloutWorker
from sp_lightning.rollout.server import ServerRolloutWorker
from sp_lightning.rollout.vllm import VLLMRolloutWorker  # imports vllm only when an engine starts

__all__ = [
    "HFRolloutWorker", "RemoteRolloutWorker", "RetrySettings", "RolloutFailed", "RolloutWorker", "SamplingSettings",
    "ServerRolloutWorker", "TransientRolloutError", "VLLMRolloutWorker",
]
