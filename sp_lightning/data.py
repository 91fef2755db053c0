"""SelfPlayDataModule: the ``data`` block of a config, the run's engine, and its batches.

The DataModule's arguments are the config's ``data`` block; it checks them when the config is
read (building nothing) and, at setup, builds the run's :class:`~sp_lightning.engine.Engine`
from them and the module's model. It owns the engine: validation, the league callback and the
CLI commands reach it through :attr:`SelfPlayDataModule.engine` (:func:`engine_of` from a
Trainer), and nothing else of the DataModule; the module never does.

The training set is an IterableDataset whose every item is one freshly played Batch. The module
consumes it through ``training_step(dataloader_iter)``, which stops Lightning from prefetching,
so each batch is generated right before the step that trains on it (on-policy). Under DDP every
rank plays its own games (seeded by rank) and yields one batch per step, so ranks stay in step.
The validation set holds one item per game: the played validation of that game, ``eval.games``
games against the evaluation opponent split evenly over the seats (``Engine.validate``), whose
metrics the module logs; the games of ``eval.held_out`` follow, played and never trained on.
Data flows one way: the module reads what the batches and validation items carry and never
reads the engine.

What the engine needs from training reaches it through callbacks the DataModule installs when it
sets up (LightningDataModule has no ``configure_callbacks``; they are added to the Trainer's
before any callback's ``setup`` runs): the weight path (``sp_lightning.weight_sync``), the
engine's own hooks (:class:`EngineHooks`) and, with ``data.league``, the league's callback (the
league on disk, ratings, the evaluator), whose opponent sampler seats every training game.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from torch.utils.data import DataLoader, IterableDataset

from sp_lightning import distributed
from sp_lightning.async_rollouts import AsyncRolloutSettings
from sp_lightning.credit import GRPO, CreditAssigner
from sp_lightning.engine import (
    DEFAULTS, ArenaFactory, Engine, EngineSettings, EvalSettings, RolloutFactory, default_source, engine_of,
)
from sp_lightning.episode_log import EpisodeLogSettings
from sp_lightning.errors import UserError
from sp_lightning.games import FixedMix, GameSettings, OpponentSampler
from sp_lightning.imitation import WarmStartCheckpoint, WarmStartSettings
from sp_lightning.league.callbacks import LeagueCallback
from sp_lightning.league.sampler import LeagueSampler
from sp_lightning.league.settings import LeagueSettings
from sp_lightning.rollout import RetrySettings, SamplingSettings
from sp_lightning.rollout.remote import RemoteModel
from sp_lightning.sampling import SamplingPlan, checked_overrides
from sp_lightning.sources import EpisodeSource
from sp_lightning.weight_sync import WeightSync

__all__ = ["EvalSettings", "SelfPlayDataModule", "engine_of"]


class _RolloutStream(IterableDataset):
    def __init__(self, engine: Engine):
        self.engine = engine

    def __iter__(self):
        while True:
            yield self.engine.next_batch()


class _Validations(IterableDataset):
    """One item per game validated (the training games, then ``data.eval.held_out``): its
    validation, played when the item is drawn (after the weight path has sent the weights being
    validated).

    Its length is known so that Lightning's loop does not prefetch: an iterable of unknown length
    is read one item ahead when the loop starts, before ``on_validation_start``, and the first
    game would be played with the weights of the previous validation (or the base model's)."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def __len__(self) -> int:
        return len(self.engine.validations())

    def __iter__(self):
        for game, prefix, opponents, games in self.engine.validations():
            yield self.engine.validate(game, prefix, opponents, games)


class EngineHooks(L.Callback):
    """The engine's part in a fit: the arena's training hooks, and under asynchronous collection
    the arena's baton lent to the producer for the whole training step (fetching the batch and
    the update) and taken back before any other callback's ``on_train_batch_end`` runs (this
    callback is the first of the Trainer's), so batch-level callbacks and validation see an arena
    that does not change under them."""

    def __init__(self, datamodule: SelfPlayDataModule):
        self.datamodule = datamodule
        self._lent = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.datamodule.engine.on_train_start()

    def on_train_end(self, trainer, pl_module) -> None:
        self.datamodule.engine.on_train_end()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._lent = self.datamodule.engine.update_overlap()
        self._lent.__enter__()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._lent is not None:
            self._lent.__exit__(None, None, None)
            self._lent = None


class SelfPlayDataModule(L.LightningDataModule):
    def __init__(
        self,
        games: list[GameSettings] | None = None,
        episodes_per_batch: int = 64,
        sampling: SamplingSettings | None = None,
        credit: CreditAssigner | None = None,
        eval: EvalSettings | None = None,
        seed: int = 0,
        opponents: OpponentSampler | None = None,
        league: LeagueSettings | None = None,
        rollout: RolloutFactory | None = None,
        retry: RetrySettings | None = None,
        episodes: EpisodeSource | None = None,
        remote_models: dict[str, RemoteModel] | None = None,
        arena: ArenaFactory | None = None,
        episode_log: EpisodeLogSettings | None = None,
        async_rollouts: AsyncRolloutSettings | None = None,
        sampling_by_role: dict[str, dict[str, Any]] | None = None,
        sampling_by_policy: dict[str, dict[str, Any]] | None = None,
        warm_start: WarmStartSettings | None = None,
    ):
        """
        Args:
            games: The games of the training mix, each with its opponents and reward settings;
                they are also what validation plays. Optional when ``episodes`` is given.
            episodes_per_batch: Episodes played (per rank) for each training step (one batch).
            sampling: How the rollout worker samples completions (every request's, unless a role's
                or a policy's own overrides it).
            credit: The credit assigner (class_path: sp_lightning.credit.GRPO | RAE | GAE | ContinuationCredit |
                EpisodicRewardCredit | Constant).
            eval: Evaluation against a fixed opponent at each validation (and on held-out games:
                ``eval.held_out``).
            seed: Seed of the game schedule (deals, seats, opponents).
            opponents: Who sits in each seat of a training episode (class_path:
                sp_lightning.games.FixedMix, the games' own opponent mix, by default). A league
                chooses its own: set ``league`` instead.
            league: League play in one block (``sp_lightning.league.LeagueSettings``): past
                checkpoints and baselines as opponents by matchmaking, ratings, a background
                evaluator. It installs its opponent sampler and its callback.
            rollout: The rollout backend serving every model policy (class_path:
                sp_lightning.rollout.HFRolloutWorker by default), built at setup with the model.
            retry: How a generate call that failed with a transient fault (a remote server's
                timeout or dropped connection) is retried before the run stops.
            episodes: What each batch plays (class_path: a sp_lightning.sources.EpisodeSource,
                e.g. sp_lightning.protocols.proposer_solver.ProposerSolver); by default
                sp_lightning.sources.GameMix of ``games`` with seats from ``opponents``.
            remote_models: Models behind OpenAI-compatible servers, by name: a seat, an opponent
                or a judge plays one as ``remote:<name>`` (see sp_lightning.rollout.remote).
            arena: The arena class that plays each batch (class_path: sp_lightning.arena.Arena
                by default, or a subclass with its own ``get_batch``, registered episodes and
                hooks) with its own settings (``init_args: {max_concurrent: N}`` bounds the
                episodes in flight); the engine gives it the worker, sampling, bots, credit and
                batch size.
            episode_log: A human-readable log of the run's episodes, model calls, rewards and
                batches (``path``), and optionally each batch's decoded records as JSONL
                (``records``); off by default.
            async_rollouts: Play the next batches on a thread of their own while the trainer
                steps, with a bounded queue and a bound on the policy lag of what is trained
                (see sp_lightning.async_rollouts); off by default. Needs a backend whose engine
                holds its own weights (VLLMRolloutWorker, ServerRolloutWorker, or
                HFRolloutWorker).
            sampling_by_role: A role's own sampling, each naming the settings it changes (``judge:
                {temperature: 0.0}``; see sp_lightning.sampling).
            sampling_by_policy: A policy's own sampling, by spec (``learner:solver``,
                ``checkpoint:<id>``) or kind (``base``, ``checkpoint``, ``learner``); it wins over
                the role's where both set a key.
            warm_start: Begin with ``steps`` steps of imitation of a teacher (a bot, a checkpoint or the
                base model playing the learner's seats, or logged games), then self-play; ``warm_start.ckpt`` is kept
                beside the run's checkpoints (sp_lightning.imitation.WarmStartSettings).
        """
        super().__init__()
        games = list(games or [])
        if not games and episodes is None and arena is None:
            raise ValueError("data.games: expected at least one game (or an episode source in data.episodes, "
                             "or an arena in data.arena), got none")
        if episodes_per_batch < 1:
            raise ValueError(f"data.episodes_per_batch: expected >= 1, got {episodes_per_batch}")
        if seed < 0:  # numpy's generators (the bots') take none
            raise ValueError(f"data.seed: expected an int >= 0, got {seed}")
        _refuse_overridden_settings(games, opponents, league, episodes)
        self.warm_start_checkpoint = (WarmStartCheckpoint(warm_start.steps)
                                      if warm_start is not None and warm_start.steps else None)
        self.league_callback = None
        if league is not None:
            opponents = LeagueSampler.from_settings(league)
            self.league_callback = LeagueCallback(league, opponents)
        opponents = opponents if opponents is not None else FixedMix()
        self.settings = EngineSettings(
            games=games, episodes_per_batch=episodes_per_batch,
            sampling=SamplingPlan(sampling or SamplingSettings(),
                                  checked_overrides(sampling_by_role, "data.sampling_by_role"),
                                  checked_overrides(sampling_by_policy, "data.sampling_by_policy")),
            credit=credit if credit is not None else GRPO(), eval=eval or EvalSettings(), seed=seed,
            opponents=opponents, source=default_source(games, opponents, episodes),
            rollout=rollout if rollout is not None else DEFAULTS["rollout"],
            arena=arena if arena is not None else DEFAULTS["arena"], retry=retry or RetrySettings(),
            remote_models=dict(remote_models or {}), episode_log=episode_log or EpisodeLogSettings(),
            async_rollouts=async_rollouts or AsyncRolloutSettings(), league=league, warm_start=warm_start,
        )
        self._engine: Engine | None = None
        self._restored: dict | None = None  # a checkpoint's state loaded before the engine exists
        self.weight_sync = WeightSync(lambda: self.engine.worker)
        self.engine_hooks = EngineHooks(self)
        if self.league_callback is not None:
            self.league_callback.resend_weights = self.weight_sync.send

    # ---- the engine ---------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The run's engine (built at setup, or by :meth:`build_engine`)."""
        if self._engine is None:
            raise RuntimeError("SelfPlayDataModule.engine: no engine yet; it is built at setup (fit, validate) "
                               "or by build_engine(module) outside a Trainer")
        return self._engine

    def build_engine(self, module, rank: int = 0, world_size: int = 1, fit: bool = False) -> Engine:
        """Build the run's engine on ``module``'s model, once (later calls return it): its worker
        serves a copy of the policy. ``sp-lightning evaluate``, ``rollout``, ``play`` and
        ``crossplay`` call it without a Trainer, and then the worker gets the module's weights
        now (:meth:`send_weights`). Under a Trainer, ``setup`` builds it and the weight path
        sends when training or validation starts (after a checkpoint is loaded)."""
        if self._engine is None:
            self._build(module, rank, world_size, fit)
            if not fit:  # (a worker that does not train is sent nothing: WeightSync.send)
                self.send_weights(module)
        return self._engine

    def _build(self, module, rank: int, world_size: int, fit: bool) -> None:
        self._engine = Engine(self.settings, module.model, module.tokenizer, rank=rank, world_size=world_size,
                              fit=fit, learners=getattr(module, "learners", None))
        if self._restored is not None:
            self._engine.load_state_dict(self._restored)
            self._restored = None

    def send_weights(self, module, version: int = 0) -> None:
        """``module``'s weights into the engine's worker, through the weight path: what the
        commands that play outside a Trainer call after loading a checkpoint into the module."""
        self.weight_sync.send(module, version)

    def callbacks(self) -> list:
        """The callbacks the ``data`` block installs, in the order they run after the Trainer's
        own: the weight path, then the league's (which reads the fresh weights, and sends them
        again after resetting an exploiter). :class:`EngineHooks` goes first of all."""
        return ([self.weight_sync] + ([self.league_callback] if self.league_callback is not None else [])
                + ([self.warm_start_checkpoint] if self.warm_start_checkpoint is not None else []))

    # ---- Lightning hooks ----------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        if stage == "fit":
            _check_values_are_learned(self.settings.credit, self.trainer.lightning_module)
        self._install_callbacks()
        if self._engine is not None:  # setup runs again for validate after fit
            return
        self._build(self.trainer.lightning_module, rank=self.trainer.global_rank,
                    world_size=self.trainer.world_size, fit=stage == "fit")
        self._engine.start()

    def _install_callbacks(self) -> None:
        """:meth:`callbacks` among the Trainer's, before its checkpoint callbacks (a checkpoint
        holds the league as of this step), and :class:`EngineHooks` first; once per Trainer."""
        from lightning.pytorch.callbacks import Checkpoint

        callbacks = self.trainer.callbacks
        if self.engine_hooks in callbacks:
            return
        at = next((i for i, c in enumerate(callbacks) if isinstance(c, Checkpoint)), len(callbacks))
        callbacks[at:at] = self.callbacks()
        callbacks.insert(0, self.engine_hooks)

    def teardown(self, stage: str) -> None:
        if self._engine is not None:
            self._engine.close()

    def on_exception(self, exception: BaseException) -> None:
        """A run that raised skips teardown: the engine still shuts down (its log is closed)."""
        self.teardown("exception")

    def train_dataloader(self):
        return DataLoader(_RolloutStream(self.engine), batch_size=None, collate_fn=_identity)

    def val_dataloader(self):
        return DataLoader(_Validations(self.engine), batch_size=None, collate_fn=_identity)

    def state_dict(self) -> dict:
        """The engine's state (rank 0's at the top level); with several ranks every rank's too,
        under ``ranks``: each played its own games from its own streams, and resumes them."""
        state = self.engine.state_dict() if self._engine is not None else dict(self._restored or {})
        ranks = distributed.gather(state)
        return {**ranks[0], "ranks": ranks} if len(ranks) > 1 else state

    def load_state_dict(self, state: dict) -> None:
        ranks = state.get("ranks")
        if ranks is not None:
            if len(ranks) != distributed.world_size():
                raise UserError(f"the checkpoint was written by {len(ranks)} data-parallel ranks, this run has "
                                 f"{distributed.world_size()}: resume with as many ranks (trainer.devices x "
                                 f"trainer.num_nodes) to continue every rank's games")
            state = ranks[distributed.rank()]
        if self._engine is not None:
            self._engine.load_state_dict(state)
        else:  # applied when the engine is built (fit restores after setup; others may not)
            self._restored = state


def _check_values_are_learned(credit: CreditAssigner, module) -> None:
    """An estimator that learns values (``credit.GAE``) trains its value heads in the module's
    loss: a module not given it would train the policy on advantages from heads that never learn."""
    if getattr(credit, "learns_values", False) and getattr(module, "credit", None) is not credit:
        raise ValueError(f"data.credit: {type(credit).__name__} learns values, and the module was not given it: "
                         f"pass SelfPlayModule(credit=datamodule.settings.credit) (sp-lightning fit links "
                         f"model.credit to data.credit)")


def _refuse_overridden_settings(games: list[GameSettings], opponents, league, episodes) -> None:
    """A setting that another one overrides would be silently ignored: name both keys instead."""
    if league is not None and opponents is not None:
        raise ValueError("data.opponents and data.league: a league chooses the opponents by its matchmaking "
                         "(data.league.matchmaking); remove data.opponents")
    if league is not None:
        for index, game in enumerate(games):
            if game.opponents is not None:
                raise ValueError(f"data.games[{index}].opponents and data.league: a league chooses every "
                                 f"opponent by its matchmaking; remove data.games[{index}].opponents")
    if episodes is not None and opponents is not None:
        raise ValueError("data.opponents and data.episodes: an episode source chooses its own seats; remove "
                         "data.opponents (or data.episodes to play data.games)")
    if episodes is not None and league is not None:
        raise ValueError("data.league and data.episodes: a league seats the learner in data.games; remove "
                         "data.episodes (or data.league)")
    if episodes is not None:
        for index, game in enumerate(games):
            if game.opponents is not None:
                raise ValueError(f"data.games[{index}].opponents and data.episodes: an episode source chooses its "
                                 f"own seats; remove data.games[{index}].opponents")
    if isinstance(opponents, LeagueSampler):
        raise ValueError("data.opponents: a LeagueSampler needs its league; write the league as one block, "
                         "data.league (which installs the sampler and its callback), instead")


def _identity(item):
    return item
