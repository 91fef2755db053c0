import json
import random

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from sp_lightning.league.matchmaking import (
    BUCKETS,
    MIRROR_ID,
    MODES,
    Candidate,
    LearnerInfo,
    Matchmaker,
    MatchmakingSettings,
    by_agent,
    by_bucket,
    opponent_distribution,
)

LEARNER = LearnerInfo(step=1000, elo=1200.0, mu=30.0)


def ckpt(step, **kw):
    return Candidate(id=f"ckpt-{step:06d}", kind="checkpoint", step=step, **kw)


def bot(name, **kw):
    return Candidate(id=name, kind="baseline", **kw)


LEAGUE = [
    bot("random_bot", elo=900.0, win_prob=0.95),
    bot("base_model", elo=950.0, win_prob=0.9),
    ckpt(200, elo=1000.0, win_prob=0.8, mu=20.0),
    ckpt(500, elo=1150.0, win_prob=0.6, mu=27.0, quality=0.7),
    ckpt(800, elo=1250.0, win_prob=0.3, mu=31.0, quality=0.4),
    ckpt(900, elo=1400.0, win_prob=0.1, mu=38.0, quality=0.2),
]


def mode_settings(mode, **kw):
    if mode == "fixed":
        kw.setdefault("fixed_opponents", ["random_bot", "ckpt-000500"])
    return MatchmakingSettings(mode=mode, **kw)


def check_distribution(entries):
    assert entries
    assert all(e.prob >= 0 for e in entries)
    assert sum(e.prob for e in entries) == pytest.approx(1.0)
    assert all(e.bucket in BUCKETS for e in entries)


# --------------------------------------------------------------------------- every mode


candidate_sets = st.lists(
    st.builds(
        Candidate,
        id=st.just(""),
        kind=st.sampled_from(["baseline", "checkpoint", "fixed"]),
        step=st.one_of(st.none(), st.integers(0, 2000)),
        elo=st.floats(500, 2000),
        mu=st.floats(0, 50),
        win_prob=st.floats(0, 1),
        quality=st.floats(0, 1),
        coverage=st.one_of(st.none(), st.floats(0, 1)),
    ),
    max_size=8,
).map(lambda cs: [Candidate(**{**c.__dict__, "id": f"agent-{i}"}) for i, c in enumerate(cs)])


@hsettings(max_examples=60, deadline=None)
@given(
    candidates=candidate_sets,
    mode=st.sampled_from(MODES),
    learner_step=st.integers(0, 2000),
    learner_elo=st.floats(500, 2000),
    weighting=st.sampled_from(["hard", "var"]),
    coverage_weight=st.sampled_from([0.0, 2.0]),
)
def test_probabilities_are_a_distribution_in_every_mode(
    candidates, mode, learner_step, learner_elo, weighting, coverage_weight
):
    settings = MatchmakingSettings(
        mode=mode,
        pfsp_weighting=weighting,
        coverage_weight=coverage_weight,
        fixed_opponents=[MIRROR_ID] + [c.id for c in candidates[:2]],
    )
    learner = LearnerInfo(step=learner_step, elo=learner_elo)
    try:
        entries = opponent_distribution(learner, candidates, settings)
    except ValueError as err:  # only when there is truly nothing to play
        checkpoints = [c for c in candidates if c.kind == "checkpoint"]
        baselines = [c for c in candidates if c.kind == "baseline"]
        cold = len(checkpoints) < settings.min_checkpoints
        no_step = mode == "lagged" and all(c.step is None for c in checkpoints)
        assert (cold and not baselines) or (not cold and no_step), err
        return
    check_distribution(entries)
    known = {c.id for c in candidates} | {MIRROR_ID}
    assert {e.id for e in entries} <= known


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_on_the_sample_league(mode):
    check_distribution(opponent_distribution(LEARNER, LEAGUE, mode_settings(mode)))


# --------------------------------------------------------------------------- each mode picks what it says


def test_mirror_plays_only_the_learner():
    assert opponent_distribution(LEARNER, LEAGUE, mode_settings("mirror")) == [(MIRROR_ID, "mirror", 1.0)]
    picks = Matchmaker(mode_settings("mirror")).sample(LEARNER, LEAGUE, random.Random(0), k=5)
    assert picks == [(MIRROR_ID, "mirror")] * 5


def test_fixed_plays_only_the_listed_ids_with_their_weights():
    s = mode_settings("fixed", fixed_opponents=["base_model", MIRROR_ID], fixed_weights=[3.0, 1.0])
    entries = opponent_distribution(LEARNER, LEAGUE, s)
    assert by_agent(entries) == pytest.approx({"base_model": 0.75, MIRROR_ID: 0.25})
    assert {e.bucket for e in entries} == {"fixed"}
    mm = Matchmaker(s)
    rng = random.Random(1)
    assert {p.id for _ in range(200) for p in mm.sample(LEARNER, LEAGUE, rng)} == {"base_model", MIRROR_ID}


def test_fixed_names_missing_ids():
    with pytest.raises(ValueError, match="not in the league"):
        opponent_distribution(LEARNER, LEAGUE, mode_settings("fixed", fixed_opponents=["nobody"]))


def test_lagged_plays_only_inside_the_window():
    s = mode_settings("lagged", lag_min=150, lag_max=600)  # steps [400, 850]
    entries = opponent_distribution(LEARNER, LEAGUE, s)
    assert by_agent(entries) == pytest.approx({"ckpt-000500": 0.5, "ckpt-000800": 0.5})
    assert {e.bucket for e in entries} == {"lagged"}


def test_lagged_falls_back_to_the_checkpoint_nearest_the_window():
    s = mode_settings("lagged", lag_min=50, lag_max=60)  # steps [940, 950]: empty
    assert by_agent(opponent_distribution(LEARNER, LEAGUE, s)) == {"ckpt-000900": 1.0}


def test_random_is_uniform_over_every_candidate():
    probs = by_agent(opponent_distribution(LEARNER, LEAGUE, mode_settings("random")))
    assert probs == pytest.approx({c.id: 1 / len(LEAGUE) for c in LEAGUE})


def test_match_quality_prefers_the_highest_quality():
    probs = by_agent(opponent_distribution(LEARNER, LEAGUE, mode_settings("match_quality")))
    assert max(probs, key=probs.get) == "ckpt-000500"  # quality 0.7


def test_ts_dist_prefers_the_closest_mu():
    probs = by_agent(opponent_distribution(LEARNER, LEAGUE, mode_settings("ts_dist")))
    assert max(probs, key=probs.get) == "ckpt-000800"  # mu 31 vs learner 30
    assert probs["ckpt-000800"] > probs["ckpt-000500"] > probs["ckpt-000200"]


def test_pfsp_hard_favours_the_opponent_the_hero_loses_to():
    s = mode_settings("pfsp", bucket_weights={"exploitable": 1.0})
    probs = by_agent(opponent_distribution(LEARNER, LEAGUE, s))
    assert set(probs) == {"ckpt-000200", "ckpt-000500", "ckpt-000800", "ckpt-000900"}
    assert max(probs, key=probs.get) == "ckpt-000900"  # win_prob 0.1
    assert probs["ckpt-000900"] > probs["ckpt-000800"] > probs["ckpt-000500"] > probs["ckpt-000200"]
    # by hand: (1 - x)^2 + floor, normalised
    weights = {"ckpt-000200": 0.04, "ckpt-000500": 0.16, "ckpt-000800": 0.49, "ckpt-000900": 0.81}
    total = sum(w + 1e-3 for w in weights.values())
    assert probs == pytest.approx({k: (w + 1e-3) / total for k, w in weights.items()})


def test_pfsp_var_favours_even_matches():
    s = mode_settings("pfsp", bucket_weights={"exploitable": 1.0}, pfsp_weighting="var")
    probs = by_agent(opponent_distribution(LEARNER, LEAGUE, s))
    assert max(probs, key=probs.get) == "ckpt-000500"  # win_prob 0.6: x(1-x) = 0.24


def test_pfsp_all_zero_weights_fall_back_to_uniform():
    beaten = [ckpt(1, win_prob=1.0), ckpt(2, win_prob=1.0)]
    s = mode_settings("pfsp", bucket_weights={"exploitable": 1.0}, pfsp_floor=0.0)  # no floor: all zero
    assert by_agent(opponent_distribution(LEARNER, beaten, s)) == pytest.approx({c.id: 0.5 for c in beaten})


def test_pfsp_peers_are_within_the_elo_window_or_the_nearest():
    s = mode_settings("pfsp", bucket_weights={"peer": 1.0})
    probs = by_agent(opponent_distribution(LEARNER, LEAGUE, s))  # learner 1200: 1150 and 1250 within 100
    assert probs == pytest.approx({"ckpt-000500": 0.5, "ckpt-000800": 0.5})
    far = [ckpt(1, elo=500.0), ckpt(2, elo=2000.0), ckpt(3, elo=1500.0)]
    assert by_agent(opponent_distribution(LEARNER, far, s)) == {"ckpt-000003": 1.0}


def test_pfsp_bucket_shares_and_the_empty_baseline_bucket():
    entries = opponent_distribution(LEARNER, LEAGUE, mode_settings("pfsp"))
    assert by_bucket(entries) == pytest.approx({"mirror": 0.3, "peer": 0.4, "exploitable": 0.2, "baseline": 0.1})
    # a checkpoint in two buckets: one entry per bucket, summed by by_agent
    assert [e.bucket for e in entries if e.id == "ckpt-000500"] == ["peer", "exploitable"]
    no_baselines = [c for c in LEAGUE if c.kind == "checkpoint"]
    mix = by_bucket(opponent_distribution(LEARNER, no_baselines, mode_settings("pfsp")))
    assert mix == pytest.approx({"mirror": 0.3 / 0.9, "peer": 0.4 / 0.9, "exploitable": 0.2 / 0.9})


def test_pfsp_coverage_weight_favours_diverse_checkpoints():
    league = [ckpt(1, coverage=0.1), ckpt(2, coverage=0.9), ckpt(3)]
    s = mode_settings("pfsp", bucket_weights={"exploitable": 1.0}, coverage_weight=1.0)
    probs = by_agent(opponent_distribution(LEARNER, league, s))
    assert probs == pytest.approx({"ckpt-000001": 1.1 / 4.0, "ckpt-000002": 1.9 / 4.0, "ckpt-000003": 1.0 / 4.0})


def test_all_weight_on_empty_buckets_raises():
    s = mode_settings("pfsp", bucket_weights={"baseline": 1.0})
    with pytest.raises(ValueError, match="nothing to play"):
        opponent_distribution(LEARNER, [ckpt(1), ckpt(2)], s)


# --------------------------------------------------------------------------- cold start


@pytest.mark.parametrize("mode", ["pfsp", "lagged", "random", "match_quality", "ts_dist"])
def test_cold_start_plays_only_baselines(mode):
    league = [bot("random_bot"), bot("base_model"), ckpt(100, win_prob=0.0)]  # one checkpoint
    entries = opponent_distribution(LEARNER, league, mode_settings(mode))
    assert by_agent(entries) == pytest.approx({"random_bot": 0.5, "base_model": 0.5})
    assert {e.bucket for e in entries} == {"baseline"}


def test_cold_start_without_baselines_says_so():
    with pytest.raises(ValueError, match="cold start"):
        opponent_distribution(LEARNER, [ckpt(100)], mode_settings("pfsp"))


def test_cold_start_does_not_apply_to_mirror_and_fixed():
    league = [bot("random_bot"), ckpt(100)]
    assert by_agent(opponent_distribution(LEARNER, league, mode_settings("mirror"))) == {MIRROR_ID: 1.0}
    s = mode_settings("fixed", fixed_opponents=["ckpt-000100"])
    assert by_agent(opponent_distribution(LEARNER, league, s)) == {"ckpt-000100": 1.0}


# --------------------------------------------------------------------------- sampling


def test_realised_pfsp_mix_matches_the_configured_mix():
    mm = Matchmaker(MatchmakingSettings())
    rng = random.Random(1234)
    for _ in range(2000):
        mm.sample(LEARNER, LEAGUE, rng)
    mix = mm.realised_mix()
    for bucket, share in {"mirror": 0.3, "peer": 0.4, "exploitable": 0.2, "baseline": 0.1}.items():
        assert abs(mix[bucket] - share) <= 0.05, (bucket, mix)


def test_sampling_is_deterministic_given_the_rng():
    a = [Matchmaker().sample(LEARNER, LEAGUE, random.Random(7), k=3) for _ in range(2)]
    assert a[0] == a[1]


def test_multi_seat_with_one_distinct_clones_one_opponent():
    mm = Matchmaker(MatchmakingSettings())
    rng = random.Random(3)
    for _ in range(50):
        picks = mm.sample(LEARNER, LEAGUE, rng, k=3, max_distinct=1)
        assert len(picks) == 3 and len(set(picks)) == 1
    assert sum(mm.bucket_counts.values()) == 150  # counted per seat


def test_multi_seat_respects_max_distinct():
    mm = Matchmaker(mode_settings("random"))
    rng = random.Random(5)
    for _ in range(50):
        picks = mm.sample(LEARNER, LEAGUE, rng, k=5, max_distinct=2)
        assert len(picks) == 5 and len({p.id for p in picks}) <= 2


def test_sample_argument_errors():
    with pytest.raises(ValueError, match="k"):
        Matchmaker().sample(LEARNER, LEAGUE, random.Random(0), k=0)
    with pytest.raises(ValueError, match="max_distinct"):
        Matchmaker().sample(LEARNER, LEAGUE, random.Random(0), k=2, max_distinct=0)


def test_state_dict_round_trip_continues_the_statistics():
    mm = Matchmaker(MatchmakingSettings())
    rng = random.Random(9)
    for _ in range(100):
        mm.sample(LEARNER, LEAGUE, rng)
    state = json.loads(json.dumps(mm.state_dict()))
    resumed = Matchmaker(MatchmakingSettings())
    resumed.load_state_dict(state)
    assert resumed.realised_mix() == mm.realised_mix()
    resumed.sample(LEARNER, LEAGUE, rng)
    assert sum(resumed.bucket_counts.values()) == 101
    with pytest.raises(ValueError, match="bucket_counts"):
        resumed.load_state_dict({"counts": {}})


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mode": "league"}, "mode"),
        ({"pfsp_weighting": "soft"}, "pfsp_weighting"),
        ({"bucket_weights": {"peers": 1.0}}, "unknown"),
        ({"bucket_weights": {"peer": 0.0}}, "positive sum"),
        ({"lag_min": 10, "lag_max": 5}, "lag_max"),
        ({"mu_temperature": 0.0}, "mu_temperature"),
        ({"mode": "fixed"}, "fixed_opponents"),
        ({"fixed_opponents": ["a"], "fixed_weights": [1.0, 2.0]}, "one weight per"),
    ],
)
def test_settings_errors_say_what_was_expected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MatchmakingSettings(**kwargs)


def test_candidate_errors():
    with pytest.raises(ValueError, match="kind"):
        Candidate("x", kind="bot")
    with pytest.raises(ValueError, match="reserved"):
        Candidate(MIRROR_ID, kind="checkpoint")
    with pytest.raises(ValueError, match="win_prob"):
        Candidate("x", kind="checkpoint", win_prob=1.5)
    with pytest.raises(ValueError, match="unique"):
        opponent_distribution(LEARNER, [bot("a"), bot("a")], MatchmakingSettings())
