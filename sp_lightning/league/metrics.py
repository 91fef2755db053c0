"""The league's figures, by name: ratings, the opponent mix, win rates per opponent type, the
background evaluator's results. Pure functions of the league's data, so every rank computes the
same names from the same news, and the names are decided in one place.

Per-game figures (exploitability, the evaluator's win rates) keep their plain names in a run of
one game (``league/exploitability/learner``: what the docs, charts and recipes read); with
several games each game's figures carry the game's name after the family, as validation names
its figures ``val/<game>/...`` (``league/exploitability/<game>/learner``).
"""

from __future__ import annotations

from collections import Counter, defaultdict

from sp_lightning.league.messages import EvaluatorResult
from sp_lightning.league.ratings import TrueSkillRatings
from sp_lightning.league.registry import LeagueState
from sp_lightning.types import LEARNER_ID


def per_game(family: str, game: str, several: bool) -> str:
    """The prefix of ``game``'s figures of ``family`` (e.g. ``league/exploitability``)."""
    return f"{family}/{game}" if several else family


def ratings(state: LeagueState, coverages: dict[int, float]) -> dict[str, float]:
    """The learner's rating beside the baselines' and the best checkpoint's, the number of
    checkpoints, and the learner's n-gram coverage (``coverages``: n -> coverage)."""
    learner = state.agents[LEARNER_ID]
    members = list(state.agents.values())
    metrics = {"league/learner/mu": learner.mu, "league/learner/sigma": learner.sigma, "league/learner/elo": learner.elo,
               "league/learner/rating": TrueSkillRatings.conservative(learner.mu, learner.sigma),
               "league/checkpoints": float(sum(a.type == "checkpoint" for a in members))}
    for agent in members:
        if agent.type == "baseline":
            metrics[f"league/baseline/{agent.id}/rating"] = TrueSkillRatings.conservative(agent.mu, agent.sigma)
            metrics[f"league/baseline/{agent.id}/mu"] = agent.mu  # with sigma: the interval
            metrics[f"league/baseline/{agent.id}/sigma"] = agent.sigma
            metrics[f"league/baseline/{agent.id}/elo"] = agent.elo
    best = state.metadata.get("best_agent")
    if best in state.agents:
        metrics["league/best/rating"] = state.metadata["best_rating"]
        metrics["league/best/elo"] = state.agents[best].elo
    for n, value in coverages.items():
        metrics[f"league/learner/coverage_{n}gram"] = value
    return metrics


def mix_and_win_rates(buckets: list[str], results: list[tuple[str, float]]) -> dict[str, float]:
    """The share of each opponent bucket among the step's seated opponents, and the learner's
    win rate per opponent type: the share of ``results`` (bucket, the learner's payoff margin
    over its opponents' mean) with a positive margin (mirror games say nothing about it: left out)."""
    metrics = {}
    for bucket, count in Counter(buckets).items():
        metrics[f"league/mix/{bucket}"] = count / len(buckets)
    payoffs: dict[str, list[float]] = defaultdict(list)
    for kind, payoff in results:
        payoffs[kind].append(payoff)
    for kind, values in payoffs.items():
        if kind != "mirror":
            metrics[f"league/win_rate/{kind}"] = sum(v > 0 for v in values) / len(values)
    return metrics


def evaluation(result: EvaluatorResult, labels: dict[str, str], several: bool) -> dict[str, float]:
    """A finished tournament's figures: its duration and the win rate against each gatekeeper,
    named by the label it was chosen by (``best`` and ``recent`` stay apart from plain ids)."""
    metrics = {"league/eval/seconds": result.seconds}
    for game, per_gatekeeper in result.results.items():
        prefix = per_game("league/eval", game, several)
        for gatekeeper, r in per_gatekeeper.items():
            metrics[f"{prefix}/win_rate_vs_{labels.get(gatekeeper, gatekeeper)}"] = r.win_rate
    return metrics
