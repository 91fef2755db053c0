"""The RolloutWorker interface, which every backend (hf, vllm, servers, remote) implements, and the
plumbing they share (sampling and retry settings, prompt limits, adapter files)."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from sp_lightning.types import PROMPT_TOO_LONG, Completion, ModelRequest, PolicyRef

log = logging.getLogger(__name__)


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
    """The interface between the arena and a model backend: everything the arena, the engine,
    validation, the league, evaluation and the CLI ask of a backend is here, and each backend
    (``HFRolloutWorker``, ``VLLMRolloutWorker``, ``ServerRolloutWorker``, ``RemoteRolloutWorker``)
    implements all of it. What a backend cannot do it states as a capability set to False, and
    the method refuses with an error that names the config key to change.

    ``generate`` receives every pending request of the concurrent episodes (for any mix of model
    policies) and must return one Completion per request, in order, each carrying its prompt and
    completion token ids and the processed (post-temperature) logprob of each completion token.
    ``policy_version`` counts weight updates so that every completion records its provenance.
    A request whose prompt would not fit the model's context (with the completion budget) is
    never sent: its Completion comes back with ``refused = PROMPT_TOO_LONG`` and no tokens.

    Each backend maps a :class:`~sp_lightning.types.PolicyKind` to what serves it (an adapter,
    a LoRA request, a served model name) in one method of its own.
    """

    # ---- capabilities: every backend states each of them ----------------------------------------
    trains: bool = True
    """Whether its completions carry the token ids and logprobs training needs (a text-only
    backend sets False, and ``fit`` refuses it)."""
    shares_weights: bool = False
    """Whether it generates with the trainer's own model object (the Hugging Face backend): its
    logprobs are then the trainer's, and the loss needs no importance correction (see
    ``LossSettings.importance_sampling``). Another engine (vLLM, a server) computes them its
    own way, and the loss corrects for the gap."""
    supports_async: bool = False
    """Whether it may generate on another thread while the trainer steps (``data.async_rollouts``):
    its engine holds a copy of the weights of its own, written by :meth:`publish_weights`. A
    backend that generates with the trainer's model object (the Hugging Face one, unless
    ``own_copy``) cannot: the optimizer would change the weights under a generation in flight."""
    serves_checkpoints: bool = True
    """Whether :meth:`register_adapter` can make a saved adapter directory servable as
    ``checkpoint:<name>`` (league opponents, ``evaluate --opponent checkpoint:<dir>``)."""
    scores_completions: bool = True
    """Whether :meth:`completion_logprobs` scores given answers (a policy's strategy, which
    exploitability reads)."""
    max_adapters: int | None = None
    """Most checkpoint adapters held at once; more are reloaded from disk as they are asked for
    (None: no limit of the worker's own)."""

    # ---- state every backend keeps --------------------------------------------------------------
    policy_version: int = 0
    """The learner's weight version, set by :meth:`sync_weights`."""
    generated_tokens: int = 0
    """Completion tokens generated so far (a running count, for throughput metrics)."""
    adapter_load_seconds: float = 0.0
    """Seconds spent loading adapters so far (a running total)."""
    last_sync_bytes: int = 0
    """Bytes the last :meth:`sync_weights` copied or sent to the engine (0 where nothing crossed at
    the sync: an engine reading the trainer's own weights, or one that loads them at its next
    generate)."""
    tokenizer = None
    """The tokenizer prompts are encoded with; None for a backend that sends text."""

    @abstractmethod
    def generate(self, requests: list[ModelRequest], sampling: SamplingSettings) -> list[Completion]:
        """One Completion per request, in the same order."""

    @abstractmethod
    def completion_logprobs(self, requests: list[ModelRequest], completions: list[list[str]]) -> list[list[float]]:
        """For each request, the log-probability (temperature 1, no end-of-turn token) that the
        policy's answer starts with each candidate text. Refused where ``scores_completions`` is
        False."""

    @abstractmethod
    def register_adapter(self, name: str, path: str) -> None:
        """Make ``checkpoint:<name>`` servable from the peft adapter directory ``path`` (a new
        path under an old name replaces it). Refused where ``serves_checkpoints`` is False."""

    @abstractmethod
    def forget_adapter(self, name: str) -> None:
        """Stop serving ``checkpoint:<name>`` and release what holds it (unknown names: nothing)."""

    @abstractmethod
    def close(self) -> None:
        """Release the engine, its processes, files and connections. Calling it twice is
        harmless, and a later call of any other method starts again what it needs."""

    def sync_weights(self, version: int) -> None:
        """The learner's weights changed (an optimizer step, a restored checkpoint): completions
        from now on are stamped with ``version``, and serve those weights by the next generate."""
        self.policy_version = version

    def publish_weights(self) -> None:
        """Copy the learner's current weights to the engine now rather than at the next generate.
        Asynchronous collection calls it on the trainer's thread right after ``sync_weights``, so
        that a generation on the producer thread never reads weights the optimizer is changing.
        A backend that generates with the trainer's own weights has nothing to do."""

    def keep_unsharded_copy(self, device) -> None:
        """The trainer is about to shard its model's frozen weights over the ranks (FSDP,
        ``sp_lightning.sharding``), after which a rank cannot run it alone. A backend that
        generates with the trainer's model object takes a whole copy of its own now, on
        ``device``, or refuses naming the key that would give it one. Backends holding their own
        weights (vLLM, servers) have nothing to do: they only read the trained adapter, which
        stays whole on every rank."""
        if self.shares_weights:
            raise refuse(self, "generate from a sharded model (each rank's games need different numbers of "
                         "forward passes, and every pass of a sharded model is a collective)",
                         "trainer.strategy", "give the backend a copy of its own (own_copy: true), or use "
                         "VLLMRolloutWorker / ServerRolloutWorker")

    def health_metrics(self) -> dict[str, float]:
        """``rollout/...`` figures of the backend's own state, logged with every batch (the server
        backend: servers in the rotation, taken out, taken back); none by default."""
        return {}

    def version_of(self, policy: PolicyRef) -> int:
        """The weight version a completion of ``policy`` is stamped with: the learner's current
        one; other policies' weights never change (0)."""
        return self.policy_version if policy.is_learner else 0


def refuse(worker: RolloutWorker, what: str, key: str, instead: str) -> ValueError:
    """The error of a backend asked for what it cannot do: names the backend, what was asked,
    the config key that asked for it, and what to use instead."""
    return ValueError(f"{key}: {type(worker).__name__} cannot {what}; {instead}")


# ---- plumbing every backend shares ------------------------------------------------------------

def refuse_too_long(requests: list[ModelRequest], prompts: list[list[int]],
                    limit: int) -> tuple[list[Completion | None], list[int]]:
    """``(results, sendable)``: a refused Completion (``PROMPT_TOO_LONG``, never sent: the model
    would read past its context) in place of each prompt longer than ``limit``, None for the
    others, and the indices of the others, which the backend fills in."""
    results: list[Completion | None] = [None] * len(requests)
    sendable = []
    for i, prompt in enumerate(prompts):
        if len(prompt) > limit:
            results[i] = Completion("", prompt_ids=prompt, policy=requests[i].policy, refused=PROMPT_TOO_LONG)
        else:
            sendable.append(i)
    return results, sendable


def checked_max_prompt_tokens(value: int | None) -> int | None:
    """``rollout.max_prompt_tokens``, checked: an int >= 1, or None (the context decides)."""
    if value is not None and value < 1:
        raise ValueError(f"rollout.max_prompt_tokens: expected >= 1 or null, got {value}")
    return value


def context_length(model, max_model_len: int | None = None) -> int | None:
    """The context a backend serves: ``max_model_len`` when set, else the model's own."""
    return max_model_len or getattr(getattr(model, "config", None), "max_position_embeddings", None)


def prompt_limit(context: int | None, sampling: SamplingSettings, max_prompt_tokens: int | None) -> int:
    """The longest prompt a backend sends: the context minus the completion budget, or
    ``max_prompt_tokens`` if smaller (a longer prompt is refused, never truncated)."""
    limit = (context or 1_000_000_000) - sampling.max_new_tokens
    return limit if max_prompt_tokens is None else min(limit, max_prompt_tokens)


def save_learner_adapter(model, path: str, learner: str = "") -> str:
    """Write learner ``learner``'s adapter ("" the one unnamed learner: peft's ``default``) to
    ``path``, a plain adapter directory that an engine, ``PeftModel.from_pretrained`` or
    ``checkpoint:<dir>`` loads; returns ``path``."""
    import shutil

    from sp_lightning.learners import adapter_of

    adapter = adapter_of(learner)
    model.save_pretrained(path, selected_adapters=[adapter])
    nested = os.path.join(path, adapter)  # peft nests every adapter but ``default`` in a folder
    if os.path.isdir(nested):
        for name in os.listdir(nested):
            os.replace(os.path.join(nested, name), os.path.join(path, name))
        shutil.rmtree(nested)
    return path


def write_zero_adapter(model, path: str) -> str:
    """The (first) learner's adapter layout with every weight zero, written to ``path``: served,
    it is the base model exactly (LoRA adds B @ A = 0)."""
    import torch
    from safetensors.torch import load_file, save_file

    from sp_lightning.learners import learner_names

    path = save_learner_adapter(model, path, learner_names(model)[0])
    weights = os.path.join(path, "adapter_model.safetensors")
    save_file({k: torch.zeros_like(v) for k, v in load_file(weights).items()}, weights)
    return path


def check_adapter_dir(name: str, path: str) -> None:
    """``register_adapter``'s check: ``path`` must be a peft adapter directory."""
    if not os.path.isfile(os.path.join(path, "adapter_config.json")):
        raise ValueError(f"checkpoint {name!r}: expected a peft adapter directory, got {path!r} "
                         f"(no adapter_config.json)")


def registered_path(adapter_paths: dict[str, str], name: str) -> str:
    """The adapter directory registered as ``checkpoint:<name>``, or an error listing the known ids."""
    if name not in adapter_paths:
        raise ValueError(f"policy checkpoint:{name}: no adapter registered under that id "
                         f"(known: {sorted(adapter_paths) or 'none'})")
    return adapter_paths[name]


def ram_temp_dir(prefix: str) -> str:
    """A new directory for files rewritten every optimizer step (learner adapter versions): in
    ``/dev/shm`` (RAM-backed) where the machine has one, else in the system temp dir."""
    ram = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=ram)


class TransientRolloutError(RuntimeError):
    """A fault that trying again may cure: a remote server that timed out, refused or dropped the
    connection, an engine restarting. Backends raise it (or ``ConnectionError`` / ``TimeoutError``,
    which a client library raises for the same faults); any other exception is a bug or a bad
    request, and retrying it would only hide it."""


RETRYABLE = (TransientRolloutError, ConnectionError, TimeoutError)


class RolloutFailed(RuntimeError):
    """The backend kept failing: the batch in flight is dropped whole and the run stops."""


@dataclass
class RetrySettings:
    """How the arena retries a generate call that failed with a transient fault."""

    attempts: int = 4
    """Tries of one generate call, the first included; 1 never retries."""
    backoff_s: float = 1.0
    """Wait before the first retry; it doubles at each further retry."""
    max_backoff_s: float = 30.0
    """The longest wait between two tries."""

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError(f"retry.attempts: expected >= 1, got {self.attempts}")
        if self.backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError(f"retry.backoff_s / max_backoff_s: expected >= 0, got {self.backoff_s} / {self.max_backoff_s}")

    def wait(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        return min(self.max_backoff_s, self.backoff_s * 2 ** (retry - 1))


def generate_with_retries(
    worker: RolloutWorker,
    requests: list[ModelRequest],
    sampling: SamplingSettings,
    retry: RetrySettings,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[Completion], int]:
    """``worker.generate`` with transient faults retried after a backoff; returns the completions
    and the number of retries.

    A generate call is all or nothing: every request of a failed call is sent again, and each
    request gets exactly one completion, so no episode in flight loses a move or plays one twice.
    When the tries run out, :class:`RolloutFailed` says so and the batch is not counted (the arena
    counts a batch only once it is played); the run resumes from its last checkpoint.
    """
    name = type(worker).__name__
    for attempt in range(1, retry.attempts + 1):
        try:
            completions = worker.generate(requests, sampling)
            break
        except RETRYABLE as err:
            if attempt == retry.attempts:
                raise RolloutFailed(
                    f"rollout backend {name} failed {attempt} time(s) in a row on a call of {len(requests)} "
                    f"request(s) (last: {type(err).__name__}: {err}). The episodes in flight were dropped and "
                    f"this batch is not counted; fix the backend (or raise data.retry.attempts) and resume "
                    f"with `fit --ckpt_path <checkpoints>/last.ckpt`."
                ) from err
            wait = retry.wait(attempt)
            log.warning("rollout backend %s: %s: %s; retry %d of %d in %.1f s", name, type(err).__name__,
                        err, attempt, retry.attempts - 1, wait)
            sleep(wait)
    if len(completions) != len(requests):
        raise RuntimeError(f"rollout backend {name} returned {len(completions)} completions for "
                           f"{len(requests)} requests: every request needs exactly one")
    return completions, attempt - 1
