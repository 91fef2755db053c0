"""SelfPlayModule: the LightningModule that trains the policy on the batches the DataModule plays.

It only trains. Data flows one way: the DataModule's engine plays the games and hands each
training step a Batch of records, which carry everything training needs to know about
themselves (tokens, behaviour logprobs, the temperature they were sampled at, whether those
logprobs are the trainer's own computation); the module learns from them, and the weight path
(``sp_lightning.weight_sync``, a callback of the DataModule's) sends its new weights to the
engine's worker. The module never reads the engine.

Where each concern lives: collation (``collate``), the forward of a micro-batch
(``policy_forward``), the loss terms (``loss_terms``) and the KL term's warm-start reference
(``reference_policy``), the update's passes and optimizer steps
(``update``), the optimizer (``optimizer``), adapter surgery (``learners``), an advantage
estimator's value heads and value term (``credit``). One training step is one batch of games:
``global_step`` counts them, whatever ``update_epochs``, and every "every N steps" setting
(checkpoints, schedules, the league's) is in that unit. Manual optimisation: a step is
``update_epochs`` optimizer steps over the same records with one Lightning-counted step among
them, each learner clipped and checked for non-finite gradients on its own, which Lightning's
automatic loop (one closure, one clip) does not express. With LoRA, checkpoints hold only the
trainable weights (and value heads): the base model is rebuilt from its config.
"""

from __future__ import annotations

import os
import time

import lightning as L
import torch

from sp_lightning import distributed, sharding
from sp_lightning import rng as rng_streams
from sp_lightning.checkpoints import adapter_misfit, check_fits, check_policy_dir, read_checkpoint
from sp_lightning.collate import LegalMoves
from sp_lightning.device_memory import PeakMemory
from sp_lightning.errors import UserError
from sp_lightning.learners import (
    LearnerSettings, Learners, adapter_twins, copy_adapter, load_adapter_dir, overridden, params_of, reset_adapter,
    save_learner_adapter,
)
from sp_lightning.loss_terms import Aggregation, Imitation, LossSettings
from sp_lightning.model import PolicySettings, load_policy
from sp_lightning.optimizer import OptimizerSettings, build_optimizer
from sp_lightning.policy_forward import PolicyForward
from sp_lightning.reference_policy import WarmStartReference
from sp_lightning.rollout.base import WeightUpdate
from sp_lightning.update import PolicyUpdate, batch_counts
from sp_lightning.value_head import hidden_size_of
from sp_lightning.weight_sync import update_of

__all__ = ["LossSettings", "OptimizerSettings", "SelfPlayModule"]


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
        credit=None,
        warm_start_steps: int = 0,
    ):
        """
        Args:
            policy: The model, its LoRA adapter and its tokenizer.
            loss: The clipped surrogate and its further terms (KL, entropy, magnet).
            optimizer: Learning rate, clipping and warm-up.
            micro_batch_size: Most sequences per forward/backward; gradients accumulate over a batch.
            micro_batch_tokens: Most padded tokens (sequences x the longest of them) per
                forward/backward, which bounds the activations whatever the records' lengths; a
                longer sequence goes alone. Null: ``micro_batch_size`` alone.
            max_train_tokens: Prompt+completion tokens beyond this are not trained on; null: all.
            update_epochs: Passes over each batch's records, an optimizer step each (PPO's
                epochs): the first on-policy, the later ones kept in check by the clipped ratio.
                One training step (``global_step``) per batch whatever their number.
            share_prompts: Compute each distinct prompt of a micro-batch once where it saves a
                quarter of the tokens (``sp_lightning.shared_prompts``; the same logits within
                float rounding). False: always the plain forward.
            learners: Several policies learning at once (sp_lightning.learners): name -> the roles
                it plays and its overrides of ``policy.lora``, ``optimizer`` and ``loss``; each its
                own adapter, loss normalisation, clipping and parameter group. Null: one learner.
            credit: The run's credit assigner (``data.credit``, linked here by ``sp-lightning
                fit``): an estimator that learns values (``credit.GAE``) has its value heads
                trained with the policy and its value term in the loss.
            warm_start_steps: The run's ``data.warm_start.steps`` (linked here by ``sp-lightning
                fit``): where ``loss.kl.reference`` is ``warm_start``, the policy after that many
                steps becomes the KL term's reference (``sp_lightning.reference_policy``).
        """
        super().__init__()
        self.save_hyperparameters(ignore=["credit", "warm_start_steps"])  # the data block's, linked in: saved there
        _check_positive(micro_batch_size, micro_batch_tokens, update_epochs)
        self.policy_settings, self.loss_settings = policy or PolicySettings(), loss or LossSettings()
        self.optim = optimizer or OptimizerSettings()
        self.micro_batch_size, self.micro_batch_tokens = micro_batch_size, micro_batch_tokens
        self.update_epochs, self.max_train_tokens, self.share_prompts = update_epochs, max_train_tokens, share_prompts
        self.automatic_optimization = False
        self.learners = Learners(learners)
        self.loss_of = {name: self._own(self.loss_settings, name, "loss") for name in self.learners.names}
        self.optim_of = {name: self._own(self.optim, name, "optimizer") for name in self.learners.names}
        self.model, self.tokenizer = load_policy(self.policy_settings, self.learners.settings or None)
        self.uses_adapter = self.policy_settings.lora is not None or self.policy_settings.adapter_path
        self.warm_start_steps = warm_start_steps
        self.reference = WarmStartReference(self.model, self.learners, self.loss_of, bool(self.uses_adapter),
                                            warm_start_steps)
        """The warm start's policy, where the warmed learner's KL term holds it near (taken at its end)."""
        self.strict_loading = not self.uses_adapter
        self.policy_forward = PolicyForward(self.model, self.tokenizer.pad_token_id)
        self.legal_moves = LegalMoves(self.tokenizer)
        self.updater = PolicyUpdate(self)
        self.nonfinite_in_a_row = {name: 0 for name in self.learners.names}  # steps skipped in a row, per learner
        self.nonfinite_steps = 0
        self.last_batch = None
        """The last training step's Batch (records, rollouts, metrics), for callbacks."""
        self._resumed_rng_states: dict | None = None  # from on_load_checkpoint, for on_train_start
        self.sharded = False  # the frozen base sharded over the ranks (configure_model, FSDP)
        self.credit = credit if getattr(credit, "learns_values", False) else None
        self.value_heads = None  # the credit estimator's, made at setup when it learns values
        self.terms_of = {name: self.loss_of[name].terms() for name in self.learners.names}
        self.imitation_terms = [Imitation(Aggregation(self.loss_settings.aggregation, self.loss_settings.max_length))]
        """The loss of a teacher's moves (records with ``imitation``: an imitation learner's, a warm start's)."""

    def _own(self, settings, name: str, key: str):
        """``settings`` with learner ``name``'s overrides of ``model.learners.<name>.<key>``."""
        return overridden(settings, getattr(self.learners.settings[name], key), f"model.learners.{name}.{key}") \
            if name else settings

    @property
    def last_rollouts(self) -> list:
        """The games of the last training step, for callbacks (sp_lightning.tensorboard)."""
        return self.last_batch.rollouts if self.last_batch is not None else []

    def on_fit_start(self) -> None:
        if str(self.trainer.precision).startswith("16"):
            raise ValueError(f"trainer.precision: expected 32-true, bf16-mixed or bf16-true, got "
                             f"{self.trainer.precision!r} (fp16 needs a gradient scaler, which this module's "
                             f"manual optimisation does not run)")

    def setup(self, stage: str) -> None:
        """The credit estimator's value heads (one per learner) when it learns values, and its value
        term in each learner's loss: made here, before the optimizer and a resumed run's weights,
        which then include the heads."""
        if self.value_heads is None and self.credit is not None:
            self.value_heads = self.credit.value_heads(self.learners.names, hidden_size_of(self.model))
            for name in self.learners.names:
                self.terms_of[name] = self.loss_of[name].terms() + [self.credit.value_term(self.value_heads)]

    def weight_update(self, version: int) -> WeightUpdate:
        """Every learner's trainable tensors (never the frozen base): what the weight path sends to
        the rollout backend (``sp_lightning.weight_sync``)."""
        return update_of(self.model, version, self.learners.names)

    def trainable(self, name: str) -> list[torch.nn.Parameter]:
        """What learner ``name``'s optimizer steps: its adapter (or every trained weight) and its
        value head where it has one."""
        params = params_of(self.model, name)
        return params + (self.value_heads.params_of(name) if self.value_heads is not None else [])

    @property
    def shares_prompts(self) -> bool:
        """Whether micro-batches may compute each distinct prompt once: asked for, not sharded (one
        forward per micro-batch on every rank), not under gradient checkpointing."""
        return self.share_prompts and not self.sharded and self.policy_forward.can_share_prompts()

    def needs_reference(self, name: str) -> bool:
        """Whether learner ``name``'s loss reads the reference policy now: the base model (adapter
        off), or the warm start's policy once the warm start is over."""
        settings = self.loss_of[name]
        if not settings.needs_reference:
            return False
        return self.reference.ready if settings.kl.reference == "warm_start" else bool(self.uses_adapter)

    def reference_logprobs(self, name: str, batch) -> torch.Tensor:
        """(B, K) learner ``name``'s reference policy's logprobs of a collated micro-batch."""
        warm = self.loss_of[name].kl.reference == "warm_start"
        return self.policy_forward.reference(batch, self.reference.weights if warm else None)

    def configure_model(self) -> None:
        """Under ``ModelParallelStrategy``: the frozen base sharded over the ranks with FSDP2, the
        adapter left whole (sp_lightning.sharding). The rollout backend made its own copy of the
        whole model when the DataModule set up, before this."""
        strategy = self._trainer.strategy if self._trainer is not None else None
        if not sharding.shards_model(strategy) or self.sharded:
            return
        if not self.uses_adapter:
            raise ValueError("trainer.strategy: ModelParallelStrategy shards the frozen base model and trains a LoRA "
                             "adapter; set model.policy.lora (or use ddp to train every weight)")
        if self.reference.wanted:
            raise ValueError("model.loss.kl.reference: 'warm_start' is not supported under ModelParallelStrategy "
                             "(its weight swap is untested on sharded models); use reference: base, or ddp")
        sharding.shard_frozen_base(self.model, sharding.data_parallel_mesh(strategy))
        self.sharded = True

    # ---- optimisation -------------------------------------------------------------------------
    def configure_optimizers(self):
        total = self.trainer.max_steps if self._trainer is not None and self.trainer.max_steps > 0 else 0
        opt, sched = build_optimizer([(self.trainable(name), self.optim_of[name]) for name in self.learners.names],
                                     total, self.update_epochs)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def step_optimizers(self, counted: bool) -> None:
        """One optimizer step of every learner with a gradient (AdamW skips the others), then the
        learning-rate schedule's. ``counted``: the training step Lightning counts (once per batch:
        ``global_step``); the later passes over the same batch step the optimizer itself. (Not
        Lightning's ``optimizer_step`` hook: manual optimization steps here, by name.)"""
        opt = self.optimizers()
        opt.step() if counted else opt.optimizer.step()
        opt.zero_grad(set_to_none=True)
        self.lr_schedulers().step()

    def advance_schedule(self, passes: int) -> None:
        """The learning-rate schedule moved on by ``passes`` passes of this batch in which no
        learner stepped (every loss non-finite), so that each later pass keeps its place between
        two training steps (``optimizer.build_optimizer``)."""
        for _ in range(passes):
            self.lr_schedulers().step()

    def training_step(self, dataloader_iter):
        # ---- rollout: the batch the engine played with the current weights ----
        batch, _, _ = next(dataloader_iter)
        self.last_batch = batch
        self.reference.take_when_due(batch.records)  # the first self-play step: the warm start's policy
        start = time.perf_counter()
        mine = {name: [r for r in batch.records if r.learner == name] for name in self.learners.names}
        counts = batch_counts(mine, self.max_train_tokens)
        if not any(c.records for c in counts.values()):  # every move came from bots or was empty, on every rank
            self._log_rollout(batch.metrics)
            return None
        # ---- update: loss over micro-batches, optimizer step(s) ----
        used = ([group["lr"] for group in self.optimizers().param_groups], self.global_step)  # what this step uses
        with PeakMemory() as peak:
            totals, passes = self.updater.run(mine, counts)
        if not any(passes.values()):  # nothing learnt from this batch
            self._log_rollout(batch.metrics)
            return None
        for name in self.learners.names:
            if passes[name] == self.update_epochs:
                self.nonfinite_in_a_row[name] = 0
        # ---- logging: the last pass's diagnostics (its ratio and clip fraction show how far the
        # earlier passes moved the policy from the one that played) ----
        self._log_update(batch, time.perf_counter() - start, totals, passes, counts, peak.bytes, used)
        self._log_rollout(batch.metrics)
        return None

    def _log_update(self, batch, elapsed, totals, passes, counts, peak: int | None, used: tuple[list, int]) -> None:
        lrs, step = used  # what the update ran with: the optimizer and the schedules are on the next step's now
        trained = sum(passes[r.learner] * (len(r.prompt_ids) + len(r.completion_ids)) for r in batch.records)
        # the whole step: playing the batch (timed by the arena; under asynchronous collection
        # only the wait for it, the rest overlapped the previous update) and learning from it
        played = batch.metrics.get("rollout/wait_seconds", batch.metrics.get("rollout/seconds", 0.0))
        metrics = distributed.mean_metrics({"train/tokens_per_s": trained / max(elapsed, 1e-9),
                                            "train/update_seconds": elapsed, "train/step_seconds": elapsed + played})
        if peak is not None:  # on a GPU: what the update held at its peak (under asynchronous
            metrics["train/peak_memory_gib"] = peak / 2**30  # collection the producer's generation too)
        for k, name in enumerate(self.learners.names):
            if not counts[name].records:
                continue
            prefix = f"train/{name}/" if name else "train/"
            metrics.update({f"{prefix}{key}": value for key, value in totals[name].items()})
            metrics[f"{prefix}records"] = counts[name].records
            metrics[f"{prefix}lr"] = lrs[k]  # the first pass's (with update_epochs > 1 each pass steps it)
            if self.learners.imitates(name):
                continue
            metrics[f"{prefix}advantage_mean"] = totals[name].get(  # credit that learns values: the trainer's own
                "value_advantage_mean", counts[name].advantage_sum / counts[name].records)
            settings = self.loss_of[name]
            metrics[f"{prefix}entropy_coef"] = settings.entropy.coef.at(step)
            if settings.magnet.coef:
                metrics[f"{prefix}magnet_coef"] = settings.magnet.coef.at(step)
        self.log_dict(metrics, batch_size=max(len(batch.records), 1))

    def _log_rollout(self, metrics: dict[str, float]) -> None:
        """The batch's play metrics, averaged over the ranks (each played its own games)."""
        metrics = distributed.mean_metrics(metrics)
        own_prefix = ("rollout/", "credit/", "online_eval/", "imitation/")  # logged under their own names
        games = {k: v for k, v in metrics.items() if not k.startswith(own_prefix)}
        self.log_dict({f"games/{k}": v for k, v in games.items()}, batch_size=1)
        self.log_dict({k: v for k, v in metrics.items() if k.startswith(own_prefix)}, batch_size=1, prog_bar=False)

    # ---- evaluation ---------------------------------------------------------------------------
    def validation_step(self, validation, batch_idx):
        metrics, line = validation  # a game's validation, played by the DataModule's engine
        # the same figures on every rank (counted over all of them): sync_dist only says so
        self.log_dict(metrics, batch_size=1, sync_dist=True)
        self.print(f"[eval step {self.global_step}] {line}")

    # ---- checkpoints: only what was trained -----------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        states = distributed.gather(rng_streams.global_states())  # every rank samples from its own
        checkpoint["rng_states"] = states[0] if len(states) == 1 else states
        self.updater.save(checkpoint)
        self.reference.save(checkpoint)
        if not self.uses_adapter:
            return
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k in trainable}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # a checkpoint of another config is refused before Lightning loads it (which would put
        # weights of the wrong shape in place without a word)
        source = f"ckpt_path {self.trainer.ckpt_path}" if self._trainer else "the checkpoint"
        check_fits(checkpoint, self, source)
        self.reference.load(checkpoint, source)
        self.updater.load(checkpoint)
        # applied at on_train_start, after the sanity-check validation a resumed fit runs again
        states = checkpoint.get("rng_states")
        if isinstance(states, list):  # one per data-parallel rank
            if len(states) != distributed.world_size():
                raise UserError(f"the checkpoint was written by {len(states)} data-parallel ranks, this run has "
                                 f"{distributed.world_size()}: resume with as many ranks")
            states = states[distributed.rank()]
        self._resumed_rng_states = states

    def on_train_start(self) -> None:
        """A resumed run continues the random streams of the run that saved the checkpoint, so
        the next batch samples what the unbroken run sampled (sp_lightning.rng); Lightning restores
        them before this hook, after setup and ``on_fit_start``."""
        states, self._resumed_rng_states = self._resumed_rng_states, None
        if states is not None:
            rng_streams.set_global_states(states)
        elif distributed.world_size() > 1:  # the ranks were seeded alike: each samples its own moves
            rng_streams.seed_rank(distributed.rank())

    # ---- the policy's weights: load, save, reset ------------------------------------------------
    def load_policy_weights(self, path: str | os.PathLike[str], key: str = "--checkpoint") -> None:
        """Load a trained policy: a Lightning ``.ckpt`` (its trainable weights) or a peft adapter
        directory. A file that cannot be read, or weights that do not fit the config's model,
        raise a ``UserError`` naming ``key`` (the flag that named ``path``) and, for a checkpoint
        of another config, the settings that differ (sp_lightning.checkpoints). A run's value
        heads (``credit.GAE``) are no part of the policy: they are read only where this module
        has them."""
        path = os.fspath(path)
        if os.path.isdir(path):
            self._check_policy_dir(path, key)
            try:
                load_adapter_dir(self.model, path)
            except RuntimeError as error:  # size mismatch
                raise adapter_misfit(path, key, self.model, error) from error
            return
        checkpoint = read_checkpoint(path, key)
        check_fits(checkpoint, self, f"{key} {path}")
        params = dict(self.named_parameters())
        state = {k: v for k, v in checkpoint["state_dict"].items() if k in params}
        self.load_state_dict(state, strict=False)

    def check_policy_weights(self, path: str | os.PathLike[str], key: str = "--checkpoint") -> None:
        """What :meth:`load_policy_weights` refuses, refused without loading: a command checks
        every file it names before it plays any (a bad last one would lose the others' games)."""
        path = os.fspath(path)
        if os.path.isdir(path):
            self._check_policy_dir(path, key)
        else:
            check_fits(read_checkpoint(path, key), self, f"{key} {path}")

    def _check_policy_dir(self, path: str, key: str) -> None:
        check_policy_dir(path, key, self.model, self.learners.names)

    def reset_learner(self, learner: str, seed: int, copy_from: str | None = None) -> None:
        """Learner ``learner``'s adapter made fresh again (``learners.reset_adapter``) or, with
        ``copy_from``, a copy of that learner's; its value head zero (its value starts over) and its
        optimizer state dropped: an exploiter starting over (sp_lightning.league.exploiters)."""
        params = self.trainable(learner)
        reset_adapter(self.model, learner, seed)
        with torch.no_grad():
            for param in self.value_heads.params_of(learner) if self.value_heads is not None else []:
                param.zero_()
        if copy_from is not None:
            copy_adapter(self.model, copy_from, learner)
        if self._trainer is not None:
            optimizer = self.optimizers().optimizer
            for p in params:
                optimizer.state.pop(p, None)

    def adapter_twins(self, source: str, target: str) -> list:
        """``learners.adapter_twins`` of the policy (what ``reset_to: main`` checks at start)."""
        return adapter_twins(self.model, source, target)

    def save_adapter(self, path: str | os.PathLike[str], learner: str = "") -> None:
        """The trained adapter (or the whole model without LoRA) and the tokenizer, with
        save_pretrained: what the league keeps for each checkpoint, ``checkpoint:<dir>`` serves,
        and ``PeftModel.from_pretrained`` or vLLM load. Only learner ``learner``'s adapter."""
        if hasattr(self.model, "peft_config"):
            save_learner_adapter(self.model, os.fspath(path), learner)
        else:
            self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)


def _check_positive(micro_batch_size: int, micro_batch_tokens: int | None, update_epochs: int) -> None:
    if micro_batch_size < 1:
        raise ValueError(f"model.micro_batch_size: expected >= 1, got {micro_batch_size}")
    if micro_batch_tokens is not None and micro_batch_tokens < 1:
        raise ValueError(f"model.micro_batch_tokens: expected an int >= 1 or null, got {micro_batch_tokens!r}")
    if update_epochs < 1:
        raise ValueError(f"model.update_epochs: expected an int >= 1, got {update_epochs!r}")
