"""sp_lightning: self-play reinforcement learning for language models on PyTorch Lightning.

The names a notebook or script needs are importable from here (lazily: ``import sp_lightning``
alone loads neither torch nor Lightning, and changes nothing in the process)::

    from sp_lightning import GameSettings, SelfPlayDataModule, SelfPlayModule

A run is a ``SelfPlayModule`` (the policy and its loss) and a ``SelfPlayDataModule`` (the games,
opponents, sampling and evaluation) handed to a ``lightning.Trainer`` (``make_trainer`` builds one as ``sp-lightning fit`` does); each settings class is the
Python form of one block of a config file (``model.policy`` is ``PolicySettings``, ...).
"""

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "SelfPlayModule": "module", "LossSettings": "loss_terms", "OptimizerSettings": "optimizer",
    "EntropyBonus": "loss_terms", "Magnet": "loss_terms", "KLPenalty": "loss_terms", "Schedule": "schedule",
    "SamplingPlan": "sampling",
    "SelfPlayDataModule": "data", "EvalSettings": "engine", "Engine": "engine",
    "AsyncRolloutSettings": "async_rollouts", "LeagueSettings": "league.settings",
    "GameSettings": "games", "RewardSettings": "rubric",
    "PolicySettings": "model", "LoraSettings": "model", "TinyModelSettings": "model",
    "SamplingSettings": "rollout.base", "GRPO": "credit", "RAE": "credit",
    "make_trainer": "trainer", "build_from_config": "cli.common",
    "evaluate": "evaluation.matches", "play_games": "evaluation.matches",
}
"""name -> "module" (the attribute of that name) or "module:attribute"."""


def __getattr__(name: str):
    """Lazy exports (PEP 562): importing the package stays cheap for the CLI's subcommands."""
    if name in _EXPORTS:
        module, _, attribute = _EXPORTS[name].partition(":")
        return getattr(importlib.import_module(f"sp_lightning.{module}"), attribute or name)
    raise AttributeError(f"module 'sp_lightning' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
