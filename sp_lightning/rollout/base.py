"""The RolloutWorker interface, which every backend (hf, vllm, servers, remote) implements, and the
plumbing they share (sampling and retry settings, prompt limits, adapter files)."""

from __future__ import annotations

import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from sp_lightning.errors import ServiceError, UserError
from sp_lightning.scratch_dirs import process_temp_dir
from sp_lightning.types import PROMPT_TOO_LONG, Completion, ModelRequest, PolicyRef

log = logging.getLogger(__name__)


@dataclass
class WeightUpdate:
    """What crosses from the trainer to a rollout backend: every learner's trainable tensors
    (``sp_lightning.learners.trainable_state``: LoRA weights, trainable token rows; never the
    frozen base) and the version they are. Sent after each optimizer step, when training starts
    (a resumed run's restored weights) and when validation starts, by the one owner of the weight
    path (``sp_lightning.weight_sync.WeightSync``).

    The tensors are the trainer's own, live: a backend copies (or writes) what it needs inside
    ``load_weights`` and keeps no reference to them, so the next optimizer step cannot change what
    it serves."""

    tensors: dict
    """Learner name ("" the one unnamed learner) -> tensor name -> tensor."""
    version: int
    """The trainer's optimizer step: completions sampled from these weights carry it."""
    device: object = None
    """Where the trainer's model lives (a ``torch.device``): a backend that generates from a copy of
    its own in this process places it there (None: where it is)."""
    base_dtype: object = None
    """The dtype of the trainer's frozen weights (bf16 under ``precision: bf16-true``): a backend
    with a copy of its own in this process casts it alike, so that both compute the same numbers
    (None: as it is)."""

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for tensors in self.tensors.values() for t in tensors.values())


@dataclass(frozen=True)
class SamplingSettings:
    """How completions are sampled (hashable: a backend groups requests by their settings)."""

    max_new_tokens: int = 8
    """Generation stops at end-of-turn or after this many tokens."""
    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    """Nucleus sampling. Training divides its logits by the temperature, as the sampler did, but
    does not truncate them: with top_p < 1 or top_k > 0 (:attr:`truncates`) the sampler's
    logprobs are not the trainer's, and every backend says so (``Completion.logprobs_from_trainer``
    false), so the loss corrects them (``loss.importance_sampling: auto``)."""
    top_k: int = 0
    """0 disables top-k (vLLM's -1)."""

    @property
    def truncates(self) -> bool:
        """Whether sampling draws from a truncated distribution (top-p or top-k), whose logprobs
        differ from the trainer's temperature-only ones."""
        return self.temperature != 0 and (self.top_p < 1.0 or self.top_k > 0)

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"sampling.max_new_tokens: expected >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"sampling.temperature: expected >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling.top_p: expected in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"sampling.top_k: expected an int >= 0 (0: no top-k, which vLLM writes -1), got {self.top_k}")


def by_sampling(indices: list[int], settings: list[SamplingSettings]) -> list[tuple[SamplingSettings, list[int]]]:
    """``indices`` grouped by their requests' sampling ``settings`` (equal settings together, in
    first-seen order): one call per group on a backend that samples a whole call alike."""
    groups: dict[SamplingSettings, list[int]] = {}
    for i in indices:
        groups.setdefault(settings[i], []).append(i)
    return list(groups.items())


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
    supports_async: bool = True
    """Whether it may generate on another thread while the trainer steps (``data.async_rollouts``):
    every backend that serves the trainer's weights holds a copy of its own (:meth:`load_weights`),
    so the optimizer never changes weights under a generation in flight."""
    serves_checkpoints: bool = True
    """Whether :meth:`register_adapter` can make a saved adapter directory servable as
    ``checkpoint:<name>`` (league opponents, ``evaluate --opponent checkpoint:<dir>``)."""
    scores_completions: bool = True
    """Whether :meth:`completion_logprobs` scores given answers (a policy's strategy, which
    exploitability reads)."""
    max_adapters: int | None = None
    """Most checkpoint adapters held at once; more are reloaded from disk as they are asked for
    (None: no limit of the worker's own)."""
    adapter_slots: int | None = None
    """Distinct checkpoint adapters one batch of generation serves together beside the learners'
    own: a batch that needs more pays reloads or extra passes, so the league's cluster sampling
    keeps each training batch within it (``LeagueSampler.batch_seats``). None: no limit."""

    # ---- state every backend keeps --------------------------------------------------------------
    policy_version: int = 0
    """The learner's weight version, set by :meth:`load_weights`."""
    generated_tokens: int = 0
    """Completion tokens generated so far (a running count, for throughput metrics)."""
    adapter_load_seconds: float = 0.0
    """Seconds spent loading adapters so far (a running total)."""
    tokenizer = None
    """The tokenizer prompts are encoded with; None for a backend that sends text."""

    @abstractmethod
    def generate(self, requests: list[ModelRequest], sampling: SamplingSettings) -> list[Completion]:
        """One Completion per request, in the same order."""

    @abstractmethod
    def load_weights(self, update: WeightUpdate) -> None:
        """Serve ``update``'s weights from the next generate call on, stamping completions with its
        version: the one way the trainer's weights reach the backend. The backend copies or writes
        the tensors before it returns (the trainer changes them at its next step); a backend that
        cannot take weights (a server it does not own) refuses, naming the key."""

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
                    limit: int | list[int]) -> tuple[list[Completion | None], list[int]]:
    """``(results, sendable)``: a refused Completion (``PROMPT_TOO_LONG``, never sent: the model
    would read past its context) in place of each prompt longer than ``limit`` (one for all, or
    each request's own: its sampling's budget differs), None for the others, and the indices of
    the others, which the backend fills in."""
    results: list[Completion | None] = [None] * len(requests)
    sendable = []
    limits = limit if isinstance(limit, list) else [limit] * len(prompts)
    for i, prompt in enumerate(prompts):
        if len(prompt) > limits[i]:
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


def check_adapter_dir(name: str, path: str) -> None:
    """``register_adapter``'s check: ``path`` must be a peft adapter directory."""
    if not os.path.isfile(os.path.join(path, "adapter_config.json")):
        raise UserError(f"checkpoint {name!r}: expected a peft adapter directory, got {path!r} "
                        f"(no adapter_config.json)")


def registered_path(adapter_paths: dict[str, str], name: str) -> str:
    """The adapter directory registered as ``checkpoint:<name>``, or an error listing the known ids."""
    if name not in adapter_paths:
        raise ValueError(f"policy checkpoint:{name}: no adapter registered under that id "
                         f"(known: {sorted(adapter_paths) or 'none'})")
    return adapter_paths[name]


def ram_temp_dir(prefix: str) -> str:
    """A new directory for files rewritten every optimizer step (learner adapter versions): in
    ``/dev/shm`` (RAM-backed) where the machine has one, else in the system temp dir; those a
    killed run left there are removed first (``scratch_dirs``)."""
    return process_temp_dir(prefix, ram=True)


class TransientRolloutError(RuntimeError):
    """A fault that trying again may cure: a remote server that timed out, refused or dropped the
    connection, an engine restarting. Backends raise it (or ``ConnectionError`` / ``TimeoutError``,
    which a client library raises for the same faults); any other exception is a bug or a bad
    request, and retrying it would only hide it."""


RETRYABLE = (TransientRolloutError, ConnectionError, TimeoutError)


class RolloutFailed(ServiceError):
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
