"""Policy-gradient loss for LLM self-play: a PPO clipped surrogate over completion tokens.

Pure functions of tensors: no model, no trainer. Shapes: ``B`` sequences (completions), ``T``
completion-token positions (right-padded, ``mask`` is 1 on real tokens), ``V`` vocabulary.

Per token, with ``ratio = exp(logprobs - old_logprobs)`` and ``A`` the sequence's advantage::

    pg_loss1 = -A * ratio
    pg_loss2 = -A * clip(ratio, 1 - clip_low, 1 + clip_high)
    loss_t   = max(pg_loss1, pg_loss2) + kl.coef * k3(ref_logprobs - logprobs)

then aggregated over masked tokens by one of :data:`AGGREGATIONS` (see :func:`aggregate`). The
terms that use these functions, each with its block of ``model.loss``, are
``sp_lightning.loss_terms``.

Where this departs from the papers (PPO, Schulman et al. 2017; GRPO, Shao et al. 2024;
Dr. GRPO, Liu et al. 2025):

1. No value function and no GAE (unlike PPO): one scalar advantage per sequence, from
   :mod:`sp_lightning.credit`, is broadcast to every token of that sequence (GRPO's outcome
   supervision).
2. The clip range is asymmetric, ``[1 - clip_low, 1 + clip_high]`` (DAPO's clip-higher); PPO and
   GRPO use one symmetric epsilon. The defaults (0.2, 0.2) give back the symmetric form.
3. The KL penalty to a reference policy is optional and off by default (``loss.kl.coef: 0``), as in
   Dr. GRPO and DAPO; GRPO keeps it on. When on, it is GRPO's per-token k3 estimator
   ``exp(ref - lp) - (ref - lp) - 1`` added to the per-token loss, evaluated on tokens sampled
   from the old (behaviour) policy, so it is unbiased only on-policy, as in GRPO.
4. Aggregation is a choice: GRPO's paper averages per sequence then over the group
   (``"sequence_mean"``), DAPO averages over all tokens (``"token_mean"``, the default here),
   Dr. GRPO divides the token sum by a constant (``"constant"``). Dr. GRPO's other change, no
   division by the group's reward std, lives in ``credit.GRPO(normalize=False)``.
5. Padding is masked before ``exp``: the log ratio and the KL argument are set to 0 where
   ``mask`` is 0, so garbage (even ``inf``) at padded positions never reaches the loss, the
   diagnostics or the gradients; an all-zero mask gives a loss of 0, not NaN.
6. ``approx_kl`` is cleanrl's k3 estimate of KL(old || new), ``(ratio - 1) - log ratio``, a
   diagnostic only; ``clip_fraction`` counts a token only when clipping changed its loss
   (``pg_loss2 > pg_loss1``), not whenever the ratio left the range.
"""

from __future__ import annotations

import torch
from torch import Tensor

AGGREGATIONS = ("token_mean", "sequence_mean", "constant")


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` where ``mask`` is nonzero; 0 (not NaN) where nothing is masked in."""
    mask = mask.to(x.dtype)
    total = torch.where(mask != 0, x * mask, torch.zeros_like(x))
    if dim is None:
        return total.sum() / mask.sum().clamp(min=1)
    return total.sum(dim) / mask.sum(dim).clamp(min=1)


def gather_logprobs(logits: Tensor, token_ids: Tensor) -> Tensor:
    """Log-probability of each token under ``softmax(logits)``, in float32.

    ``logits`` is ``(B, T, V)`` and ``token_ids`` ``(B, T)``; returns ``(B, T)``. Uses
    ``logit[token] - logsumexp(logits)`` so no ``(B, T, V)`` log-softmax is kept; half-precision
    logits are upcast one sequence at a time to bound the float32 copy to ``(T, V)``.
    Divide the logits by the sampling temperature first to match the sampler's logprobs.
    """
    if logits.dtype in (torch.float32, torch.float64):
        picked = logits.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)  # (B, T)
        return picked - torch.logsumexp(logits, dim=-1)  # (B, T)
    rows = []
    for row_logits, row_ids in zip(logits, token_ids):
        row_logits = row_logits.float()  # (T, V)
        picked = row_logits.gather(-1, row_ids.unsqueeze(-1)).squeeze(-1)  # (T,)
        rows.append(picked - torch.logsumexp(row_logits, dim=-1))  # (T,)
    return torch.stack(rows)  # (B, T)


def token_entropy(logits: Tensor) -> Tensor:
    """Entropy of ``softmax(logits)`` over the last (vocabulary) dim: ``(B, T, V) -> (B, T)``.

    Computed in float32 from ``log_softmax``; vocabulary entries with ``-inf`` logits (banned
    tokens) contribute 0, not NaN. Differentiable: the entropy bonus trains through it.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    p = logp.exp()  # (B, T, V)
    # the -inf entries zeroed before the product, not after: p * -inf would be NaN in the backward pass
    plogp = p * torch.where(p > 0, logp, torch.zeros_like(logp))  # (B, T, V)
    return -plogp.sum(-1)  # (B, T)


def legal_move_entropy(logits: Tensor, first_position: Tensor, legal_mask: Tensor) -> Tensor:
    """Token entropy where each row's first completion token is scored over its legal moves only.

    ``logits`` ``(B, T, V)``; ``first_position`` ``(B,)`` the column of each row's first
    completion token; ``legal_mask`` ``(B, V)`` True on the tokens that start a legal move (all
    True for a row whose legal moves are unknown: its entropy is then the vocabulary's).
    Returns ``(B, T)``: at ``first_position`` the entropy of softmax restricted to the legal
    tokens, elsewhere the vocabulary entropy of :func:`token_entropy`.

    Why: an entropy bonus over the whole vocabulary is maximised by spreading mass over the
    hundreds of illegal tokens, so a coefficient large enough to keep the moves mixed also
    teaches illegal moves. Over the legal moves it is ``log(n) - KL(pi_legal || uniform)``: the
    uniform-magnet term of magnetic mirror descent, which keeps the last iterate of zero-sum
    self-play mixed without touching legality (the invalid-move penalty teaches that).
    """
    entropy = token_entropy(logits)  # (B, T)
    rows = torch.arange(logits.shape[0], device=logits.device)
    first = logits[rows, first_position].float()  # (B, V)
    # a large finite fill, not -inf: -inf would make the masked-out branch's gradient NaN
    logp = torch.log_softmax(first.masked_fill(~legal_mask, -1e9), dim=-1)  # (B, V)
    plogp = torch.where(legal_mask, logp.exp() * logp, torch.zeros_like(logp))  # (B, V)
    legal_entropy = -plogp.sum(-1)  # (B,)
    at_first = torch.zeros_like(entropy, dtype=torch.bool)  # (B, T)
    at_first[rows, first_position] = True
    return torch.where(at_first, legal_entropy.unsqueeze(-1).to(entropy.dtype), entropy)


def legal_magnet_kl(logits: Tensor, first_position: Tensor, legal_mask: Tensor) -> Tensor:
    """``KL(uniform over the legal moves || pi)`` at each row's first completion token: ``(B,)``.

    ``logits`` ``(B, T, V)``, ``first_position`` ``(B,)``, ``legal_mask`` ``(B, V)`` as in
    :func:`legal_move_entropy`. Equal to ``-log(n) - mean_{a legal} log pi(a)``, 0 exactly when
    the policy is uniform over the ``n`` legal moves.

    Why this direction of the KL: magnetic mirror descent pulls the policy toward a magnet
    (uniform over legal actions here) so that the last iterate of zero-sum self-play converges to
    a regularised equilibrium instead of cycling. The forward ``KL(pi || magnet)`` is infinite as
    soon as any mass sits on an illegal token; this one is finite, and its gradient on the logits,
    ``pi - uniform``, does not vanish when the policy is saturated on one token: a policy stuck on
    an illegal answer (where the policy gradient's ``1 - pi`` goes to 0) is pulled back.
    """
    rows = torch.arange(logits.shape[0], device=logits.device)
    logp = torch.log_softmax(logits[rows, first_position].float(), dim=-1)  # (B, V)
    n = legal_mask.sum(-1).clamp(min=1)  # (B,)
    mean_legal_logp = torch.where(legal_mask, logp, torch.zeros_like(logp)).sum(-1) / n  # (B,)
    return -torch.log(n.float()) - mean_legal_logp


def aggregate(token_loss: Tensor, mask: Tensor, kind: str, num_tokens: float | Tensor | None = None,
              num_sequences: float | None = None, max_length: int | None = None) -> Tensor:
    """A token term ``(B, T)`` as a scalar, over the tokens where ``mask`` (float) is nonzero:

    - ``"token_mean"``: ``sum_{i,t} L / num_tokens``; ``num_tokens`` defaults to ``mask.sum()``.
      Pass the token count over ALL micro-batches of one optimizer step and summing the
      micro-batch losses equals the full-batch loss exactly.
    - ``"sequence_mean"``: ``sum_i (sum_t L_i / mask_i.sum()) / num_sequences``; ``num_sequences``
      defaults to ``B``; a sequence with no masked tokens adds 0.
    - ``"constant"`` (Dr. GRPO): ``sum_{i,t} L / (num_sequences * max_length)``, with ``max_length``
      (the generation budget) required.
    """
    if kind not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {kind!r}")
    total = token_loss * mask  # (B, T)
    n_seq = total.shape[0] if num_sequences is None else num_sequences
    if kind == "token_mean":
        n_tok = mask.sum() if num_tokens is None else num_tokens
        n_tok = torch.as_tensor(n_tok, device=total.device)
        return total.sum() / n_tok.to(total.dtype).clamp(min=1)
    if kind == "sequence_mean":
        per_seq = total.sum(-1) / mask.sum(-1).clamp(min=1)  # (B,)
        return per_seq.sum() / max(n_seq, 1)
    if max_length is None or max_length <= 0:
        raise ValueError(f'aggregation="constant" needs max_length > 0 (the generation budget in tokens), '
                         f"got max_length={max_length!r}")
    return total.sum() / (n_seq * max_length)
