"""Rollout workers: turn batches of model requests into completions with tokens and logprobs."""

from sp_lightning.rollout.base import RolloutWorker, SamplingSettings
from sp_lightning.rollout.hf import HFRolloutWorker

__all__ = ["HFRolloutWorker", "RolloutWorker", "SamplingSettings"]
