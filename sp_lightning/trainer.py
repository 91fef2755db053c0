"""The Lightning Trainer as ``sp-lightning fit`` builds it, for the CLI, notebooks and scripts.

Defaults where a config is silent (100 steps, one batch of games each, validation every 50
steps), checkpoint files that a kill cannot corrupt, TensorBoard charts and decoded games, and
this engine's progress view. :func:`make_trainer` is the Python form of ``fit``'s ``trainer:``
block.
"""

from __future__ import annotations

import logging
import warnings

KNOWN_WARNINGS = (
    # training_step(dataloader_iter) is flagged as experimental, and as wrong for a step that
    # reads the iterator more than once: this engine reads it once per step, and it is what keeps
    # training on-policy (Lightning does not fetch the next batch before the step that plays it)
    ".*Found `dataloader_iter` argument.*",
    ".*You are using the `dataloader_iter` step flavor.*",
    # the batches are played by the engine in this process (its worker may hold a GPU); worker
    # processes would each need an engine of their own and the weights sent to them
    ".*does not have many workers.*",
    # the validation games have a length so that the loop does not read one ahead of the weights
    # being sent (data._Validations); they are played in this process, never by loader workers
    ".*Your `IterableDataset` has `__len__` defined.*",
    # a checkpoint every N steps holds the weights after that step's update: what a resume needs
    ".*Using ModelCheckpoint with manual optimization.*",
)
"""Lightning warnings about choices this engine makes on purpose, each wrong for it as the
comment beside it says."""
DEPENDENCY_WARNINGS = (
    # Lightning 2.6's own use of a torch pytree API that torch 2.12 deprecated: nothing a user of
    # this engine can change (Lightning's next release drops it)
    (FutureWarning, r".*isinstance\(treespec, LeafSpec\)"),
    # peft reads transformers' old attribute name when it wraps a model: peft's to change
    (FutureWarning, r".*`is_gradient_checkpointing` is deprecated"),
)
"""(category, message) of deprecations inside our dependencies that a first run would print and
a user could mistake for a fault of theirs."""
DEPENDENCY_NOTICES = (
    # Lightning's suggestions to install its cloud services (litlogger, litmodels), logged on every
    # fit to stderr beside the run's real messages: nothing a run here needs or can act on
    "💡 Tip:",
)
"""Starts of the log lines from Lightning that a run leaves out (see :class:`_LeaveOut`)."""
_LIGHTNING_INFO = "lightning.pytorch.utilities.rank_zero"
"""The logger of Lightning's ``rank_zero_info`` messages."""


class _LeaveOut(logging.Filter):
    """Drops the log records that start with one of :data:`DEPENDENCY_NOTICES`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(DEPENDENCY_NOTICES)


def quiet_known_warnings() -> None:
    """Silence :data:`KNOWN_WARNINGS`, :data:`DEPENDENCY_WARNINGS` and :data:`DEPENDENCY_NOTICES`
    (called by the commands and :func:`make_trainer`)."""
    for message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    for category, message in DEPENDENCY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    info = logging.getLogger(_LIGHTNING_INFO)
    if not any(isinstance(f, _LeaveOut) for f in info.filters):
        info.addFilter(_LeaveOut())


def default_precision() -> str:
    """bf16 autocast where the hardware has it (a CUDA GPU with bf16), full precision elsewhere."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16-mixed"
    return "32-true"


def trainer_defaults() -> dict:
    """The Trainer settings ``sp-lightning fit`` uses where a config is silent: ``max_steps``
    counts batches of games trained on (``global_step`` is one per batch, whatever
    ``model.update_epochs``; a batch with nothing to learn from, all bots, is not counted),
    validation every 50 steps (not per epoch: the stream has none), no sanity
    validation, every step logged."""
    return {
        "precision": default_precision(),
        "max_steps": 100,
        "check_val_every_n_epoch": None,
        "val_check_interval": 50,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": 1,
        "accelerator": "auto",
        "devices": 1,
    }


def make_trainer(**kwargs):
    """A ``lightning.Trainer`` as ``sp-lightning fit`` builds it, for notebooks and scripts:
    :func:`trainer_defaults` under ``kwargs``, then :func:`finish_trainer`."""
    import lightning as L

    quiet_known_warnings()
    return finish_trainer(L.Trainer(**with_default_progress_bar({**trainer_defaults(), **kwargs})))


def finish_trainer(trainer):
    """Checkpoint files a kill cannot corrupt (sp_lightning.checkpoint_io) unless the trainer
    has its own checkpoint IO, and readable TensorBoard (sp_lightning.tensorboard)."""
    from lightning.pytorch.plugins.io import TorchCheckpointIO

    from sp_lightning.checkpoint_io import AtomicCheckpointIO

    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()
    add_tensorboard_games(trainer)
    return trainer


def with_default_progress_bar(trainer_kwargs: dict) -> dict:
    """``trainer_kwargs`` with ``progress.default_progress_bar()`` among the callbacks, unless they
    hold a progress bar of their own or the bar is switched off: Lightning adds its default bar
    only when the callbacks have none, so one given here takes its place and one the config
    chose stays."""
    from lightning.pytorch.callbacks import ProgressBar

    from sp_lightning.progress import default_progress_bar

    callbacks = trainer_kwargs.get("callbacks") or []
    callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    if trainer_kwargs.get("enable_progress_bar", True) is False or any(isinstance(c, ProgressBar) for c in callbacks):
        return trainer_kwargs
    return {**trainer_kwargs, "callbacks": [*callbacks, default_progress_bar()]}


def add_tensorboard_games(trainer) -> None:
    """With a TensorBoard logger, the chart layout and decoded games (sp_lightning.tensorboard),
    unless the config added its own ``TensorBoardGames``."""
    from lightning.pytorch.loggers import TensorBoardLogger

    from sp_lightning.tensorboard import TensorBoardGames

    has_tensorboard = any(isinstance(logger, TensorBoardLogger) for logger in trainer.loggers)
    if has_tensorboard and not any(isinstance(c, TensorBoardGames) for c in trainer.callbacks):
        trainer.callbacks.append(TensorBoardGames())
