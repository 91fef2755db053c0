"""Episode sources: what each training batch plays (the engine specification's ``get_batch``).

The DataModule asks its source for ``episodes_per_batch`` episode requests per step, plays them
in one arena run, and shows the source the finished rollouts (``observe``). Curricula, artifact
stores and custom protocols (debate, proposer/solver) are sources chosen by class in the config
(``data.episodes: {class_path: ...}``); the default, :class:`GameMix`, plays the config's games
with seats from the opponent sampler (``data.opponents``: the fixed mix or the league).

A source draws everything random from the ``rng`` it is handed: one stream per batch, seeded by
the run's seed, the rank and the batch's index, so a resumed run plays the games the unbroken run
played. Its own statistics (a curriculum's success rates) go through ``state_dict``, which the
DataModule checkpoints.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from sp_lightning.episodes import Episode


@dataclass
class EpisodeRequest:
    """One episode to play and the seed it is played with."""

    episode: Episode
    seed: int


class EpisodeSource:
    """What each training batch plays; subclass it and name it in ``data.episodes``."""

    def get_batch(self, rng: random.Random, size: int) -> list[EpisodeRequest]:
        """``size`` episode requests for one batch, drawn from ``rng``."""
        raise NotImplementedError

    def observe(self, rollouts: list) -> None:
        """The batch's finished rollouts (scored, with advantages): for curricula and ratings."""

    def bots(self, seed: int) -> dict[str, Any]:
        """Scripted players this source's episodes seat (``bot:<name>``), beside the built-in ones."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


NOTHING_TO_PLAY = ("arena.get_batch: no episode is registered (add_episode) and no source is set "
                   "(data.games or data.episodes); override get_batch or register one")


class NoEpisodes(EpisodeSource):
    """The source of a run with neither games nor ``data.episodes``: its arena must say what a
    batch plays (registered episodes or its own ``get_batch``); one that does not gets the
    arena's own "nothing registered" error from here."""

    def get_batch(self, rng: random.Random, size: int) -> list[EpisodeRequest]:
        raise ValueError(NOTHING_TO_PLAY)


class GameMix(EpisodeSource):
    """The config's games by weight, each seat filled by the opponent sampler (the default)."""

    def __init__(self, games: list, opponents):
        weights = [g.weight for g in games]
        if games and (any(not w >= 0 for w in weights) or sum(weights) <= 0):
            raise ValueError(f"data.games: expected each game's weight >= 0 with at least one > 0 (its share of "
                             f"the batches' games), got {weights}")
        self.games = games
        self.opponents = opponents

    def pick_game(self, rng: random.Random):
        return rng.choices(self.games, weights=[g.weight for g in self.games])[0]

    def wrap_opponents(self, wrap) -> None:
        """Seat its games with ``wrap(opponent sampler)`` from now on: a sampler that rewrites the
        seats the run's own draws (``imitation.SeatRewrite``)."""
        self.opponents = wrap(self.opponents)

    def get_batch(self, rng: random.Random, size: int) -> list[EpisodeRequest]:
        games = [self.pick_game(rng) for _ in range(size)]
        episodes = [game.episode(seats) for game, seats in zip(games, self.opponents.batch_seats(games, rng))]
        return [EpisodeRequest(episode, rng.randrange(2**31)) for episode in episodes]

    def observe(self, rollouts: list) -> None:
        self.opponents.observe(rollouts)
