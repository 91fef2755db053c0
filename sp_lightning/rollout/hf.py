"""Hugging Face transformers backend: one batched generate call for all pending requests.

The worker generates from a copy of the policy of its own, made when it is built (before the
trainer moves, casts or shards its model), never from the trainer's model object: the trainer's
weights reach it only through :meth:`HFRolloutWorker.load_weights`, which copies the learners'
trainable tensors in (and, the first time, places the copy where the trainer's model is, in
its dtype). What it generates with after an update is what it was sent, the same path vLLM and
the servers take. Every model policy is served by the same copy:

- ``learner``: the trained adapter (peft's ``default``);
- ``base``: the same model with the adapter disabled;
- ``checkpoint:<id>``: a saved adapter (``register_adapter(id, path)``), loaded once as a named
  peft adapter beside the learner's and switched in for its requests. At most ``max_adapters``
  are held at once; the least recently used one is unloaded first. They are loaded into the
  worker's copy, never into the model being trained.

Pending requests of different policies share one generate call: peft's mixed-adapter batches
(``adapter_names``) route each row through its own adapter inside a single forward, so a league
with twenty opponents costs one call per turn, not twenty (benchmarks/bench_rollout_and_step.py
measures it). Adapters that do not fit under ``max_adapters`` are reloaded from disk every turn,
which then dominates the turn (the same benchmark), so league configs set the cap to the
league's size. A call holds at most ``max_batch_size`` rows and ``max_adapters`` checkpoints;
a plain model without adapters gets one call per policy. A call is the worker's own sampler
(``sampler.sample``: prefill and KV-cached decoding with transformers' warpers, drawing the tokens
``model.generate`` draws from the same random state without its set-up per call, which costs
more than a one-token move's forward on a tiny model). Logprobs come from the processed scores
(after temperature / top-k / top-p), which is what the sampler drew from. In float32 and without
top-k / top-p that is the trainer's forward on the same weights, up to rounding, so completions
say their logprobs are the trainer's (``Completion.logprobs_from_trainer``) and the loss needs no
importance correction for them (top-k / top-p renormalise over the tokens kept, which the
trainer does not: those completions say otherwise, and the loss corrects them). In bf16 it is
not: KV-cached decoding sums in another order than the trainer's one forward
over the whole sequence, and the trainer computes under autocast while this copy holds bf16
weights, so the two differ by bf16's rounding; completions then say so and the loss corrects
them like another engine's (``loss.importance_sampling: auto``; ``train/sampler_mismatch``
logs the gap).

Unmerged LoRA layers cost a second matmul per projection. With ``merge_learner`` the worker
keeps a further copy with the learner's adapter merged into the weights and serves the generate
and scoring calls whose rows are all the learner's from it (mixed calls and the other policies stay
on the peft copy): faster generation with the same logprobs, within the test's tolerance
(benchmarks/bench_rollout_share.py measures the gain), and the strategy exploitability reads is
the one the learner's moves are drawn from. ``load_weights`` marks it stale and the
next learner-only call refreshes it in place (``merged_copy``). It costs the model's memory once
more: on by default for small models (at most ``AUTO_MERGE_MAX_PARAMS``), off for larger ones
(on the GPU a decode step of the unmerged model is bound by launching the LoRA's kernels: see
docs/scale-out.md, and measure ``merge_learner: true`` there).
"""

from __future__ import annotations

import copy
import time
from collections import OrderedDict, defaultdict
from contextlib import contextmanager, nullcontext

import torch

from sp_lightning.errors import UserError
from sp_lightning.learners import adapter_of, learner_adapters, state_targets, trainable_again
from sp_lightning.padding import left_pad
from sp_lightning.rollout.base import (
    RolloutWorker, SamplingSettings, WeightUpdate, by_sampling, check_adapter_dir, checked_max_prompt_tokens,
    context_length, prompt_limit, refuse, refuse_too_long, registered_path,
)
from sp_lightning.rollout.chat import PromptEncoder
from sp_lightning.rollout.merged_copy import LEARNER_ADAPTER, MergedCopy
from sp_lightning.rollout.sampler import sample
from sp_lightning.shared_prompts import SharedPrompts, shared_window_logits
from sp_lightning.types import LEARNER, Completion, ModelRequest, PolicyKind, PolicyRef

BASE_ROWS = "__base__"  # peft's adapter name for rows served with no adapter in a mixed batch

AUTO_MERGE_MAX_PARAMS = 50_000_000
"""``merge_learner: null`` merges for models up to this size (a copy of 50M fp32 parameters is
200 MB): below it the copy's memory and its rebuild after each optimizer step cost less than
the faster generation saves."""


MIN_SHARED_PREFIX = 4
"""Scoring computes the rows' common first tokens once when there are at least this many: a few
tokens are not worth a second forward pass and the cache copied to every row (a threshold
chosen, not measured; Tic-Tac-Toe's prompts share 11)."""


class HFRolloutWorker(RolloutWorker):
    trains = True
    supports_async = True  # a copy of its own, written only by load_weights
    scores_completions = True

    @property
    def serves_checkpoints(self) -> bool:
        """Checkpoints are peft adapters loaded beside the learner's: a LoRA policy only."""
        return hasattr(self.model, "peft_config")

    def __init__(self, model, tokenizer, max_batch_size: int = 256, max_adapters: int = 8,
                 max_prompt_tokens: int | None = None, merge_learner: bool | None = None):
        """
        Args:
            model: The policy (a peft model with the learners' adapters, or a plain causal LM):
                the worker serves a copy of it, made now, and never reads it again.
            tokenizer: Its tokenizer, with a chat template.
            max_batch_size: Most sequences in one generate call.
            max_adapters: Most checkpoint adapters held in the model at once (LRU unloading).
            max_prompt_tokens: Longest prompt sent to the model. A longer one is refused, not
                truncated (a cut prompt would lose the game's state or the question); by default
                (and never above) the model's context minus ``sampling.max_new_tokens``.
            merge_learner: Serve learner-only calls from a further copy with the adapter merged
                in (faster generation, the model's memory once more; see the module docstring).
                Null (the default): on for models of at most ``AUTO_MERGE_MAX_PARAMS``
                parameters (the tiny models, where the copy costs megabytes), off for larger ones.
        """
        if max_adapters < 1:
            raise ValueError(f"rollout.max_adapters: expected >= 1, got {max_adapters}")
        if max_batch_size < 1:
            raise ValueError(f"rollout.max_batch_size: expected >= 1, got {max_batch_size}")
        self.max_prompt_tokens = checked_max_prompt_tokens(max_prompt_tokens)
        with torch.inference_mode(False), torch.no_grad():  # written in place by load_weights
            self.model = copy.deepcopy(model)
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_adapters = max_adapters
        self.adapter_slots = max_adapters  # a call mixes at most this many checkpoints (see _calls)
        self.policy_version = 0
        self.generated_tokens = 0  # running count, for throughput metrics
        self.adapter_paths: dict[str, str] = {}
        self.loaded: OrderedDict[str, None] = OrderedDict()  # checkpoint ids, least recent first
        self.adapter_loads = 0
        self.adapter_load_seconds = 0.0
        self.prompts = PromptEncoder(tokenizer)
        if merge_learner is None:
            merge_learner = sum(p.numel() for p in model.parameters()) <= AUTO_MERGE_MAX_PARAMS
        self.merge_learner = merge_learner
        self._merged: MergedCopy | None = None  # of self.model, made at the first learner-only call
        self._targets: dict[str, dict[str, torch.Tensor]] = {}  # per learner: where its tensors go
        self.logprobs_from_trainer = _all_float32(self.model)
        """Whether this worker's logprobs are the trainer's computation (see the module docstring)."""

    # ---- the learner's weights -----------------------------------------------------------------
    def load_weights(self, update: WeightUpdate) -> None:
        """Copy each learner's tensors into the worker's own model (placed and cast like the
        trainer's the first time: ``update.device``, ``update.base_dtype``); the merged copy, if
        any, is refreshed at the next learner-only call."""
        with torch.inference_mode(False), torch.no_grad():
            self._place(update.device, update.base_dtype)
            for learner, tensors in update.tensors.items():
                if learner not in self._targets:
                    self._targets[learner] = state_targets(self.model, learner)
                targets = self._targets[learner]
                for name, tensor in tensors.items():
                    if name not in targets:
                        raise ValueError(f"load_weights: the policy served here has no weight {name!r} of learner "
                                         f"{learner!r}: the update was made for another model")
                    target = targets[name]
                    if target.dtype != tensor.dtype or target.device != tensor.device:
                        target.data = torch.empty_like(tensor)
                    target.copy_(tensor)
        if self._merged is not None:
            self._merged.mark_stale()
        self.logprobs_from_trainer = _all_float32(self.model)
        self.policy_version = update.version

    def _place(self, device, base_dtype) -> None:
        """The worker's model on ``device`` with its frozen weights in ``base_dtype`` (what
        Lightning's strategy and precision did to the trainer's); None leaves it as it is."""
        moved = False
        if device is not None and next(self.model.parameters()).device != torch.device(device):
            self.model.to(device)
            moved = True
        frozen = next((p for p in self.model.parameters() if not p.requires_grad), None)
        if base_dtype is not None and frozen is not None and frozen.dtype != base_dtype:
            self.model.to(base_dtype)
            moved = True
        if moved:
            self._merged = None  # made again from the placed model

    # ---- checkpoint adapters ------------------------------------------------------------------
    def register_adapter(self, name: str, path: str) -> None:
        """Make ``checkpoint:<name>`` servable from the peft adapter directory ``path``."""
        if not self.serves_checkpoints:
            raise refuse(self, f"serve checkpoint {name!r}: the model has no peft adapter to load it beside",
                         "model.policy.lora", "checkpoints need a LoRA policy (set model.policy.lora)")
        check_adapter_dir(name, path)
        if self.adapter_paths.get(name) not in (None, path) and name in self.loaded:
            self._unload(name)  # a new path under an old name: never serve stale weights
        self.adapter_paths[name] = path

    def forget_adapter(self, name: str) -> None:
        if name in self.loaded:
            self._unload(name)
        self.adapter_paths.pop(name, None)

    def close(self) -> None:
        """Release the merged copy and the loaded checkpoint adapters: registered adapters stay
        registered and load again when asked for, the merged copy is made again. The own copy
        stays (the weights a later validate plays until its first sync)."""
        for name in list(self.loaded):
            self._unload(name)
        self._merged = None

    def _unload(self, name: str) -> None:
        self.model.delete_adapter(_peft_name(name))
        del self.loaded[name]

    def _ensure_loaded(self, name: str) -> None:
        if name in self.loaded:
            self.loaded.move_to_end(name)
            return
        path = registered_path(self.adapter_paths, name)
        while len(self.loaded) >= self.max_adapters:
            self._unload(next(iter(self.loaded)))
        start = time.perf_counter()
        # peft initialises the new adapter's weights (randomly) before loading the saved ones:
        # on forked streams, so that when an adapter loads never changes what the run samples
        # (a resumed run loads its league's adapters at other moments than the unbroken run)
        device = self.model.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type):
            self.model.load_adapter(path, adapter_name=_peft_name(name))
        self.adapter_load_seconds += time.perf_counter() - start
        trainable_again(self.model)  # the learners' adapters stay the active ones between calls
        self.loaded[name] = None
        self.adapter_loads += 1

    @contextmanager
    def _eval_mode(self):
        """The model in eval mode; its train/eval mode is restored after."""
        was_training = self.model.training
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)

    @contextmanager
    def serving(self, policy: PolicyRef):
        """The model as ``policy``, in eval mode: the learner's adapter, none (base), or a
        checkpoint's."""
        with self._eval_mode(), self._adapter_of(policy):
            yield

    @contextmanager
    def serving_rows(self, policies: list[PolicyRef]):
        """The model serving each row as its own policy, in eval mode. Yields the extra forward /
        generate kwargs: none when every row has one policy, else peft's ``adapter_names``."""
        distinct = list(dict.fromkeys(policies))
        if len(distinct) == 1:
            with self.serving(distinct[0]):
                yield {}
            return
        checkpoints = [p.name for p in distinct if p.kind is PolicyKind.CHECKPOINT]
        for name in checkpoints:  # most recent first, so loading the others cannot evict them
            if name in self.loaded:
                self.loaded.move_to_end(name)
        for name in checkpoints:
            self._ensure_loaded(name)
        with self._eval_mode():
            yield {"adapter_names": [self._adapter_name(p) for p in policies]}

    def _calls(self, policies: list[PolicyRef]) -> list[list[int]]:
        """Request indices packed into calls: policies stay together, a call holds at most
        ``max_batch_size`` rows and ``max_adapters`` distinct checkpoints, and only a peft model
        mixes policies in one call."""
        calls: list[list[int]] = []
        current: list[int] = []
        current_checkpoints: set[str] = set()
        mixes = hasattr(self.model, "peft_config")
        for policy, indices in _by_policy(policies).items():
            for start in range(0, len(indices), self.max_batch_size):
                part = indices[start : start + self.max_batch_size]
                new_checkpoint = policy.kind is PolicyKind.CHECKPOINT and policy.name not in current_checkpoints
                if current and (not mixes or len(current) + len(part) > self.max_batch_size
                                or (new_checkpoint and len(current_checkpoints) >= self.max_adapters)):
                    calls.append(current)
                    current, current_checkpoints = [], set()
                current.extend(part)
                if policy.kind is PolicyKind.CHECKPOINT:
                    current_checkpoints.add(policy.name)
        if current:
            calls.append(current)
        return calls

    def _adapter_name(self, policy: PolicyRef) -> str:
        """What serves ``policy`` here, the one place a policy maps to the model: the peft adapter
        of its rows (the learner's, none for the base model, a loaded checkpoint's)."""
        if policy.kind is PolicyKind.LEARNER:
            return adapter_of(policy.name)
        if policy.kind is PolicyKind.BASE:
            return BASE_ROWS
        if policy.kind is PolicyKind.CHECKPOINT:
            return _peft_name(policy.name)
        raise ValueError(f"HFRolloutWorker cannot serve policy {policy} (bots are answered by the arena)")

    @contextmanager
    def _adapter_of(self, policy: PolicyRef):
        """The model set to serve ``policy`` alone for the block."""
        adapter = self._adapter_name(policy)
        if adapter == self._resting_adapter():
            yield
        elif adapter == BASE_ROWS:
            if hasattr(self.model, "disable_adapter"):
                with self.model.disable_adapter():
                    yield
            elif self.policy_version == 0:  # no adapter, nothing trained yet: the learner is the base model
                yield
            else:
                raise UserError(
                    "policy 'base' (the base model, adapter off): with model.policy.lora null every weight trains "
                    "and there is no adapter to switch off, so the base model is gone once training has moved the "
                    "weights; give model.policy.lora, or seat another policy than 'base' (an opponent, a judge)")
        else:
            if policy.kind is PolicyKind.CHECKPOINT:
                self._ensure_loaded(policy.name)
            self.model.base_model.set_adapter(adapter, inference_mode=True)
            try:
                yield
            finally:
                trainable_again(self.model)

    def _resting_adapter(self) -> str:
        """The adapter active between calls (the first learner's), which serves without a switch."""
        names = learner_adapters(self.model)
        return names[0] if names else LEARNER_ADAPTER

    @property
    def merges(self) -> int:
        """How often the merged copy was made current (built once, then refreshed in place)."""
        return 0 if self._merged is None else self._merged.builds + self._merged.refreshes

    def _merged_learner(self):
        """The model with the learner's adapter merged in (eval mode), current with the trained
        weights (``merged_copy``: refreshed in place after each change); None when merging does
        not apply."""
        if not (self.merge_learner and hasattr(self.model, "merge_and_unload")):
            return None
        if self._merged is None or self._merged.source is not self.model:
            self._merged = MergedCopy(self.model)
        return self._merged.get()

    # ---- generation ---------------------------------------------------------------------------
    def encode_prompts(self, conversations: list[list[dict[str, str]]]) -> list[list[int]]:
        """Each conversation's prompt ids, in one tokenizer call; model-written text in them cannot
        become special tokens (see ``chat``)."""
        return self.prompts.encode(conversations)

    def prompt_limit(self, sampling: SamplingSettings) -> int:
        """The longest prompt this worker sends: the model's context minus the completion
        budget, or ``max_prompt_tokens`` if smaller."""
        return prompt_limit(context_length(self.model), sampling, self.max_prompt_tokens)

    def generate(self, requests: list[ModelRequest], sampling: SamplingSettings) -> list[Completion]:
        """Each request sampled with its own settings (``request.sampling``, else ``sampling``):
        requests with equal settings share calls, one call per distinct settings and policy pack."""
        prompts = self.encode_prompts([r.messages for r in requests])
        settings = [r.sampling or sampling for r in requests]
        results, sendable = refuse_too_long(requests, prompts, [self.prompt_limit(s) for s in settings])
        for call_sampling, group in by_sampling(sendable, settings):
            for call in self._calls([requests[i].policy for i in group]):
                rows = [group[j] for j in call]
                completions = self._generate_ids([prompts[i] for i in rows], [requests[i].policy for i in rows],
                                                 call_sampling)
                for i, completion in zip(rows, completions):
                    results[i] = completion
        return results  # type: ignore[return-value]

    @torch.no_grad()
    def completion_logprobs(self, requests: list[ModelRequest], completions: list[list[str]]) -> list[list[float]]:
        """For each request, the log-probability that the policy's answer starts with each
        candidate text (the sum of the logprobs of its tokens after the prompt, at temperature
        1, no end-of-turn token). With one-token moves this is exactly the probability of
        sampling that move; exploitability reads a policy's strategy through it.

        Candidates of one request that differ only in their last token share one scored row
        (the prompt and their common first tokens): a causal model's logits at a position do
        not depend on what follows, so one forward gives every one-token move of a board
        (Tic-Tac-Toe's exploitability scores 4,520 boards, not one row per legal move)."""
        out = [[0.0] * len(texts) for texts in completions]  # an empty candidate: log 1
        rows, owners = [], []  # (prompt, body, {last token: [candidate indices]}), request index
        prompts = self.encode_prompts([r.messages for r in requests])
        for i, prompt in enumerate(prompts):
            shared: dict[tuple[int, ...], dict[int, list[int]]] = {}
            for k, text in enumerate(completions[i]):
                ids = self.tokenizer.encode(text, add_special_tokens=False)
                if ids:
                    shared.setdefault(tuple(ids[:-1]), {}).setdefault(ids[-1], []).append(k)
            for body, finals in shared.items():
                rows.append((prompt, list(body), finals))
                owners.append(i)
        # shortest rows first, so that each call pads its rows to about their own length (the
        # 4,520 Tic-Tac-Toe prompts run from 36 to 58 tokens, 43.5 on average: calls of 256 in
        # the order asked padded them to 53.7 on average, sorted to 44.2)
        order = sorted(range(len(rows)), key=lambda j: len(rows[j][0]) + len(rows[j][1]))
        rows, owners = [rows[j] for j in order], [owners[j] for j in order]
        for call in self._calls([requests[i].policy for i in owners]):
            chunk = [rows[j] for j in call]
            for j, values in zip(call, self._score(chunk, [requests[owners[j]].policy for j in call])):
                for k, value in values.items():
                    out[owners[j]][k] = value
        return out

    def _score(self, rows: list[tuple[list[int], list[int], dict[int, list[int]]]],
               policies: list[PolicyRef]) -> list[dict[int, float]]:
        """Each row ``(prompt, body, finals)`` in one forward of ``prompt + body``: for each final
        token, ``{candidate index: logprob of body + final after the prompt}``."""
        window = max(len(b) for _, b, _ in rows) + 1  # only the columns that predict body or final tokens
        logprobs = torch.log_softmax(self._window_logits(rows, policies, window).float(), dim=-1).cpu()  # (B, window, V)
        values = []
        for row, (_, body, finals) in enumerate(rows):
            k = len(body)
            predicted = logprobs[row, window - 1 - k : window - 1]  # (k, V) the columns before each body token
            body_logprob = float(predicted.gather(-1, torch.tensor(body, dtype=torch.long).unsqueeze(-1)).sum())
            last = logprobs[row, window - 1]  # (V,) after the whole body
            values.append({index: body_logprob + float(last[token]) for token, indices in finals.items() for index in indices})
        return values

    def _window_logits(self, rows: list[tuple[list[int], list[int], dict[int, list[int]]]],
                       policies: list[PolicyRef], window: int) -> torch.Tensor:
        """The logits of the last ``window`` columns of each row's ``prompt + body``, left-padded:
        (B, window, V). Learner-only rows are served by the merged copy their moves are generated
        from. When every row is one policy's, the prompts' common beginning (chat markup, the
        game's opening words: 11 of Tic-Tac-Toe's 36-58 tokens) is computed once and read from
        the key/value cache by every row (``shared_window_logits``); it stops before the shortest
        prompt's last token, whose logits predict that row's first scored token."""
        device = next(self.model.parameters()).device
        shared = 0
        if len(rows) > 1 and len(set(policies)) == 1:  # one row would compute its prompt in two passes for nothing
            shared = min(_common_length([p for p, _, _ in rows]), min(len(p) for p, _, _ in rows) - 1)
            shared = shared if shared >= MIN_SHARED_PREFIX else 0
        input_ids, attention_mask = left_pad([(p + b)[shared:] for p, b, _ in rows], self.tokenizer.pad_token_id)
        inputs = {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device),
                  "position_ids": (shared + (attention_mask.cumsum(-1) - 1).clamp(min=0)).to(device)}
        merged = self._merged_learner() if all(p == LEARNER for p in policies) else None
        with nullcontext({}) if merged is not None else self.serving_rows(policies) as routing:
            model = self.model if merged is None else merged
            if not shared:
                return model(**inputs, logits_to_keep=window, use_cache=False, **routing).logits
            prompt = SharedPrompts(torch.tensor([rows[0][0][:shared]]), torch.ones(1, shared, dtype=torch.long),
                                   torch.arange(shared).unsqueeze(0), torch.zeros(len(rows), dtype=torch.long))
            return shared_window_logits(model, **inputs, shared=prompt.to(device), logits_to_keep=window)

    @torch.no_grad()
    def _generate_ids(
        self, prompts: list[list[int]], policies: list[PolicyRef], sampling: SamplingSettings
    ) -> list[Completion]:
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        input_ids, attention_mask = left_pad(prompts, tok.pad_token_id)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        merged = self._merged_learner() if all(p == LEARNER for p in policies) else None  # the unnamed one
        if merged is not None:
            new_tokens, logprobs = sample(merged, input_ids, attention_mask, sampling, tok.eos_token_id, tok.pad_token_id)
        else:
            with self.serving_rows(policies) as routing:
                new_tokens, logprobs = sample(self.model, input_ids, attention_mask, sampling, tok.eos_token_id,
                                              tok.pad_token_id, **routing)
        new_tokens, logprobs = new_tokens.cpu(), logprobs.cpu()  # (B, N)
        # whole tensors to Python once, and one batched decode: per-row conversions cost more
        # than a one-token generation's own share of the forward on a tiny model
        rows_ids, rows_logprobs = new_tokens.tolist(), logprobs.tolist()
        for row, ids in enumerate(rows_ids):
            if tok.eos_token_id in ids:  # keep the end-of-turn token: the policy learns to stop
                rows_ids[row] = ids[: ids.index(tok.eos_token_id) + 1]
        texts = tok.batch_decode(rows_ids, skip_special_tokens=True)
        versions = {policy: self.version_of(policy) for policy in set(policies)}
        from_trainer = self.logprobs_from_trainer and not sampling.truncates
        completions = []
        for ids, row_logprobs, text, prompt, policy in zip(rows_ids, rows_logprobs, texts, prompts, policies):
            self.generated_tokens += len(ids)
            completions.append(Completion(text=text, prompt_ids=prompt, completion_ids=ids,
                                          logprobs=row_logprobs[: len(ids)], policy=policy,
                                          policy_version=versions[policy], temperature=sampling.temperature,
                                          logprobs_from_trainer=from_trainer))
        return completions


def _all_float32(model) -> bool:
    return all(p.dtype == torch.float32 for p in model.parameters())


def _common_length(sequences: list[list[int]]) -> int:
    """How many leading tokens every one of ``sequences`` shares."""
    first, length = sequences[0], min(len(s) for s in sequences)
    for other in sequences[1:]:
        length = next((i for i, (a, b) in enumerate(zip(first[:length], other[:length])) if a != b), length)
    return length


def _by_policy(policies: list[PolicyRef]) -> dict[PolicyRef, list[int]]:
    groups: dict[PolicyRef, list[int]] = defaultdict(list)
    for index, policy in enumerate(policies):
        if not policy.is_model:
            raise ValueError(f"HFRolloutWorker got a request for bot policy {policy}")
        groups[policy].append(index)
    return groups


def _peft_name(checkpoint_id: str) -> str:
    """peft adapter names become module attribute keys: keep them free of dots."""
    return "ckpt__" + checkpoint_id.replace(".", "_")
