"""Hand-computed checks of Elo and TrueSkill."""

import math

import pytest
import trueskill

from sp_lightning.league.ratings import (
    TrueSkillRatings,
    elo_expected,
    elo_update,
    ranks_from_scores,
)


def test_ranks_from_scores_best_is_zero_and_ties_share():
    assert ranks_from_scores([3, 1, 3, 0]) == [0, 2, 0, 3]
    assert ranks_from_scores([1.0, -1.0]) == [0, 1]
    assert ranks_from_scores([0.5, 0.5]) == [0, 0]


def test_elo_expected():
    assert elo_expected(1000, 1000) == 0.5
    # 400 points ahead: 1 / (1 + 10^-1) = 10/11
    assert elo_expected(1400, 1000) == pytest.approx(10 / 11)
    assert elo_expected(1000, 1400) + elo_expected(1400, 1000) == pytest.approx(1.0)


def test_elo_two_equal_players():
    """Equal ratings expect 0.5 each: the winner gets 32 * (1 - 0.5) = +16."""
    assert elo_update([1000, 1000], [1, 0]) == [1016, 984]
    assert elo_update([1000, 1000], [-1, 1]) == [984, 1016]
    assert elo_update([1000, 1000], [0, 0]) == [1000, 1000]  # a draw between equals


def test_elo_upset():
    """1000 beats 1200: expected 1 / (1 + 10^(200/400)) = 0.2403, so +32 * 0.7597 = +24.31."""
    low, high = elo_update([1000, 1200], [1, 0])
    assert low == pytest.approx(1000 + 32 * (1 - 1 / (1 + 10**0.5)))
    assert low == pytest.approx(1024.31, abs=0.01)
    assert high == pytest.approx(1200 - 24.31, abs=0.01)


def test_elo_three_players_pairwise_with_half_k():
    """Three equal players, scores 3 > 2 > 1: three games, each with K / (N-1) = 16.
    First wins 2 games: 2 * 16 * 0.5 = +16; second wins one, loses one: 0; third: -16."""
    assert elo_update([1000, 1000, 1000], [3, 2, 1]) == [1016, 1000, 984]
    # a tie for first: the two leaders draw each other and each beat the third: +8 each, -16
    assert elo_update([1000, 1000, 1000], [1, 1, 0]) == [1008, 1008, 984]


def test_elo_is_zero_sum_and_order_free():
    ratings, scores = [1100.0, 950.0, 1020.0, 1300.0], [0.0, 2.0, 1.0, 2.0]
    new = elo_update(ratings, scores, k=24)
    assert sum(new) == pytest.approx(sum(ratings))
    perm = [2, 0, 3, 1]
    new_perm = elo_update([ratings[i] for i in perm], [scores[i] for i in perm], k=24)
    assert new_perm == pytest.approx([new[i] for i in perm])


def test_elo_rejects_mismatched_lengths_and_keeps_a_lone_player():
    with pytest.raises(ValueError, match="2 ratings and 1 scores"):
        elo_update([1000, 1000], [1])
    assert elo_update([1234.0], [1.0]) == [1234.0]


def test_trueskill_1v1_matches_the_package_docs():
    """The trueskill docs' first 1v1 game between new players: 29.396/7.171 and 20.604/7.171."""
    ts = TrueSkillRatings()
    (winner,), (loser,) = ts.rate([[(25.0, 25 / 3)], [(25.0, 25 / 3)]], [0, 1])
    assert winner == pytest.approx((29.396, 7.171), abs=1e-3)
    assert loser == pytest.approx((20.604, 7.171), abs=1e-3)


def test_trueskill_winner_rises_loser_falls():
    ts = TrueSkillRatings()
    a, b = (27.0, 5.0), (24.0, 7.0)
    (a2,), (b2,) = ts.rate([[a], [b]], [1, 0])  # b wins
    assert b2[0] > b[0] and a2[0] < a[0]
    assert a2[1] < a[1] and b2[1] < b[1]


def test_trueskill_draw_between_equals_keeps_mus_and_shrinks_sigma():
    ts = TrueSkillRatings()
    (a,), (b,) = ts.rate([[(25.0, 25 / 3)], [(25.0, 25 / 3)]], [0, 0])
    assert a[0] == pytest.approx(25.0) and b[0] == pytest.approx(25.0)
    assert a[1] == pytest.approx(b[1]) and a[1] < 25 / 3
    assert a[1] == pytest.approx(6.458, abs=1e-3)  # the package's documented draw


def test_trueskill_three_teams_and_a_team_of_two():
    ts = TrueSkillRatings()
    new = ts.rate([[(25.0, 8.0)], [(25.0, 8.0)], [(25.0, 8.0)]], [2, 0, 1])
    assert new[1][0][0] > 25.0 > new[0][0][0]  # first rises, last falls
    assert new[1][0][0] > new[2][0][0] > new[0][0][0]
    # a team of two: both members move together, the lone winner rises
    (solo,), (m1, m2) = ts.rate([[(25.0, 8.0)], [(25.0, 8.0), (20.0, 4.0)]], [0, 1])
    assert solo[0] > 25.0 and m1[0] < 25.0 and m2[0] < 20.0
    with pytest.raises(ValueError, match="one rank per team"):
        ts.rate([[(25.0, 8.0)], [(25.0, 8.0)]], [0])
    with pytest.raises(ValueError, match="at least 2 teams"):
        ts.rate([[(25.0, 8.0)]], [0])


def test_win_probability():
    ts = TrueSkillRatings()
    assert ts.win_probability((25.0, 8.0), (25.0, 3.0)) == pytest.approx(0.5)
    a, b = (30.0, 2.0), (26.0, 5.0)
    assert ts.win_probability(a, b) + ts.win_probability(b, a) == pytest.approx(1.0)
    assert ts.win_probability(a, b) > 0.5
    # no uncertainty: Phi(5 / sqrt(2 * beta^2)), beta = 25/6: Phi(0.8485) = 0.8019
    expected = 0.5 * (1 + math.erf(5 / math.sqrt(2 * (25 / 6) ** 2) / math.sqrt(2)))
    assert ts.win_probability((30.0, 0.0), (25.0, 0.0)) == pytest.approx(expected)
    assert expected == pytest.approx(0.8019, abs=1e-4)


def test_quality_and_conservative():
    ts = TrueSkillRatings()
    even = ts.quality([[(25.0, 25 / 3)], [(25.0, 25 / 3)]])
    uneven = ts.quality([[(35.0, 25 / 3)], [(15.0, 25 / 3)]])
    assert 0.0 < uneven < even <= 1.0
    assert ts.quality([[(25.0, 1.0)], [(25.0, 1.0)], [(25.0, 1.0)]]) > 0.0
    assert TrueSkillRatings.conservative(25.0, 25 / 3) == pytest.approx(0.0)
    assert ts.conservative(30.0, 2.0) == 24.0


def test_settings_are_used_and_the_global_environment_is_left_alone():
    before = trueskill.global_env()
    ts = TrueSkillRatings(mu=1000.0, sigma=300.0, draw_probability=0.0)
    assert (ts.beta, ts.tau) == (150.0, 3.0)
    assert trueskill.global_env() is before and trueskill.global_env().mu == 25.0
    (w,), (l,) = ts.rate([[(1000.0, 300.0)], [(1000.0, 300.0)]], [0, 1])
    assert w[0] > 1000.0 > l[0]
    # a wider beta makes the same mu gap less decisive
    narrow = TrueSkillRatings(beta=1.0).win_probability((26.0, 0.0), (25.0, 0.0))
    wide = TrueSkillRatings(beta=10.0).win_probability((26.0, 0.0), (25.0, 0.0))
    assert narrow > wide > 0.5
    with pytest.raises(ValueError, match="draw_probability"):
        TrueSkillRatings(draw_probability=1.0)


def test_pool_matches_sums_payoffs_per_block_of_the_same_agents():
    from sp_lightning.league.ratings import pool_matches

    games = [(["learner", "random_bot"], [2.0, -2.0]), (["random_bot", "learner"], [1.0, -1.0]),
             (["learner", "ckpt-1"], [1.0, -1.0]), (["learner", "random_bot"], [-1.0, 1.0]),
             (["learner", "random_bot"], [2.0, -2.0])]
    assert pool_matches(games, 1) == [(list(ids), list(s)) for ids, s in games]
    # learner vs random_bot: blocks (+2 -1 -1) and (+2); learner vs ckpt-1: one block of one game
    assert pool_matches(games, 3) == [(["learner", "random_bot"], [0.0, 0.0]),
                                      (["learner", "random_bot"], [2.0, -2.0]),
                                      (["ckpt-1", "learner"], [-1.0, 1.0])]
    with pytest.raises(ValueError, match="games_per_match"):
        pool_matches(games, 0)


def test_blocks_of_hands_rate_the_chip_winner_above_the_hand_winner():
    """Per hand, an agent winning 1 chip in 3 of 4 hands beats one winning 4 chips in the other;
    per block of 4 hands, the chip winner (+1 net) is rated higher."""
    from sp_lightning.league.ratings import TrueSkillRatings, pool_matches, ranks_from_scores

    hands = [(["nit", "shark"], [1.0, -1.0])] * 3 + [(["nit", "shark"], [-4.0, 4.0])]
    for games_per_match, leader in ((1, "nit"), (4, "shark")):
        ts, ratings = TrueSkillRatings(), {"nit": (25.0, 25 / 3), "shark": (25.0, 25 / 3)}
        for _ in range(50):
            for ids, scores in pool_matches(hands, games_per_match):
                new = ts.rate([[ratings[i]] for i in ids], ranks_from_scores(scores))
                ratings.update({i: tuple(r[0]) for i, r in zip(ids, new)})
        assert max(ratings, key=lambda i: ratings[i][0]) == leader


def test_match_pooler_carries_games_across_calls_and_through_its_state():
    from sp_lightning.league.ratings import MatchPooler

    pooler = MatchPooler(3)
    assert pooler.add([(["learner", "bot"], [1.0, -1.0]), (["bot", "learner"], [2.0, -2.0])]) == []
    resumed = MatchPooler(3)
    resumed.load_state_dict(pooler.state_dict())
    for p in (pooler, resumed):  # the third game completes the block, from the saved state too
        assert p.add([(["learner", "bot"], [4.0, -4.0]), (["learner", "ckpt"], [1.0, -1.0])]) == [
            (["bot", "learner"], [-3.0, 3.0])]
        assert p.waiting == {("ckpt", "learner"): [[-1.0, 1.0]]}
    assert MatchPooler(1).add([(["learner", "bot"], [1.0, -1.0])]) == [(["learner", "bot"], [1.0, -1.0])]
