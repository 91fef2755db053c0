"""The evaluation module: any policy against any policy, per seat, deterministic by seed."""

from collections import Counter

import pytest

from sp_lightning.evaluation.crossplay import cross_play
from sp_lightning.evaluation.matches import Match, evaluate, play
from sp_lightning.evaluation.stats import wilson_interval
from sp_lightning.games import GameSettings
from sp_lightning.rollout import HFRolloutWorker, SamplingSettings
from sp_lightning.types import PolicyRef


def test_bots_against_bots_need_no_model_and_fill_every_seat():
    game = GameSettings(id="kuhn_poker_3p_v1")
    result = evaluate(None, game, policy="bot:random", opponent="bot:random", games_per_seat=20, seed=3)
    assert result.games == 60 and set(result.per_seat_win_rate) == set(game.agents)
    assert result.wins + result.draws + result.losses == 60
    _, games = play(None, Match(game, "bot:random", "bot:random", 20, 3))
    assert Counter(seat for seat, _ in games) == {agent: 20 for agent in game.agents}  # the tested policy in each seat
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


@pytest.mark.slow
def test_uniform_random_tictactoe_matches_the_known_rate():
    """Random against random: X wins ~58.5%, O ~28.8% (exact game-tree values), ~43.7% averaged;
    1000 games per seat put it within the Wilson interval."""
    game = GameSettings(id="tictactoe_v1")
    result = evaluate(None, game, policy=PolicyRef("bot", "random"), opponent="bot:random", games_per_seat=1000, seed=1)
    low, high = wilson_interval(result.wins, result.games)
    assert low <= 0.437 <= high


# ---- cross-play ------------------------------------------------------------------------------

def test_cross_play_fills_every_cell_from_both_seats_and_reads_each_pair_both_ways():
    """Bots only: the tactical bot (takes a win, blocks one) beats RandomBot with an interval above
    zero; a pair's two cells are the same games read from either seat (zero-sum: payoffs negate)."""
    game = GameSettings(id="tictactoe_v1")
    table = cross_play(None, game, {"random": "bot:random", "tactical": "bot:tictactoe_tactical"},
                       games_per_seat=100, seed=7)
    assert set(table.results) == {(a, b) for a in table.labels for b in table.labels}
    assert all(r.games == 200 for r in table.results.values())
    tactical, random_ = table.results[("tactical", "random")], table.results[("random", "tactical")]
    assert tactical.payoff_ci[0] > 0 and tactical.wins == random_.losses and tactical.losses == random_.wins
    assert [round(-p, 9) for p in tactical.payoffs] == [round(p, 9) for p in random_.payoffs]
    assert tactical.per_seat_win_rate != random_.per_seat_win_rate  # read from the other seat
    matrix = table.matrix()
    assert matrix[0][1] == -matrix[1][0] and table.labels == ["random", "tactical"]
    assert "tactical" in table.table() and table.interval_halfwidth() > 0


def test_cross_play_serves_model_policies_in_one_run_and_refuses_three_seat_games(tiny_policy):
    model, tok = tiny_policy
    worker = HFRolloutWorker(model, tok)
    game = GameSettings(id="kuhn_poker_v1", env_kwargs={"invalid_move": "random"})
    sampling = SamplingSettings(max_new_tokens=1)
    calls = []
    generate = worker.generate
    worker.generate = lambda requests, sampling: (calls.append(len(requests)), generate(requests, sampling))[1]
    policies = {"learner": "learner", "base": "base", "random": "bot:random"}
    table = cross_play(worker, game, policies, games_per_seat=20, sampling=sampling, seed=3)
    in_one_run, calls[:] = len(calls), []
    for a, b in [("learner", "learner"), ("learner", "base"), ("learner", "random"), ("base", "base"),
                 ("base", "random")]:  # the pairs with a model seat, each on its own
        evaluate(worker, game, policy=policies[a], opponent=policies[b], games_per_seat=20, sampling=sampling, seed=3)
    # the pairs' model moves shared generate calls: one per move of a Kuhn game (at most 3)
    assert in_one_run <= 3 < len(calls)
    alone = evaluate(worker, game, policy="learner", opponent="base", games_per_seat=20, sampling=sampling, seed=3)
    assert table.results[("learner", "base")].games == alone.games == 40
    model_pair, reverse = table.results[("learner", "base")], table.results[("base", "learner")]
    assert (model_pair.wins, model_pair.losses) == (reverse.losses, reverse.wins)
    with pytest.raises(ValueError, match="needs 2"):
        cross_play(None, GameSettings(id="kuhn_poker_3p_v1"), {"r": "bot:random"})
