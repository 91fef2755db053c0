"""The league: past selves and baselines that the hero trains against, rated over time.

- ``registry``: the league on disk (one JSON file, atomic writes under a file lock).
- ``ratings``: TrueSkill and multi-player Elo.
- ``matchmaking``: who the hero plays (PFSP and the modes Unstable Baselines users know).
- ``exploration``: n-gram coverage of each agent's action sequences.
- ``sampler``: the league's opponent sampler (composes each training batch).
- ``callbacks``: the Lightning callback: checkpoint schedule, ratings, background evaluator.
- ``evaluator``: the background tournament process, reading adapters from disk.
"""

from sp_lightning.league.callbacks import CheckpointSchedule, EvaluatorSettings, LeagueCallback
from sp_lightning.league.matchmaking import MatchmakingSettings
from sp_lightning.league.sampler import LeagueSampler

__all__ = ["CheckpointSchedule", "EvaluatorSettings", "LeagueCallback", "LeagueSampler", "MatchmakingSettings"]
