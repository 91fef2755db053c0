"""What the vLLM tests share: the tiny policy an engine serves, its prompts, and the trainer's
logprobs to compare the engine's with (``tests/test_vllm_worker.py``, ``test_vllm_servers.py``,
``test_vllm_fit.py``)."""

from contextlib import contextmanager

import pytest
import torch

from sp_lightning.model import LoraSettings, PolicySettings
from sp_lightning.rollout import VLLMRolloutWorker
from sp_lightning.types import ModelRequest
from tests.helpers import send_weights

LOGPROB_TOLERANCE = 1e-4
"""vLLM's processed logprobs against the trainer's of the same tokens and weights (float32 both;
measured differences are ~1e-5 on the tiny model)."""

KV_CACHE_BYTES = 1 << 30  # vLLM's CPU engine: 1 GiB of KV cache is plenty for the tiny model

PROMPTS = [f"Board {i}\nLegal moves: [0] [4] [8]" for i in range(6)]


def requests_of(policies):
    """One request of the prompts above per policy, in order."""
    return [ModelRequest("player", [{"role": "user", "content": text}], policy)
            for text, policy in zip(PROMPTS, policies)]


def perturb_adapter(model, std: float, seed: int) -> None:
    """Move LoRA B off zero (a fresh adapter is the base model) so each adapter differs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * std)


def trainer_logprobs(module, completions):
    """The trainer's logprobs of each completion's tokens (the module's forward on the collated
    records, as a training step computes them, dividing each row's logits by the temperature its
    completion was sampled at)."""
    from sp_lightning.collate import collate
    from sp_lightning.types import TrainingRecord

    records = [TrainingRecord(c.prompt_ids, c.completion_ids, c.logprobs, 0.0, 0.0, [1] * len(c.completion_ids),
                              temperature=c.temperature) for c in completions]
    batch = collate(records, module.tokenizer.pad_token_id)
    with torch.no_grad():
        logprobs, _, _ = module.policy_forward(batch)
    return [logprobs[row, logprobs.shape[1] - len(c.completion_ids):].tolist() for row, c in enumerate(completions)]


@contextmanager
def adapter_as(model, std: float, seed: int):
    """The learner's adapter moved off zero with ``seed`` (another policy's weights) for the
    block, then restored."""
    saved = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    perturb_adapter(model, std, seed)
    try:
        yield
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in saved:
                    p.copy_(saved[n])


def served_policy():
    """The tiny policy (LoRA r16, its adapter moved off zero) and a vLLM worker for it, its
    learner's weights sent; the engine starts at the first call that needs it. Closed after."""
    pytest.importorskip("vllm")
    from sp_lightning.module import SelfPlayModule

    torch.manual_seed(0)
    module = SelfPlayModule(policy=PolicySettings(lora=LoraSettings(r=16, alpha=32)))
    module.model.eval()
    perturb_adapter(module.model, 0.3, seed=1)
    worker = VLLMRolloutWorker(module.model, module.tokenizer, max_loras=4, dtype="float32", enforce_eager=True,
                               max_model_len=512, engine_kwargs={"kv_cache_memory_bytes": KV_CACHE_BYTES})
    send_weights(worker, module.model, 0)
    try:
        yield module, worker
    finally:
        worker.close()
