"""Ratings from a cross-play table: Bradley-Terry and Elo, each with a bootstrap interval.

A cross-play table (:mod:`sp_lightning.evaluation.crossplay`) holds every game of every pair.
Each game scores 1 for a win, 1/2 for a draw and 0 for a loss of the row policy. Two ratings
summarise them, both on the Elo scale (a 400-point gap means 10:1 odds), centred on the agents'
mean (0):

- **Bradley-Terry**: the maximum-likelihood strengths of the model P(i beats j) = p_i / (p_i +
  p_j). They are found by Hunter's (2004) MM iteration, with draws counted as half a win each.
  One prior game, drawn, is added to every pair: an agent that never scored then gets a finite
  rating instead of minus infinity. The rating does not depend on the order of the games.
- **Elo**: the sequential update (K = ``elo_k``) run over the games in a random order. It is the
  figure league tables show. It does depend on the order, so its point value is the median over
  the bootstrap replicates, each of which also shuffles the order (the Chatbot Arena method).

Intervals: ``resamples`` bootstrap replicates. Each replicate resamples the games within every
pair with replacement, so each pair keeps its number of games. All draws come from ``seed``: the
same table and seed give the same intervals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sp_lightning.evaluation.crossplay import CrossPlay
from sp_lightning.league.ratings import elo_expected

ELO_SCALE = 400.0 / math.log(10.0)  # natural-log strength -> Elo points


@dataclass
class CrossPlayRatings:
    """Per agent, in ``labels`` order: each rating, and its 95% interval as (low, high)."""

    labels: list[str]
    bradley_terry: list[float]
    bradley_terry_ci: list[tuple[float, float]]
    elo: list[float]
    elo_ci: list[tuple[float, float]]
    games: int
    resamples: int
    seed: int

    def as_dict(self) -> dict:
        return {
            "labels": self.labels, "games": self.games, "resamples": self.resamples, "seed": self.seed,
            "bradley_terry": dict(zip(self.labels, self.bradley_terry)),
            "bradley_terry_ci": {a: list(ci) for a, ci in zip(self.labels, self.bradley_terry_ci)},
            "elo": dict(zip(self.labels, self.elo)),
            "elo_ci": {a: list(ci) for a, ci in zip(self.labels, self.elo_ci)},
        }

    def table(self) -> str:
        width = max(8, *(len(a) for a in self.labels))
        lines = [f"{'agent':<{width}}  {'Bradley-Terry [95% CI]':>26}  {'Elo [95% CI]':>26}"]
        order = sorted(range(len(self.labels)), key=lambda i: -self.bradley_terry[i])
        for i in order:
            bt, (bl, bh) = self.bradley_terry[i], self.bradley_terry_ci[i]
            elo, (el, eh) = self.elo[i], self.elo_ci[i]
            lines.append(f"{self.labels[i]:<{width}}  {bt:+7.0f} [{bl:+7.0f}, {bh:+7.0f}]  "
                         f"{elo:+7.0f} [{el:+7.0f}, {eh:+7.0f}]")
        return "\n".join(lines)


def pair_scores(table: CrossPlay) -> dict[tuple[int, int], np.ndarray]:
    """For every pair ``i < j``: the score of ``i`` in each of their games: 1 when its payoff was
    higher than ``j``'s, 1/2 when equal, 0 when lower. Both cells of a pair hold the same games
    in the same order, read from either side, so this also holds for games that are not
    zero-sum (a negotiation where both gain is no win for either)."""
    index = {a: k for k, a in enumerate(table.labels)}
    out = {}
    for (a, b), result in table.results.items():
        i, j = index[a], index[b]
        if i < j:
            mine = np.asarray(result.payoffs, dtype=np.float64)
            theirs = np.asarray(table.results[(b, a)].payoffs, dtype=np.float64)
            out[(i, j)] = 0.5 + 0.5 * np.sign(mine - theirs)  # 1 won, 0.5 drawn, 0 lost
    return out


def bradley_terry(n: int, scores: dict[tuple[int, int], np.ndarray], prior_games: float = 1.0,
                  iterations: int = 10_000, tolerance: float = 1e-10) -> np.ndarray:
    """Elo-scale Bradley-Terry ratings (mean 0) of ``n`` agents from each pair's game scores."""
    won = np.zeros((n, n))  # won[i, j]: i's total score against j
    played = np.zeros((n, n))
    for (i, j), s in scores.items():
        won[i, j] += s.sum() + prior_games / 2
        won[j, i] += len(s) - s.sum() + prior_games / 2
        played[i, j] = played[j, i] = len(s) + prior_games
    strength = np.ones(n)
    total_won = won.sum(axis=1)
    for _ in range(iterations):
        denom = (played / (strength[:, None] + strength[None, :])).sum(axis=1)
        new = np.where(denom > 0, total_won / np.where(denom > 0, denom, 1), 1.0)
        new /= math.exp(np.log(new).mean())  # fix the scale: geometric mean 1
        done = np.max(np.abs(new - strength)) < tolerance
        strength = new
        if done:
            break
    return ELO_SCALE * np.log(strength)


def sequential_elo(n: int, order_i: np.ndarray, order_j: np.ndarray, order_s: np.ndarray,
                   k: float = 16.0) -> np.ndarray:
    """Elo ratings (mean 0) after updating on games in the given order; each argument is
    ``(replicates, games)``: agent ``i`` scored ``s`` against ``j``. One column at a time,
    every replicate at once."""
    replicates = order_i.shape[0]
    ratings = np.zeros((replicates, n))
    rows = np.arange(replicates)
    for g in range(order_i.shape[1]):
        i, j, s = order_i[:, g], order_j[:, g], order_s[:, g]
        expected = elo_expected(ratings[rows, i], ratings[rows, j])
        delta = k * (s - expected)
        ratings[rows, i] += delta
        ratings[rows, j] -= delta
    return ratings - ratings.mean(axis=1, keepdims=True)


def rate(table: CrossPlay, resamples: int = 200, seed: int = 0, elo_k: float = 16.0) -> CrossPlayRatings:
    """Bradley-Terry and Elo ratings of the table's agents with bootstrap intervals (module doc)."""
    n = len(table.labels)
    scores = pair_scores(table)
    if not scores:
        raise ValueError("rate: the cross-play table has no pair of distinct agents")
    rng = np.random.default_rng(seed)
    pairs = list(scores)
    # who played each game: the same in every replicate (a pair keeps its number of games)
    i = np.concatenate([np.full(len(scores[p]), p[0]) for p in pairs])
    j = np.concatenate([np.full(len(scores[p]), p[1]) for p in pairs])
    bt_replicates = np.zeros((resamples, n))
    game_i, game_j, game_s = [], [], []
    for r in range(resamples):
        resampled = {p: scores[p][rng.integers(0, len(scores[p]), len(scores[p]))] for p in pairs}
        bt_replicates[r] = bradley_terry(n, resampled)
        s = np.concatenate(list(resampled.values()))
        order = rng.permutation(len(s))
        game_i.append(i[order])
        game_j.append(j[order])
        game_s.append(s[order])
    elo_replicates = sequential_elo(n, np.stack(game_i), np.stack(game_j), np.stack(game_s), k=elo_k)

    elo = np.median(elo_replicates, axis=0)

    def interval(replicates: np.ndarray) -> list[tuple[float, float]]:
        low, high = np.percentile(replicates, [2.5, 97.5], axis=0)
        return [(float(a), float(b)) for a, b in zip(low, high)]

    return CrossPlayRatings(
        labels=list(table.labels),
        bradley_terry=[float(v) for v in bradley_terry(n, scores)],
        bradley_terry_ci=interval(bt_replicates),
        elo=[float(v) for v in elo - elo.mean()],
        elo_ci=interval(elo_replicates),
        games=len(i),  # every game of every pair, once
        resamples=resamples,
        seed=seed,
    )
