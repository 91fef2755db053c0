"""Hugging Face transformers backend: one batched ``generate`` call per policy.

The worker shares the learner's model object in-process, so a weight sync is only a version
bump. Requests for the base policy run with the adapter disabled. Logprobs come from the
processed scores (after temperature / top-k / top-p), which is what the sampler drew from.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import nullcontext

import torch

from sp_lightning.rollout.base import RolloutWorker, SamplingSettings
from sp_lightning.types import Completion, ModelRequest, PolicyRef


class HFRolloutWorker(RolloutWorker):
    def __init__(self, model, tokenizer, max_batch_size: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.policy_version = 0
        self.generated_tokens = 0  # running count, for throughput metrics

    def encode_prompt(self, messages: list[dict[str, str]]) -> list[int]:
        return list(
            self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )

    def generate(self, requests: list[ModelRequest], sampling: SamplingSettings) -> list[Completion]:
        results: list[Completion | None] = [None] * len(requests)
        by_policy: dict[PolicyRef, list[int]] = defaultdict(list)
        for index, request in enumerate(requests):
            if not request.policy.is_model:
                raise ValueError(f"HFRolloutWorker got a request for bot policy {request.policy}")
            by_policy[request.policy].append(index)
        for policy, indices in by_policy.items():
            for start in range(0, len(indices), self.max_batch_size):
                chunk = indices[start : start + self.max_batch_size]
                prompts = [self.encode_prompt(requests[i].messages) for i in chunk]
                for i, completion in zip(chunk, self._generate_ids(prompts, policy, sampling)):
                    results[i] = completion
        return results  # type: ignore[return-value]

    def _adapter_context(self, policy: PolicyRef):
        if policy.kind == "learner":
            return nullcontext()
        if policy.kind == "base":
            if not hasattr(self.model, "disable_adapter"):
                return nullcontext()  # no adapter: the learner is the base model
            return self.model.disable_adapter()
        raise ValueError(f"HFRolloutWorker cannot serve policy {policy} yet")

    @torch.no_grad()
    def _generate_ids(
        self, prompts: list[list[int]], policy: PolicyRef, sampling: SamplingSettings
    ) -> list[Completion]:
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding: every prompt ends at column -1
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
            attention_mask[row, width - len(prompt) :] = 1
        greedy = sampling.temperature == 0
        kwargs = dict(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not greedy,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
        if not greedy:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        was_training = self.model.training
        self.model.eval()
        try:
            with self._adapter_context(policy):
                out = self.model.generate(
                    input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), **kwargs
                )
        finally:
            self.model.train(was_training)
        new_tokens = out.sequences[:, width:].cpu()  # (B, N)
        scores = torch.stack(out.scores, dim=1).float()  # (B, N, V) processed logits
        logprobs = torch.log_softmax(scores, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1).cpu()
        completions = []
        for row, prompt in enumerate(prompts):
            ids = new_tokens[row].tolist()
            if tok.eos_token_id in ids:  # keep the end-of-turn token: the policy learns to stop
                ids = ids[: ids.index(tok.eos_token_id) + 1]
            self.generated_tokens += len(ids)
            completions.append(
                Completion(
                    text=tok.decode(ids, skip_special_tokens=True),
                    prompt_ids=prompt,
                    completion_ids=ids,
                    logprobs=logprobs[row, : len(ids)].tolist(),
                    policy=policy,
                    policy_version=self.policy_version,
                )
            )
        return completions
