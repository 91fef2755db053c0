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
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sp_lightning.rollout.base import SamplingSettings
from sp_lightning.types import Completion, ModelRequest


class RemoteModelError(RuntimeError):
    """A remote model could not answer (after the client's retries); the message names the URL."""


@dataclass
class RemoteModel:
    """One OpenAI-compatible endpoint and the model to ask there.

    Args:
        base_url: The API root, e.g. ``https://openrouter.ai/api/v1`` or ``http://127.0.0.1:8000/v1``.
        model: The model name the server knows.
        api_key_env: The environment variable holding the API key; a local server needs none
            (an unset variable sends a placeholder key).
        timeout: Seconds before one attempt is abandoned (then retried).
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
            raise ValueError(f"remote model {self.model!r}: base_url must start with http:// or https://, "
                             f"got {self.base_url!r}")
        if self.timeout <= 0 or self.max_retries < 0 or self.max_concurrency < 1:
            raise ValueError(f"remote model {self.model!r}: expected timeout > 0, max_retries >= 0 and "
                             f"max_concurrency >= 1, got {self.timeout}, {self.max_retries}, {self.max_concurrency}")
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
            response = self.client.chat.completions.create(
                model=self.model, messages=messages, temperature=temperature, top_p=sampling.top_p,
                max_tokens=self.max_tokens or sampling.max_new_tokens)
        except openai.APIStatusError as error:  # 4xx other than 408/409/429 are not retried
            retried = error.status_code in (408, 409, 429) or error.status_code >= 500
            tries = f"after {self.max_retries} retries" if retried else "(not retried)"
            raise RemoteModelError(f"remote model {self.model!r} at {self.base_url}: HTTP {error.status_code} "
                                   f"{tries}: {error.message}") from error
        except openai.APIError as error:  # connection refused, timed out
            raise RemoteModelError(f"remote model {self.model!r} at {self.base_url}: no answer after "
                                   f"{self.max_retries} retries ({type(error).__name__}: {error})") from error
        if not response.choices:
            raise RemoteModelError(f"remote model {self.model!r} at {self.base_url}: an answer without choices")
        return response.choices[0].message.content or ""

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
        return int(value)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        if self._client is not None:
            self._client.close()
            self._client = None
