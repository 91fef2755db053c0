"""The league: past selves and baselines that the learner trains against, rated over time.

A league is one block of config, ``data.league`` (``settings.LeagueSettings``), which installs
the opponent sampler and the callback below.

- ``settings``: the ``data.league`` block (schedule, evaluator, matchmaking, baselines).
- ``registry``: the league on disk (one JSON file, atomic writes under a file lock).
- ``ratings``: TrueSkill and multi-player Elo.
- ``matchmaking``: who the learner plays (PFSP and the modes Unstable Baselines users know).
- ``exploration``: n-gram coverage of each agent's action sequences.
- ``sampler``: the league's opponent sampler (composes each training batch).
- ``callbacks``: the Lightning callback: checkpoint schedule, ratings, background evaluator.
- ``evaluator``: the background tournament process, reading adapters from disk.
"""

import importlib

_EXPORTS = {
    "LeagueSettings": "settings", "CheckpointSchedule": "settings", "EvaluatorSettings": "settings",
    "MatchmakingSettings": "matchmaking", "LeagueCallback": "callbacks", "LeagueSampler": "sampler",
}


def __getattr__(name: str):
    """Lazy exports: the evaluator process and the registry need no Lightning import."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"sp_lightning.league.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'sp_lightning.league' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
