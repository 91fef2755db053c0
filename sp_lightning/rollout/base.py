"""The RolloutWorker interface, which every backend (hf, vllm, openai-compatible) implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from sp_lightning.types import Completion, ModelRequest


@dataclass
class SamplingSettings:
    """How completions are sampled."""

    max_new_tokens: int = 8
    """Generation stops at end-of-turn or after this many tokens."""
    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling. Training divides its logits by the temperature, as the sampler did, but
    does not truncate them: with top_p < 1 or top_k > 0 the PPO ratio is approximate."""
    top_k: int = 0
    """0 disables top-k."""

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"sampling.max_new_tokens: expected >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"sampling.temperature: expected >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling.top_p: expected in (0, 1], got {self.top_p}")


class RolloutWorker(ABC):
    """Generates completions for model requests, many at once.

    ``generate`` receives every pending request of the concurrent episodes (for any mix of model
    policies) and must return one Completion per request, in order, each carrying its prompt and
    completion token ids and the processed (post-temperature) logprob of each completion token.
    ``policy_version`` counts weight updates so that every completion records its provenance.
    """

    policy_version: int = 0

    @abstractmethod
    def generate(self, requests: list[ModelRequest], sampling: SamplingSettings) -> list[Completion]:
        """One Completion per request, in the same order."""

    def sync_weights(self, version: int) -> None:
        """Make the learner's latest weights the ones used for generation."""
        self.policy_version = version
