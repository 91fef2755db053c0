"""Episodes: who sits in which seat, what each model is asked, when the episode ends.

- :class:`Episode`, :class:`EpisodeContext` (``base``): the protocol every episode follows.
- :class:`GameEpisode` (``game``): a PettingZoo AEC text game with a policy per seat.
- :class:`SingleTurnEpisode` (``single_turn``): one prompt, one completion.
- :class:`MultiTurnEpisode`, :class:`AlternatingRolesEpisode` (``chat``): chat loops with a
  shared transcript and private observations.
"""

from sp_lightning.episodes.base import Episode, EpisodeContext
from sp_lightning.episodes.chat import ENV, AlternatingRolesEpisode, ChatState, Message, MultiTurnEpisode
from sp_lightning.episodes.game import CUT_OFF_REASONS, GameEpisode
from sp_lightning.episodes.single_turn import SingleTurnEpisode

__all__ = [
    "AlternatingRolesEpisode", "CUT_OFF_REASONS", "ChatState", "ENV", "Episode", "EpisodeContext",
    "GameEpisode", "Message", "MultiTurnEpisode", "SingleTurnEpisode",
]
