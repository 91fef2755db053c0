"""Cross-play ratings (Bradley-Terry and Elo with bootstrap intervals), the report's JSON, PNGs
and TensorBoard events, and ``sp-lightning crossplay`` over a league directory on disk."""

import json
import math

import numpy as np
import pytest

from sp_lightning.evaluation.crossplay import CrossPlay, cross_play
from sp_lightning.evaluation.crossplay_ratings import bradley_terry, rate
from sp_lightning.evaluation.crossplay_report import write_report
from sp_lightning.evaluation.matches import EvalResult
from sp_lightning.games import GameSettings
from sp_lightning.tensorboard import read_scalars


def _result(payoffs):
    return EvalResult(policy="", opponent="", games=len(payoffs), wins=0, draws=0, losses=0,
                      payoff_mean=float(np.mean(payoffs)), payoff_ci=(0.0, 0.0), legal_move_rate=1.0,
                      per_seat_win_rate={}, payoffs=list(payoffs))


def _synthetic_table(elo_truth: dict[str, float], games: int, seed: int = 0) -> CrossPlay:
    """Every pair plays ``games`` decisive games drawn from the Elo model of ``elo_truth``."""
    rng = np.random.default_rng(seed)
    labels = list(elo_truth)
    results = {}
    for x, a in enumerate(labels):
        results[(a, a)] = _result([0.0] * games)
        for b in labels[x + 1:]:
            p = 1 / (1 + 10 ** ((elo_truth[b] - elo_truth[a]) / 400))
            payoffs = np.where(rng.random(games) < p, 1.0, -1.0)
            results[(a, b)], results[(b, a)] = _result(payoffs), _result(-payoffs)
    return CrossPlay(labels, results)


def test_bradley_terry_recovers_the_strengths_that_generated_the_games():
    truth = {"weak": -200.0, "mid": 0.0, "strong": 200.0}
    table = _synthetic_table(truth, games=4000)
    ratings = rate(table, resamples=100, seed=1)
    for label, value, (low, high) in zip(ratings.labels, ratings.bradley_terry, ratings.bradley_terry_ci):
        assert abs(value - truth[label]) < 25 and low <= value <= high
        assert low <= truth[label] <= high or abs(value - truth[label]) < 15
    # sequential Elo ranks them the same way, and its intervals tell the three apart
    assert sorted(ratings.labels, key=lambda a: ratings.elo[ratings.labels.index(a)]) == ["weak", "mid", "strong"]
    elo_ci = dict(zip(ratings.labels, ratings.elo_ci))
    assert elo_ci["weak"][1] < elo_ci["mid"][0] and elo_ci["mid"][1] < elo_ci["strong"][0]
    # centred on 0 (Bradley-Terry by construction, Elo's medians re-centred)
    assert abs(sum(ratings.bradley_terry)) < 1e-6 and abs(sum(ratings.elo)) < 1e-6


@pytest.mark.slow
def test_intervals_narrow_with_more_games_and_repeat_for_a_seed():
    truth = {"a": 0.0, "b": 100.0, "c": 150.0, "d": -50.0, "e": -200.0}
    few, many = _synthetic_table(truth, 40), _synthetic_table(truth, 1000)
    width = lambda r: np.mean([h - lo for lo, h in r.bradley_terry_ci])
    assert width(rate(many, 100, seed=2)) < width(rate(few, 100, seed=2)) / 3
    assert rate(few, 50, seed=3).as_dict() == rate(few, 50, seed=3).as_dict()
    assert rate(few, 50, seed=3).elo_ci != rate(few, 50, seed=4).elo_ci


def test_bradley_terry_counts_draws_as_half_and_keeps_a_scoreless_agent_finite():
    even = {(0, 1): np.full(100, 0.5)}
    assert np.allclose(bradley_terry(2, even), [0.0, 0.0], atol=1e-6)
    shutout = bradley_terry(2, {(0, 1): np.zeros(100)})  # agent 0 never scores: the prior bounds it
    # one prior game drawn: odds 0.5 : 100.5, a gap of 400 log10(201) = 921 points
    assert math.isfinite(shutout[0]) and shutout[1] - shutout[0] == pytest.approx(400 * math.log10(201))


def test_report_writes_json_pngs_and_tensorboard(tmp_path):
    game = GameSettings(id="tictactoe_v1")
    table = cross_play(None, game, {"random": "bot:random", "tactical": "bot:tictactoe_tactical"},
                       games_per_seat=30, seed=5)
    ratings = rate(table, resamples=50, seed=5)
    paths = write_report(table, ratings, str(tmp_path / "out"), {"game": game.name})
    report = json.loads(open(paths["json"]).read())
    assert report["labels"] == ["random", "tactical"] and report["game"] == "tictactoe_v1"
    assert report["payoff_matrix"][1][0] > 0 and report["games_matrix"][0][1] == 60
    assert report["ratings"]["bradley_terry"]["tactical"] > report["ratings"]["bradley_terry"]["random"]
    for key in ("heatmap", "ratings"):
        assert open(paths[key], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    scalars = read_scalars(paths["tensorboard"], "crossplay/.*")
    assert scalars["crossplay/bradley_terry/tactical"][0][1] == pytest.approx(ratings.bradley_terry[1], abs=1e-3)
    assert scalars["crossplay/elo/random"][0][1] == pytest.approx(ratings.elo[0], abs=1e-3)
    assert report["ratings"] == ratings.as_dict()


def test_a_game_is_won_by_the_higher_payoff_not_by_a_positive_one():
    """A non-zero-sum game (both gain in a deal): the pair's score compares the two payoffs, so
    the order of the labels does not decide who won."""
    from sp_lightning.evaluation.crossplay_ratings import pair_scores

    both_gain = CrossPlay(["a", "b"], {("a", "a"): _result([0.0]), ("b", "b"): _result([0.0]),
                                       ("a", "b"): _result([0.5, 0.8, 0.3]), ("b", "a"): _result([0.5, 0.2, 0.9])})
    assert pair_scores(both_gain)[(0, 1)].tolist() == [0.5, 1.0, 0.0]
