"""SelfPlayModule: completion-token logprobs -> policy-gradient loss -> optimizer step(s).

Each training step takes one Batch played by the arena with the current weights, splits its
records into micro-batches, accumulates gradients over them (the loss is normalised over the
whole batch, so accumulation is exact), clips, and steps once (``update_epochs`` times with PPO
epochs, each pass a fresh accumulation over the same records). Validation plays the evaluation
games against a fixed opponent. With LoRA, checkpoints hold only the trainable (adapter)
weights: the base model is rebuilt from its config.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass

import lightning as L
import torch

from sp_lightning import rng as rng_streams
from sp_lightning.losses import (
    gather_logprobs, legal_magnet_kl, legal_move_entropy, masked_mean, policy_gradient_loss, token_entropy,
)
from sp_lightning import distributed, sharding
from sp_lightning.credit import value_diagnostics
from sp_lightning.data import callbacks_of
from sp_lightning.device_memory import PeakMemory
from sp_lightning.engine import engine_of
from sp_lightning.learners import (
    LearnerSettings, Learners, activate, adapter_of, overridden, params_of, trainable_again,
)
from sp_lightning.model import PolicySettings, load_policy
from sp_lightning.rollout.base import save_learner_adapter
from sp_lightning.rollout.hf import left_pad
from sp_lightning.shared_prompts import SharedPrompts, collate_shared, group_by_prompt, shared_window_logits
from sp_lightning.types import TrainingRecord
from sp_lightning.value_head import ValueHeads, capture_final_hidden, hidden_size_of, prompt_end_hidden

log = logging.getLogger(__name__)


def linear_anneal(start: float, floor: float, steps: int | None, step: int) -> float:
    """``start`` falling linearly to 0 over ``steps`` steps, never below ``floor``; constant
    ``start`` when ``steps`` is unset."""
    if not steps:
        return start
    return max(floor, start * max(0.0, 1.0 - step / steps))


@dataclass
class LossSettings:
    """The policy-gradient loss (see sp_lightning.losses.policy_gradient_loss)."""

    clip_low: float = 0.2
    """The ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.2
    """The ratio is clipped above at 1 + clip_high (raise it for DAPO's clip-higher)."""
    aggregation: str = "token_mean"
    """token_mean | sequence_mean | constant (Dr. GRPO; needs max_length)."""
    max_length: int | None = None
    """The constant normaliser of aggregation=constant, in tokens."""
    kl_coef: float = 0.0
    """Weight of the KL term against the base model (adapter disabled); 0 turns it off."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus on the completion tokens' next-token distributions."""
    entropy_decay_steps: int | None = None
    """Anneal entropy_coef linearly to 0 over this many optimizer steps; null keeps it constant.
    A policy that cannot yet tell states apart collapses onto the one answer that is most often
    right (every state alike); holding entropy up early lets it learn to read the state first."""

    entropy_floor: float = 0.0
    """The annealed coefficient never goes below this: an entropy term that does not vanish keeps
    the last iterate of self-play in zero-sum games from collapsing onto a pure strategy."""
    entropy_over: str = "vocabulary"
    """vocabulary | legal_moves. "legal_moves" scores a move's first token over the game's legal
    moves only (where each legal move is one distinct token, as with the tiny tokenizer; other
    rows and tokens keep the vocabulary's entropy): the bonus then keeps the moves mixed without
    pushing mass onto illegal tokens (see losses.legal_move_entropy)."""
    magnet_coef: float = 0.0
    """Weight of KL(uniform over the legal moves || policy) at each move token (rows whose legal
    moves are distinct single tokens; see losses.legal_magnet_kl). It does not anneal: it is the
    magnet of magnetic mirror descent, which makes the last iterate of zero-sum self-play
    converge (to an equilibrium regularised by this weight) and pulls a policy stuck on one
    illegal answer back to the legal moves. 0 turns it off."""
    magnet_decay_steps: int | None = None
    """Anneal magnet_coef linearly to magnet_floor over this many optimizer steps; null (the
    default) keeps it constant, the magnetic mirror descent above. In a game with a pure best
    play (Tic-Tac-Toe) the magnet is wanted early, while the policy learns which tokens are
    legal, and costs later: it keeps every legal move likely, so the learner's own later moves are
    noisy and so is the return each earlier move is credited with."""
    magnet_floor: float = 0.0
    """The annealed magnet never goes below this."""
    importance_sampling: str = "auto"
    """auto | on | off. Truncated importance sampling for completions sampled by another engine
    than the trainer (vLLM, servers): the PPO ratio is taken against the trainer's own logprobs
    of the sampled tokens, and each token is weighted by min(exp(trainer - sampler), tis_cap).
    "auto": on exactly when the rollout worker does not share the trainer's weights
    (``RolloutWorker.shares_weights``). The trainer/sampler gap is logged either way
    (``train/sampler_mismatch``)."""
    tis_cap: float = 2.0
    """C of the truncated importance weight min(exp(trainer - sampler), C)."""

    def magnet_coef_at(self, step: int) -> float:
        return linear_anneal(self.magnet_coef, self.magnet_floor, self.magnet_decay_steps, step)

    def entropy_coef_at(self, step: int) -> float:
        return linear_anneal(self.entropy_coef, self.entropy_floor, self.entropy_decay_steps, step)

    def __post_init__(self):
        if self.importance_sampling not in ("auto", "on", "off"):
            raise ValueError(f"loss.importance_sampling: expected 'auto', 'on' or 'off', got "
                             f"{self.importance_sampling!r}")
        if not self.tis_cap > 0:
            raise ValueError(f"loss.tis_cap: expected > 0, got {self.tis_cap!r}")
        if self.entropy_over not in ("vocabulary", "legal_moves"):
            raise ValueError(f"loss.entropy_over: expected 'vocabulary' or 'legal_moves', got {self.entropy_over!r}")
        choices = ("token_mean", "sequence_mean", "constant")
        if self.aggregation not in choices:
            raise ValueError(f"loss.aggregation: expected one of {choices}, got {self.aggregation!r}")
        if self.aggregation == "constant" and not self.max_length:
            raise ValueError("loss.max_length: required (> 0) when loss.aggregation is 'constant'")
        if self.magnet_decay_steps is not None and self.magnet_decay_steps < 1:
            raise ValueError(f"loss.magnet_decay_steps: expected an int >= 1 or null, got {self.magnet_decay_steps!r}")
        if not 0.0 <= self.magnet_floor <= self.magnet_coef or (self.magnet_floor and not self.magnet_decay_steps):
            raise ValueError(
                f"loss.magnet_floor: expected 0 <= magnet_floor <= magnet_coef ({self.magnet_coef}), with "
                f"magnet_decay_steps set; got {self.magnet_floor!r}")


@dataclass
class OptimizerSettings:
    """AdamW on the trainable weights."""

    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = 1.0
    """Clip the gradient's global norm to this value; null disables clipping."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up over this many optimizer steps."""
    schedule: str = "constant"
    """After warm-up: "constant", or "cosine" decay to min_lr_ratio * lr at trainer.max_steps."""
    min_lr_ratio: float = 0.1
    max_nonfinite_steps: int = 5
    """A step whose loss or gradient is NaN or inf is skipped (no weight changes) and logged;
    this many such steps in a row stop the run with an error."""

    def __post_init__(self):
        if self.max_nonfinite_steps < 1:
            raise ValueError(f"optimizer.max_nonfinite_steps: expected >= 1, got {self.max_nonfinite_steps}")
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"optimizer.schedule: expected 'constant' or 'cosine', got {self.schedule!r}")

    def lr_factor(self, step: int, total_steps: int) -> float:
        """Multiplier of lr at ``step``: linear warm-up, then constant or cosine decay."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.schedule == "constant" or total_steps <= self.warmup_steps:
            return 1.0
        progress = min(1.0, (step - self.warmup_steps) / (total_steps - self.warmup_steps))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@dataclass
class TrainBatch:
    """Collated tensors of one micro-batch.

    Sequences are LEFT-padded, so every row's completion ends at the last column and the
    completion tensors are right-aligned in a (B, K) window, K the longest kept completion. The
    model then computes logits for the last K+1 columns only (``logits_to_keep``): the LM head and
    log-softmax never run over prompt positions, which are most of the tokens.

    With ``shared`` (see ``sp_lightning.shared_prompts``) the distinct prompts are there, each
    computed once, and ``input_ids`` / ``attention_mask`` / ``position_ids`` hold each row's
    suffix only (its prompt's last token and its completion), laid out the same way.
    """

    input_ids: torch.Tensor  # (B, W)
    attention_mask: torch.Tensor  # (B, W)
    position_ids: torch.Tensor  # (B, W) 0 at each row's first real token
    targets: torch.Tensor  # (B, K) the last K tokens of each row
    loss_mask: torch.Tensor  # (B, K) 1 on trained completion tokens
    old_logprobs: torch.Tensor  # (B, K)
    advantages: torch.Tensor  # (B,)
    shared: SharedPrompts | None = None
    value_column: torch.Tensor | None = None  # (B,) the column of each row's last prompt token among the K+1 kept

    def to(self, device) -> TrainBatch:
        return TrainBatch(*(None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
                            for f in dataclasses.fields(self)))


def collate(records: list[TrainingRecord], pad_id: int, max_tokens: int | None = None,
            share_prompts: bool = False) -> TrainBatch:
    """Left-padded prompt+completion sequences, cut at ``max_tokens`` (no training past it).
    ``share_prompts``: the shared-prompt layout where it pays and no sequence is cut."""
    seqs, kept = [], []
    for r in records:
        ids = list(r.prompt_ids) + list(r.completion_ids)
        if max_tokens:
            ids = ids[:max_tokens]
        seqs.append(ids)
        kept.append(max(0, min(len(r.completion_ids), len(ids) - len(r.prompt_ids))))
    uncut = all(len(ids) == len(r.prompt_ids) + len(r.completion_ids) for ids, r in zip(seqs, records))
    shared = collate_shared(records, pad_id) if share_prompts and uncut else None
    if shared is not None:
        input_ids, attention_mask, position_ids, prompts = shared
    else:
        input_ids, attention_mask = left_pad(seqs, pad_id)
        position_ids, prompts = (attention_mask.cumsum(-1) - 1).clamp(min=0), None
    width = input_ids.shape[1]
    window = max(1, max(kept))
    loss_mask = torch.zeros((len(records), window))
    old_logprobs = torch.zeros((len(records), window))
    for row, (r, k) in enumerate(zip(records, kept)):
        if k:
            loss_mask[row, window - k :] = torch.tensor(r.action_mask[:k], dtype=torch.float)
            old_logprobs[row, window - k :] = torch.tensor(r.logprobs[:k])
    advantages = torch.tensor([r.advantage for r in records], dtype=torch.float)
    value_column = window - torch.tensor(kept, dtype=torch.long)  # (B,) K - k: predicts the first completion token
    return TrainBatch(input_ids, attention_mask, position_ids, input_ids[:, width - window :],
                      loss_mask, old_logprobs, advantages, prompts, value_column)


def split_micro_batches(records: list[TrainingRecord], max_records: int, max_tokens: int | None,
                        max_train_tokens: int | None = None) -> list[list[TrainingRecord]]:
    """``records`` cut, in order, into runs of at most ``max_records`` whose padded size (count x
    the longest sequence, as ``collate`` pads them) stays within ``max_tokens``."""
    chunks: list[list[TrainingRecord]] = []
    current: list[TrainingRecord] = []
    longest = 0  # of the records in ``current``
    for r in records:
        length = len(r.prompt_ids) + len(r.completion_ids)
        if max_train_tokens:
            length = min(length, max_train_tokens)
        full = len(current) >= max_records
        if current and (full or (max_tokens and (len(current) + 1) * max(longest, length) > max_tokens)):
            chunks.append(current)
            current, longest = [], 0
        current.append(r)
        longest = max(longest, length)
    if current:
        chunks.append(current)
    return chunks


@dataclass(frozen=True)
class _Counts:
    """A batch's trained tokens, records and advantage sum over every rank."""

    tokens: float
    records: float
    advantage_sum: float


@dataclass(frozen=True)
class _UpdateInputs:
    """What an update needs from the run beyond the records: the sampler's temperature (the
    trainer scales its logits as the sampler did) and whether the loss corrects for a sampler
    that is not the trainer."""

    temperature: float
    importance_sampling: bool


def uses_importance_sampling(loss: LossSettings, worker) -> bool:
    """Whether the loss corrects for a sampler that is not the trainer (``loss.importance_sampling``;
    ``auto``: exactly when the worker does not generate with the trainer's own weights)."""
    if loss.importance_sampling != "auto":
        return loss.importance_sampling == "on"
    return not worker.shares_weights


@dataclass
class _MicroBatch:
    """One micro-batch of a training step: its records, their collated tensors, the count of
    trained tokens (counted on the CPU, so no pass waits on the device for it), and the
    legal-move mask (built on the first pass that needs it, reused by later passes)."""

    records: list[TrainingRecord]
    tensors: TrainBatch
    trained_tokens: float
    legal: tuple | None = None
    trainer_logprobs: torch.Tensor | None = None
    """(B, K) the trainer's logprobs under the weights that played (the first pass's, detached)."""
    sampler_mismatch: torch.Tensor | None = None
    value_targets: torch.Tensor | None = None
    """(B,) what the value head learns toward (credit that learns values; None otherwise)."""

    @classmethod
    def collated(cls, records: list[TrainingRecord], pad_id: int, max_tokens: int | None, device,
                 share_prompts: bool = False) -> _MicroBatch:
        tensors = collate(records, pad_id, max_tokens, share_prompts)
        return cls(records, tensors.to(device), float(tensors.loss_mask.sum()))


class SelfPlayModule(L.LightningModule):
    def __init__(
        self,
        policy: PolicySettings | None = None,
        loss: LossSettings | None = None,
        optimizer: OptimizerSettings | None = None,
        micro_batch_size: int = 64,
        micro_batch_tokens: int | None = 4096,
        max_train_tokens: int | None = None,
        update_epochs: int = 1,
        share_prompts: bool = True,
        learners: dict[str, LearnerSettings] | None = None,
    ):
        """
        Args:
            policy: The model, its LoRA adapter and its tokenizer.
            loss: The policy-gradient loss and its KL term.
            optimizer: Learning rate, clipping and warm-up.
            micro_batch_size: Most sequences per forward/backward; gradients accumulate over a batch.
            micro_batch_tokens: Most padded tokens (sequences x the longest of them) per
                forward/backward; a sequence longer than this goes alone. Peak memory follows
                tokens, not sequences: a step's records differ in length from game to game and
                config to config, and a budget in tokens bounds the activations whatever they
                are. Null: ``micro_batch_size`` alone.
            max_train_tokens: Prompt+completion tokens beyond this are not trained on
                (generation may be longer); null trains on everything.
            update_epochs: Optimizer steps taken on each batch of rollouts (PPO's epochs). The
                first is on-policy; later ones reuse the same records, kept in check by the
                clipped ratio to the behaviour policy. Playing costs about as much as learning
                here, so a second pass gets more out of each game for less than a second batch.
                Lightning counts optimizer steps: ``trainer.max_steps``, the learning-rate and
                entropy schedules and ``every_n_train_steps`` then advance ``update_epochs``
                per batch, while ``val_check_interval`` counts batches. Choose ``max_steps`` and
                every "every N steps" setting (checkpoints, the league's schedule and evaluator)
                as multiples of ``update_epochs``: the step count moves by that much at once.
            share_prompts: Compute each distinct prompt of a micro-batch once and run only the
                completions per record (``sp_lightning.shared_prompts``): GRPO groups share their
                prompt, so their update costs a fraction of the plain forward. Used per
                micro-batch where it saves at least a quarter of the tokens; the logits and
                gradients are the plain forward's within float rounding. False: always plain.
            learners: Several policies learning at once (sp_lightning.learners): name -> the
                roles it plays and its overrides of ``policy.lora``, ``optimizer`` and ``loss``.
                Each is its own LoRA adapter of the one base model, updated in every step from
                its own records with its own loss normalisation, clipping and optimizer state
                (one AdamW, a parameter group per learner); metrics ``train/<name>/...``.
                Null: one unnamed learner.
        """
        super().__init__()
        self.save_hyperparameters()
        self.policy_settings = policy or PolicySettings()
        self.loss_settings = loss or LossSettings()
        self.optim = optimizer or OptimizerSettings()
        if micro_batch_size < 1:
            raise ValueError(f"model.micro_batch_size: expected >= 1, got {micro_batch_size}")
        self.micro_batch_size = micro_batch_size
        if micro_batch_tokens is not None and micro_batch_tokens < 1:
            raise ValueError(f"model.micro_batch_tokens: expected an int >= 1 or null, got {micro_batch_tokens!r}")
        self.micro_batch_tokens = micro_batch_tokens
        if update_epochs < 1:
            raise ValueError(f"model.update_epochs: expected an int >= 1, got {update_epochs!r}")
        self.update_epochs = update_epochs
        self.max_train_tokens = max_train_tokens
        self.share_prompts = share_prompts
        self.automatic_optimization = False
        self.learners = Learners(learners)
        # each learner's loss and optimizer settings: the model's, with its own keys changed
        self.loss_of = {name: overridden(self.loss_settings, self.learners.settings[name].loss,
                                         f"model.learners.{name}.loss") if name else self.loss_settings
                        for name in self.learners.names}
        self.optim_of = {name: overridden(self.optim, self.learners.settings[name].optimizer,
                                          f"model.learners.{name}.optimizer") if name else self.optim
                         for name in self.learners.names}
        self.model, self.tokenizer = load_policy(self.policy_settings, self.learners.settings or None)
        self.uses_adapter = self.policy_settings.lora is not None or self.policy_settings.adapter_path
        self.strict_loading = not self.uses_adapter
        self._move_token_ids: dict[str, int | None] = {}
        self.nonfinite_in_a_row = {name: 0 for name in self.learners.names}  # steps skipped in a row, per learner
        self.last_batch = None
        """The last training step's Batch (records, rollouts, metrics), for callbacks."""
        self.nonfinite_steps = 0
        self._resumed_rng_states: dict | None = None  # from on_load_checkpoint, for on_train_start
        self.sharded = False  # the frozen base sharded over the ranks (configure_model, FSDP)
        self.value_heads: ValueHeads | None = None  # made at setup when the run's credit learns values

    @property
    def last_rollouts(self) -> list:
        """The games of the last training step, for callbacks (sp_lightning.tensorboard)."""
        return self.last_batch.rollouts if self.last_batch is not None else []

    def on_fit_start(self) -> None:
        if str(self.trainer.precision).startswith("16"):
            raise ValueError(
                f"trainer.precision: expected 32-true, bf16-mixed or bf16-true, got "
                f"{self.trainer.precision!r} (fp16 needs a gradient scaler, which this module's "
                f"manual optimisation does not run)"
            )

    @property
    def engine(self):
        """The run's engine (the DataModule's): the worker whose weights follow every optimizer
        step, sampling, evaluation (sp_lightning.engine)."""
        return engine_of(self.trainer)

    def setup(self, stage: str) -> None:
        """A value head per learner when the run's credit learns values (``credit.GAE``): made
        here, after the DataModule built the engine and before the optimizer and a resumed run's
        weights, which then include the heads."""
        if self.value_heads is None and self._value_credit() is not None:
            self.value_heads = ValueHeads(self.learners.names, hidden_size_of(self.model))

    def _value_credit(self):
        """The run's credit assigner if it learns values (``learns_values``), else None."""
        if self._trainer is None:
            return None
        credit = self.engine.credit
        return credit if getattr(credit, "learns_values", False) else None

    def _trainable(self, name: str) -> list[torch.nn.Parameter]:
        """What learner ``name``'s optimizer steps: its adapter (or every trained weight) and
        its value head where it has one."""
        params = params_of(self.model, name)
        if self.value_heads is not None:
            params = params + self.value_heads.params_of(name)
        return params

    def configure_callbacks(self):
        """The callbacks the config's ``data`` block installs (a league's), handed to Lightning."""
        return callbacks_of(self.trainer)

    def configure_model(self) -> None:
        """Under ``ModelParallelStrategy``: the frozen base sharded over the ranks with FSDP2, the
        adapter left whole (sp_lightning.sharding). The rollout backend first takes what it needs
        of the unsharded model (a whole copy, for a backend that generates with the trainer's)."""
        strategy = self._trainer.strategy if self._trainer is not None else None
        if not sharding.shards_model(strategy) or self.sharded:
            return
        if not self.uses_adapter:
            raise ValueError("trainer.strategy: ModelParallelStrategy shards the frozen base model and trains a LoRA "
                             "adapter; set model.policy.lora (or use ddp to train every weight)")
        mesh = sharding.data_parallel_mesh(strategy)
        self.engine.worker.keep_unsharded_copy(strategy.root_device)
        sharding.shard_frozen_base(self.model, mesh)
        self.sharded = True

    # ---- optimisation -------------------------------------------------------------------------
    def configure_optimizers(self):
        # one optimizer, a parameter group per learner: one optimizer step per pass whatever the
        # number of learners (Lightning counts every optimizer's steps in global_step)
        groups = [{"params": self._trainable(name), "lr": self.optim_of[name].lr,
                   "betas": tuple(self.optim_of[name].betas), "weight_decay": self.optim_of[name].weight_decay}
                  for name in self.learners.names]
        opt = torch.optim.AdamW(groups)
        total = self.trainer.max_steps if self._trainer is not None and self.trainer.max_steps > 0 else 0
        factors = [lambda step, o=self.optim_of[name]: o.lr_factor(step, total) for name in self.learners.names]
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factors)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def sequence_logprobs(self, batch: TrainBatch, disable_adapter: bool = False, temperature: float = 1.0):
        """(logprobs, logits) of the completion window: (B, K) logprob of each target token under
        the policy (or the base model with ``disable_adapter``) and the (B, K, V) logits behind it,
        scaled by the sampling ``temperature`` as the sampler's were."""
        ctx = self.model.disable_adapter() if disable_adapter else nullcontext()
        window = batch.targets.shape[1]
        with ctx:
            if batch.shared is not None:
                logits = shared_window_logits(self.model, batch.input_ids, batch.attention_mask,
                                              batch.position_ids, batch.shared, logits_to_keep=window + 1)
            else:
                logits = self.model(
                    input_ids=batch.input_ids,
                    attention_mask=batch.attention_mask,
                    position_ids=batch.position_ids,
                    logits_to_keep=window + 1,
                ).logits
        logits = logits[:, :-1]  # (B, K, V) the columns that predict the last K tokens
        if temperature not in (0.0, 1.0):  # the sampler's logprobs were taken after temperature
            logits = logits / temperature
        return gather_logprobs(logits, batch.targets), logits

    def _shares_prompts(self) -> bool:
        """Whether micro-batches may compute each distinct prompt once. Not under gradient
        checkpointing: Hugging Face models keep no key/value cache there."""
        if not self.share_prompts or self.sharded:  # sharded: one forward per micro-batch on every rank
            return False
        checkpointing = getattr(self.model, "is_activation_checkpointing", None)  # transformers >= 5
        if checkpointing is None:
            checkpointing = getattr(self.model, "is_gradient_checkpointing", False)
        return not checkpointing

    def training_step(self, dataloader_iter):
        # ---- rollout: the batch the engine played with the current weights ----
        batch, _, _ = next(dataloader_iter)
        engine = self.engine
        opt = self.optimizers()
        records = batch.records
        self.last_batch = batch
        start = time.perf_counter()
        names = self.learners.names
        mine = {name: [r for r in records if r.learner == name] for name in names}
        # the counts over every rank, per learner: each rank's loss is normalised by them, so the
        # gradients summed over the ranks are those of one process training on every rank's records
        flat = distributed.sum_floats([value for name in names for value in (
            sum(sum(r.action_mask) for r in mine[name]), len(mine[name]), sum(r.advantage for r in mine[name]))])
        counts = {name: _Counts(*flat[3 * k: 3 * k + 3]) for k, name in enumerate(names)}
        if not any(c.records for c in counts.values()):  # every move came from bots or was empty, on every rank
            self._log_rollout(batch.metrics)
            return None
        # ---- update: loss over micro-batches, optimizer step(s) ----
        how = {name: _UpdateInputs(temperature=float(engine.sampling.temperature),
                                   importance_sampling=uses_importance_sampling(self.loss_of[name], engine.worker))
               for name in names}
        with engine.update_overlap(), PeakMemory(enabled=engine.collector is None) as peak:
            totals, passes = self._update(opt, mine, how, counts)  # async collection plays meanwhile
        if not any(passes.values()):  # nothing learnt from this batch
            self._log_rollout(batch.metrics)
            return None
        for name in names:
            if passes[name] == self.update_epochs:
                self.nonfinite_in_a_row[name] = 0
        sync_start = time.perf_counter()
        engine.worker.sync_weights(self.global_step)
        sync_seconds = time.perf_counter() - sync_start
        # ---- logging: the last pass's diagnostics (its ratio and clip fraction show how far the
        # earlier passes moved the policy from the one that played) ----
        elapsed = time.perf_counter() - start
        trained_tokens = sum(passes[r.learner] * (len(r.prompt_ids) + len(r.completion_ids)) for r in records)
        # the whole step: playing the batch (timed by the arena; under asynchronous collection
        # only the wait for it, the rest overlapped the previous update) and learning from it
        played = batch.metrics.get("rollout/wait_seconds", batch.metrics.get("rollout/seconds", 0.0))
        metrics = distributed.mean_metrics({"train/tokens_per_s": trained_tokens / max(elapsed, 1e-9),
                                            "train/update_seconds": elapsed, "train/step_seconds": elapsed + played,
                                            "rollout/weight_sync_ms": 1000 * sync_seconds,
                                            "rollout/weight_sync_bytes": float(engine.worker.last_sync_bytes)})
        if peak.bytes is not None:  # on a GPU: what the update held at its peak
            metrics["train/peak_memory_gib"] = peak.bytes / 2**30
        for k, name in enumerate(names):
            if not counts[name].records:
                continue
            prefix = f"train/{name}/" if name else "train/"
            metrics.update({f"{prefix}{key}": value for key, value in totals[name].items()})
            metrics[f"{prefix}records"] = counts[name].records
            metrics[f"{prefix}advantage_mean"] = totals[name].get(  # credit that learns values: the trainer's own
                "value_advantage_mean", counts[name].advantage_sum / counts[name].records)
            s = self.loss_of[name]
            metrics[f"{prefix}entropy_coef"] = s.entropy_coef_at(self.global_step)
            if s.magnet_coef:
                metrics[f"{prefix}magnet_coef"] = s.magnet_coef_at(self.global_step)
            metrics[f"{prefix}lr"] = opt.param_groups[k]["lr"]
        self.log_dict(metrics, batch_size=max(len(records), 1))
        self._log_rollout(batch.metrics)
        return None

    def _update(self, opt, records: dict[str, list[TrainingRecord]], how: dict[str, _UpdateInputs],
                counts: dict[str, _Counts]) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
        """``update_epochs`` passes over each learner's records, each pass ending in one optimizer
        step for every learner still stepping; returns each learner's last completed pass's
        diagnostics and how many of its passes stepped. A learner whose pass was not finite keeps
        what its earlier passes learnt and sits out the later ones; the others go on."""
        # collated once, reused by every pass; with several passes each micro-batch's legal-move
        # mask is built on first use and kept for the later ones
        share = self._shares_prompts()
        active = [name for name in self.learners.names if counts[name].records]
        micro_batches = {name: self._micro_batches(records[name], share) for name in active}
        # sharded, every forward and backward pass is a collective: each rank runs as many
        fillers = {name: (distributed.max_int(len(micro_batches[name])) - len(micro_batches[name])
                          if self.sharded else 0) for name in active}
        totals: dict[str, dict[str, float]] = {name: {} for name in self.learners.names}
        passes = {name: 0 for name in self.learners.names}  # passes that ended in an optimizer step
        strategy = self._trainer.strategy if self._trainer is not None else None
        credit = self._value_credit()
        value_stats: dict[str, dict[str, float]] = {}
        try:
            if credit is not None:  # advantages from the values of the weights that played
                for name in active:
                    activate(self.model, name)
                    value_stats[name] = self._credit_from_values(credit, name, micro_batches[name], how[name],
                                                                 fillers[name])
            for _ in range(self.update_epochs):
                pass_totals = {}
                with distributed.local_backward(strategy):
                    for name in active:
                        activate(self.model, name)
                        pass_totals[name] = {}
                        self._backward_passes(micro_batches[name], counts[name], how[name], pass_totals[name],
                                              self.loss_of[name])
                        for _ in range(fillers[name]):
                            self._filler_pass(self.loss_of[name])
                # the gradients summed over the ranks once per pass (a rank with fewer or no
                # micro-batches did fewer or no backward passes: the one collective follows them)
                heads = list(self.value_heads.parameters()) if self.value_heads is not None else []
                distributed.sum_gradients([p for p in self.model.parameters() if p.requires_grad] + heads)
                stepping = []
                for name in active:
                    pass_totals[name] = distributed.sum_metrics(pass_totals[name])
                    if self._clipped_and_finite(name, pass_totals[name]):
                        stepping.append(name)
                    else:
                        self._skip_nonfinite(name, records[name], pass_totals[name])
                if not stepping:
                    break
                opt.step()
                opt.zero_grad(set_to_none=True)
                self.lr_schedulers().step()
                for name in stepping:
                    totals[name], passes[name] = {**pass_totals[name], **value_stats.get(name, {})}, passes[name] + 1
                active = stepping
        finally:
            trainable_again(self.model)
        return totals, passes

    @torch.no_grad()
    def _credit_from_values(self, credit, name: str, micro_batches: list[_MicroBatch], how: _UpdateInputs,
                            fillers: int) -> dict[str, float]:
        """Learner ``name``'s advantages and value targets set from its value head's V of every
        record (``credit.advantages``: GAE along each trajectory), before the update's first pass;
        returns the value's diagnostics (this rank's). Each micro-batch's forward also gives the
        trainer's logprobs under the weights that played, which the first pass would take."""
        values = []
        for micro in micro_batches:
            with capture_final_hidden(self.model) as captured:
                logprobs, _ = self.sequence_logprobs(micro.tensors, temperature=how.temperature)
            micro.trainer_logprobs = logprobs
            micro.sampler_mismatch = masked_mean((logprobs - micro.tensors.old_logprobs).abs(), micro.tensors.loss_mask)
            hidden = prompt_end_hidden(captured["hidden"], micro.tensors.value_column)
            values.extend(self.value_heads(name, hidden).float().cpu().tolist())
        for _ in range(fillers):  # sharded: every rank runs as many forward passes
            self._filler_forward()
        records = [r for micro in micro_batches for r in micro.records]
        advantages, targets = credit.advantages(records, values)
        start = 0
        for micro in micro_batches:
            end = start + len(micro.records)
            device = micro.tensors.advantages.device
            micro.tensors.advantages = torch.tensor(advantages[start:end], dtype=torch.float, device=device)
            micro.value_targets = torch.tensor(targets[start:end], dtype=torch.float, device=device)
            start = end
        return value_diagnostics(values, targets, advantages)

    def _value_loss(self, name: str, micro: _MicroBatch, hidden: torch.Tensor, coef: float, train_trunk: bool,
                    num_records: float) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, squared error mean)``: ``coef * 0.5 * (V - target)**2`` summed over the micro-batch's
        rows with a trained token, over the learner's records on every rank."""
        mb = micro.tensors
        hidden = prompt_end_hidden(hidden, mb.value_column)
        values = self.value_heads(name, hidden if train_trunk else hidden.detach())  # (B,)
        rows = (mb.loss_mask.sum(-1) > 0).float()  # (B,)
        squared = (values.float() - micro.value_targets) ** 2 * rows  # (B,)
        return coef * 0.5 * squared.sum() / max(num_records, 1.0), squared.detach().sum() / rows.sum().clamp(min=1)

    def _micro_batches(self, records: list[TrainingRecord], share: bool) -> list[_MicroBatch]:
        pad = self.tokenizer.pad_token_id
        ordered = group_by_prompt(records) if share else records  # the loss is a sum: order is free
        return [_MicroBatch.collated(chunk, pad, self.max_train_tokens, self.device, share)
                for chunk in split_micro_batches(ordered, self.micro_batch_size, self.micro_batch_tokens,
                                                 self.max_train_tokens)]

    def _backward_passes(self, micro_batches: list[_MicroBatch], counts: _Counts, how: _UpdateInputs,
                         totals: dict[str, float], s: LossSettings) -> None:
        """The loss (settings ``s``) and backward pass of each micro-batch, its diagnostics added
        to ``totals``."""
        num_tokens, num_records = counts.tokens, counts.records
        uses_legal_moves = s.entropy_over == "legal_moves" or s.magnet_coef != 0
        importance_sampling = how.importance_sampling
        learns_values = micro_batches and micro_batches[0].value_targets is not None
        credit = self._value_credit() if learns_values else None
        for micro in micro_batches:
            mb = micro.tensors
            with capture_final_hidden(self.model) if credit is not None else nullcontext({}) as captured:
                logprobs, logits = self.sequence_logprobs(mb, temperature=how.temperature)
            if micro.trainer_logprobs is None:  # the first pass: still the weights that played
                micro.trainer_logprobs = logprobs.detach()
                micro.sampler_mismatch = masked_mean((micro.trainer_logprobs - mb.old_logprobs).abs(), mb.loss_mask)
            if importance_sampling:
                old, behaviour = micro.trainer_logprobs, mb.old_logprobs
            else:
                old, behaviour = mb.old_logprobs, None
            ref_logprobs = None
            if s.kl_coef > 0 and self.uses_adapter:
                with torch.no_grad():
                    ref_logprobs, _ = self.sequence_logprobs(mb, disable_adapter=True, temperature=how.temperature)
            entropy_coef = s.entropy_coef_at(self.global_step)
            entropy_logits = logits if entropy_coef else logits.detach()  # no graph for a diagnostic
            if uses_legal_moves:
                legal = micro.legal or self._legal_moves(micro.records, mb, logits.shape[-1])
                if self.update_epochs > 1:  # kept for the later passes only: a (B, V) mask each
                    micro.legal = legal
                first_position, legal_mask, known = legal
            if s.entropy_over == "legal_moves":
                entropy = legal_move_entropy(entropy_logits, first_position, legal_mask)  # (B, K)
            else:
                entropy = token_entropy(entropy_logits)  # (B, K)
            loss, diag = policy_gradient_loss(
                logprobs, old, mb.advantages, mb.loss_mask,
                clip_low=s.clip_low, clip_high=s.clip_high, aggregation=s.aggregation,
                num_tokens=num_tokens, num_sequences=num_records, max_length=s.max_length,
                ref_logprobs=ref_logprobs, kl_coef=s.kl_coef, entropy=entropy, entropy_coef=entropy_coef,
                behaviour_logprobs=behaviour, tis_cap=s.tis_cap if importance_sampling else None,
            )
            diag["sampler_mismatch"] = micro.sampler_mismatch
            if s.magnet_coef:
                magnet = legal_magnet_kl(logits, first_position, legal_mask) * known  # (B,)
                diag["magnet_kl"] = masked_mean(magnet.detach(), known)
                loss = loss + s.magnet_coef_at(self.global_step) * magnet.sum() / num_records
            if credit is not None:
                value_loss, diag["value_error"] = self._value_loss(
                    micro.records[0].learner, micro, captured["hidden"], credit.value_coef, credit.train_trunk,
                    num_records)
                loss = loss + value_loss
            self.manual_backward(loss)
            weight = micro.trained_tokens / max(num_tokens, 1)
            for key, value in diag.items():
                totals[key] = totals.get(key, 0.0) + weight * float(value)
            totals["loss"] = totals.get("loss", 0.0) + float(loss.detach())

    def _filler_pass(self, s: LossSettings) -> None:
        """The forward and backward passes of a micro-batch, on two padding tokens, with a loss of
        zero: what a rank with fewer micro-batches than the others runs under a sharded model,
        whose every pass gathers each layer's weights from all ranks (a rank that skipped one
        would leave the others waiting). The same passes in the same order as a real micro-batch:
        the policy's forward, the reference forward when the KL term runs, the backward."""
        logits = self._filler_forward()
        if s.kl_coef > 0 and self.uses_adapter:
            with torch.no_grad(), self.model.disable_adapter():
                self._filler_forward()
        self.manual_backward(logits.sum() * 0.0)

    def _filler_forward(self) -> torch.Tensor:
        """The policy's forward on two padding tokens (a sharded rank's stand-in pass); its logits."""
        ids = torch.full((1, 2), self.tokenizer.pad_token_id, dtype=torch.long, device=self.device)
        return self.model(input_ids=ids, logits_to_keep=1).logits

    def _clipped_and_finite(self, name: str, totals: dict[str, float]) -> bool:
        """Clip learner ``name``'s summed gradient (its own ``grad_clip``; ``totals`` gains its
        ``grad_norm``) and say whether its loss and gradient are finite."""
        trainable = self._trainable(name)
        clip = self.optim_of[name].grad_clip
        if clip:
            grad_norm = torch.nn.utils.clip_grad_norm_(trainable, clip)
        else:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in trainable if p.grad is not None])
        totals["grad_norm"] = float(grad_norm)
        return math.isfinite(totals.get("loss", 0.0)) and math.isfinite(totals["grad_norm"])

    def _skip_nonfinite(self, name: str, records: list[TrainingRecord], totals: dict[str, float]) -> None:
        """Drop learner ``name``'s gradient of this pass (its weights and optimizer state stay as
        they were: AdamW skips a parameter without a gradient), log what its batch held, and stop
        the run once ``optimizer.max_nonfinite_steps`` of its passes in a row went this way."""
        for p in self._trainable(name):
            p.grad = None
        self.nonfinite_in_a_row[name] += 1
        self.nonfinite_steps += 1
        advantages = [r.advantage for r in records] or [math.nan]  # a rank may have trained on none
        rewards = [r.reward for r in records] or [math.nan]
        who = f"learner {name!r}: " if name else ""
        detail = (f"{who}loss {totals.get('loss')}, grad norm {totals['grad_norm']}; this rank's batch: "
                  f"{len(records)} records, rewards in [{min(rewards):.3g}, {max(rewards):.3g}], advantages in "
                  f"[{min(advantages):.3g}, {max(advantages):.3g}], policy versions "
                  f"{sorted({r.policy_version for r in records})}")
        log.warning("optimizer step %d skipped (%d in a row): non-finite %s",
                    self.global_step, self.nonfinite_in_a_row[name], detail)
        self.log("train/nonfinite_steps", float(self.nonfinite_steps), batch_size=1)
        limit = self.optim_of[name].max_nonfinite_steps
        if self.nonfinite_in_a_row[name] >= limit:
            raise RuntimeError(
                f"{self.nonfinite_in_a_row[name]} optimizer steps in a row had a non-finite loss or gradient "
                f"(optimizer.max_nonfinite_steps = {limit}); last: {detail}. "
                f"Lower optimizer.lr, check the rewards for inf/NaN, or resume from the last checkpoint."
            )

    def _legal_moves(self, records: list[TrainingRecord], mb: TrainBatch, vocab: int):
        """(first_position (B,), legal_mask (B, V), known (B,)) of a micro-batch: the column of
        each row's first trained token, the tokens of its legal moves (all True where unknown),
        and which rows' legal moves are known. The mask is built on the CPU in one indexed write
        and moved to the device once."""
        legal_mask = torch.ones(len(records), vocab, dtype=torch.bool)
        known_rows, rows, columns = [], [], []
        for row, record in enumerate(records):
            ids = self._legal_token_ids(record.legal_actions)
            if ids is not None:
                known_rows.append(row)
                rows.extend([row] * len(ids))
                columns.extend(ids)
        legal_mask[known_rows] = False
        legal_mask[rows, columns] = True
        known = torch.zeros(len(records), dtype=torch.bool)
        known[known_rows] = True
        device = mb.loss_mask.device
        trained = mb.loss_mask.sum(-1) > 0  # a row with no trained token has no move column
        first_position = (mb.loss_mask != 0).float().argmax(-1)  # (B,)
        return first_position, legal_mask.to(device), known.to(device) & trained

    def _legal_token_ids(self, actions: list[str] | None) -> list[int] | None:
        """The token of each legal move, or None unless every move is one token and they differ
        (moves spelled over several tokens have no single choice point to score). One legal move
        gives an entropy of 0 there: a forced move needs no exploring."""
        if not actions:
            return None
        ids = []
        for action in actions:
            if action not in self._move_token_ids:
                encoded = self.tokenizer.encode(action, add_special_tokens=False)
                self._move_token_ids[action] = encoded[0] if len(encoded) == 1 else None
            ids.append(self._move_token_ids[action])
        if None in ids or len(set(ids)) < len(ids):
            return None
        return ids

    def _log_rollout(self, metrics: dict[str, float]) -> None:
        """The batch's play metrics, averaged over the ranks (each played its own games)."""
        metrics = distributed.mean_metrics(metrics)
        own_prefix = ("rollout/", "credit/", "online_eval/")  # logged under their own names
        games = {k: v for k, v in metrics.items() if not k.startswith(own_prefix)}
        self.log_dict({f"games/{k}": v for k, v in games.items()}, batch_size=1)
        self.log_dict({k: v for k, v in metrics.items() if k.startswith(own_prefix)}, batch_size=1, prog_bar=False)

    # ---- evaluation ---------------------------------------------------------------------------
    def validation_step(self, game, batch_idx):
        metrics, line = self.engine.validate(game, f"val/{game.name}")
        # the same figures on every rank (counted over all of them): sync_dist only says so
        self.log_dict(metrics, batch_size=1, sync_dist=True)
        self.print(f"[eval step {self.global_step}] {line}")

    # ---- checkpoints: only what was trained -----------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        states = distributed.gather(rng_streams.global_states())  # every rank samples from its own
        checkpoint["rng_states"] = states[0] if len(states) == 1 else states
        if not self.uses_adapter:
            return
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # applied at on_train_start, after the sanity-check validation a resumed fit runs again
        states = checkpoint.get("rng_states")
        if isinstance(states, list):  # one per data-parallel rank
            if len(states) != distributed.world_size():
                raise ValueError(f"the checkpoint was written by {len(states)} data-parallel ranks, this run has "
                                 f"{distributed.world_size()}: resume with as many ranks")
            states = states[distributed.rank()]
        self._resumed_rng_states = states

    def on_train_start(self) -> None:
        """A resumed run continues the random streams of the run that saved the checkpoint, so
        the next batch samples what the unbroken run sampled (sp_lightning.rng). The worker serves
        the weights and version training starts from: a resumed run's restored ones (a worker
        with a copy of its own would otherwise play the first batch with the weights it was built
        with); Lightning restores both before this hook, after setup and ``on_fit_start``."""
        states, self._resumed_rng_states = self._resumed_rng_states, None
        if states is not None:
            rng_streams.set_global_states(states)
        elif distributed.world_size() > 1:  # the ranks were seeded alike: each samples its own moves
            rng_streams.seed_rank(distributed.rank())
        self.engine.worker.sync_weights(self.global_step)
        self.engine.on_train_start()

    def on_validation_start(self) -> None:
        """Validation plays the weights being validated: a worker with a copy of its own gets
        them first (``validate --ckpt_path``, a resumed fit's sanity check)."""
        self.engine.worker.sync_weights(self.global_step)

    def on_train_end(self) -> None:
        self.engine.on_train_end()

    def load_policy_weights(self, path: str | os.PathLike[str]) -> None:
        """Load a trained policy: a Lightning ``.ckpt`` (its trainable weights) or a peft adapter
        directory. Weights that do not fit the config's model raise, naming them. A run's value
        heads (``credit.GAE``) are no part of the policy: they are read only where this module
        has them."""
        path = os.fspath(path)
        if os.path.isdir(path):
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(self.model, load_file(os.path.join(path, "adapter_model.safetensors")))
            return
        state = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
        params = dict(self.named_parameters())
        state = {k: v for k, v in state.items() if k in params or not k.startswith("value_heads.")}
        missing = [k for k in state if k not in params]
        if missing:
            raise ValueError(f"--checkpoint {path}: weights {missing[:3]} do not fit the config's model")
        self.load_state_dict(state, strict=False)

    def reset_learner(self, learner: str, seed: int, copy_from: str | None = None) -> None:
        """Learner ``learner``'s adapter made fresh again (LoRA A drawn anew from ``seed``, B and
        trainable token rows zero: the base model's policy), or with ``copy_from`` a copy of that
        learner's adapter, and its optimizer state dropped: an exploiter starting over
        (sp_lightning.league.exploiters). ``seed`` makes every rank draw the same adapter without
        touching the run's own random streams."""
        from peft.tuners.lora import LoraLayer
        from peft.tuners.trainable_tokens.layer import TrainableTokensLayer

        adapter = adapter_of(learner)
        params = self._trainable(learner)
        device = params[0].device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type), \
                torch.no_grad():
            torch.manual_seed(seed)
            for module in self.model.modules():
                if isinstance(module, LoraLayer) and adapter in module.lora_A:
                    module.reset_lora_parameters(adapter, True)
                elif isinstance(module, TrainableTokensLayer) and adapter in module.trainable_tokens_delta:
                    module.trainable_tokens_delta[adapter].zero_()
            for param in self.value_heads.params_of(learner) if self.value_heads is not None else []:
                param.zero_()  # its value starts over with it (a copy of another learner's keeps this zero value)
        if copy_from is not None:
            self._copy_adapter(copy_from, learner)
        if self._trainer is not None:
            optimizer = self.optimizers().optimizer
            for p in params:
                optimizer.state.pop(p, None)

    def adapter_twins(self, source: str, target: str) -> list[tuple[torch.nn.Parameter, torch.nn.Parameter]]:
        """Each weight of learner ``target``'s adapter paired with ``source``'s same weight; raises
        when the two adapters differ in shape (what ``reset_to: main`` needs; the league checks it
        when training starts)."""
        mine, theirs = f".{adapter_of(target)}.", f".{adapter_of(source)}."
        params = dict(self.model.named_parameters())
        pairs = []
        for name, param in params.items():
            if mine not in name + ".":
                continue
            twin = (name + ".").replace(mine, theirs)[:-1]
            if twin not in params or params[twin].shape != param.shape:
                raise ValueError(f"data.league.exploiters.reset_to: main needs learner {target!r}'s adapter shaped "
                                 f"as {source!r}'s (model.learners.<name>.lora); {name} has no twin")
            pairs.append((param, params[twin]))
        return pairs

    @torch.no_grad()
    def _copy_adapter(self, source: str, target: str) -> None:
        """``target``'s adapter weights set to ``source``'s (same LoRA shape required)."""
        for param, twin in self.adapter_twins(source, target):
            param.copy_(twin)

    def save_adapter(self, path: str | os.PathLike[str], learner: str = "") -> None:
        """The trained adapter (or the whole model without LoRA) and the tokenizer, with
        save_pretrained: what the league keeps for each checkpoint, ``checkpoint:<dir>`` serves,
        and ``PeftModel.from_pretrained`` or vLLM load. Only one learner's adapter (``learner``,
        "" the one unnamed learner): league checkpoints loaded beside it for rollouts and the
        run's other learners are not saved with it."""
        if hasattr(self.model, "peft_config"):
            save_learner_adapter(self.model, os.fspath(path), learner)
        else:
            self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
