"""A model behind an OpenAI-compatible chat-completions endpoint, for judges and fixed opponents.

OpenAI, OpenRouter, a local ``vllm`` or ``llama.cpp`` server: any server that speaks
``POST {base_url}/chat/completions``. A seat or a judge names it as ``remote:<name>``, ``<name>``
being its key in the DataModule's ``remote_models`` (or in ``Arena(remotes=...)``). Its answers
are text: a remote model never trains (only the ``learner`` policy does), so no token ids or
logprobs are needed from it.

The HTTP work is the ``openai`` package's: its client times out, and retries connection errors,
timeouts, 408/409/429 and 5xx answers with exponential backoff (honouring a server's
``retry-after``), up to ``max_retries`` times. What this module adds: the API key read from an
environment variable (none needed for a local server), calls made from the arena's event loop on
a bounded thread pool (``max_concurrency`` requests in flight per server) so that the local
model's batches go on while a remote answer is awaited, and an error that names the URL and the
model when a server stays down or refuses the request.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sp_lightning.errors import ServiceError, UserError
from sp_lightning.rollout.base import RolloutWorker, SamplingSettings, refuse
from sp_lightning.rollout.chat import neutralise_remote
from sp_lightning.types import Completion, ModelRequest, PolicyKind


class RemoteModelError(ServiceError):
    """A remote model could not answer (after the client's retries); the message names the URL."""


@dataclass
class RemoteModel:
    """One OpenAI-compatible endpoint and the model to ask there.

    Args:
        base_url: The API root, e.g. ``https://openrouter.ai/api/v1`` or ``http://127.0.0.1:8000/v1``.
        model: The model name the server knows.
        api_key_env: The environment variable holding the API key; a local server needs none
            (an unset variable sends a placeholder key).
        timeout: Seconds before an attempt is abandoned: a silent server (connecting, or before
            its answer starts) is retried; an answer still arriving this long after it started
            (a server or proxy trickling bytes) fails the call.
        max_retries: Retries after the first attempt, with exponential backoff.
        max_concurrency: Requests to this server in flight at once.
        temperature: Sampling temperature for this model; null uses the run's sampling.
        max_tokens: Completion budget; null uses the run's ``sampling.max_new_tokens``.
        version_url: A URL answering the served policy's version (a JSON number, or an object
            with ``"version"``), read by :meth:`get_policy_version`; null: version 0.
    """

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 60.0
    max_retries: int = 3
    max_concurrency: int = 8
    temperature: float | None = None
    max_tokens: int | None = None
    version_url: str | None = None

    def __post_init__(self):
        if not self.base_url.startswith(("http://", "https://")):
            raise UserError(f"remote model {self.model!r}: base_url must start with http:// or https://, "
                            f"got {self.base_url!r}")
        if self.timeout <= 0 or self.max_retries < 0 or self.max_concurrency < 1:
            raise UserError(f"remote model {self.model!r}: expected timeout > 0, max_retries >= 0 and "
                            f"max_concurrency >= 1, got {self.timeout}, {self.max_retries}, {self.max_concurrency}")
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 1):
            raise UserError(f"remote model {self.model!r}: max_tokens: expected an int >= 1 or null (the run's "
                            f"sampling.max_new_tokens), got {self.max_tokens!r}")
        if self.temperature is not None and not self.temperature >= 0:
            raise UserError(f"remote model {self.model!r}: temperature: expected >= 0 or null (the run's), got "
                            f"{self.temperature!r}")
        self._client = None
        self._pool: ThreadPoolExecutor | None = None

    @property
    def client(self):
        if self._client is None:
            import openai

            self._client = openai.OpenAI(base_url=self.base_url, api_key=os.environ.get(self.api_key_env) or "none",
                                         timeout=self.timeout, max_retries=self.max_retries)
        return self._client

    def complete(self, messages: list[dict[str, str]], sampling: SamplingSettings) -> str:
        """The text of one chat completion (blocking)."""
        import openai

        temperature = sampling.temperature if self.temperature is None else self.temperature
        try:
            with self.client.chat.completions.with_streaming_response.create(
                    model=self.model, messages=neutralise_remote(messages), temperature=temperature,
                    top_p=sampling.top_p, max_tokens=self.max_tokens or sampling.max_new_tokens) as response:
                body = self._read_within_timeout(response)
        except openai.APIStatusError as error:  # 4xx other than 408/409/429 are not retried
            retried = error.status_code in (408, 409, 429) or error.status_code >= 500
            tries = f"after {self.max_retries} retries" if retried else "(not retried)"
            raise RemoteModelError(f"remote model {self.model!r} at {self.base_url}: HTTP {error.status_code} "
                                   f"{tries}: {error.message}") from error
        except openai.APIError as error:  # connection refused, timed out
            raise RemoteModelError(f"remote model {self.model!r} at {self.base_url}: no answer after "
                                   f"{self.max_retries} retries ({type(error).__name__}: {error})") from error
        try:  # a proxy's HTML page, a choice without a message: the server's fault, named as such
            choices = json.loads(body)["choices"]
            content = choices[0]["message"]["content"] if choices else None
            if choices and content is not None and not isinstance(content, str):
                raise TypeError(f"content is a {type(content).__name__}")
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise RemoteModelError(f"remote model {self.model!r} at {self.base_url}: not a chat completion "
                                   f"({type(error).__name__}: {error}); got {body[:200]!r}") from error
        if not choices:
            raise RemoteModelError(f"remote model {self.model!r} at {self.base_url}: an answer without choices")
        return content or ""

    def _read_within_timeout(self, response) -> bytes:
        """The answer's body, read within ``timeout`` seconds of its headers: the client's own
        timeout bounds only the silence between two reads, and a server (or a proxy keeping the
        connection alive) that sends a byte a second would hold the call for ever."""
        deadline, chunks = time.monotonic() + self.timeout, []
        try:
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise RemoteModelError(f"remote model {self.model!r} at {self.base_url}: no whole answer "
                                           f"within timeout {self.timeout} s (it kept sending)")
        except RemoteModelError:
            raise
        except Exception as error:  # the connection dropped or fell silent mid-answer (httpx's errors)
            raise RemoteModelError(f"remote model {self.model!r} at {self.base_url}: the answer broke off "
                                   f"({type(error).__name__}: {error})") from error
        return b"".join(chunks)

    def submit(self, request: ModelRequest, sampling: SamplingSettings, versions: dict[str, int]) -> asyncio.Future:
        """Send the request now, on this model's thread pool, and return the future Completion
        (awaitable from the running event loop). ``versions`` caches the served policy's version
        per run, read in the same thread (never blocking the event loop)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix="remote-model")

        def work() -> Completion:
            name = request.policy.name
            if name not in versions:
                versions[name] = self.get_policy_version()
            text = self.complete(request.messages, sampling)
            return Completion(text=text, policy=request.policy, policy_version=versions[name])

        return asyncio.get_running_loop().run_in_executor(self._pool, work)

    def get_policy_version(self) -> int:
        """The version the server reports at ``version_url`` (0 without one)."""
        if not self.version_url:
            return 0
        try:
            with urllib.request.urlopen(self.version_url, timeout=self.timeout) as answer:
                body = json.loads(answer.read().decode() or "0")
        except (OSError, ValueError) as error:
            raise RemoteModelError(f"remote model {self.model!r}: cannot read its version at "
                                   f"{self.version_url}: {error}") from error
        value = body.get("version", 0) if isinstance(body, dict) else body
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 0:
            raise RemoteModelError(f"remote model {self.model!r}: its version at {self.version_url} is {value!r}; "
                                   f"expected an int >= 0 (a JSON number, or an object with \"version\")")
        return int(value)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        if self._client is not None:
            self._client.close()
            self._client = None


class RemoteRolloutWorker(RolloutWorker):
    """Every model policy of a run served by one OpenAI-compatible server: rollout-only runs
    (``sp-lightning rollout``) and evaluations of a model that only a server holds.

    ``learner`` asks for ``served_model``; ``checkpoint:<id>`` for the model named ``<id>`` on the
    same server (a vLLM server serves its loaded LoRA adapters by name); ``base`` for
    ``base_model``. The answers are text only: no token ids or logprobs, so nothing it plays can
    train (``trains = False``; ``fit`` refuses it). The settings are :class:`RemoteModel`'s.

    In a config: ``data.rollout: {class_path: sp_lightning.rollout.remote.RemoteRolloutWorker,
    init_args: {base_url: http://127.0.0.1:8000/v1, served_model: my-model}}``.
    """

    trains = False  # text only: no token ids or logprobs
    supports_async = False
    serves_checkpoints = False  # adapters live on the server, loaded there and named checkpoint:<name>
    scores_completions = False
    max_adapters = None

    def __init__(self, model=None, tokenizer=None, *, base_url: str, served_model: str,
                 base_model: str | None = None, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
                 max_retries: int = 3, max_concurrency: int = 8, version_url: str | None = None):
        self.base_model = base_model
        self.settings = dict(base_url=base_url, api_key_env=api_key_env, timeout=timeout,
                             max_retries=max_retries, max_concurrency=max_concurrency)
        self.served = RemoteModel(model=served_model, version_url=version_url, **self.settings)
        self.models: dict[str, RemoteModel] = {served_model: self.served}
        self.tokenizer = None  # completions carry no token ids: records show text only
        self._pool: ThreadPoolExecutor | None = None
        self.policy_version = self.served.get_policy_version()

    def model_for(self, policy) -> RemoteModel:
        """What serves ``policy`` here, the one place a policy maps to the server: the server-side
        model it is asked of."""
        if policy.kind is PolicyKind.LEARNER:
            name = self.served.model
        elif policy.kind is PolicyKind.CHECKPOINT:
            name = policy.name
        elif policy.kind is PolicyKind.BASE and self.base_model:
            name = self.base_model
        else:
            raise ValueError(f"RemoteRolloutWorker at {self.settings['base_url']}: cannot serve policy {policy} "
                             f"(learner, checkpoint:<served name>, and base with base_model set)")
        if name not in self.models:
            self.models[name] = RemoteModel(model=name, **self.settings)
        return self.models[name]

    def generate(self, requests: list[ModelRequest], sampling: SamplingSettings) -> list[Completion]:
        models = [self.model_for(r.policy) for r in requests]  # refuse before sending anything
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.settings["max_concurrency"],
                                            thread_name_prefix="remote-rollout")
        texts = list(self._pool.map(lambda pair: pair[0].complete(pair[1].messages, pair[1].sampling or sampling),
                                    zip(models, requests)))
        return [Completion(text=text, policy=r.policy, policy_version=self.policy_version)
                for text, r in zip(texts, requests)]

    def register_adapter(self, name: str, path: str) -> None:
        raise refuse(self, f"send adapter directory {path!r} to {self.settings['base_url']}", "data.rollout",
                     "load it on the server and name it checkpoint:<its served name>")

    def forget_adapter(self, name: str) -> None:
        """Nothing to release: the server's adapters are the server's."""

    def completion_logprobs(self, requests: list[ModelRequest], completions: list[list[str]]) -> list[list[float]]:
        raise refuse(self, "score given answers (text only: no logprobs)", "data.rollout",
                     "use HFRolloutWorker or VLLMRolloutWorker for exploitability")

    def load_weights(self, update) -> None:
        raise refuse(self, f"take a trainer's weights: the server at {self.settings['base_url']} holds its own",
                     "data.rollout", "serve the trained adapter from the server (checkpoint:<its served name>), or "
                     "use HFRolloutWorker, VLLMRolloutWorker or ServerRolloutWorker")

    def close(self) -> None:
        """Close the connections; the next call opens new ones."""
        for model in self.models.values():
            model.close()
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
