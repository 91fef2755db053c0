"""The evaluation module: any policy against any policy, per seat, deterministic by seed."""

from collections import Counter

import pytest

from sp_lightning.evaluation.matches import evaluate, play
from sp_lightning.evaluation.stats import wilson_interval
from sp_lightning.games import GameSettings
from sp_lightning.rollout import HFRolloutWorker, SamplingSettings
from sp_lightning.types import PolicyRef


def test_bots_against_bots_need_no_model_and_fill_every_seat():
    game = GameSettings(id="kuhn_poker_3p_v1")
    result = evaluate(None, game, policy="bot:random", opponent="bot:random", games_per_seat=20, seed=3)
    assert result.games == 60 and set(result.per_seat_win_rate) == set(game.agents)
    assert result.wins + result.draws + result.losses == 60
    _, games = play(None, game, policy="bot:random", opponent="bot:random", games_per_seat=20, seed=3)
    assert Counter(seat for seat, _ in games) == {agent: 20 for agent in game.agents}  # the hero in each seat
    assert all(ref.kind == "bot" for _, rollout in games for ref in rollout.seats.values())
    with pytest.raises(ValueError, match="expected 1 or 2 opponents"):
        evaluate(None, game, policy="bot:random", opponent=["bot:random"] * 3, games_per_seat=1)


def test_same_seed_same_games_other_seed_other_games(tiny_policy):
    model, tok = tiny_policy
    worker = HFRolloutWorker(model, tok)
    game = GameSettings(id="tictactoe_v1", env_kwargs={"invalid_move": "random"})
    run = lambda seed: evaluate(worker, game, opponent="bot:random", games_per_seat=30, seed=seed,
                                sampling=SamplingSettings(max_new_tokens=1)).payoffs
    assert run(5) == run(5)
    assert run(5) != run(6)


def test_uniform_random_tictactoe_matches_the_known_rate():
    """Random against random: X wins ~58.5%, O ~28.8% (exact game-tree values), ~43.7% averaged;
    1000 games per seat put it within the Wilson interval."""
    game = GameSettings(id="tictactoe_v1")
    result = evaluate(None, game, policy=PolicyRef("bot", "random"), opponent="bot:random", games_per_seat=1000, seed=1)
    low, high = wilson_interval(result.wins, result.games)
    assert low <= 0.437 <= high
