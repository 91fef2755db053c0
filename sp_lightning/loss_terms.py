"""The loss as a list of small terms, each ``(batch, outputs) -> (loss, stats)``, composed from
the ``model.loss`` block (torchtune's GRPO loss is the model).

- :class:`PolicyGradient`: the clipped surrogate over completion tokens, with truncated
  importance sampling for another engine's logprobs (``sp_lightning.losses`` says where it departs
  from PPO, GRPO, DAPO and Dr. GRPO);
- :class:`KLPenalty`: GRPO's k3 estimate of the KL to the reference (the base model, adapter off);
- :class:`EntropyBonus`: an entropy bonus over the vocabulary or over the legal moves, annealed;
- :class:`Magnet`: KL(uniform over the legal moves || policy), magnetic mirror descent's magnet;
- :class:`Imitation`: the cross-entropy of a teacher's moves, the whole loss of an imitation
  learner (``sp_lightning.imitation``);
- the value loss, when the run's credit learns values: the estimator's own term
  (``credit.GAE.value_term``);
- a user's own terms, subclasses of :class:`LossTerm` named by ``class_path`` in
  ``model.loss.extra``, added after the others.

Every term reads the same :class:`LossBatch` (the micro-batch's tensors, the batch's counts over
every rank, the step, the legal moves where a term asked for them) and :class:`ForwardOutputs`
(what the trainer's forward gave), and returns its loss (None when it adds nothing at this step)
and detached diagnostics, each a mean over the micro-batch's trained tokens (rows for the
magnet), so micro-batches combine exactly when weighted by their token counts. :func:`combine`
adds the losses in the list's order and merges the stats. Annealed coefficients are one type,
``sp_lightning.schedule.Schedule``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import Tensor

from sp_lightning.collate import TrainBatch
from sp_lightning.losses import (
    AGGREGATIONS, aggregate, legal_magnet_kl, legal_move_entropy, masked_mean, token_entropy,
)
from sp_lightning.reference_policy import REFERENCES
from sp_lightning.schedule import Schedule, schedule_of


@dataclass
class LossBatch:
    """What the terms read of one micro-batch besides the forward's outputs."""

    tensors: TrainBatch
    num_tokens: float
    """Trained tokens of the learner's batch over every rank (token_mean's denominator)."""
    num_records: float
    """Its records over every rank (sequence_mean's and the magnet's denominator)."""
    step: float
    """The optimizer step the schedules are read at."""
    logprobs_from_trainer: bool = True
    """Whether every record's behaviour logprobs are the trainer's own computation."""
    legal: tuple | None = None
    """(first_position (B,), legal_mask (B, V), known (B,)) where a term needs the legal moves."""
    value_targets: Tensor | None = None
    """(B,) what a value head learns toward (credit that learns values)."""
    learner: str = ""

    @property
    def mask(self) -> Tensor:
        return self.tensors.loss_mask


@dataclass
class ForwardOutputs:
    """What the trainer's forward of a micro-batch gave."""

    logprobs: Tensor
    """(B, K) the policy's logprob of each completion token, with grad."""
    logits: Tensor
    """(B, K, V) the logits behind them (scaled by each row's sampling temperature)."""
    trainer_logprobs: Tensor
    """(B, K) the trainer's logprobs under the weights that played (the first pass's, detached)."""
    ref_logprobs: Tensor | None = None
    """(B, K) the reference's (base model's), where the KL penalty asked for them."""
    hidden: Tensor | None = None
    """(B, K+1, H) the final hidden states of the kept columns, where a value head reads them."""


@dataclass(frozen=True)
class Aggregation:
    """How every token term becomes a scalar (``sp_lightning.losses.aggregate``)."""

    kind: str = "token_mean"
    max_length: int | None = None

    def __call__(self, token_loss: Tensor, batch: LossBatch) -> Tensor:
        mask = batch.mask.to(token_loss.dtype)
        return aggregate(token_loss, mask, self.kind, batch.num_tokens, batch.num_records, self.max_length)


@dataclass
class PolicyGradient:
    """The clipped surrogate, ``max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))`` per token,
    aggregated; with ``importance_sampling`` the ratio is taken against the trainer's own logprobs
    and each token weighted by ``min(exp(trainer - sampler), tis_cap)``."""

    clip_low: float = 0.2
    clip_high: float = 0.2
    importance_sampling: str = "auto"
    tis_cap: float = 2.0
    aggregation: Aggregation = field(default_factory=Aggregation)

    def corrects(self, batch: LossBatch) -> bool:
        """Whether this micro-batch is corrected for a sampler that is not the trainer."""
        if self.importance_sampling != "auto":
            return self.importance_sampling == "on"
        return not batch.logprobs_from_trainer

    def __call__(self, batch: LossBatch, out: ForwardOutputs) -> tuple[Tensor, dict[str, Tensor]]:
        logprobs, mask = out.logprobs, batch.mask.to(out.logprobs.dtype)  # (B, K)
        keep, zeros = mask != 0, torch.zeros_like(logprobs)  # (B, K)
        corrected = self.corrects(batch)
        old = out.trainer_logprobs if corrected else batch.tensors.old_logprobs  # (B, K)
        log_ratio = torch.where(keep, logprobs - old, zeros)  # (B, K)
        ratio = log_ratio.exp()  # (B, K)
        adv = batch.tensors.advantages.to(logprobs.dtype).unsqueeze(-1)  # (B, 1)
        pg_loss1 = -adv * ratio  # (B, K)
        pg_loss2 = -adv * ratio.clamp(1.0 - self.clip_low, 1.0 + self.clip_high)  # (B, K)
        pg_token_loss = torch.maximum(pg_loss1, pg_loss2)  # (B, K)
        stats = {}
        if corrected:
            raw_weight = torch.where(keep, old - batch.tensors.old_logprobs, zeros).detach().exp()  # (B, K)
            tis_weight = raw_weight.clamp(max=self.tis_cap)  # (B, K)
            pg_token_loss = tis_weight * pg_token_loss
            stats = {"tis_weight_mean": masked_mean(tis_weight, mask),
                     "tis_truncated_fraction": masked_mean((raw_weight > self.tis_cap).to(mask.dtype), mask)}
        loss = self.aggregation(pg_token_loss, batch)
        with torch.no_grad():
            stats = {"pg_loss": masked_mean(pg_token_loss.detach(), mask),
                     "clip_fraction": masked_mean((pg_loss2 > pg_loss1).to(mask.dtype), mask),
                     "approx_kl": masked_mean((ratio - 1.0 - log_ratio).detach(), mask),
                     "ratio_mean": masked_mean(ratio.detach(), mask), **stats}
        return loss, stats


@dataclass
class KLPenalty:
    """``coef`` x GRPO's per-token k3 estimate ``exp(ref - lp) - (ref - lp) - 1`` of the KL to the
    reference policy, aggregated; off at 0 (the default, as in Dr. GRPO and DAPO). Its mean is
    logged either way (0 without reference logprobs)."""

    coef: float = 0.0
    """Weight of the penalty; 0 turns it off (and the reference's forward with it)."""
    reference: str = "base"
    """base | warm_start. ``base``: the base model, adapter off (GRPO's). ``warm_start``: the policy
    the run's warm start handed to self-play (``data.warm_start``; RLHF's supervised model), from
    the end of the warm start on (``sp_lightning.reference_policy``); needs no adapter."""

    def __post_init__(self):
        if self.reference not in REFERENCES:
            raise ValueError(f"loss.kl.reference: expected one of {REFERENCES}, got {self.reference!r}")
        if not self.coef >= 0:  # negative: a push away from the reference, which nobody means
            raise ValueError(f"loss.kl.coef: expected >= 0 (0: off), got {self.coef!r}")
        self.aggregation = Aggregation()

    @property
    def needs_reference(self) -> bool:
        return self.coef > 0

    def __call__(self, batch: LossBatch, out: ForwardOutputs) -> tuple[Tensor | None, dict[str, Tensor]]:
        logprobs, mask = out.logprobs, batch.mask.to(out.logprobs.dtype)  # (B, K)
        kl_token = torch.zeros_like(logprobs)  # (B, K)
        if out.ref_logprobs is not None:
            ref_diff = torch.where(mask != 0, out.ref_logprobs - logprobs, kl_token)  # (B, K)
            kl_token = ref_diff.exp() - ref_diff - 1.0  # (B, K)
        loss = self.coef * self.aggregation(kl_token, batch) if self.coef != 0.0 and out.ref_logprobs is not None \
            else None
        return loss, {"kl": masked_mean(kl_token.detach(), mask)}


@dataclass
class EntropyBonus:
    """An entropy bonus, ``-coef x`` the aggregated entropy of the completion tokens' next-token
    distributions. A policy that cannot yet tell states apart collapses onto the one answer that
    is most often right; holding entropy up early lets it learn to read the state first, and a
    floor keeps the last iterate of zero-sum self-play from collapsing onto a pure strategy. Its
    mean is logged at every coefficient, 0 included."""

    coef: float | Schedule = 0.0
    """Its weight: a number, or ``{start, steps, floor}`` to anneal it (sp_lightning.schedule)."""
    over: str = "vocabulary"
    """vocabulary | legal_moves. "legal_moves" scores a move's first token over the game's legal
    moves only (where each legal move is one distinct token, as with the tiny tokenizer; other rows
    and tokens keep the vocabulary's entropy): the bonus then keeps the moves mixed without pushing
    mass onto illegal tokens (losses.legal_move_entropy)."""

    def __post_init__(self):
        self.coef = schedule_of(self.coef, "loss.entropy.coef")
        if self.over not in ("vocabulary", "legal_moves"):
            raise ValueError(f"loss.entropy.over: expected 'vocabulary' or 'legal_moves', got {self.over!r}")
        self.aggregation = Aggregation()

    @property
    def needs_legal_moves(self) -> bool:
        return self.over == "legal_moves"

    def __call__(self, batch: LossBatch, out: ForwardOutputs) -> tuple[Tensor | None, dict[str, Tensor]]:
        coef = self.coef.at(batch.step)
        logits = out.logits if coef else out.logits.detach()  # no graph for a diagnostic
        if self.needs_legal_moves:
            first_position, legal_mask, _ = batch.legal
            entropy = legal_move_entropy(logits, first_position, legal_mask)  # (B, K)
        else:
            entropy = token_entropy(logits)  # (B, K)
        loss = -(coef * self.aggregation(entropy, batch)) if coef != 0.0 else None
        mask = batch.mask.to(out.logprobs.dtype)
        return loss, {"entropy": masked_mean(entropy.detach(), mask)}


@dataclass
class Magnet:
    """``coef x KL(uniform over the legal moves || policy)`` at each move token, summed over the
    rows whose legal moves are distinct single tokens and divided by the batch's records: the
    magnet of magnetic mirror descent, which makes the last iterate of zero-sum self-play converge
    (to an equilibrium regularised by this weight) and pulls a policy stuck on one illegal answer
    back to the legal moves. Anneal it where the game has a pure best play (Tic-Tac-Toe): it is
    wanted early, while the policy learns which tokens are legal, and costs later."""

    coef: float | Schedule = 0.0
    """Its weight: a number (constant, magnetic mirror descent), or ``{start, steps, floor}``."""

    def __post_init__(self):
        self.coef = schedule_of(self.coef, "loss.magnet.coef")

    @property
    def needs_legal_moves(self) -> bool:
        return bool(self.coef)

    def __call__(self, batch: LossBatch, out: ForwardOutputs) -> tuple[Tensor | None, dict[str, Tensor]]:
        if not self.coef:
            return None, {}
        first_position, legal_mask, known = batch.legal
        magnet = legal_magnet_kl(out.logits, first_position, legal_mask) * known  # (B,)
        loss = self.coef.at(batch.step) * magnet.sum() / batch.num_records
        return loss, {"magnet_kl": masked_mean(magnet.detach(), known)}


@dataclass
class Imitation:
    """The cross-entropy of the completion tokens, ``-log p(token)`` aggregated: an imitation
    learner's whole loss (its records are a teacher's moves; advantages and behaviour logprobs
    play no part). Logged: the mean negative log-likelihood and probability of the teacher's
    tokens, and the share of them that are the policy's most likely (what it plays greedily)."""

    aggregation: Aggregation = field(default_factory=Aggregation)
    needs_reference = False
    needs_legal_moves = False

    def __call__(self, batch: LossBatch, out: ForwardOutputs) -> tuple[Tensor, dict[str, Tensor]]:
        mask = batch.mask.to(out.logprobs.dtype)  # (B, K)
        loss = self.aggregation(-out.logprobs, batch)
        with torch.no_grad():
            logits = out.logits.detach().float()  # (B, K, V)
            top_logprob = logits.max(dim=-1).values - torch.logsumexp(logits, dim=-1)  # (B, K)
            is_top = (out.logprobs.detach().float() >= top_logprob - 1e-5).to(mask.dtype)  # (B, K)
            stats = {"imitation_nll": masked_mean(-out.logprobs.detach(), mask),
                     "imitation_prob": masked_mean(out.logprobs.detach().exp(), mask),
                     "imitation_top1": masked_mean(is_top, mask)}
        return loss, stats


class LossTerm:
    """A further term of the loss, named in ``model.loss.extra`` by ``class_path`` (its
    ``init_args`` are its constructor's): ``term(batch, outputs)`` returns its loss (None when it
    adds nothing at this step) and detached diagnostics, each a mean over the micro-batch's
    trained tokens, which are logged as ``train/<name>``. A term that reads the reference's
    logprobs (``outputs.ref_logprobs``) or the legal moves (``batch.legal``) says so, and the
    trainer computes them for it."""

    needs_reference: bool = False
    needs_legal_moves: bool = False

    def __call__(self, batch: LossBatch, out: ForwardOutputs) -> tuple[Tensor | None, dict[str, Tensor]]:
        raise NotImplementedError(f"{type(self).__name__}: a loss term computes (batch, outputs) -> (loss, stats)")


class ZLoss(LossTerm):
    """``coef x logsumexp(logits)^2`` at each completion token (PaLM's z-loss): keeps the logits'
    normaliser near 1 so that they do not drift upward, which bf16 rounds badly. A ready
    :class:`LossTerm`, and the pattern for one of a user's own::

        model:
          loss:
            extra:
              - {class_path: sp_lightning.loss_terms.ZLoss, init_args: {coef: 1.0e-4}}
    """

    def __init__(self, coef: float = 1e-4):
        if not coef > 0:
            raise ValueError(f"loss.extra: ZLoss coef: expected > 0, got {coef!r}")
        self.coef = coef

    def __call__(self, batch: LossBatch, out: ForwardOutputs) -> tuple[Tensor | None, dict[str, Tensor]]:
        mask = batch.mask.to(out.logits.dtype)  # (B, K)
        z_squared = torch.logsumexp(out.logits.float(), dim=-1).pow(2)  # (B, K)
        # at least 1: a learner's micro-batch may hold no trained token (max_train_tokens cut
        # inside its prompts), and 0/0 would make the whole step non-finite
        loss = self.coef * (z_squared * mask).sum() / max(batch.num_tokens, 1)
        return loss, {"z_loss": masked_mean(z_squared.detach(), mask)}


@dataclass
class LossSettings:
    """``model.loss``: the clipped surrogate and how every token term aggregates, then a block per
    further term (KL to the reference, entropy bonus, magnet). Each block is the term itself."""

    clip_low: float = 0.2
    """The ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.2
    """The ratio is clipped above at 1 + clip_high (raise it for DAPO's clip-higher)."""
    aggregation: str = "token_mean"
    """token_mean | sequence_mean | constant (Dr. GRPO; needs max_length): how every token term
    (surrogate, KL, entropy) becomes a scalar."""
    max_length: int | None = None
    """The constant normaliser of aggregation=constant, in tokens."""
    importance_sampling: str = "auto"
    """auto | on | off. Truncated importance sampling for completions whose logprobs are another
    engine's (vLLM, servers): the PPO ratio is taken against the trainer's own logprobs of the
    sampled tokens, and each token weighted by min(exp(trainer - sampler), tis_cap). "auto": on
    exactly when a record's behaviour logprobs are not the trainer's own computation
    (``TrainingRecord.logprobs_from_trainer``). The gap is logged either way
    (``train/sampler_mismatch``)."""
    tis_cap: float = 2.0
    """C of the truncated importance weight min(exp(trainer - sampler), C)."""
    kl: KLPenalty = field(default_factory=KLPenalty)
    entropy: EntropyBonus = field(default_factory=EntropyBonus)
    magnet: Magnet = field(default_factory=Magnet)
    extra: list[LossTerm] = field(default_factory=list)
    """Further terms (:class:`LossTerm` subclasses by ``class_path``), added after the others."""

    def __post_init__(self):
        for name in ("clip_low", "clip_high"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"loss.{name}: expected >= 0, got {getattr(self, name)!r}")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"loss.max_length: expected an int >= 1 or null, got {self.max_length!r}")
        if self.importance_sampling not in ("auto", "on", "off"):
            raise ValueError(f"loss.importance_sampling: expected 'auto', 'on' or 'off', got "
                             f"{self.importance_sampling!r}")
        if not self.tis_cap > 0:
            raise ValueError(f"loss.tis_cap: expected > 0, got {self.tis_cap!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"loss.aggregation: expected one of {AGGREGATIONS}, got {self.aggregation!r}")
        if self.aggregation == "constant" and not self.max_length:
            raise ValueError("loss.max_length: required (> 0) when loss.aggregation is 'constant'")

    def terms(self) -> list:
        """The terms in the order their losses add: surrogate, KL, entropy, magnet, the extra ones."""
        aggregation = Aggregation(self.aggregation, self.max_length)
        policy = PolicyGradient(self.clip_low, self.clip_high, self.importance_sampling, self.tis_cap, aggregation)
        kl, entropy = dataclasses.replace(self.kl), dataclasses.replace(self.entropy)
        kl.aggregation = entropy.aggregation = aggregation
        return [policy, kl, entropy, self.magnet, *self.extra]

    @property
    def needs_legal_moves(self) -> bool:
        return (self.entropy.needs_legal_moves or self.magnet.needs_legal_moves
                or any(term.needs_legal_moves for term in self.extra))

    @property
    def needs_reference(self) -> bool:
        return self.kl.needs_reference or any(term.needs_reference for term in self.extra)


def combine(terms: list, batch: LossBatch, out: ForwardOutputs) -> tuple[Tensor, dict[str, Tensor]]:
    """The terms' losses added in order (a term returning None adds nothing) and their stats."""
    total, stats = None, {}
    for term in terms:
        loss, term_stats = term(batch, out)
        stats.update(term_stats)
        if loss is not None:
            total = loss if total is None else total + loss
    return total, stats
