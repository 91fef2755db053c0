"""Hand-computed checks of the loss terms (sp_lightning.loss_terms) and their tensor helpers
(sp_lightning.losses): each term ``(batch, outputs) -> (loss, stats)`` on three or four values,
the arithmetic in each test's docstring."""

import math

import pytest
import torch
from torch.testing import assert_close

from sp_lightning.collate import TrainBatch
from sp_lightning.loss_terms import (
    EntropyBonus, ForwardOutputs, KLPenalty, LossBatch, LossSettings, LossTerm, Magnet, ZLoss, combine,
)
from sp_lightning.losses import (
    AGGREGATIONS,
    gather_logprobs,
    legal_magnet_kl,
    legal_move_entropy,
    masked_mean,
    token_entropy,
)
from sp_lightning.schedule import Schedule

LN2 = math.log(2.0)


def policy_gradient_loss(logprobs, old_logprobs, advantages, mask, *, num_tokens=None, num_sequences=None,
                         ref_logprobs=None, behaviour_logprobs=None, logits=None, **loss):
    """The composed terms of ``LossSettings(**loss)`` (surrogate, KL, entropy, magnet) on one
    micro-batch: ``old_logprobs`` the ratio's denominator, ``behaviour_logprobs`` (importance
    sampling on) the sampler's; the denominators default to the micro-batch's own counts."""
    b, k = logprobs.shape
    behaviour = behaviour_logprobs if behaviour_logprobs is not None else old_logprobs
    ids = torch.zeros(b, k, dtype=torch.long)
    tensors = TrainBatch(ids, torch.ones(b, k, dtype=torch.long), ids, ids, mask, behaviour, advantages)
    if behaviour_logprobs is not None:
        loss.setdefault("importance_sampling", "on")
    terms = LossSettings(**loss).terms()
    batch = LossBatch(tensors, float(mask.sum()) if num_tokens is None else num_tokens,
                      float(b) if num_sequences is None else num_sequences, step=0.0)
    logits = logits if logits is not None else torch.zeros(b, k, 2)
    return combine(terms, batch, ForwardOutputs(logprobs, logits, old_logprobs, ref_logprobs))


def t(values):
    return torch.tensor(values, dtype=torch.float32)


def logprobs_for(ratios):
    """Logprobs (with grad) whose ratio to old logprobs of 0 is ``ratios``."""
    return torch.log(t(ratios)).requires_grad_(True)


def test_clip_positive_advantage():
    """A = +1, ratios [1.5, 0.5, 1.1], clip [0.8, 1.2].

    pg_loss1 = -r        = [-1.5, -0.5, -1.1]
    pg_loss2 = -clip(r)  = [-1.2, -0.8, -1.1]
    max                  = [-1.2, -0.5, -1.1] -> token mean -2.8 / 3
    clipped where pg_loss2 > pg_loss1: only the first token -> clip_fraction 1/3.
    d loss / d logprob = -A * r / 3 on unclipped tokens, 0 on the clipped one:
    [0, -0.5/3, -1.1/3].
    """
    lp = logprobs_for([[1.5, 0.5, 1.1]])
    loss, stats = policy_gradient_loss(lp, torch.zeros(1, 3), t([1.0]), torch.ones(1, 3))
    assert_close(loss, torch.tensor(-2.8 / 3))
    assert_close(stats["clip_fraction"], torch.tensor(1 / 3))
    loss.backward()
    assert_close(lp.grad, t([[0.0, -0.5 / 3, -1.1 / 3]]))


def test_clip_negative_advantage():
    """A = -1, ratios [1.5, 0.5, 1.1], clip [0.8, 1.2].

    pg_loss1 = r        = [1.5, 0.5, 1.1]
    pg_loss2 = clip(r)  = [1.2, 0.8, 1.1]
    max                 = [1.5, 0.8, 1.1] -> token mean 3.4 / 3
    clipped only on the second token (0.8 > 0.5) -> clip_fraction 1/3.
    Gradient -A * r / 3 = [1.5/3, 0, 1.1/3].
    """
    lp = logprobs_for([[1.5, 0.5, 1.1]])
    loss, stats = policy_gradient_loss(lp, torch.zeros(1, 3), t([-1.0]), torch.ones(1, 3))
    assert_close(loss, torch.tensor(3.4 / 3))
    assert_close(stats["clip_fraction"], torch.tensor(1 / 3))
    loss.backward()
    assert_close(lp.grad, t([[1.5 / 3, 0.0, 1.1 / 3]]))


def test_clip_higher_is_asymmetric():
    """clip_low 0.2, clip_high 0.28, A = [+1, -1], ratios [[1.5, 0.7], [1.5, 0.7]].

    Row A=+1: max(-r, -clip(r)) = [max(-1.5, -1.28), max(-0.7, -0.8)] = [-1.28, -0.7]
    Row A=-1: max(r, clip(r))   = [max(1.5, 1.28), max(0.7, 0.8)]     = [1.5, 0.8]
    token mean = (-1.28 - 0.7 + 1.5 + 0.8) / 4 = 0.32 / 4 = 0.08
    clipped: row 1 token 1 and row 2 token 2 -> clip_fraction 2/4.
    """
    lp = logprobs_for([[1.5, 0.7], [1.5, 0.7]])
    loss, stats = policy_gradient_loss(
        lp, torch.zeros(2, 2), t([1.0, -1.0]), torch.ones(2, 2), clip_low=0.2, clip_high=0.28
    )
    assert_close(loss, torch.tensor(0.08))
    assert_close(stats["clip_fraction"], torch.tensor(0.5))
    assert_close(stats["pg_loss"], torch.tensor(0.08))


# Shared batch for the aggregation tests: ratios within the clip range, so loss_t = -A * r.
# Padding holds garbage (+inf logprobs) that masking must keep out.
INF = float("inf")
AGG_LP = [[0.0, math.log(1.1), INF], [math.log(0.9), INF, INF]]
AGG_ADV = [1.0, 2.0]
AGG_MASK = [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def agg_loss(**kwargs):
    lp = t(AGG_LP).requires_grad_(True)
    loss, stats = policy_gradient_loss(lp, torch.zeros(2, 3), t(AGG_ADV), t(AGG_MASK), **kwargs)
    return lp, loss, stats


def test_token_mean():
    """Masked per-token losses: row 1 = -1 * [1.0, 1.1] = [-1.0, -1.1], row 2 = -2 * 0.9 = [-1.8].

    token_mean = (-1.0 - 1.1 - 1.8) / 3 = -3.9 / 3 = -1.3; padding (inf logprobs) adds nothing.
    Gradients -A * r / 3: [[-1/3, -1.1/3, 0], [-1.8/3, 0, 0]].
    """
    lp, loss, stats = agg_loss(aggregation="token_mean")
    assert_close(loss, torch.tensor(-1.3))
    assert_close(stats["pg_loss"], torch.tensor(-1.3))
    loss.backward()
    assert_close(lp.grad, t([[-1 / 3, -1.1 / 3, 0.0], [-1.8 / 3, 0.0, 0.0]]))


def test_sequence_mean():
    """Row means: (-1.0 - 1.1) / 2 = -1.05 and -1.8 / 1 = -1.8; mean over 2 rows = -2.85 / 2.

    With num_sequences=3 (a third, empty sequence elsewhere): -2.85 / 3 = -0.95.
    stats["pg_loss"] stays the masked token mean, -3.9 / 3 = -1.3, whatever the aggregation.
    """
    _, loss, stats = agg_loss(aggregation="sequence_mean")
    assert_close(loss, torch.tensor(-1.425))
    assert_close(stats["pg_loss"], torch.tensor(-1.3))
    _, loss, _ = agg_loss(aggregation="sequence_mean", num_sequences=3)
    assert_close(loss, torch.tensor(-0.95))


def test_sequence_mean_empty_row_adds_zero():
    """Row 2 has no masked tokens: (sum([-1.0, -1.1]) / 2 + 0) / B = -1.05 / 2 = -0.525."""
    lp = t(AGG_LP)
    mask = t([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    loss, _ = policy_gradient_loss(
        lp, torch.zeros(2, 3), t(AGG_ADV), mask, aggregation="sequence_mean"
    )
    assert_close(loss, torch.tensor(-0.525))


def test_constant_aggregation():
    """Dr. GRPO: token sum / (num_sequences * max_length) = -3.9 / (2 * 3) = -0.65.

    With num_sequences=4, max_length=5: -3.9 / 20 = -0.195.
    """
    _, loss, _ = agg_loss(aggregation="constant", max_length=3)
    assert_close(loss, torch.tensor(-0.65))
    _, loss, _ = agg_loss(aggregation="constant", max_length=5, num_sequences=4)
    assert_close(loss, torch.tensor(-0.195))


def test_constant_needs_max_length():
    with pytest.raises(ValueError, match="max_length"):
        agg_loss(aggregation="constant")


def test_unknown_aggregation_lists_choices():
    with pytest.raises(ValueError, match="token_mean.*sequence_mean.*constant"):
        agg_loss(aggregation="seq_mean_token_sum")


def test_kl_without_reference_logprobs_adds_nothing_and_reports_zero():
    """The module refuses a KL coefficient without a reference (model.policy.lora), so a term
    without reference logprobs only reports kl = 0."""
    _, loss, stats = agg_loss(kl=KLPenalty(coef=0.1))
    assert_close(loss, torch.tensor(-1.3))
    assert_close(stats["kl"], torch.tensor(0.0))


@pytest.mark.parametrize(
    ("aggregation", "kwargs"),
    [
        ("token_mean", {"num_tokens": 3}),
        ("sequence_mean", {"num_sequences": 2}),
        ("constant", {"num_sequences": 2, "max_length": 3}),
    ],
)
def test_micro_batches_sum_to_full_batch(aggregation, kwargs):
    """Split the 2-row batch into two 1-row micro-batches with the full-batch denominators
    (3 tokens, 2 sequences); the micro-batch losses and gradients add up to the full batch's:
    token_mean -1.3, sequence_mean -1.425, constant -0.65. The stats, weighted by token share
    (2/3 and 1/3), give the full batch's: pg_loss (2/3)(-2.1/2) + (1/3)(-1.8) = -1.3.
    """
    lp_full, full, full_stats = agg_loss(aggregation=aggregation, **kwargs)
    full.backward()
    lp = t(AGG_LP).requires_grad_(True)
    parts = [
        policy_gradient_loss(
            lp[i : i + 1],
            torch.zeros(1, 3),
            t(AGG_ADV[i : i + 1]),
            t(AGG_MASK[i : i + 1]),
            aggregation=aggregation,
            **kwargs,
        )
        for i in range(2)
    ]
    total = parts[0][0] + parts[1][0]
    total.backward()
    assert_close(total, full)
    assert_close(lp.grad, lp_full.grad)
    for name, value in full_stats.items():
        combined = (2 / 3) * parts[0][1][name] + (1 / 3) * parts[1][1][name]
        assert_close(combined, value, msg=name)


def test_kl_term():
    """A = 0 and ratio 1, so only the KL term is left. ref - lp = [0, ln 2, -ln 2].

    k3 = exp(d) - d - 1 = [0, 2 - ln2 - 1, 0.5 + ln2 - 1], summing to 0.5; token mean 0.5 / 3.
    loss = kl_coef * 0.5 / 3 = 0.1 / 6; stats["kl"] = 1/6 (before kl_coef).
    Gradient of k3 wrt lp is 1 - exp(d) = [0, -1, 0.5], times 0.1 / 3.
    """
    lp = torch.zeros(1, 3, requires_grad=True)
    ref = t([[0.0, LN2, -LN2]])
    loss, stats = policy_gradient_loss(
        lp, torch.zeros(1, 3), t([0.0]), torch.ones(1, 3), ref_logprobs=ref, kl=KLPenalty(coef=0.1)
    )
    assert_close(loss, torch.tensor(0.1 / 6))
    assert_close(stats["kl"], torch.tensor(1 / 6))
    assert_close(stats["pg_loss"], torch.tensor(0.0))
    loss.backward()
    assert_close(lp.grad, t([[0.0, -0.1 / 3, 0.05 / 3]]))


def test_an_extra_term_adds_its_loss_after_the_others_with_its_stats():
    """model.loss.extra: ZLoss (coef x logsumexp(logits)^2, a token mean) over logits whose
    normalisers are ln 2 and ln 4: its loss adds to the surrogate's and its gradient is the
    coefficient's share of 2 z softmax."""
    logits = torch.zeros(1, 2, 2)
    logits[0, 1] = math.log(2.0)  # logsumexp: ln 2 and ln 4
    logits.requires_grad_(True)
    lp = torch.zeros(1, 2, requires_grad=True)
    plain, _ = policy_gradient_loss(lp, torch.zeros(1, 2), t([0.0]), torch.ones(1, 2), logits=logits)
    loss, stats = policy_gradient_loss(lp, torch.zeros(1, 2), t([0.0]), torch.ones(1, 2), logits=logits,
                                       extra=[ZLoss(coef=0.5)])
    z = t([LN2, 2 * LN2])
    assert_close(loss - plain, 0.5 * (z ** 2).sum() / 2)
    assert_close(stats["z_loss"], (z ** 2).mean())
    loss.backward()
    assert_close(logits.grad[0], 0.5 * (2 * z[:, None] * torch.softmax(logits.detach()[0], -1)) / 2)
    # a learner's micro-batch with no trained token (max_train_tokens cut inside its prompts):
    # nothing to add, not 0/0
    empty, _ = policy_gradient_loss(lp, torch.zeros(1, 2), t([0.0]), torch.zeros(1, 2), logits=logits,
                                    extra=[ZLoss(coef=0.5)], num_tokens=0)
    assert torch.isfinite(empty) and empty.item() == 0.0
    assert LossSettings(extra=[ZLoss()]).terms()[-1].coef == 1e-4
    with pytest.raises(ValueError, match="ZLoss coef"):
        ZLoss(coef=0.0)


def test_an_extra_term_that_reads_the_reference_or_the_legal_moves_asks_for_them():
    class ReadsReference(LossTerm):
        needs_reference = True

    class ReadsLegalMoves(LossTerm):
        needs_legal_moves = True

    assert not LossSettings().needs_reference and not LossSettings().needs_legal_moves
    assert LossSettings(extra=[ReadsReference()]).needs_reference
    assert LossSettings(extra=[ReadsLegalMoves()]).needs_legal_moves


def test_kl_reported_without_penalty():
    """ref given but kl_coef = 0: the loss has no KL term, stats["kl"] still reports 1/6."""
    zeros, ref = torch.zeros(1, 3), t([[0.0, LN2, -LN2]])
    loss, stats = policy_gradient_loss(zeros, zeros, t([0.0]), torch.ones(1, 3), ref_logprobs=ref)
    assert_close(loss, torch.tensor(0.0))
    assert_close(stats["kl"], torch.tensor(1 / 6))


def test_approx_kl_and_ratio_mean():
    """ratios [2, 0.5], A = 0. approx_kl = mean((r - 1) - ln r) = ((1 - ln2) + (-0.5 + ln2)) / 2
    = 0.25; ratio_mean = 1.25; no ref -> kl = 0; A = 0 -> nothing clipped.
    """
    lp = logprobs_for([[2.0, 0.5]])
    _, stats = policy_gradient_loss(lp, torch.zeros(1, 2), t([0.0]), torch.ones(1, 2))
    assert_close(stats["approx_kl"], torch.tensor(0.25))
    assert_close(stats["ratio_mean"], torch.tensor(1.25))
    assert_close(stats["kl"], torch.tensor(0.0))
    assert_close(stats["clip_fraction"], torch.tensor(0.0))
    assert all(not v.requires_grad for v in stats.values())


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_all_zero_mask_gives_zero_not_nan(aggregation):
    """Nothing to train on: loss 0, every stat finite, gradients 0."""
    lp = t([[INF, -INF, 3.0]]).requires_grad_(True)
    loss, stats = policy_gradient_loss(
        lp,
        torch.zeros(1, 3),
        t([1.0]),
        torch.zeros(1, 3),
        aggregation=aggregation,
        max_length=3,
        ref_logprobs=t([[0.0, 0.0, -INF]]),
        kl=KLPenalty(coef=0.1),
    )
    loss.backward()
    assert_close(loss, torch.tensor(0.0))
    for name, value in stats.items():
        assert torch.isfinite(value), name
    assert_close(lp.grad, torch.zeros(1, 3))


def test_masked_mean():
    """[1, 2, 3] with mask [1, 0, 1] -> (1 + 3) / 2 = 2; per row with dim=-1; all-zero -> 0."""
    x = t([[1.0, 2.0, 3.0], [4.0, INF, 6.0]])
    mask = t([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    assert_close(masked_mean(x[:1], mask[:1]), torch.tensor(2.0))
    assert_close(masked_mean(x, mask, dim=-1), t([2.0, 4.0]))
    assert_close(masked_mean(x, torch.zeros(2, 3)), torch.tensor(0.0))


def test_gather_logprobs():
    """logits [0, ln 3] -> probs [1/4, 3/4]; tokens [1, 0] -> [ln 0.75, ln 0.25].

    bfloat16 logits go through the per-row float32 path and agree with the float32 result.
    """
    logits = t([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])  # (1, 2, 2)
    ids = torch.tensor([[1, 0]])
    expected = t([[math.log(0.75), math.log(0.25)]])
    assert_close(gather_logprobs(logits, ids), expected)
    random_logits = torch.randn(3, 4, 11)
    random_ids = torch.randint(0, 11, (3, 4))
    reference = torch.log_softmax(random_logits, -1).gather(-1, random_ids[..., None])[..., 0]
    assert_close(gather_logprobs(random_logits, random_ids), reference)
    half = gather_logprobs(random_logits.bfloat16(), random_ids)
    assert half.dtype == torch.float32
    assert_close(half, reference, atol=0.05, rtol=0.0)


def test_token_entropy():
    """Uniform over 4 -> ln 4. Logits [0, 0, ln 2] -> probs [1/4, 1/4, 1/2] (padded with -inf):
    H = 2 * (1/4) ln 4 + (1/2) ln 2 = 1.5 ln 2. A one-hot row (-inf elsewhere) -> 0, not NaN.
    """
    logits = t([[[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, LN2, -INF], [5.0, -INF, -INF, -INF]]])
    assert_close(token_entropy(logits), t([[math.log(4.0), 1.5 * LN2, 0.0]]))
    # and the bonus trains through it: the gradient is finite where banned tokens are -inf
    logits.requires_grad_(True)
    token_entropy(logits).sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 0].abs().max() < 1e-6  # uniform: a maximum
    assert logits.grad[0, 1, 2] < 0  # the likeliest token is pushed down: entropy rises


def test_entropy_bonus_is_subtracted_with_the_same_aggregation():
    """Two tokens, advantages 0 (no policy-gradient term); logits over 4 tokens uniform at the
    first (entropy ln 4) and over 2 of them at the second (ln 2), token_mean, coef 0.5:
    loss = -0.5 * (ln 4 + ln 2) / 2 = -0.75 ln 2; the stats report the mean entropy 1.5 ln 2. At
    coefficient 0 the entropy is still reported and adds nothing."""
    logprobs = torch.tensor([[-1.0, -1.0]])
    logits = t([[[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, -INF, -INF]]]).requires_grad_(True)
    loss, stats = policy_gradient_loss(logprobs, logprobs, torch.tensor([0.0]), torch.ones(1, 2), logits=logits,
                                       entropy=EntropyBonus(coef=0.5))
    assert_close(loss, torch.tensor(-0.75 * LN2))
    assert_close(stats["entropy"], torch.tensor(1.5 * LN2))
    loss, stats = policy_gradient_loss(logprobs, logprobs, torch.tensor([0.0]), torch.ones(1, 2), logits=logits)
    assert_close(loss, torch.tensor(0.0))
    assert_close(stats["entropy"], torch.tensor(1.5 * LN2))
    with pytest.raises(ValueError, match="loss.entropy.over"):
        EntropyBonus(over="legal")


def test_a_schedule_anneals_linearly_to_zero_or_its_floor():
    s = EntropyBonus(coef=Schedule(start=0.2, steps=100)).coef
    assert [s.at(t) for t in (0, 50, 100, 150)] == pytest.approx([0.2, 0.1, 0.0, 0.0])
    assert EntropyBonus(coef=0.2).coef.at(10_000) == 0.2
    floored = Schedule(start=0.2, steps=100, floor=0.05)
    assert [floored.at(t) for t in (0, 50, 80, 150)] == pytest.approx([0.2, 0.1, 0.05, 0.05])
    assert floored.at(12.5) == pytest.approx(0.175)  # a later pass over one batch: between two steps


def test_magnet_coef_is_constant_by_default_and_anneals_to_its_floor_when_asked():
    assert Magnet(coef=0.05).coef.at(10_000) == 0.05  # magnetic mirror descent
    s = Magnet(coef=Schedule(start=0.05, steps=100, floor=0.01)).coef
    assert [s.at(t) for t in (0, 50, 80, 100, 500)] == pytest.approx([0.05, 0.025, 0.01, 0.01, 0.01])
    for bad, key in [(Schedule(0.05, steps=0), "loss.magnet.coef.steps"),
                     (Schedule(0.05, floor=0.1, steps=10), "loss.magnet.coef.floor"),
                     (Schedule(0.05, floor=0.01), "loss.magnet.coef.floor")]:  # a floor without a schedule
        with pytest.raises(ValueError, match=key):
            Magnet(coef=bad)


def test_legal_move_entropy_scores_the_first_move_token_over_the_legal_moves_only():
    """Row 0: legal tokens {1, 2} with logits [0, ln 2] at its first completion column (1) ->
    probs [1/3, 2/3], H = ln 3 - (2/3) ln 2; its other column keeps the vocabulary entropy.
    Row 1: legal moves unknown (all True) -> the vocabulary entropy everywhere. Row 2: one legal
    move -> 0. Gradients are finite although illegal logits are masked out."""
    logits = torch.randn(3, 2, 5)
    logits[0, 1] = t([4.0, 0.0, LN2, 3.0, -2.0])
    logits.requires_grad_(True)
    legal = torch.zeros(3, 5, dtype=torch.bool)
    legal[0, [1, 2]] = True
    legal[1] = True
    legal[2, 4] = True
    entropy = legal_move_entropy(logits, torch.tensor([1, 0, 0]), legal)
    vocab = token_entropy(logits)
    assert_close(entropy[0, 1], torch.tensor(math.log(3.0) - (2.0 / 3.0) * LN2))
    assert_close(entropy[0, 0], vocab[0, 0])
    assert_close(entropy[1], vocab[1])
    assert_close(entropy[2], torch.stack([torch.tensor(0.0), vocab[2, 1]]))
    entropy.sum().backward()
    assert torch.isfinite(logits.grad).all()
    assert logits.grad[0, 1, [0, 3, 4]].abs().max() == 0  # illegal tokens get no push from the bonus


def test_legal_magnet_kl_is_zero_at_uniform_over_the_legal_moves_and_never_saturates():
    """KL(uniform over legal || pi) = -ln n - mean_legal log pi. Uniform over legal moves
    (illegal logits very low) -> 0. A policy saturated on an illegal token (logit 30) has a large
    KL and a gradient on the logits of pi - uniform: ~+1 on the illegal token, ~-1/2 on each of
    the two legal ones, where the policy gradient's (1 - pi) would vanish."""
    legal = torch.zeros(2, 4, dtype=torch.bool)
    legal[:, [0, 1]] = True
    uniform = t([[[0.0, 0.0, -60.0, -60.0]], [[0.0, 0.0, 30.0, 0.0]]]).requires_grad_(True)
    kl = legal_magnet_kl(uniform, torch.tensor([0, 0]), legal)
    assert_close(kl[0], torch.tensor(0.0), atol=1e-6, rtol=0)
    assert kl[1] > 25
    kl[1].backward()
    assert_close(uniform.grad[1, 0], t([-0.5, -0.5, 1.0, 0.0]), atol=1e-6, rtol=0)


def test_truncated_importance_sampling_weights_each_token_by_the_capped_trainer_sampler_ratio():
    """old = the trainer's logprobs, behaviour = the sampler's: each token's surrogate is scaled
    by min(exp(old - behaviour), cap), detached; equal logprobs change nothing."""
    torch.manual_seed(0)
    logprobs = torch.randn(3, 4, requires_grad=True)
    old = logprobs.detach() + 0.05 * torch.randn(3, 4)
    behaviour = old - torch.tensor([[0.0, 0.1, 1.5, -0.2]]).expand(3, 4)  # token 2: exp(1.5) > cap
    behaviour.requires_grad_()  # a weight that were not detached would pass gradient to it
    advantages = torch.tensor([1.0, -0.5, 2.0])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.float)
    plain, _ = policy_gradient_loss(logprobs, old, advantages, mask)
    same, _ = policy_gradient_loss(logprobs, old, advantages, mask, behaviour_logprobs=old.clone(), tis_cap=2.0)
    torch.testing.assert_close(same, plain)
    loss, stats = policy_gradient_loss(logprobs, old, advantages, mask, behaviour_logprobs=behaviour, tis_cap=2.0)
    weight = torch.tensor([[1.0, math.exp(0.1), 2.0, math.exp(-0.2)]]).expand(3, 4)
    ratio = (logprobs - old).exp()
    surrogate = torch.maximum(-advantages[:, None] * ratio, -advantages[:, None] * ratio.clamp(0.8, 1.2))
    expected = (weight * surrogate * mask).sum() / mask.sum()
    torch.testing.assert_close(loss, expected)
    assert stats["tis_truncated_fraction"].item() == pytest.approx(3 / 10)  # the masked-in token-2 cells
    grad_tis, = torch.autograd.grad(loss, logprobs)
    grad_expected, = torch.autograd.grad(expected, logprobs)
    torch.testing.assert_close(grad_tis, grad_expected)
    grad_behaviour, = torch.autograd.grad(loss, behaviour, allow_unused=True)
    assert grad_behaviour is None  # the weight itself carries no gradient
    with pytest.raises(ValueError, match="loss.tis_cap: expected > 0"):
        LossSettings(tis_cap=0.0)
