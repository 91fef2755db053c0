"""One training step's update: the loss of every micro-batch, the backward passes, and the
optimizer step(s), for every learner of the run.

``update_epochs`` passes over each learner's records (PPO's epochs; the first is on-policy), each
pass one optimizer step for every learner still stepping; gradients accumulate over micro-batches
and, under data parallelism, are summed over the ranks once per pass. The loss of a micro-batch is
the learner's terms (``sp_lightning.loss_terms``) over the trainer's forward
(``sp_lightning.policy_forward``); an estimator that learns values first runs its value pass
(the trainer's forward through the estimator's heads, then the estimator's advantages). A
learner whose pass is not finite keeps what its earlier passes learnt and sits out the rest.

The module hosts this: it owns the model, the optimizer and Lightning's backward; the algorithm
is here, so that the module only wires the parts together.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from sp_lightning import distributed
from sp_lightning.collate import MicroBatch, split_micro_batches, trained_tokens
from sp_lightning.credit import value_diagnostics
from sp_lightning.learners import activate, trainable_again
from sp_lightning.loss_terms import ForwardOutputs, LossBatch, combine
from sp_lightning.losses import masked_mean
from sp_lightning.shared_prompts import group_by_prompt
from sp_lightning.types import TrainingRecord
from sp_lightning.value_head import prompt_end_hidden

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Counts:
    """A learner's trained tokens, records and advantage sum in a batch, over every rank."""

    tokens: float
    records: float
    advantage_sum: float
    imitated: float = 0.0
    """Of its records, a teacher's moves (``TrainingRecord.imitation``)."""

    @property
    def imitating(self) -> bool:
        """Whether this batch trains the learner on a teacher's moves (the same on every rank, so a
        rank without records runs the same passes as the others)."""
        return self.imitated > 0


def batch_counts(records: dict[str, list[TrainingRecord]], max_train_tokens: int | None = None) -> dict[str, Counts]:
    """Each learner's :class:`Counts`, summed over the ranks in one collective: each rank's loss is
    normalised by them, so the gradients summed over the ranks are those of one process training on
    every rank's records. The tokens are those trained on: a sequence cut at ``max_train_tokens``
    counts the completion tokens it keeps (the loss's mean and the diagnostics' weights are over them)."""
    names = list(records)
    flat = distributed.sum_floats([value for name in names for value in (
        sum(trained_tokens(r, max_train_tokens) for r in records[name]), len(records[name]),
        sum(r.advantage for r in records[name]),
        sum(r.imitation for r in records[name]))])
    return {name: Counts(*flat[4 * k: 4 * k + 4]) for k, name in enumerate(names)}


class PolicyUpdate:
    """The update of the module ``host`` (a ``SelfPlayModule``) from one batch."""

    def __init__(self, host):
        self.host = host

    def save(self, checkpoint: dict) -> None:
        """The non-finite steps counted so far (``_skip_nonfinite``) go in the checkpoint: a resumed
        run stops after as many more in a row as the unbroken one would."""
        checkpoint["nonfinite"] = {"in_a_row": dict(self.host.nonfinite_in_a_row), "steps": self.host.nonfinite_steps}

    def load(self, checkpoint: dict) -> None:
        nonfinite = checkpoint.get("nonfinite")  # absent from checkpoints made before they were kept
        if nonfinite is not None:
            known = self.host.nonfinite_in_a_row
            known.update({name: n for name, n in nonfinite["in_a_row"].items() if name in known})
            self.host.nonfinite_steps = nonfinite["steps"]

    def run(self, records: dict[str, list[TrainingRecord]], counts: dict[str, Counts]):
        """``(totals, passes)``: each learner's last completed pass's diagnostics and how many of its
        passes stepped."""
        host = self.host
        for name, own in records.items():
            if 0 < counts[name].imitated < counts[name].records:  # (the data side never mixes them: a bug if it did)
                raise RuntimeError(f"learner {name!r}: a batch mixes a teacher's moves with its own")
        active = [name for name in host.learners.names if counts[name].records]
        micro_batches = {name: self._micro_batches(records[name]) for name in active}
        # sharded, every forward and backward pass is a collective: each rank runs as many
        fillers = {name: (distributed.max_int(len(micro_batches[name])) - len(micro_batches[name])
                          if host.sharded else 0) for name in active}
        totals: dict[str, dict[str, float]] = {name: {} for name in host.learners.names}
        passes = {name: 0 for name in host.learners.names}
        value_stats: dict[str, dict[str, float]] = {}
        self._step = host.global_step  # the training step this batch is
        self._stepped = 0  # this batch's passes that stepped (the first is the training step Lightning counts)
        try:
            if host.credit is not None:  # advantages from the values of the weights that played
                for name in active:
                    if counts[name].imitating:  # a teacher's moves: no advantage to estimate
                        continue
                    activate(host.model, name)
                    value_stats[name] = self._value_pass(name, micro_batches[name], fillers[name])
            for epoch in range(host.update_epochs):
                stepping = self._pass(epoch, active, micro_batches, counts, fillers, records)
                for name, pass_totals in stepping.items():
                    totals[name], passes[name] = {**pass_totals, **value_stats.get(name, {})}, passes[name] + 1
                active = list(stepping)
                if not active:
                    break
            if self._stepped:  # later passes where nothing stepped: the schedule stays on the training step
                host.advance_schedule(host.update_epochs - self._stepped)
        finally:
            trainable_again(host.model)
        return totals, passes

    def _pass(self, epoch: int, active: list[str], micro_batches: dict, counts: dict[str, Counts],
              fillers: dict[str, int], records: dict) -> dict[str, dict[str, float]]:
        """One pass over every active learner's micro-batches and its optimizer step; returns the
        diagnostics of the learners that stepped."""
        host = self.host
        strategy = host._trainer.strategy if host._trainer is not None else None
        pass_totals = {}
        with distributed.local_backward(strategy):
            for name in active:
                activate(host.model, name)
                pass_totals[name] = {}
                step = self._step + epoch / host.update_epochs  # a later pass: between two steps
                for micro in micro_batches[name]:
                    self._backward(name, micro, counts[name], step, pass_totals[name])
                for _ in range(fillers[name]):
                    self._filler_pass(name, counts[name].imitating)
        # the gradients summed over the ranks once per pass (a rank with fewer or no
        # micro-batches did fewer or no backward passes: the one collective follows them), the
        # active learners' only: the others keep no gradient, as on one process, so AdamW leaves
        # them be (a zero gradient would move them by their momentum and weight decay)
        distributed.sum_gradients(list({id(p): p for name in active for p in host.trainable(name)}.values()))
        stepping = {}
        for name in active:
            pass_totals[name] = distributed.sum_metrics(pass_totals[name])
            if self._clipped_and_finite(name, pass_totals[name]):
                stepping[name] = pass_totals[name]
            else:
                self._skip_nonfinite(name, records[name], pass_totals[name])
        if stepping:  # the first optimizer step of the batch is the training step Lightning counts
            host.step_optimizers(counted=not self._stepped)
            self._stepped += 1
        return stepping

    def _micro_batches(self, records: list[TrainingRecord]) -> list[MicroBatch]:
        host = self.host
        share = host.shares_prompts
        ordered = group_by_prompt(records) if share else records  # the loss is a sum: order is free
        pad = host.tokenizer.pad_token_id
        return [MicroBatch.collated(chunk, pad, host.max_train_tokens, host.device, share)
                for chunk in split_micro_batches(ordered, host.micro_batch_size, host.micro_batch_tokens,
                                                 host.max_train_tokens)]

    def _backward(self, name: str, micro: MicroBatch, counts: Counts, step: float, totals: dict[str, float]) -> None:
        """The loss of learner ``name``'s micro-batch and its backward pass; its diagnostics added to
        ``totals``, weighted by its share of the trained tokens."""
        host = self.host
        imitation = counts.imitating
        terms = host.imitation_terms if imitation else host.terms_of[name]
        # the reference first: a warm-start reference swaps its weights into the model's own, which
        # no graph may hold yet (sp_lightning.reference_policy)
        reference = host.reference_logprobs(name, micro.tensors) if host.needs_reference(name) and not imitation \
            else None
        logprobs, logits, hidden = host.policy_forward(micro.tensors, hidden=host.credit is not None and not imitation)
        if micro.trainer_logprobs is None:  # the first pass: still the weights that played
            micro.trainer_logprobs = logprobs.detach()
            micro.sampler_mismatch = masked_mean((micro.trainer_logprobs - micro.tensors.old_logprobs).abs(),
                                                 micro.tensors.loss_mask)
        if host.loss_of[name].needs_legal_moves and not imitation and micro.legal is None:
            micro.legal = host.legal_moves.masks(micro.records, micro.tensors, logits.shape[-1])
        batch = LossBatch(micro.tensors, counts.tokens, counts.records, step, micro.logprobs_from_trainer,
                          micro.legal, micro.value_targets, name)
        out = ForwardOutputs(logprobs, logits, micro.trainer_logprobs, reference, hidden)
        loss, diag = combine(terms, batch, out)
        if not imitation:  # (a teacher's moves have no behaviour logprobs)
            diag["sampler_mismatch"] = micro.sampler_mismatch
        host.manual_backward(loss)
        if host.update_epochs == 1:
            micro.legal = None  # kept for the later passes only: a (B, V) mask each
        weight = micro.trained_tokens / max(counts.tokens, 1)
        for key, value in diag.items():
            totals[key] = totals.get(key, 0.0) + weight * float(value)
        totals["loss"] = totals.get("loss", 0.0) + float(loss.detach())

    @torch.no_grad()
    def _value_pass(self, name: str, micro_batches: list[MicroBatch], fillers: int) -> dict[str, float]:
        """Learner ``name``'s advantages and value targets from its value head's V of every record
        (the credit estimator's ``advantages``), before the update's first pass; returns the value's
        diagnostics (this rank's). Each micro-batch's forward also gives the trainer's logprobs under
        the weights that played, which the first pass would take."""
        host = self.host
        values = []
        for micro in micro_batches:
            logprobs, _, hidden = host.policy_forward(micro.tensors, hidden=True)
            micro.trainer_logprobs = logprobs
            micro.sampler_mismatch = masked_mean((logprobs - micro.tensors.old_logprobs).abs(), micro.tensors.loss_mask)
            values.extend(host.value_heads(name, prompt_end_hidden(hidden, micro.tensors.value_column))
                          .float().cpu().tolist())
        for _ in range(fillers):  # sharded: every rank runs as many forward passes
            host.policy_forward.filler()
        records = [r for micro in micro_batches for r in micro.records]
        advantages, targets = host.credit.advantages(records, values)
        start = 0
        for micro in micro_batches:
            end = start + len(micro.records)
            device = micro.tensors.advantages.device
            micro.tensors.advantages = torch.tensor(advantages[start:end], dtype=torch.float, device=device)
            micro.value_targets = torch.tensor(targets[start:end], dtype=torch.float, device=device)
            start = end
        return value_diagnostics(values, targets, advantages)

    def _filler_pass(self, name: str, imitating: bool) -> None:
        """The forward and backward passes of a micro-batch, on two padding tokens, with a loss of
        zero: what a rank with fewer micro-batches than the others runs under a sharded model,
        whose every pass gathers each layer's weights from all ranks (a rank that skipped one
        would leave the others waiting). The same passes in the same order as a real micro-batch:
        the reference's forward when the KL term runs, the policy's forward, the backward."""
        host = self.host
        if host.needs_reference(name) and not imitating:
            with torch.no_grad(), host.model.disable_adapter():
                host.policy_forward.filler()
        logits = host.policy_forward.filler()
        host.manual_backward(logits.sum() * 0.0)

    def _clipped_and_finite(self, name: str, totals: dict[str, float]) -> bool:
        """Clip learner ``name``'s summed gradient (its own ``grad_clip``; ``totals`` gains its
        ``grad_norm``) and say whether its loss and gradient are finite."""
        trainable = self.host.trainable(name)
        clip = self.host.optim_of[name].grad_clip
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
        host = self.host
        for p in host.trainable(name):
            p.grad = None
        host.nonfinite_in_a_row[name] += 1
        host.nonfinite_steps += 1
        advantages = [r.advantage for r in records] or [math.nan]  # a rank may have trained on none
        rewards = [r.reward for r in records] or [math.nan]
        who = f"learner {name!r}: " if name else ""
        detail = (f"{who}loss {totals.get('loss')}, grad norm {totals['grad_norm']}; this rank's batch: "
                  f"{len(records)} records, rewards in [{min(rewards):.3g}, {max(rewards):.3g}], advantages in "
                  f"[{min(advantages):.3g}, {max(advantages):.3g}], policy versions "
                  f"{sorted({r.policy_version for r in records})}")
        log.warning("optimizer step %d skipped (%d in a row): non-finite %s",
                    host.global_step, host.nonfinite_in_a_row[name], detail)
        host.log("train/nonfinite_steps", float(host.nonfinite_steps), batch_size=1)
        limit = host.optim_of[name].max_nonfinite_steps
        if host.nonfinite_in_a_row[name] >= limit:
            raise RuntimeError(
                f"{host.nonfinite_in_a_row[name]} optimizer steps in a row had a non-finite loss or gradient "
                f"(optimizer.max_nonfinite_steps = {limit}); last: {detail}. "
                f"Lower optimizer.lr, check the rewards for inf/NaN, or resume from the last checkpoint."
            )
