"""The league's opponent sampler: matchmaking decides who sits in each training episode.

Installed by the config's ``data.league`` block together with its
:class:`~sp_lightning.league.callbacks.LeagueCallback`, which owns the league on disk and hands
this sampler a fresh view of it after every step (:meth:`refresh`). Per episode the learner
takes the next seat in rotation and the matchmaker fills the others. After every batch
:meth:`observe` turns the finished games into match results for the ratings, updates the learner's
win-rate estimate against each opponent (what PFSP weighs by) and the exploration statistics.
Only the learner's steps are trained on (``Step.trainable``); bots never call a model.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from sp_lightning.games import GameSettings, OpponentSampler
from sp_lightning.league import best_responses
from sp_lightning.league.exploration import NGramCoverage
from sp_lightning.league.matchmaking import KINDS, MIRROR_ID, Candidate, LearnerInfo, Matchmaker, MatchmakingSettings
from sp_lightning.league.messages import RankReport
from sp_lightning.league.ratings import TrueSkillRatings, mean_by_agent
from sp_lightning.types import LEARNER, LEARNER_ID, PolicyKind, PolicyRef, Rollout, parse_policy


class LeagueSampler(OpponentSampler):
    @classmethod
    def from_settings(cls, settings) -> LeagueSampler:
        """The sampler of a ``data.league`` block (``sp_lightning.league.settings.LeagueSettings``)."""
        return cls(settings.matchmaking, settings.max_distinct_opponents, settings.win_rate_decay,
                   tuple(settings.coverage_ngrams), settings.exploiters)

    def __init__(
        self,
        matchmaking: MatchmakingSettings | None = None,
        max_distinct_opponents: int | None = None,
        win_rate_decay: float = 0.95,
        coverage_ngrams: tuple[int, ...] = (1, 2),
        exploiters=None,
    ):
        """
        Args:
            matchmaking: The matchmaking mode and its settings (PFSP by default).
            max_distinct_opponents: At most this many distinct opponents in one game of more
                than two seats (cluster sampling); null leaves every seat free.
            win_rate_decay: Decay of the learner's moving win-rate estimate against each opponent.
            coverage_ngrams: The n of the n-gram coverage statistics of each agent's moves.
            exploiters: The league's exploiters (``ExploiterSettings``; None: none): each plays
                its share of the games, seated here against its opponents.
        """
        if not 0 <= win_rate_decay < 1:
            raise ValueError(f"opponents.win_rate_decay: expected in [0, 1), got {win_rate_decay}")
        self.matchmaker = Matchmaker(matchmaking)
        self.max_distinct = max_distinct_opponents
        self.win_rate_decay = win_rate_decay
        self.coverage = NGramCoverage(ns=coverage_ngrams)
        self.trueskill = TrueSkillRatings()
        self.learner: LearnerInfo | None = None
        self.candidates: list[Candidate] = []
        self.policy_ids: dict[str, str] = {}  # policy spec -> agent id
        self.policies: dict[str, PolicyRef] = {}  # agent id -> policy
        self.kinds: dict[str, str] = {}  # agent id -> league type
        self.game_of: dict[str, str] = {}  # agent id -> the one game it plays (best responses of several games)
        self.win_rates: dict[str, float] = {}  # EMA of the learner's score (1 win, 0.5 draw) per opponent
        self.rotation: dict[str, int] = defaultdict(int)
        self.pending: list[tuple[list[str], list[float]]] = []  # match results for the ratings
        self.step_buckets: list[str] = []  # the buckets of this batch's opponents (for the mix)
        self.step_results: list[tuple[str, float]] = []  # (bucket, learner payoff margin) of this batch
        self.exploiters = exploiters
        self.exploiter_refs = ({name: PolicyRef(PolicyKind.LEARNER, name) for name in exploiters.names().values()}
                               if exploiters is not None else {})
        self.exploiter_results: list[tuple[str, float, float]] = []  # (exploiter, payoff, margin) of this batch
        self.adapter_slots: int | None = None  # the worker's (set when training starts): see batch_seats
        self.clustered_batches = 0  # batches whose checkpoints batch_seats had to cluster

    # ---- the league view (from the callback) --------------------------------------------------
    def refresh(self, agents: list, learner, step: int | None = None) -> None:
        """A fresh view of the league: ``agents`` are registry AgentRecords, ``learner`` the learner's,
        ``step`` the training step (the learner record's own step when not given)."""
        step = learner.step if step is None else step
        self.learner = LearnerInfo(step=step or 0, elo=learner.elo, mu=learner.mu, sigma=learner.sigma)
        # departed members kept: a batch played ahead (asynchronous collection) may end with
        # games seated before a checkpoint left; their results are still that checkpoint's
        self.policy_ids.update({a.policy: a.id for a in agents})
        self.kinds = {a.id: a.type for a in agents}
        self.game_of = {a.id: game for a in agents if (game := best_responses.game_of(a)) is not None}
        self.policies = {a.id: parse_policy(a.policy) for a in agents if a.type != LEARNER_ID}
        self.candidates = [
            Candidate(
                id=a.id, kind=a.type, step=a.step, elo=a.elo, mu=a.mu, sigma=a.sigma,
                win_prob=self.win_probability(a),
                quality=self.trueskill.quality([[(learner.mu, learner.sigma)], [(a.mu, a.sigma)]]),
                coverage=self.coverage.coverage(a.id) if a.type == "checkpoint" else None,
            )
            for a in agents
            if a.type in KINDS
        ]

    def win_probability(self, agent) -> float:
        """The learner's moving win rate against ``agent`` once it has played it, else TrueSkill's."""
        if agent.id in self.win_rates:
            return self.win_rates[agent.id]
        return self.trueskill.win_probability((self.learner.mu, self.learner.sigma), (agent.mu, agent.sigma))

    # ---- OpponentSampler ----------------------------------------------------------------------
    def seats(self, game: GameSettings, rng: random.Random) -> dict[str, PolicyRef]:
        if self.learner is None:
            raise RuntimeError("LeagueSampler has no league yet: its LeagueCallback (installed by data.league) "
                               "refreshes it when training starts")
        agents = game.agents
        learner_seat = agents[self.rotation[game.name] % len(agents)]
        self.rotation[game.name] += 1
        exploiter = self._exploiter_game(rng)
        if exploiter == "main":  # the main exploiter against the main agent in every other seat
            return {a: (self.exploiter_refs[self.exploiters.main] if a == learner_seat else LEARNER) for a in agents}
        picks = self.matchmaker.sample(self.learner, self._candidates_for(game.name), rng, k=len(agents) - 1,
                                       max_distinct=self.max_distinct)
        if exploiter == "league":  # the league exploiter against the league, picked as for the main agent
            others = iter(picks)
            return {a: (self.exploiter_refs[self.exploiters.league] if a == learner_seat
                        else self._policy_of(next(others))) for a in agents}
        self.step_buckets.extend(p.bucket for p in picks)
        others = iter(picks)
        seats = {}
        for agent in agents:
            seats[agent] = LEARNER if agent == learner_seat else self._policy_of(next(others))
        return seats

    def batch_seats(self, games: list[GameSettings], rng: random.Random) -> list[dict[str, PolicyRef]]:
        """Each game's seats as :meth:`seats` draws them, then, when the batch's games together
        seat more distinct checkpoints than the rollout backend serves at once
        (``adapter_slots``, set from the worker when training starts), cluster sampling over the
        batch: the first ``adapter_slots`` distinct checkpoints in the order they were drawn stay,
        and each seat drawn another checkpoint gets a copy of one of the checkpoints already
        seated, chosen uniformly among those seats (so a checkpoint drawn more often is copied
        more often: PFSP's weights among the kept ones). A seven-power table under
        ``max_loras: 3`` (the learner's adapter and two more) reads ``[hero, A, A, A, B, B, B]``.
        Bots, the base model and the learner's seats are untouched, and so is the mix of PFSP
        buckets (a copied seat keeps the bucket it was drawn from). A batch within the limit is
        exactly what :meth:`seats` drew, and draws nothing more from ``rng``."""
        seatings = [self.seats(game, rng) for game in games]
        slots = self.adapter_slots
        drawn = [(seating, agent) for seating in seatings for agent, policy in seating.items()
                 if policy.kind is PolicyKind.CHECKPOINT]
        if slots is None or len({seating[agent] for seating, agent in drawn}) <= slots:
            return seatings
        kept: list[PolicyRef] = []  # the checkpoint of every seat that keeps or got one, in turn
        for seating, agent in drawn:
            policy = seating[agent]
            if policy not in kept and len(set(kept)) >= slots:  # a few dozen seats: no index needed
                seating[agent] = policy = rng.choice(kept)
            kept.append(policy)
        self.clustered_batches += 1
        return seatings

    def _candidates_for(self, game: str) -> list[Candidate]:
        """The members that can sit in a game of ``game``: all of them, but for another game's
        best responses in a league of several games (a table reads only its own game)."""
        if not self.game_of:
            return self.candidates
        return [c for c in self.candidates if self.game_of.get(c.id, game) == game]

    def _policy_of(self, pick) -> PolicyRef:
        return LEARNER if pick.id == MIRROR_ID else self.policies[pick.id]

    def _exploiter_game(self, rng: random.Random) -> str | None:
        """Which exploiter plays this game ("main", "league"), or None: the main agent's game.
        Draws from ``rng`` only when the league has exploiters (a league without keeps its
        streams as they were)."""
        if not self.exploiter_refs:
            return None
        u = rng.random()
        for index, kind in enumerate(self.exploiters.names()):
            if u < self.exploiters.share * (index + 1):
                return kind
        return None

    def observe(self, rollouts: list[Rollout]) -> None:
        exploiters = set(self.exploiter_refs.values())
        for rollout in rollouts:
            seats = rollout.seats
            played = [(a, p) for a, p in seats.items() if p in exploiters]
            if played:  # an exploiter's game: its result is its own, not the league's ratings
                agent, policy = played[0]
                payoff = rollout.outcome.get(agent, 0.0)
                others = [rollout.outcome.get(a, 0.0) for a, p in seats.items() if p != policy]
                margin = payoff - sum(others) / len(others) if others else 0.0  # a win: > 0, as the learner's
                self.exploiter_results.append((policy.name, payoff, margin))
                continue
            for agent, policy in seats.items():
                moves = [s.info.get("parsed_move") or "?" for s in rollout.steps_of(agent)]
                self.coverage.add(LEARNER_ID if policy.kind is PolicyKind.LEARNER else self.policy_ids.get(str(policy), str(policy)), moves)
            learner_seats = [a for a, p in seats.items() if p.kind is PolicyKind.LEARNER]
            if len(learner_seats) == len(seats):  # mirror: no rating information
                self.step_results.append(("mirror", 0.0))
                continue
            learner_payoff = sum(rollout.outcome.get(a, 0.0) for a in learner_seats) / len(learner_seats)
            opponents = [(a, self.policy_ids[str(p)]) for a, p in seats.items() if p.kind is not PolicyKind.LEARNER]
            bucket = self._bucket_of(opponents[0][1])
            # the learner's margin over its opponents' mean payoff: in a two-player zero-sum game
            # twice its payoff (a win is > 0, as before); at a seven-power table, where every payoff
            # is a share of the centres and so positive, more centres than the others' mean
            opponent_payoffs = [rollout.outcome.get(a, 0.0) for a, _ in opponents]
            self.step_results.append((bucket, learner_payoff - sum(opponent_payoffs) / len(opponent_payoffs)))
            for opponent_id, payoff in mean_by_agent([i for _, i in opponents], opponent_payoffs).items():
                # a win is a better result than the opponent's (its mean over its seats): in a
                # two-player zero-sum game, a positive payoff; at a seven-power table, more centres
                score = 1.0 if learner_payoff > payoff else 0.5 if learner_payoff == payoff else 0.0
                old = self.win_rates.get(opponent_id, 0.5)
                self.win_rates[opponent_id] = self.win_rate_decay * old + (1 - self.win_rate_decay) * score
            ids = [LEARNER_ID] + [opponent_id for _, opponent_id in opponents]
            scores = [learner_payoff] + opponent_payoffs
            self.pending.append((ids, scores))

    def _bucket_of(self, agent_id: str) -> str:
        kind = self.kinds.get(agent_id)
        return kind if kind in ("baseline", "best_response") else "checkpoint"

    def drain(self) -> RankReport:
        """This batch's games as the report this rank hands the league's lead (and starts the
        next batch's empty)."""
        out = RankReport(matches=self.pending, buckets=self.step_buckets, results=self.step_results,
                         exploiter_results=self.exploiter_results)
        self.pending, self.step_buckets, self.step_results, self.exploiter_results = [], [], [], []
        return out

    # ---- checkpointed state -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "matchmaker": self.matchmaker.state_dict(),
            "win_rates": dict(self.win_rates),
            "rotation": dict(self.rotation),
            "coverage": self.coverage.state_dict(),
            "clustered_batches": self.clustered_batches,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.matchmaker.load_state_dict(state["matchmaker"])
        self.win_rates = dict(state["win_rates"])
        self.rotation = defaultdict(int, state["rotation"])
        self.coverage.load_state_dict(state["coverage"])
        self.clustered_batches = int(state.get("clustered_batches", 0))  # absent from checkpoints before it

