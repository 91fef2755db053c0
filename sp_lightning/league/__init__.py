"""The league: past selves and baselines that the learner trains against, rated over time.

A league is one block of config, ``data.league`` (``settings.LeagueSettings``), which installs
the opponent sampler and the callback below.

- ``settings``: the ``data.league`` block (schedule, evaluator, matchmaking, baselines).
- ``registry``: the league on disk (one JSON file, atomic writes under a file lock).
- ``ratings``: TrueSkill and multi-player Elo.
- ``matchmaking``: who the learner plays (PFSP and the modes Unstable Baselines users know).
- ``exploration``: n-gram coverage of each agent's action sequences.
- ``sampler``: the league's opponent sampler (composes each training batch).
- ``callbacks``: the Lightning callback, which wires training's hooks to the units below.
- ``store``: the lead's league on disk: checkpoint schedule, promotions and prunes, resume.
- ``sync``: the ranks' collectives, and each rank's worker serving the league's adapters.
- ``evaluator_process``: starts, polls and stops the background tournament.
- ``evaluator``: the background tournament process, reading adapters from disk.
- ``exact``: exact exploitability and best responses, for every game that has them.
- ``best_responses``: a best response as a table on disk and as a bot.
- ``exploiters``: AlphaStar's exploiters as the lead tracks them.
- ``messages``: what passes between ranks and processes, as dataclasses.
- ``metrics``: the league's figures and their names.
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
