"""The engine: what a run plays with, built once from the config's ``data`` block and the policy.

A run has four Lightning-facing objects: the module (the policy and its loss), the DataModule
(the batches), validation and the league callback, and the ``sp-lightning`` commands use the
same parts outside a Trainer. All but the module play with the same things: a rollout worker serving
the policy, an arena that plays episodes with it, sampling and retry settings, credit, the
episode source and its opponent sampler, evaluation settings, the episode log, the remote
models, and (under asynchronous collection) the producer thread. :class:`Engine` holds them.

- :class:`EngineSettings` is the ``data`` block, its settings checked when the config is read (no
  env is built, nothing is written; each game's env is checked when the engine is built): the DataModule makes it from its arguments.
- :class:`Engine` is built from it once per run, at setup, when the module's model exists
  (``SelfPlayDataModule.setup``, or ``build_engine`` for the commands that run without a
  Trainer). Every part gets what it needs in its constructor; nothing is assigned afterwards.
- Validation, the league callback and the CLI commands reach it through one accessor:
  ``datamodule.engine`` (:func:`engine_of` from a Trainer). The module never does: it gets the
  engine's batches and sends nothing back but its weights, through ``sp_lightning.weight_sync``.

What a batch is: :meth:`Engine.next_batch` plays batch ``i`` from the stream ``(seed, rank, i)``
(so a resumed run plays the unbroken run's games), with the online evaluation games of batch
``i`` alongside, or takes it from the producer thread's queue when collection is asynchronous.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from envs import make_bots
from envs.base import INVALID_MOVE_POLICIES
from sp_lightning import distributed
from sp_lightning import rng as rng_streams
from sp_lightning.arena import Arena
from sp_lightning.async_rollouts import AsyncCollector, AsyncRolloutSettings
from sp_lightning.batch import Batch
from sp_lightning.credit import GRPO, CreditAssigner
from sp_lightning.device_memory import PeakMemory
from sp_lightning.episode_log import EpisodeLog, EpisodeLogSettings
from sp_lightning.errors import UserError
from sp_lightning.evaluation.online import OnlineEvaluation, online_metrics
from sp_lightning.games import FixedMix, GameSettings, HeldOutGame, OpponentSampler
from sp_lightning.imitation import AnticipatoryPlay, Imitation, SeatRewrite, WarmStartSeats, WarmStartSettings
from sp_lightning.league.settings import LeagueSettings
from sp_lightning.learners import Learners
from sp_lightning.rng import seeded_rng
from sp_lightning.rollout import HFRolloutWorker, RetrySettings, RolloutWorker
from sp_lightning.rollout.remote import RemoteModel
from sp_lightning.sampling import SamplingPlan
from sp_lightning.sources import EpisodeSource, GameMix, NoEpisodes
from sp_lightning.types import LEARNER, PolicyKind, PolicyRef, as_policy, parse_policy

log = logging.getLogger(__name__)

RolloutFactory = Callable[[Any, Any], RolloutWorker]
"""A rollout backend class with its settings; LightningCLI leaves (model, tokenizer) to the engine."""
ArenaFactory = Callable[[], Arena]
"""An arena class with its own settings (``max_concurrent``, a subclass's): LightningCLI makes it
a partial of every constructor argument, and the engine calls it with the run's worker, sampling,
bots, credit... as keywords (so no parameter is taken positionally, whatever a subclass's order)."""


@dataclass
class EvalSettings:
    """Evaluation against a fixed opponent, run as Lightning validation."""

    games: int = 200
    """Games per game id, split evenly over the seats (rounded down to a multiple of them, at
    least one each)."""
    opponent: str = "bot:random"
    """Who the policy plays: bot:<name>, base, checkpoint:<adapter dir>, learner:<name> or
    remote:<name of data.remote_models>."""
    temperature: float | None = None
    """Sampling temperature for evaluation; null uses the training sampling's."""
    invalid_move: str | None = "forfeit"
    """Invalid-move policy in evaluation games (null keeps each game's own)."""
    seed: int = 12345
    """Seed of the evaluation games (deals, bots, sampling). Report final results on other seeds."""
    also_against: list[str] = field(default_factory=list)
    """More opponents, each evaluated the same way after ``opponent``, logged as
    ``val/<game>/vs/<name>/...`` (e.g. ``bot:tictactoe_perfect``: the draw rate against a perfect
    player beside the win rate against RandomBot). With any, ``val/<game>/payoff_over_opponents``
    is the mean payoff over ``opponent`` and these: a checkpoint rule that reads every yardstick
    (a best-of rule on the win rate against RandomBot alone keeps the checkpoint that loses most
    to the perfect player when they tie)."""
    exploitability: bool = False
    """Also compute the policy's exploitability, for games that have it (Kuhn Poker exactly,
    with OpenSpiel; Tic-Tac-Toe by an exact best response over its boards)."""
    online_games: int = 0
    """Evaluation games against ``opponent`` played inside every training batch, per game (rounded
    down to a multiple of its seats), alongside the training games and with the same weights.
    They give no training records and are logged as ``online_eval/<game>/...`` (see
    sp_lightning.evaluation.online). 0 turns them off."""
    held_out: list[HeldOutGame] = field(default_factory=list)
    """Games validated and evaluated beside the training games and never trained on, each
    against its own opponent (``data.eval.opponent`` where it names none), ``games`` games each:
    transfer to games the policy never played, logged as ``val/held_out/<game>/...``."""

    def __post_init__(self):
        if not isinstance(self.games, int) or self.games < 1:
            raise ValueError(f"data.eval.games: expected an int >= 1 (split over the seats), got {self.games!r}")
        if self.temperature is not None and not self.temperature >= 0:
            raise ValueError(f"data.eval.temperature: expected >= 0 (0: greedy) or null, got {self.temperature!r}")
        policies = (*INVALID_MOVE_POLICIES, "game")  # game: TextArena's own rule (envs/adapters/textarena.py)
        if self.invalid_move is not None and self.invalid_move not in policies:
            raise ValueError(f"data.eval.invalid_move: expected one of {', '.join(policies)} or null "
                             f"(each game's own), got {self.invalid_move!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"data.eval.seed: expected an int >= 0, got {self.seed!r}")
        for index, spec in enumerate(self.also_against):
            parse_policy(spec, f"data.eval.also_against[{index}]")
        if not isinstance(self.online_games, int) or self.online_games < 0:
            raise ValueError(f"data.eval.online_games: expected an int >= 0, got {self.online_games!r}")
        names = [held.id for held in self.held_out]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"data.eval.held_out: {', '.join(twice)} listed twice; expected each game once "
                             f"(its figures are named by the game)")

    def env_overrides(self) -> dict[str, Any]:
        """Env settings of evaluation games: the eval invalid-move policy, if one is set."""
        return {"invalid_move": self.invalid_move} if self.invalid_move else {}


@dataclass
class EngineSettings:
    """The ``data`` block as the engine reads it (see ``SelfPlayDataModule`` for each key)."""

    games: list[GameSettings]
    episodes_per_batch: int
    sampling: SamplingPlan
    credit: CreditAssigner
    eval: EvalSettings
    seed: int
    opponents: OpponentSampler
    source: EpisodeSource
    rollout: RolloutFactory
    arena: ArenaFactory
    retry: RetrySettings
    remote_models: dict[str, RemoteModel] = field(default_factory=dict)
    episode_log: EpisodeLogSettings = field(default_factory=EpisodeLogSettings)
    async_rollouts: AsyncRolloutSettings = field(default_factory=AsyncRolloutSettings)
    league: LeagueSettings | None = None
    warm_start: WarmStartSettings | None = None


def check_moves_fit(games: list[GameSettings], tokenizer, sampling: SamplingPlan,
                    games_key: str = "data.games") -> None:
    """Refuse, before any game is played, a run whose answers cannot hold a move: a game's move
    takes more tokens under this tokenizer than the sampling of one of its seats (the run's, the
    seat's role's or a policy's own) lets the policy write. With the tiny model that means the
    game's moves were not made single tokens (``policy.tiny.games``); every answer would be an
    invalid move and the run would learn nothing, silently."""
    for index, game in enumerate(games):
        moves = game.info.moves if game.info is not None else ()
        if not moves:
            continue
        lengths = {move: len(tokenizer.encode(move, add_special_tokens=False)) for move in moves}
        longest = max(lengths, key=lengths.get)
        max_new_tokens, key = min(sampling.fewest_new_tokens(agent) for agent in game.agents)
        if lengths[longest] > max_new_tokens:
            raise ValueError(
                f"{key}: {max_new_tokens} token(s) cannot hold move {longest!r} of "
                f"{games_key}[{index}] ({game.id}), {lengths[longest]} tokens under this tokenizer; raise "
                f"max_new_tokens, or with model: tiny add {game.id!r} to model.policy.tiny.games so that its "
                f"moves are single tokens"
            )


def check_learner_roles(games: list[GameSettings], source, learners: Learners | None) -> None:
    """A learner's role that no game of the run has (``player_7`` of a two-seat game) is refused
    by name before any game: its seats would otherwise go unplayed, or fail mid-batch. Runs whose
    roles are not seats (an episode source's protocol roles) are left to their source."""
    if not learners or not games or not isinstance(source, GameMix):
        return
    seats = {agent for game in games for agent in game.agents}
    for name, learner in learners.settings.items():
        unknown = [role for role in learner.roles if role != "*" and role not in seats]
        if unknown:
            raise ValueError(f"model.learners.{name}.roles: {unknown} are no seats of this run's games; expected "
                             f"some of {sorted(seats)} (or '*')")


def check_league_learners(league: LeagueSettings | None, learners: Learners | None) -> None:
    """A league trains one main agent, and with ``data.league.exploiters`` its exploiters: then
    ``model.learners`` names exactly those, the main agent with ``roles: ["*"]``."""
    exploiters = league.exploiters.names() if league is not None and league.exploiters is not None else {}
    if league is None or not (learners or exploiters):
        return
    # imitation learners (an average policy) sit beside the main agent and its exploiters
    others = set(learners.names) - {learners.every_role} - set(learners.imitating) if learners else set()
    if not exploiters and learners.every_role is not None and not others:
        return
    if not exploiters:
        raise ValueError(f"data.league: a league trains one main agent, and model.learners names "
                         f"{len(learners.names)} ({', '.join(learners.names)}); drop model.learners, or make the "
                         f"others exploiters (data.league.exploiters)")
    if not learners or learners.every_role is None:
        raise ValueError("data.league.exploiters: the exploiters and the main agent are learners of model.learners, "
                         "the main agent the one with roles: ['*'] (e.g. model.learners: {main: {roles: ['*']}, "
                         "main_exploiter: {}})")
    if others != set(exploiters.values()):
        raise ValueError(f"data.league.exploiters: names {sorted(exploiters.values())}, and model.learners has "
                         f"{sorted(others)} beside the main agent {learners.every_role!r}; expected the same")
    claimed = sorted(role for name in others for role in learners.settings[name].roles)
    if claimed:
        raise ValueError(f"model.learners: an exploiter plays where the league seats it; give it no roles "
                         f"(got {claimed})")


def install_seat_mixes(source, learners: Learners, imitation: Imitation, index_of) -> None:
    """Over the seats ``source`` draws, once: NFSP's anticipatory mix (``imitate.anticipatory``,
    ``imitation.AnticipatoryPlay``) and a warm start's teacher in the learner's seats
    (``imitation.WarmStartSeats``). A source that draws no seats of ``data.games`` cannot have them."""
    wanted = [(f"model.learners.{name}.imitate.anticipatory", name) for name in learners.imitating
              if learners.settings[name].imitate.anticipatory is not None]
    if imitation.warm_teacher(0) is not None:
        wanted.append(("data.warm_start", None))
    if not wanted:
        return
    if not isinstance(source, GameMix):
        raise ValueError(f"{wanted[0][0]}: sets the seats of data.games, and data.episodes draws its own; drop it "
                         f"(or play data.games)")

    def wrap(opponents):
        if isinstance(opponents, SeatRewrite):
            return opponents  # installed by an engine built before on the same settings
        for _, name in wanted:
            if name is None:
                opponents = WarmStartSeats(opponents, imitation, learners.whole(), index_of, learners.resolve)
                continue
            settings = learners.settings[name].imitate
            opponents = AnticipatoryPlay(opponents, parse_policy(settings.teacher), learners.ref(name),
                                         settings.anticipatory, learners.resolve)
        return opponents

    source.wrap_opponents(wrap)


def check_capabilities(worker: RolloutWorker, settings: EngineSettings, fit: bool) -> None:
    """Refuse, before anything is played, a run that asks its backend for what it cannot do,
    naming both config keys."""
    backend = type(worker).__name__
    if fit and not worker.trains:
        raise ValueError(f"data.rollout: {backend} answers with text only (no token ids or logprobs), so "
                         f"nothing it plays can train; use it with `sp-lightning rollout` or `evaluate`, and "
                         f"a local backend (HFRolloutWorker) for fit")
    if fit and settings.async_rollouts.enabled and not worker.supports_async:
        raise ValueError(f"data.async_rollouts.enabled: {backend} cannot play while the trainer steps; use "
                         f"HFRolloutWorker, VLLMRolloutWorker or ServerRolloutWorker, or set enabled: false")
    if settings.eval.exploitability and not worker.scores_completions:
        raise ValueError(f"data.eval.exploitability: data.rollout {backend} cannot score a policy's moves; "
                         f"turn it off or use HFRolloutWorker / VLLMRolloutWorker")
    league = settings.league
    if league is not None and league.exploitability_every and not worker.scores_completions:
        raise ValueError(f"data.league.exploitability_every: data.rollout {backend} cannot score a policy's "
                         f"moves; set it to 0 or use HFRolloutWorker / VLLMRolloutWorker")
    if league is not None and not worker.serves_checkpoints:
        raise ValueError(f"data.league: the league plays past checkpoints, which data.rollout {backend} cannot "
                         f"serve here (checkpoints need a LoRA policy: model.policy.lora)")


def check_named_policies(settings: EngineSettings, bots, learners: Learners | None) -> None:
    """Refuse, before any game, a bot, a learner or a remote model the config names that the run
    does not have (a game's opponent mix, ``data.eval.opponent``, ``data.eval.also_against``):
    otherwise the first game that seats it fails in the middle of the run, naming no key."""
    named = [(f"data.games[{index}].opponents", policy) for index, game in enumerate(settings.games)
             for policy in game.opponent_policies]
    named.append(("data.eval.opponent", parse_policy(settings.eval.opponent, "data.eval.opponent")))
    named += [("data.eval.also_against", parse_policy(spec, "data.eval.also_against"))
              for spec in settings.eval.also_against]
    named += [(f"data.eval.held_out[{index}].opponent", parse_policy(held.opponent, "data.eval.held_out.opponent"))
              for index, held in enumerate(settings.eval.held_out) if held.opponent]
    names = [name for name in (learners.names if learners is not None else []) if name]
    for key, policy in named:
        if policy.kind is PolicyKind.BOT and policy.name not in bots:
            raise ValueError(f"{key}: no bot named {policy.name!r}; expected one of "
                             f"{', '.join('bot:' + name for name in sorted(bots))}")
        if policy.kind is PolicyKind.LEARNER and policy.name and policy.name not in names:
            raise ValueError(f"{key}: no learner named {policy.name!r}; expected "
                             f"{', '.join('learner:' + name for name in names) or 'learner (model.learners names none)'}")
        check_remote(policy, settings.remote_models, key)


def check_remote(policy: PolicyRef, remotes: dict, key: str) -> None:
    """A ``remote:<name>`` seat must name a model of ``data.remote_models``."""
    if policy.kind is PolicyKind.REMOTE and policy.name not in remotes:
        known = f"expected one of {', '.join('remote:' + name for name in sorted(remotes))}" if remotes else \
            "it names none (a model behind an OpenAI-compatible server is configured there by name)"
        raise UserError(f"{key}: no remote model named {policy.name!r} in data.remote_models; {known}")


class Engine:
    """What a run plays with (see the module docstring). Built by ``SelfPlayDataModule``.

    Args:
        settings: The ``data`` block.
        model: The policy the worker serves (the module's model).
        tokenizer: Its tokenizer.
        rank: This process's data-parallel rank (its games' streams; the episode log is rank 0's).
        world_size: The number of data-parallel ranks (validation splits its games over them).
        fit: Whether the engine serves a fit (asynchronous collection, the trainable-backend check).
        learners: The module's learners (``model.learners``; None: one unnamed learner).
    """

    def __init__(self, settings: EngineSettings, model, tokenizer, *, rank: int = 0, world_size: int = 1,
                 fit: bool = False, learners: Learners | None = None):
        for index, game in enumerate(settings.games):
            game.check(f"data.games[{index}]")
        held_out = [held.game for held in settings.eval.held_out]
        for index, game in enumerate(held_out):
            game.check(f"data.eval.held_out[{index}]")
        check_moves_fit(settings.games, tokenizer, settings.sampling)
        check_moves_fit(held_out, tokenizer, settings.sampling, "data.eval.held_out")
        check_league_learners(settings.league, learners)
        check_learner_roles(settings.games, settings.source, learners)
        backend = settings.rollout(model, tokenizer)
        check_capabilities(backend, settings, fit)
        from sp_lightning.evaluation.matches import serve_policy

        for index, game in enumerate(settings.games):  # an adapter directory in an opponent mix: served by name
            game.serve_checkpoint_dirs(lambda policy, key=f"data.games[{index}].opponents":
                                       serve_policy(backend, policy, fits=model, key=key))
        # evaluation opponents given as adapter directories (checkpoint:<dir>): registered here,
        # before any game (and before a producer thread plays), then served by name (``served``)
        specs = [settings.eval.opponent, *settings.eval.also_against,
                 *(held.opponent for held in settings.eval.held_out if held.opponent)]
        self._served = {spec: serve_policy(backend, spec, fits=model, key="data.eval") for spec in dict.fromkeys(specs)}
        self._policy_model = model  # what a later opponent's adapter must fit (``served``)
        self.settings = settings
        self.games = settings.games
        self.sampling = settings.sampling
        self.eval = settings.eval
        self.remotes = settings.remote_models
        self.opponents = settings.opponents
        self.source = settings.source
        self.credit = settings.credit
        self.seed = settings.seed
        self.rank, self.world_size = rank, world_size
        self.collector = (AsyncCollector(backend, settings.async_rollouts, self.play_next_batch)
                          if fit and settings.async_rollouts.enabled else None)
        self.worker: RolloutWorker = self.collector.worker if self.collector is not None else backend
        self.online = (OnlineEvaluation(settings.games, settings.eval.opponent, settings.eval.online_games,
                                        settings.eval.seed, settings.eval.env_overrides())
                       if settings.eval.online_games else None)
        episode_log = (EpisodeLog(settings.episode_log, tokenizer=tokenizer)
                       if settings.episode_log.path is not None and rank == 0 else None)
        bot_seed = rng_streams.rank_seed(settings.seed, rank)  # each rank's bots draw their own moves
        self.arena: Arena = settings.arena(
            worker=self.worker, sampling=settings.sampling, retry=settings.retry,
            bots={**make_bots(bot_seed), **settings.source.bots(bot_seed)},
            remotes=settings.remote_models, credit=settings.credit, episodes_per_batch=settings.episodes_per_batch,
            seed=settings.seed, source=settings.source, episode_log=episode_log, learners=learners,
        )
        check_named_policies(settings, self.arena.bots, learners)
        self.pending_bot_rngs: dict[str, Any] = {}  # saved streams of bots that join later (add_bot)
        self.learners = learners if learners is not None else Learners()
        self.imitation = Imitation(self.learners, tokenizer, settings.sampling.default.max_new_tokens, settings.seed,
                                   rank, settings.warm_start, bots=self.arena.bots,
                                   serve=lambda policy: self.served(str(policy)))
        install_seat_mixes(settings.source, self.learners, self.imitation, lambda: self.batches_played)
        self._finished: Batch | None = None  # the last batch the arena's step completed (finish_batch)
        if self.imitation:  # each batch's imitation records: their teachers' moves, before it is logged
            self.arena.finish_batch = self._finish_batch

    # ---- batches ----------------------------------------------------------------------------
    def next_batch(self) -> Batch:
        """The next training batch: played now, or (asynchronous collection) the producer's next,
        its records beyond the lag bound dropped."""
        if self.collector is not None:
            return self.collector.next_batch(trainer_version=self.worker.policy_version)
        with PeakMemory() as peak:
            batch = self.play_next_batch()
        if peak.bytes is not None:  # on a GPU: what playing the batch held at its peak
            batch.metrics["rollout/peak_memory_gib"] = peak.bytes / 2**30
        return batch

    def play_next_batch(self) -> Batch:
        """Batch ``arena.steps_done`` played from its own stream ``(seed, rank, index)``, with
        that batch's online evaluation games alongside (their figures join its metrics)."""
        index = self.arena.steps_done
        matches = self.online.matches(index) if self.online is not None else []
        batch = self.arena.step(seeded_rng(self.seed, self.rank, batch=index),
                                side_episodes=[request for match in matches for request in match.requests()],
                                side_metrics=(lambda rollouts: online_metrics(matches, rollouts)) if matches else None)
        if self.imitation and self._finished is not batch:  # a custom arena's own step, without the hook
            self.imitation.apply(batch, index)
        batch.index = index
        return batch

    def _finish_batch(self, batch: Batch, index: int) -> None:
        self.imitation.apply(batch, index)
        self._finished = batch

    def run(self, steps: int, show: int = 0, out=None) -> list[dict[str, float]]:
        """``steps`` batches played and printed without training (``sp-lightning rollout``), as
        ``fit`` would play them (online evaluation games included); see ``Arena.run``."""
        return self.arena.run(steps, show, out, play_batch=self.play_next_batch)

    @property
    def batches_played(self) -> int:
        """Training batches played so far (the arena's count; a resumed run continues it)."""
        return self.arena.steps_done

    @property
    def plays_ahead(self) -> bool:
        """Whether batches are played while the trainer steps (asynchronous collection)."""
        return self.collector is not None

    @property
    def last_seated_batch(self) -> int:
        """The last batch whose games may already have their seats (a batch draws them as it
        starts): the last one played, and under asynchronous collection the one the producer
        may be playing now. An opponent that leaves the league now can still sit in the games
        of the batches up to this one, which go on with it (``league.sync``)."""
        return self.arena.steps_done - (0 if self.plays_ahead else 1)

    def update_overlap(self) -> AbstractContextManager:
        """The context the trainer's update runs in: under asynchronous collection the producer
        plays the next batches meanwhile; otherwise nothing happens beside it."""
        return self.collector.baton.lent() if self.collector is not None else nullcontext()

    # ---- evaluation -------------------------------------------------------------------------
    def served(self, spec: str):
        """The opponent ``spec`` as the worker plays it: an adapter directory (``checkpoint:<dir>``)
        registered once and played by its name, anything else as given. The config's evaluation
        opponents are registered when the engine is built; another (``evaluate --opponent``) on
        first use."""
        if spec not in self._served:
            from sp_lightning.evaluation.matches import serve_policy

            self._served[spec] = serve_policy(self.worker, spec, fits=self._policy_model, key="--opponent")
        return self._served[spec]

    def eval_sampling(self) -> SamplingPlan:
        """The sampling of evaluation games: the training plan at the eval temperature."""
        return self.sampling.at_temperature(self.eval.temperature)

    def validations(self) -> list[tuple[GameSettings, str, list[str], int]]:
        """What validation plays, ``(game, metric prefix, opponents, games)``: each training game
        against ``data.eval.opponent`` and ``also_against``, then each held-out game against its own."""
        trained = [(game, f"val/{game.name}", [self.eval.opponent, *self.eval.also_against], self.eval.games)
                   for game in self.games]
        held_out = [(held.game, f"val/held_out/{held.game.name}", [held.opponent_or(self.eval.opponent)],
                     held.games or self.eval.games) for held in self.eval.held_out]
        return trained + held_out

    def validate(self, game: GameSettings, prefix: str, opponents: list[str] | None = None,
                 games: int | None = None) -> tuple[dict[str, float], str]:
        """The learner against the evaluation opponents in ``game`` (``data.eval.opponent`` and
        ``also_against`` unless ``opponents`` are given; ``data.eval.games`` games unless
        ``games``), and its exploitability where asked and the game has it: the metrics under
        ``prefix`` and a line that says them."""
        from sp_lightning.evaluation.matches import Match, play_matches, summarize
        from sp_lightning.evaluation.strategy import exploitability_metrics

        metrics: dict[str, float] = {}
        lines, payoffs = [], []
        held_out = all(game is not trained for trained in self.games)
        opponents = opponents or [self.eval.opponent, *self.eval.also_against]
        for index, opponent in enumerate(opponents):
            # each rank plays its share of the games (every world_size-th of each seat, with the
            # seeds they have in the whole match); the results are counted over every rank
            per_seat = max(1, (games or self.eval.games) // len(game.agents))
            match = Match(game, LEARNER, self.served(opponent), per_seat, self.eval.seed, self.eval.env_overrides(),
                          shard=(self.rank, self.world_size))
            (rollouts,) = play_matches(self.worker, [match], self.eval_sampling(), self.eval.seed, self.remotes,
                                       self.learners)
            played = sorted((g for part in distributed.gather(match.played(rollouts)) for g in part),
                            key=lambda g: g.order)
            result = summarize(played, str(match.tested), match.label, game.agents, seed=self.eval.seed)
            metrics.update(result.as_metrics(prefix if index == 0 else f"{prefix}/vs/{opponent_label(opponent)}"))
            payoffs.append(result.payoff_mean)
            lines.append(f"{game.name}{' (held out)' if held_out else ''} vs {opponent}: {result.summary()}")
        if len(opponents) > 1:  # one figure that reads every yardstick, for a checkpoint rule
            metrics[f"{prefix}/payoff_over_opponents"] = sum(payoffs) / len(payoffs)
        line = "; ".join(lines)
        whole = self.learners.whole()  # exploitability reads one strategy for the whole game
        # ... and each imitation learner's (NFSP's average policy) beside it, under <prefix>/<name>/
        strategies = ([(whole, prefix, "")] if whole is not None else []) + [
            (self.learners.ref(name), f"{prefix}/{name}", f" ({name})") for name in self.learners.imitating]
        for policy, key, label in strategies if self.eval.exploitability else []:
            exploit_metrics, exploit = exploitability_metrics(self.worker, game, key, policy)
            metrics.update(exploit_metrics)
            if exploit is not None:
                line += (f"; exploitability{label} {exploit.exploitability:.4f} "
                         f"(legal mass {exploit.legal_mass_mean:.3f})")
        return metrics, line

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Before the first batch (the arena's ``on_startup``)."""
        self.arena.on_startup()

    def on_train_start(self) -> None:
        self.arena.on_train_start()

    def on_train_end(self) -> None:
        self.arena.on_train_end()

    def close(self) -> None:
        """Stop the producer (if any) before the worker, then the arena's ``on_shutdown`` (the
        worker, remote connections, the episode log). Each reopens on demand."""
        if self.collector is not None and not self.collector.stop():
            log.error("asynchronous rollouts: the producer thread is still inside a worker call after 120 s; "
                      "the worker is left open rather than closed under it")
            return
        self.arena.on_shutdown()

    def has_bot(self, name: str) -> bool:
        """Whether ``bot:<name>`` can be seated."""
        return name in self.arena.bots

    def bot_names(self) -> list[str]:
        """Every ``bot:<name>`` that can be seated now, sorted."""
        return sorted(self.arena.bots)

    def add_bot(self, name: str, bot: Any) -> None:
        """A scripted player that joins during the run, seated as ``bot:<name>`` from the next
        game on (a league's best response). On resume its random stream continues from the
        checkpoint's, as the bots built at the start do."""
        if name in self.arena.bots:
            raise ValueError(f"a bot named {name!r} is already registered")
        if name in self.pending_bot_rngs:
            rng_streams.set_object_state(bot, self.pending_bot_rngs.pop(name))
        self.arena.bots[name] = bot

    # ---- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The schedule, the opponent sampler's and the source's statistics, credit baselines,
        the bots' own random streams and the arena's stores: what a resumed run continues from."""
        bots = {name: rng_streams.object_state(bot) for name, bot in self.arena.bots.items()}
        return {"batches_played": self.batches_played, "opponents": self.opponents.state_dict(),
                "source": self.source.state_dict(), "credit": self.credit.state_dict(),
                "bot_rngs": {name: s for name, s in bots.items() if s is not None},
                "arena": self.arena.state_dict(), "imitation": self.imitation.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "credit" in state:
            self.credit.load_state_dict(state["credit"])
        if "opponents" in state:
            self.opponents.load_state_dict(state["opponents"])
        if "source" in state:
            self.source.load_state_dict(state["source"])
        for name, bot_state in state.get("bot_rngs", {}).items():
            if name in self.arena.bots:
                rng_streams.set_object_state(self.arena.bots[name], bot_state)
            else:  # a bot that joins during the run (a league's best response): restored by add_bot
                self.pending_bot_rngs[name] = bot_state
        if "arena" in state:
            self.arena.load_state_dict(state["arena"])
        self.imitation.load_state_dict(state.get("imitation", {}))


def opponent_label(spec: str) -> str:
    """An evaluation opponent's name in metric tags: a bot's, a remote model's or a checkpoint
    directory's own name, or the kind (``base``)."""
    policy = as_policy(spec)
    return os.path.basename(os.path.normpath(policy.name)) if policy.name else policy.kind.value


def engine_of(trainer) -> Engine:
    """The engine of ``trainer``'s run (its DataModule's ``engine``): the one accessor the
    module, validation and the callbacks use."""
    owner = getattr(trainer, "datamodule", None)
    engine = getattr(owner, "engine", None)
    if not isinstance(engine, Engine):
        raise TypeError(f"expected the Trainer's datamodule to be a SelfPlayDataModule with an engine, got "
                        f"{type(owner).__name__}")
    return engine


def default_source(games: list[GameSettings], opponents: OpponentSampler | None,
                   episodes: EpisodeSource | None) -> EpisodeSource:
    """What each batch plays: ``data.episodes``, else the games' mix with seats from the
    opponent sampler, else nothing (the arena must say: registered episodes or its own get_batch)."""
    if episodes is not None:
        return episodes
    if games:
        return GameMix(games, opponents if opponents is not None else FixedMix())
    return NoEpisodes()


DEFAULTS = {"rollout": HFRolloutWorker, "arena": Arena, "credit": GRPO}
