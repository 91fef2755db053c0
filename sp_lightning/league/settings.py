"""``data.league``: a league in one block of config.

The block installs both halves of league play: the opponent sampler that seats every training
game by matchmaking (``sp_lightning.league.sampler.LeagueSampler``) and the callback that keeps
the league on disk, promotes checkpoints, rates matches and runs the background evaluator
(``sp_lightning.league.callbacks.LeagueCallback``). Its settings are plain data, checked when the
config is read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sp_lightning.errors import check_int, check_writable
from sp_lightning.league.matchmaking import MatchmakingSettings

DEFAULT_BASELINES = ["base_model", "random_bot", "chaos_bot"]
"""The default baselines: they play every game."""

DEFAULT_GATEKEEPERS = ("random_bot", "best", "recent")
"""The evaluator's gatekeepers when the config names none (random_bot only where it is a baseline)."""

_LATER_ID = re.compile(r"[\w.-]+-\d{6}")
"""An agent id training adds later: a checkpoint, a best response, an exploiter's snapshot."""


def baseline_policy(agent_id: str) -> str:
    """The policy spec of a baseline id: ``base_model`` (the adapter off), or ``<name>_bot`` for
    ``bot:<name>``."""
    from envs import BOTS

    if agent_id == "base_model":
        return "base"
    if agent_id.endswith("_bot") and agent_id.removesuffix("_bot") in BOTS:
        return f"bot:{agent_id.removesuffix('_bot')}"
    known = ["base_model"] + sorted(f"{b}_bot" for b in BOTS)
    raise ValueError(f"data.league.baselines: expected ids among {known}, got {agent_id!r}")


@dataclass
class CheckpointSchedule:
    """When the learner becomes a league checkpoint."""

    recent_every: int = 10
    """Promote every this many steps; these 'recent' checkpoints stay while inside the window."""
    recent_window: int = 100
    """A recent checkpoint leaves the league once it is this many steps old (unless anchor/elite)."""
    anchor_every: int = 100
    """Promote every this many steps, kept forever (anchors)."""
    elite: bool = True
    """Also keep forever a checkpoint whose learner rating (TrueSkill mu) is a new best by elite_margin."""
    elite_margin: float = 1.0
    """How far (in TrueSkill mu) above the best so far a rating must be to count as a new best."""

    def __post_init__(self):
        for name in ("recent_every", "recent_window", "anchor_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"data.league.schedule.{name}: expected >= 1, got {getattr(self, name)}")

    def tags(self, step: int, new_best: bool) -> list[str]:
        tags = []
        if step % self.recent_every == 0:
            tags.append("recent")
        if step % self.anchor_every == 0:
            tags.append("anchor")
        if self.elite and new_best and step % self.recent_every == 0:
            tags.append("elite")
        return tags

    def keeps(self, agent_step: int, tags: list[str], now: int) -> bool:
        """Anchors, elites and exploiters' successful snapshots stay; recent ones while in the window."""
        return any(t in tags for t in ("anchor", "elite", "exploiter")) or now - agent_step < self.recent_window


@dataclass
class EvaluatorSettings:
    """The background tournament of the newest checkpoint against gatekeepers."""

    every: int = 50
    """Start a tournament every this many steps (0 disables the evaluator)."""
    games_per_seat: int = 50
    """Games per seat against each gatekeeper."""
    gatekeepers: list[str] | None = None
    """League ids, or 'best' (the best-rated checkpoint) and 'recent' (the previous checkpoint).
    Null: random_bot (where it is one of the league's baselines), best and recent."""
    threads: int = 1
    """Torch threads of the evaluator process."""
    seed: int = 99_000
    """The first tournament's seed; each later one's deals follow on from the one before's
    (``seed + k * games_per_seat`` for the k-th), so no two tournaments play a deal twice."""
    final_wait: float = 900.0
    """Seconds the end of training waits for a tournament still being played (its result is
    rated and logged); after that the evaluator is stopped, with a warning, and its games are not rated."""

    def __post_init__(self):
        for name, least in (("every", 0), ("games_per_seat", 1), ("threads", 1), ("seed", 0)):
            check_int(getattr(self, name), f"data.league.evaluator.{name}", least)
        if not self.final_wait >= 0:
            raise ValueError(f"data.league.evaluator.final_wait: expected seconds >= 0, got {self.final_wait!r}")
        if self.gatekeepers is not None and not self.gatekeepers:
            raise ValueError("data.league.evaluator.gatekeepers: expected at least one (league ids, 'best', 'recent')")

    @property
    def labels(self) -> list[str]:
        """The gatekeepers asked for: ``gatekeepers``, or the default's (a league resolves its
        default against its baselines when it is read: :meth:`check_against`)."""
        return self.gatekeepers if self.gatekeepers is not None else list(DEFAULT_GATEKEEPERS)

    def check_against(self, baselines: list[str]) -> None:
        """The gatekeepers of a league of ``baselines``: a null default keeps random_bot only
        where it is a baseline. A gatekeeper the league can never hold would be left out of every
        tournament without a word (the evaluator skips ids absent at the time: a checkpoint not
        yet promoted, one pruned since), so each must be a label, a baseline, or an id of the kind
        training adds (``ckpt-<step>``, ``br-...-<step>``, ``<exploiter>-<step>``: six digits)."""
        if self.gatekeepers is None:
            self.gatekeepers = [g for g in DEFAULT_GATEKEEPERS if g in ("best", "recent") or g in baselines]
        for name in self.gatekeepers:
            if name in ("best", "recent") or name in baselines or _LATER_ID.fullmatch(name or ""):
                continue
            raise ValueError(
                f"data.league.evaluator.gatekeepers: {name!r} is no id this league can hold; expected 'best', "
                f"'recent', a baseline of data.league.baselines ({', '.join(baselines)}) or a checkpoint id "
                f"such as ckpt-000100")


@dataclass
class ExploiterSettings:
    """AlphaStar's exploiters, each a learner of ``model.learners`` that the league seats itself
    (give it no roles). The league's main agent is the learner with ``roles: ["*"]``.

    A **main exploiter** plays only the current main agent; a **league exploiter** plays the
    league's members as the main agent's matchmaking picks them. An exploiter whose moving win
    rate against its opponents reaches ``success_win_rate`` (after ``min_games`` games since it
    was last reset) has found a weakness: a snapshot of it joins the league as a checkpoint that
    the main agent then plays, and it is reset (``reset_to``: a fresh adapter, or a copy of the
    main agent's); so is one that has not succeeded within ``reset_every`` steps. The main
    exploiter's moving payoff against the main agent is ``league/exploitability_estimate``: a
    learned best response's payoff, a lower bound on the main agent's exploitability for any game
    (checked against the exact value on Kuhn Poker and Tic-Tac-Toe by
    ``benchmarks/exploiter_check.py``)."""

    main: str | None = None
    """The main exploiter: a learner's name in model.learners (null: none)."""
    league: str | None = None
    """The league exploiter: a learner's name in model.learners (null: none)."""
    share: float = 0.25
    """Of each batch's games, the share each exploiter plays."""
    success_win_rate: float = 0.7
    """The moving win rate against its opponents at which an exploiter has succeeded."""
    min_games: int = 100
    """Games since its last reset before an exploiter can succeed."""
    window: int = 200
    """The games the moving win rate and payoff span (an exponential average over about this many)."""
    reset_every: int = 200
    """Steps after which an exploiter that has not succeeded is reset (see ``reset_to``); 0: never."""
    reset_to: str = "base"
    """What an exploiter starts over from: "base" (a fresh adapter: the base model's play) or
    "main" (a copy of the main agent's current adapter, as AlphaStar resets its exploiters to the
    supervised agent: a model whose base play is mostly illegal then need not relearn the rules;
    needs the same LoRA shape for both learners)."""
    log_every: int = 10
    """Steps between logs of the exploiters' figures (``league/exploitability_estimate``...)."""

    def names(self) -> dict[str, str]:
        """kind ("main", "league") -> learner name, for the exploiters set."""
        return {kind: name for kind, name in (("main", self.main), ("league", self.league)) if name}

    def __post_init__(self):
        if self.main is not None and self.main == self.league:
            raise ValueError(f"data.league.exploiters: main and league name the same learner {self.main!r}")
        if not (0 < self.share and len(self.names()) * self.share < 1):
            raise ValueError(f"data.league.exploiters.share: expected > 0 with the exploiters' shares summing to "
                             f"less than 1, got {self.share}")
        if not 0 < self.success_win_rate <= 1:
            raise ValueError(f"data.league.exploiters.success_win_rate: expected in (0, 1], got {self.success_win_rate}")
        for key in ("min_games", "window", "log_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"data.league.exploiters.{key}: expected >= 1, got {getattr(self, key)}")
        if self.reset_to not in ("base", "main"):
            raise ValueError(f"data.league.exploiters.reset_to: expected 'base' or 'main', got {self.reset_to!r}")
        if self.reset_every < 0:
            raise ValueError(f"data.league.exploiters.reset_every: expected >= 0, got {self.reset_every}")


@dataclass
class LeagueSettings:
    """League play: who the learner plays, when it joins the league, how the league is rated.

    Example (Kuhn Poker)::

        data:
          league:
            dir: runs/kuhn_poker_league_tiny/league
            schedule: {recent_every: 10, recent_window: 100, anchor_every: 100}
            evaluator: {every: 50, games_per_seat: 100}
            exploitability_every: 25
            games_per_match: 20
    """

    dir: str
    """Where the league lives: league.json, adapters/, evaluations/."""
    schedule: CheckpointSchedule = field(default_factory=CheckpointSchedule)
    """When the learner is promoted to a checkpoint, and how long checkpoints stay."""
    evaluator: EvaluatorSettings = field(default_factory=EvaluatorSettings)
    """The background tournament (every N steps, gatekeepers, games)."""
    matchmaking: MatchmakingSettings = field(default_factory=MatchmakingSettings)
    """Who the learner plays (PFSP by default; see sp_lightning.league.matchmaking)."""
    baselines: list[str] | None = None
    """Baseline members of the league, by id: base_model, random_bot, chaos_bot, or
    ``<name>_bot`` for any other bot (``bot:<name>``, e.g. tictactoe_tactical_bot). Null:
    base_model, random_bot, chaos_bot (they play every game)."""
    exploitability_every: int = 0
    """Log the learner's and the league mixture's exploitability every this many steps, in each
    game of the run that has it (Kuhn Poker; Tic-Tac-Toe the learner's only); 0 disables it. A run
    none of whose games has it is refused when training starts."""
    best_response_every: int = 0
    """Every this many steps the exact best response to the learner joins the league as an
    opponent (type and PFSP bucket ``best_response``, played as ``bot:br-<step>``; tables in
    ``<dir>/best_responses/``), in each game of the run whose exploitability is exact (Kuhn Poker,
    Tic-Tac-Toe: see ``sp_lightning.league.best_responses``; refused when none is); 0 disables it.
    Give the bucket a share in ``matchmaking.bucket_weights`` (default 0.2) and the learner plays
    them."""
    games_per_match: int = 1
    """Games of the same agents pooled into one rated match, scored by total payoff. 1 rates
    every game, right for win/draw/loss games; poker needs blocks of hands so that ratings follow
    chips won, not hands won."""
    max_distinct_opponents: int | None = None
    """At most this many distinct opponents in one game of more than two seats (cluster
    sampling); null leaves every seat free."""
    win_rate_decay: float = 0.95
    """Decay of the learner's moving win-rate estimate against each opponent (what PFSP weighs)."""
    coverage_ngrams: tuple[int, ...] = (1, 2)
    """The n of the n-gram coverage statistics of each agent's moves."""
    exploiters: ExploiterSettings | None = None
    """AlphaStar's main and league exploiters (learners of model.learners); null: none."""

    def __post_init__(self):
        check_writable(self.dir, "data.league.dir", folder=True)
        for entry in self.baselines or []:
            baseline_policy(entry)  # a bad name fails here, before any game is played
        if not 0 <= self.win_rate_decay < 1:
            raise ValueError(f"data.league.win_rate_decay: expected in [0, 1), got {self.win_rate_decay}")
        if self.exploitability_every < 0:
            raise ValueError(f"data.league.exploitability_every: expected >= 0, got {self.exploitability_every}")
        if self.best_response_every < 0:
            raise ValueError(f"data.league.best_response_every: expected >= 0, got {self.best_response_every}")
        if self.games_per_match < 1:
            raise ValueError(f"data.league.games_per_match: expected >= 1, got {self.games_per_match}")
        if self.max_distinct_opponents is not None and self.max_distinct_opponents < 1:
            raise ValueError(f"data.league.max_distinct_opponents: expected an int >= 1 or null, got "
                             f"{self.max_distinct_opponents}")
        if not self.coverage_ngrams or any(not isinstance(n, int) or n < 1 for n in self.coverage_ngrams):
            raise ValueError(f"data.league.coverage_ngrams: expected ints >= 1, got {list(self.coverage_ngrams)}")
        if self.baselines is not None and not self.baselines:
            raise ValueError("data.league.baselines: expected at least one baseline (matchmaking starts against "
                             "them, before any checkpoint exists), or null for the defaults")
        self.evaluator.check_against(self.baselines if self.baselines is not None else DEFAULT_BASELINES)
