"""A model policy's strategy, read as the probability of each legal move at a decision point.

Exploitability needs the whole strategy, not samples: for every information state, the
probability that the policy plays each legal move. A language model's probability of a move is
the probability that its answer starts with the move's text, scored by the rollout worker at
temperature 1 (exact for one-token moves, as in the tiny recipes). The mass the model puts on
anything else (illegal text) is reported by the exploitability code as the legal mass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from sp_lightning.evaluation.exploitability import (
    ActionProbs, ExploitabilityResult, kuhn_exploitability, mixture_exploitability,
)
from sp_lightning.evaluation.tictactoe_exploitability import tictactoe_exploitability
from sp_lightning.prompts import PromptTemplate
from sp_lightning.types import LEARNER, ModelRequest, PolicyRef


def model_action_probs(worker, policy: PolicyRef, template: PromptTemplate, role: str = "player") -> ActionProbs:
    """An ``ActionProbs`` callable for ``policy`` served by ``worker`` (``completion_logprobs``).

    ``role`` picks the template's system prompt (one prompt for every seat is the common case).
    """

    def action_probs(items: list[tuple[str, list[str]]]) -> list[dict[str, float]]:
        requests = [
            ModelRequest(role=role, messages=template.messages(text, role), policy=policy, legal_actions=list(legal))
            for text, legal in items
        ]
        rows = worker.completion_logprobs(requests, [list(legal) for _, legal in items])
        return [{move: math.exp(lp) for move, lp in zip(legal, row)} for (_, legal), row in zip(items, rows)]

    return action_probs


def _kuhn_limit(env_kwargs: Mapping[str, Any]) -> str | None:
    hands = env_kwargs.get("num_hands", 1)
    if hands != 1:
        return f"num_hands {hands} (OpenSpiel's Kuhn Poker is one hand)"
    if env_kwargs.get("list_legal_moves", True) is not True:
        # the information states' texts are the default env's: a policy would be scored on a
        # prompt it never sees in play
        return "list_legal_moves false (the exact computation reads the texts that list them)"
    return None


def _kuhn(action_probs: ActionProbs, env_kwargs: Mapping[str, Any]) -> ExploitabilityResult | None:
    if _kuhn_limit(env_kwargs) is not None:
        return None
    return kuhn_exploitability(action_probs)


EXPLOITABILITY: dict[str, Callable[[ActionProbs, Mapping[str, Any]], ExploitabilityResult | None]] = {
    "kuhn_poker_v1": _kuhn,  # exact, with OpenSpiel (sp_lightning.evaluation.exploitability)
    "tictactoe_v1": tictactoe_exploitability,  # exact best response by expectimax over the boards
}
"""Game name -> exploitability of a policy (an ``ActionProbs``) in that game, given the game's
``env_kwargs`` (the texts the policy is scored on are the ones the env shows with them), or
None where those settings make a game the computation does not cover."""

MIXTURE_EXPLOITABILITY: dict[str, Callable[[list[ActionProbs]], ExploitabilityResult]] = {
    "kuhn_poker_v1": mixture_exploitability,
}
"""Game name -> exploitability of a league (members drawn uniformly, each followed through a game),
for the games that have it."""


def not_covered(game) -> str | None:
    """Why ``game`` (a GameSettings) has no exact exploitability (nor best response) here although
    its game has one, e.g. ``"num_hands 3 (OpenSpiel's Kuhn Poker is one hand)"``; None when it has."""
    return _kuhn_limit(game.env_kwargs) if game.name == "kuhn_poker_v1" else None


def policy_exploitability(worker, game, policy: PolicyRef = LEARNER):
    """The exploitability of ``policy`` in ``game`` (a GameSettings), or None when the game has no
    exploitability computation (see ``EXPLOITABILITY``)."""
    if game.name not in EXPLOITABILITY:
        return None
    return EXPLOITABILITY[game.name](model_action_probs(worker, policy, game.prompt_template), game.env_kwargs)


def exploitability_metrics(worker, game, prefix: str, policy: PolicyRef = LEARNER):
    """``({prefix}/exploitability, {prefix}/legal_mass)`` metrics of ``policy`` and the result
    behind them (for a printed line), or ``({}, None)`` for a game without exploitability."""
    result = policy_exploitability(worker, game, policy)
    if result is None:
        return {}, None
    return {f"{prefix}/exploitability": result.exploitability, f"{prefix}/legal_mass": result.legal_mass_mean}, result
