"""Skill ratings for the league: TrueSkill (through the ``trueskill`` package) and multi-player Elo.

A rating is plain numbers, ``(mu, sigma)`` for TrueSkill and one float for Elo, so the registry
can keep them in JSON and nothing here holds state between matches.

- :class:`TrueSkillRatings` wraps a ``trueskill.TrueSkill`` environment of its own (never the
  package's global one, which any other import could reconfigure). It rates 1v1, free-for-all
  and team matches, with draws as equal ranks. ``conservative = mu - 3 sigma`` is the score to
  rank agents by: a lucky new agent with few matches does not top the league.
- :func:`elo_update` is Elo for N players by pairwise decomposition: each pair in a match is one
  game, won by the higher score, and K is divided by ``N - 1`` so that one match moves a rating
  about as much as one 1v1 game, whatever the number of players.

Both take a match as scores (payoffs) and turn them into ranks with :func:`ranks_from_scores`:
higher score is better, equal scores draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import trueskill

Rating = tuple[float, float]  # (mu, sigma)


def ranks_from_scores(scores: list[float]) -> list[int]:
    """Rank of each entry, 0 = best; equal scores share a rank (competition ranking, "1224").

    ``[3, 1, 3, 0] -> [0, 2, 0, 3]``: an entry's rank is how many entries scored strictly higher.
    """
    return [sum(other > score for other in scores) for score in scores]


def mean_by_agent(agent_ids: list[str], scores: list[float]) -> dict[str, float]:
    """Each agent's mean score over the seats it held in one game (in order of first seat): a
    league member drawn into several seats of a seven-power table counts once, by its mean."""
    seats: dict[str, list[float]] = {}
    for agent_id, score in zip(agent_ids, scores):
        seats.setdefault(agent_id, []).append(score)
    return {agent_id: sum(own) / len(own) for agent_id, own in seats.items()}


def pool_matches(matches: list[tuple[list[str], list[float]]],
                 games_per_match: int) -> list[tuple[list[str], list[float]]]:
    """Games of the same agents pooled into rated matches of up to ``games_per_match`` games each,
    scored by each agent's total payoff (in order of first appearance; a last, shorter block is
    kept, so no game is dropped). ``games_per_match=1`` returns the games unchanged.

    Why: a rating update reads only who scored more. In win/draw/loss games one game is the right
    unit, but in poker a good strategy folds many small pots and wins fewer big ones: rated per
    hand, Nash play of Kuhn Poker looks worse than RandomBot although it wins chips from it.
    Rated per block of hands, the rating follows the chips.
    """
    if games_per_match < 1:
        raise ValueError(f"games_per_match: expected >= 1, got {games_per_match}")
    if games_per_match == 1:
        return [(list(ids), list(scores)) for ids, scores in matches]
    blocks: dict[tuple[str, ...], list[list[float]]] = {}
    for ids, scores in matches:
        key, ordered = _in_id_order(ids, scores)
        blocks.setdefault(key, []).append(ordered)
    return [_block_match(key, games[start : start + games_per_match])
            for key, games in blocks.items() for start in range(0, len(games), games_per_match)]


def _in_id_order(ids: list[str], scores: list[float]) -> tuple[tuple[str, ...], list[float]]:
    """A game's agents sorted (the pairing's key, whatever the seats) and their scores alike."""
    order = sorted(range(len(ids)), key=lambda k: ids[k])
    return tuple(ids[k] for k in order), [scores[k] for k in order]


def _block_match(key: tuple[str, ...], games: list[list[float]]) -> tuple[list[str], list[float]]:
    """One rated match from a block of games: each agent's total payoff."""
    return list(key), [math.fsum(column) for column in zip(*games)]


class MatchPooler:
    """:func:`pool_matches` across calls: games of the same agents wait until ``games_per_match``
    of them have been played, then come out as one match. Training plays a few games per pairing
    per step, so the blocks span steps; the waiting games are part of the run's state
    (:meth:`state_dict`), so a resumed run rates exactly what the uninterrupted one would."""

    def __init__(self, games_per_match: int = 1) -> None:
        if games_per_match < 1:
            raise ValueError(f"games_per_match: expected >= 1, got {games_per_match}")
        self.games_per_match = games_per_match
        self.waiting: dict[tuple[str, ...], list[list[float]]] = {}

    def add(self, matches: list[tuple[list[str], list[float]]]) -> list[tuple[list[str], list[float]]]:
        """The matches completed by these games (each game in sorted-id order of its agents)."""
        if self.games_per_match == 1:
            return [(list(ids), list(scores)) for ids, scores in matches]
        done = []
        for ids, scores in matches:
            key, ordered = _in_id_order(ids, scores)
            block = self.waiting.setdefault(key, [])
            block.append(ordered)
            if len(block) == self.games_per_match:
                done.append(_block_match(key, self.waiting.pop(key)))
        return done

    def forget(self, agent_id: str) -> None:
        """Drop the waiting games of ``agent_id``, which left the league: no more of them will
        come to complete their blocks (they would wait in the run's state for ever)."""
        self.waiting = {key: block for key, block in self.waiting.items() if agent_id not in key}

    def state_dict(self) -> dict:
        return {"waiting": [[list(key), block] for key, block in self.waiting.items()]}

    def load_state_dict(self, state: dict) -> None:
        self.waiting = {tuple(key): [list(g) for g in block] for key, block in state["waiting"]}


def elo_expected(a: float, b: float) -> float:
    """Expected score of rating ``a`` against rating ``b``: ``1 / (1 + 10^((b - a) / 400))``."""
    return 1.0 / (1.0 + 10.0 ** ((b - a) / 400.0))


def elo_update(ratings: list[float], scores: list[float], k: float = 32.0) -> list[float]:
    """New Elo ratings after one match of ``len(ratings)`` players with these scores.

    Every pair ``(i, j)`` is one game: ``i`` gets 1 if it scored higher, 0.5 on equal scores,
    0 if lower, and ``k / (N - 1) * (result - elo_expected(r_i, r_j))``. All pairs use the
    ratings from before the match, so the order of the players does not matter.
    """
    if len(ratings) != len(scores):
        raise ValueError(
            f"elo_update needs one score per rating, got {len(ratings)} ratings and "
            f"{len(scores)} scores"
        )
    n = len(ratings)
    if n < 2:
        return [float(r) for r in ratings]
    ranks = ranks_from_scores(scores)
    step = k / (n - 1)
    new = [float(r) for r in ratings]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            result = 1.0 if ranks[i] < ranks[j] else 0.5 if ranks[i] == ranks[j] else 0.0
            new[i] += step * (result - elo_expected(ratings[i], ratings[j]))
    return new


@dataclass
class TrueSkillRatings:
    """TrueSkill with an environment of its own; ``beta`` and ``tau`` default to ``sigma/2``
    and ``sigma/100`` (the package's defaults)."""

    mu: float = 25.0
    sigma: float = 25.0 / 3.0
    beta: float | None = None
    tau: float | None = None
    draw_probability: float = 0.10
    env: trueskill.TrueSkill = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.beta is None:
            self.beta = self.sigma / 2.0
        if self.tau is None:
            self.tau = self.sigma / 100.0
        if not 0.0 <= self.draw_probability < 1.0:
            raise ValueError(f"draw_probability must be in [0, 1), got {self.draw_probability}")
        self.env = trueskill.TrueSkill(
            mu=self.mu, sigma=self.sigma, beta=self.beta, tau=self.tau,
            draw_probability=self.draw_probability,
        )

    def _groups(self, teams: list[list[Rating]]) -> list[tuple[trueskill.Rating, ...]]:
        if len(teams) < 2 or any(len(team) == 0 for team in teams):
            raise ValueError(
                f"TrueSkill needs at least 2 teams of at least 1 player, got team sizes "
                f"{[len(team) for team in teams]}"
            )
        return [tuple(self.env.create_rating(mu, sigma) for mu, sigma in team) for team in teams]

    def rate(self, teams: list[list[Rating]], ranks: list[int]) -> list[list[Rating]]:
        """New ``(mu, sigma)`` of every player, teams in the given order; rank 0 is the best team
        and equal ranks are a draw between those teams."""
        if len(ranks) != len(teams):
            raise ValueError(
                f"need one rank per team, got {len(teams)} teams and {len(ranks)} ranks")
        rated = self.env.rate(self._groups(teams), ranks=list(ranks))
        return [[(float(r.mu), float(r.sigma)) for r in team] for team in rated]

    def win_probability(self, a: Rating, b: Rating) -> float:
        """P(a beats b) for two players:
        ``Phi((mu_a - mu_b) / sqrt(2 beta^2 + sigma_a^2 + sigma_b^2))``."""
        denom = math.sqrt(2.0 * self.beta**2 + a[1] ** 2 + b[1] ** 2)
        return float(self.env.cdf((a[0] - b[0]) / denom))

    def quality(self, teams: list[list[Rating]]) -> float:
        """Match quality from the package: the draw probability relative to that of equal teams
        (1 is the most even match)."""
        return float(self.env.quality(self._groups(teams)))

    @staticmethod
    def conservative(mu: float, sigma: float) -> float:
        """``mu - 3 sigma``: a skill the agent has with about 99.9% confidence."""
        return mu - 3.0 * sigma
