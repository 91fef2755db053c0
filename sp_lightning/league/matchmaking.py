"""Matchmaking: who the learner (the learning policy) plays next.

Pure: the caller turns the league (registry, ratings, match history) into plain
:class:`Candidate` records and a :class:`LearnerInfo`; this module turns them into a probability
over opponents and samples from it with an rng the caller owns (and checkpoints), so a resumed
run draws the same opponents.

:func:`opponent_distribution` returns a list of :class:`Entry` ``(id, bucket, prob)``: the
bucket says WHY that opponent was chosen, so the caller can log the realised mix of opponent
types, not only of agents. One agent can sit in two buckets (a checkpoint can be both a peer and
exploitable); its chance of being played is the sum of its entries (:func:`by_agent`). The learner
itself is the id ``"learner"`` (:data:`MIRROR_ID`).

Modes (``MatchmakingSettings.mode``):

- ``"pfsp"``: a mixture of opponent types, as in AlphaStar's league (Vinyals et al. 2019):
  ``mirror`` (the learner plays itself), ``peer`` (checkpoints rated within ``peer_elo_window`` Elo
  of the learner, uniform; if none, the single nearest-rated checkpoint), ``exploitable`` (every
  checkpoint, weighted by prioritized fictitious self-play: f_hard(x) = (1 - x)^p of the learner's
  win probability x, so the opponents the learner loses to, or used to, are played most; or
  f_var(x) = x(1 - x) to focus on even games) and ``baseline`` (scripted bots and the base
  model, uniform: baselines are fixed anchors for measuring progress, and weighting them by
  f_hard would stop playing them once beaten, which is exactly when their win rate is a cheap
  regression alarm) and ``best_response`` (the exact best responses to the learner's past selves
  that ``data.league.best_response_every`` adds, weighted by f like ``exploitable``; empty, so
  sharing nothing, in a league without them).
- ``"fixed"``: the listed ``fixed_opponents`` (uniform, or by ``fixed_weights``); bucket ``fixed``.
- ``"mirror"``: always the learner; bucket ``mirror``.
- ``"lagged"``: uniform over checkpoints with step in ``[learner.step - lag_max, learner.step -
  lag_min]`` (bucket ``lagged``); if none is in the window, the single checkpoint whose step is
  nearest to it, so a run whose checkpoints are all too recent early on keeps playing.
- ``"random"``: uniform over every candidate; bucket ``random``.
- ``"match_quality"``: softmax of TrueSkill match quality / ``quality_temperature`` over every
  candidate; bucket ``match_quality``.
- ``"ts_dist"``: softmax of -|learner.mu - mu| / ``mu_temperature`` over every candidate; bucket
  ``ts_dist``.

Cold start: while the league holds fewer than ``min_checkpoints`` checkpoints, every mode except
``"mirror"`` and ``"fixed"`` plays only baselines (uniform, bucket ``baseline``). Peers, lags and
PFSP weights mean little against one or no past self, and the first checkpoint must be rated
against fixed anchors before it can anchor anything; so with the default of 2 the learner plays
baselines until its second checkpoint joins the league.

In ``"pfsp"`` an empty bucket's weight (no baselines in the league) is shared out over the
non-empty buckets in proportion to their weights. When nothing is left to play (cold start
without baselines, fixed ids not in the league, all weights on empty buckets) a ValueError says
what was missing.

Candidates of kind ``"fixed"`` (agents entered by hand, e.g. an external model) are played by
``"fixed"`` (when listed), ``"random"``, ``"match_quality"`` and ``"ts_dist"``; PFSP's buckets
hold only checkpoints, baselines and best responses.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sp_lightning.types import LEARNER_ID

MIRROR_ID = LEARNER_ID
"""The id that stands for the learner itself in entries and picks: its one name."""

KINDS = ("baseline", "checkpoint", "fixed", "best_response")
MODES = ("pfsp", "fixed", "mirror", "lagged", "random", "match_quality", "ts_dist")

MIRROR = "mirror"
PEER = "peer"
EXPLOITABLE = "exploitable"
BASELINE = "baseline"
BEST_RESPONSE = "best_response"
PFSP_BUCKETS = (MIRROR, PEER, EXPLOITABLE, BASELINE, BEST_RESPONSE)
BUCKETS = (*PFSP_BUCKETS, "fixed", "lagged", "random", "match_quality", "ts_dist")
"""Every bucket an entry can carry: the five of pfsp, then one per other mode (its name)."""


@dataclass(frozen=True)
class Candidate:
    """One league agent the learner could play, with statistics the caller computed."""

    id: str
    """League agent id, e.g. "random_bot", "base_model", "ckpt-000120"."""
    kind: str
    """baseline | checkpoint | fixed | best_response."""
    step: int | None = None
    """Training step at which a checkpoint was saved (lagged mode needs it)."""
    elo: float = 1000.0
    mu: float = 25.0
    """TrueSkill mean."""
    sigma: float = 25 / 3
    """TrueSkill standard deviation."""
    win_prob: float = 0.5
    """The learner's estimated probability of beating this candidate, in [0, 1]."""
    quality: float = 0.5
    """TrueSkill match quality of learner vs this candidate, in [0, 1]."""
    coverage: float | None = None
    """This agent's exploration statistic (n-gram coverage, in [0, 1]); None when unknown."""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"candidate {self.id!r}: kind expected one of {KINDS}, got {self.kind!r}")
        if self.id == MIRROR_ID:
            raise ValueError(
                f"candidate id {MIRROR_ID!r} is reserved for the learner itself; "
                "give the league agent another id"
            )
        for name in ("win_prob", "quality"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"candidate {self.id!r}: {name} expected in [0, 1], got {value}")
        if self.coverage is not None and not 0.0 <= self.coverage <= 1.0:
            raise ValueError(f"candidate {self.id!r}: coverage expected in [0, 1] or None, got {self.coverage}")


@dataclass(frozen=True)
class LearnerInfo:
    """The learning policy as matchmaking sees it."""

    step: int
    """Current training step."""
    elo: float = 1000.0
    mu: float = 25.0
    sigma: float = 25 / 3


class Entry(NamedTuple):
    """One line of an opponent distribution: who, in which bucket, with what probability."""

    id: str
    bucket: str
    prob: float


class Pick(NamedTuple):
    """One sampled opponent for one seat, with the bucket it was drawn from."""

    id: str
    bucket: str


def _default_bucket_weights() -> dict[str, float]:
    return {MIRROR: 0.30, PEER: 0.40, EXPLOITABLE: 0.20, BASELINE: 0.10, BEST_RESPONSE: 0.20}


@dataclass
class MatchmakingSettings:
    """Who the learner plays (see sp_lightning.league.matchmaking)."""

    mode: str = "pfsp"
    """pfsp | fixed | mirror | lagged | random | match_quality | ts_dist."""
    bucket_weights: dict[str, float] = field(default_factory=_default_bucket_weights)
    """pfsp: share of games per opponent type (mirror, peer, exploitable, baseline,
    best_response); a missing type gets 0; normalised to sum to 1 over the types the league has
    members of (best_response only once ``data.league.best_response_every`` has added one)."""
    peer_elo_window: float = 100.0
    """pfsp: checkpoints within this many Elo of the learner are its peers."""
    pfsp_weighting: str = "hard"
    """pfsp exploitable bucket: hard, f(x) = (1 - x)^pfsp_p, plays most what the learner loses to;
    var, f(x) = x(1 - x), plays most the even matches. x is the learner's win probability."""
    pfsp_p: float = 2.0
    """Exponent of f_hard; larger focuses harder on the strongest opponents."""
    pfsp_floor: float = 1e-3
    """Added to every PFSP weight, so a fully beaten opponent is still played now and then and
    all-zero weights become uniform."""
    coverage_weight: float = 0.0
    """pfsp: multiply a checkpoint's weight by (1 + coverage_weight * coverage) when its
    coverage is known, to favour opponents that play diverse lines; 0 turns it off."""
    min_checkpoints: int = 2
    """Cold start: with fewer checkpoints than this, every mode but mirror and fixed plays only
    baselines."""
    fixed_opponents: list[str] = field(default_factory=list)
    """fixed: the agent ids to play ("learner" is the learner itself)."""
    fixed_weights: list[float] | None = None
    """fixed: one weight per fixed_opponents entry; null plays them uniformly."""
    lag_min: int = 0
    """lagged: play checkpoints at least this many steps older than the learner."""
    lag_max: int = 200
    """lagged: ... and at most this many steps older."""
    quality_temperature: float = 0.1
    """match_quality: softmax temperature on match quality (which lies in [0, 1])."""
    mu_temperature: float = 2.0
    """ts_dist: softmax temperature on |learner mu - opponent mu| (TrueSkill units; sigma0 = 8.3)."""

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"matchmaking.mode: expected one of {MODES}, got {self.mode!r}")
        if self.pfsp_weighting not in ("hard", "var"):
            raise ValueError(f"matchmaking.pfsp_weighting: expected 'hard' or 'var', got {self.pfsp_weighting!r}")
        unknown = sorted(set(self.bucket_weights) - set(PFSP_BUCKETS))
        if unknown:
            raise ValueError(
                f"matchmaking.bucket_weights: keys expected among {PFSP_BUCKETS}, got unknown {unknown}"
            )
        if any(w < 0 for w in self.bucket_weights.values()) or sum(self.bucket_weights.values()) <= 0:
            raise ValueError(
                f"matchmaking.bucket_weights: expected non-negative weights with a positive sum, "
                f"got {self.bucket_weights}"
            )
        for name in ("peer_elo_window", "pfsp_p", "pfsp_floor", "coverage_weight", "min_checkpoints", "lag_min"):
            if getattr(self, name) < 0:
                raise ValueError(f"matchmaking.{name}: expected >= 0, got {getattr(self, name)}")
        if self.lag_max < self.lag_min:
            raise ValueError(f"matchmaking.lag_max: expected >= lag_min ({self.lag_min}), got {self.lag_max}")
        for name in ("quality_temperature", "mu_temperature"):
            if getattr(self, name) <= 0:
                raise ValueError(f"matchmaking.{name}: expected > 0, got {getattr(self, name)}")
        if self.mode == "fixed" and not self.fixed_opponents:
            raise ValueError("matchmaking.fixed_opponents: expected at least one agent id when mode is 'fixed'")
        if self.fixed_weights is not None:
            if len(self.fixed_weights) != len(self.fixed_opponents):
                raise ValueError(
                    f"matchmaking.fixed_weights: expected one weight per fixed opponent "
                    f"({len(self.fixed_opponents)}), got {len(self.fixed_weights)}"
                )
            if any(w < 0 for w in self.fixed_weights) or sum(self.fixed_weights) <= 0:
                raise ValueError(
                    f"matchmaking.fixed_weights: expected non-negative weights with a positive sum, "
                    f"got {self.fixed_weights}"
                )


# --------------------------------------------------------------------------- distributions


def f_hard(x: float, p: float = 2.0) -> float:
    """PFSP weighting (AlphaStar): (1 - x)^p, x the learner's win probability."""
    return (1.0 - x) ** p


def f_var(x: float) -> float:
    """PFSP weighting on even matches: x(1 - x)."""
    return x * (1.0 - x)


def _normalised(weights: list[float]) -> list[float]:
    total = sum(weights)
    return [w / total for w in weights]


def _softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    return _normalised([math.exp(s - top) for s in scores])


def _single(bucket: str, ids: Sequence[str], weights: Sequence[float] | None = None) -> list[Entry]:
    """One bucket holding everything: entries with the normalised weights (uniform if None)."""
    probs = _normalised(list(weights)) if weights is not None else [1.0 / len(ids)] * len(ids)
    return [Entry(i, bucket, p) for i, p in zip(ids, probs) if p > 0]


def _peers(learner: LearnerInfo, checkpoints: list[Candidate], window: float) -> list[Candidate]:
    peers = [c for c in checkpoints if abs(c.elo - learner.elo) <= window]
    if peers:
        return peers
    # the nearest-rated checkpoint; among equals, the most recent
    return [min(checkpoints, key=lambda c: (abs(c.elo - learner.elo), -(c.step or 0)))]


def _pfsp(learner: LearnerInfo, candidates: list[Candidate], settings: MatchmakingSettings) -> list[Entry]:
    checkpoints = [c for c in candidates if c.kind == "checkpoint"]
    baselines = [c for c in candidates if c.kind == "baseline"]
    best_responses = [c for c in candidates if c.kind == BEST_RESPONSE]

    def coverage_factor(c: Candidate) -> float:
        return 1.0 + settings.coverage_weight * c.coverage if c.coverage is not None else 1.0

    pfsp = (lambda x: f_hard(x, settings.pfsp_p)) if settings.pfsp_weighting == "hard" else f_var
    peers = _peers(learner, checkpoints, settings.peer_elo_window) if checkpoints else []
    # each bucket: (ids, weights within the bucket)
    buckets: dict[str, tuple[list[str], list[float]]] = {
        MIRROR: ([MIRROR_ID], [1.0]),
        PEER: ([c.id for c in peers], [coverage_factor(c) for c in peers]),
        EXPLOITABLE: (
            [c.id for c in checkpoints],
            [(pfsp(c.win_prob) + settings.pfsp_floor) * coverage_factor(c) for c in checkpoints],
        ),
        BASELINE: ([c.id for c in baselines], [1.0] * len(baselines)),
        # the exact best responses to the learner's past selves, weighted like the exploitable
        # bucket: most games against those it still loses to
        BEST_RESPONSE: ([c.id for c in best_responses],
                        [pfsp(c.win_prob) + settings.pfsp_floor for c in best_responses]),
    }
    # an empty bucket's share goes to the others, in proportion to their weights
    shares = {b: settings.bucket_weights.get(b, 0.0) for b, (ids, _) in buckets.items() if ids}
    total = sum(shares.values())
    if total <= 0:
        raise ValueError(
            f"pfsp has nothing to play: bucket_weights {settings.bucket_weights} put all weight on "
            f"empty buckets (checkpoints: {len(checkpoints)}, baselines: {len(baselines)})"
        )
    entries = []
    for bucket, share in shares.items():
        ids, weights = buckets[bucket]
        if share <= 0:
            continue
        if sum(weights) <= 0:  # only possible with pfsp_floor 0 and every weight 0
            weights = [1.0] * len(ids)
        entries += [Entry(i, bucket, share / total * p) for i, p in zip(ids, _normalised(weights)) if p > 0]
    return entries


def _lagged(learner: LearnerInfo, checkpoints: list[Candidate], settings: MatchmakingSettings) -> list[Entry]:
    stepped = [c for c in checkpoints if c.step is not None]
    if not stepped:
        raise ValueError(
            f"lagged matchmaking needs checkpoints with a step; got {[c.id for c in checkpoints]} without one"
        )
    low, high = learner.step - settings.lag_max, learner.step - settings.lag_min
    window = [c for c in stepped if low <= c.step <= high]
    if not window:  # nothing in the window yet: the checkpoint nearest to it
        window = [min(stepped, key=lambda c: (max(low - c.step, c.step - high), -c.step))]
    return _single("lagged", [c.id for c in window])


def opponent_distribution(
    learner: LearnerInfo, candidates: Sequence[Candidate], settings: MatchmakingSettings
) -> list[Entry]:
    """The probability of playing each opponent, per bucket; probabilities are > 0 and sum to 1.

    ``"learner"`` (:data:`MIRROR_ID`) is the learner itself. Raises ValueError when there is
    nothing to play or a candidate id repeats.
    """
    candidates = list(candidates)
    ids = [c.id for c in candidates]
    if len(set(ids)) != len(ids):
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"candidate ids must be unique; repeated: {repeated}")
    mode = settings.mode
    if mode == "mirror":
        return [Entry(MIRROR_ID, MIRROR, 1.0)]
    if mode == "fixed":
        known = set(ids) | {MIRROR_ID}
        missing = [i for i in settings.fixed_opponents if i not in known]
        if missing:
            raise ValueError(f"data.league.matchmaking.fixed_opponents: {missing} are not in the league; expected "
                             f"ids among {sorted(known)}")
        return _merge(_single("fixed", settings.fixed_opponents, settings.fixed_weights))

    checkpoints = [c for c in candidates if c.kind == "checkpoint"]
    if len(checkpoints) < settings.min_checkpoints:
        baselines = [c.id for c in candidates if c.kind == "baseline"]
        if not baselines:
            raise ValueError(
                f"cold start (checkpoints: {len(checkpoints)} < min_checkpoints: "
                f"{settings.min_checkpoints}) plays only baselines, but the league has none; "
                "add a baseline (e.g. a random bot) or lower matchmaking.min_checkpoints"
            )
        return _single(BASELINE, baselines)
    if mode == "pfsp":
        return _pfsp(learner, candidates, settings)
    if mode == "lagged":
        return _lagged(learner, checkpoints, settings)
    if not candidates:
        raise ValueError(f"matchmaking mode {mode!r} has no candidates to play")
    if mode == "random":
        return _single("random", ids)
    if mode == "match_quality":
        return _single(mode, ids, _softmax([c.quality / settings.quality_temperature for c in candidates]))
    if mode == "ts_dist":
        return _single(mode, ids, _softmax([-abs(learner.mu - c.mu) / settings.mu_temperature for c in candidates]))
    raise AssertionError(f"unhandled mode {mode!r}")  # MatchmakingSettings validates the mode


def _merge(entries: list[Entry]) -> list[Entry]:
    """Sum entries that repeat the same (id, bucket), keeping first-seen order."""
    merged: dict[tuple[str, str], float] = {}
    for e in entries:
        merged[(e.id, e.bucket)] = merged.get((e.id, e.bucket), 0.0) + e.prob
    return [Entry(i, b, p) for (i, b), p in merged.items()]


def by_agent(entries: Sequence[Entry]) -> dict[str, float]:
    """Each opponent's total probability, summed over its buckets."""
    out: dict[str, float] = {}
    for e in entries:
        out[e.id] = out.get(e.id, 0.0) + e.prob
    return out


def by_bucket(entries: Sequence[Entry]) -> dict[str, float]:
    """Each bucket's total probability: the expected mix of opponent types."""
    out: dict[str, float] = {}
    for e in entries:
        out[e.bucket] = out.get(e.bucket, 0.0) + e.prob
    return out


# --------------------------------------------------------------------------- sampling


class Matchmaker:
    """Samples opponents per the settings and counts the realised bucket mix.

    The counts are per seat (a three-seat game adds three picks) and are the whole state:
    :meth:`state_dict` / :meth:`load_state_dict` carry them across a resume. The rng is not
    state here: the caller owns and checkpoints it.
    """

    def __init__(self, settings: MatchmakingSettings | None = None):
        self.settings = settings or MatchmakingSettings()
        self.bucket_counts: dict[str, int] = {}

    def distribution(self, learner: LearnerInfo, candidates: Sequence[Candidate]) -> list[Entry]:
        return opponent_distribution(learner, candidates, self.settings)

    def sample(
        self,
        learner: LearnerInfo,
        candidates: Sequence[Candidate],
        rng: random.Random,
        k: int = 1,
        max_distinct: int | None = None,
    ) -> list[Pick]:
        """``k`` opponents, one per non-learner seat of a game.

        Without ``max_distinct`` each seat is drawn independently. With ``max_distinct = M``
        (at most M distinct opponents fit in one game, e.g. adapters loaded at once) it is
        cluster sampling: draw ``min(k, M)`` opponents independently (up to M distinct ones),
        fill the remaining seats with copies of uniformly chosen ones among them, and shuffle
        the seats. Each seat's marginal distribution is still the opponent distribution, so
        the realised mix is unbiased. Whether the learner's own adapter counts toward M is the
        caller's call (pass M - 1 if it does).
        """
        if k < 1:
            raise ValueError(f"k: expected >= 1 opponent seats, got {k}")
        if max_distinct is not None and max_distinct < 1:
            raise ValueError(f"max_distinct: expected >= 1 or None, got {max_distinct}")
        entries = self.distribution(learner, candidates)
        picks_pool = [Pick(e.id, e.bucket) for e in entries]
        weights = [e.prob for e in entries]
        draws = min(k, max_distinct) if max_distinct is not None else k
        picks = rng.choices(picks_pool, weights=weights, k=draws)
        if draws < k:
            picks += [rng.choice(picks[:draws]) for _ in range(k - draws)]
            rng.shuffle(picks)
        for pick in picks:
            self.bucket_counts[pick.bucket] = self.bucket_counts.get(pick.bucket, 0) + 1
        return picks

    def realised_mix(self) -> dict[str, float]:
        """Share of sampled seats per bucket so far; empty before the first sample."""
        total = sum(self.bucket_counts.values())
        return {b: n / total for b, n in self.bucket_counts.items()} if total else {}

    def state_dict(self) -> dict[str, Any]:
        return {"bucket_counts": dict(self.bucket_counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        counts = state.get("bucket_counts")
        if not isinstance(counts, dict) or any(not isinstance(n, int) or n < 0 for n in counts.values()):
            raise ValueError(
                f"matchmaker state: expected {{'bucket_counts': {{bucket: count >= 0}}}}, got {state!r}"
            )
        self.bucket_counts = dict(counts)
