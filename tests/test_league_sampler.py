"""The league's opponent sampler: cold start, the realised mix, seats, match results."""

import random

from sp_lightning.games import GameSettings
from sp_lightning.league.registry import AgentRecord
from sp_lightning.league.sampler import LeagueSampler
from sp_lightning.types import LEARNER_ID
from sp_lightning.types import Completion, Rollout, Step

BASELINES = [AgentRecord("base_model", "baseline", "base"), AgentRecord("random_bot", "baseline", "bot:random"),
             AgentRecord("chaos_bot", "baseline", "bot:chaos")]
LEARNER_RECORD = AgentRecord(LEARNER_ID, "learner", "learner", step=100)


def _checkpoint(step, elo):
    return AgentRecord(f"ckpt-{step:06d}", "checkpoint", f"checkpoint:ckpt-{step:06d}", adapter_path="x", step=step, elo=elo)


def test_cold_start_plays_only_baselines():
    sampler = LeagueSampler()
    sampler.refresh(BASELINES + [LEARNER_RECORD, _checkpoint(10, 1000)], LEARNER_RECORD)
    game, rng = GameSettings(id="tictactoe_v1"), random.Random(0)
    opponents = {str(p) for _ in range(200) for p in sampler.seats(game, rng).values() if p.kind != "learner"}
    assert opponents <= {"base", "bot:random", "bot:chaos"}
    assert sampler.matchmaker.realised_mix() == {"baseline": 1.0}


def test_realised_mix_over_1000_episodes_is_the_configured_one_and_the_learner_seat_rotates():
    sampler = LeagueSampler()
    league = BASELINES + [LEARNER_RECORD] + [_checkpoint(s, 900 + s) for s in range(10, 101, 10)]
    sampler.refresh(league, LEARNER_RECORD)
    game, rng = GameSettings(id="tictactoe_v1"), random.Random(1)
    for episode in range(1000):
        seats = sampler.seats(game, rng)
        assert seats[game.agents[episode % 2]].kind == "learner", "the learner's seat rotates"
    mix = sampler.matchmaker.realised_mix()
    for bucket, share in {"mirror": 0.3, "peer": 0.4, "exploitable": 0.2, "baseline": 0.1}.items():
        assert abs(mix[bucket] - share) <= 0.05, (bucket, mix)


def test_finished_games_become_rating_matches_and_win_rates():
    sampler = LeagueSampler(win_rate_decay=0.5)
    sampler.refresh(BASELINES + [LEARNER_RECORD], LEARNER_RECORD)
    from sp_lightning.types import LEARNER, PolicyRef

    rollout = Rollout("tictactoe_v1", steps=[Step("player_0", Completion("[4]", policy=LEARNER), info={"parsed_move": "[4]"})],
                      seats={"player_0": LEARNER, "player_1": PolicyRef("bot", "random")},
                      outcome={"player_0": 1.0, "player_1": -1.0})
    mirror = Rollout("tictactoe_v1", seats={"player_0": LEARNER, "player_1": LEARNER}, outcome={"player_0": 1.0, "player_1": -1.0})
    sampler.observe([rollout, mirror])
    report = sampler.drain()
    assert report.exploiter_results == []  # no exploiters in this league
    assert report.matches == [([LEARNER_ID, "random_bot"], [1.0, -1.0])]
    assert report.results == [("baseline", 2.0), ("mirror", 0.0)]  # 1 over the opponent's -1
    assert sampler.drain().matches == [], "drained: the next batch starts empty"
    assert sampler.win_rates["random_bot"] == 0.75
    state = sampler.state_dict()
    fresh = LeagueSampler()
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


def test_at_seven_seats_a_win_is_more_than_the_opponents_mean_not_a_positive_payoff():
    """Every Diplomacy payoff is a share of the centres, so positive: a hero with 2 centres to the
    others' 4 lost, one with 6 to their 3 won (league/win_rate/<type> read 1.0 for both before)."""
    from sp_lightning.league.metrics import mix_and_win_rates
    from sp_lightning.types import LEARNER, PolicyRef

    sampler = LeagueSampler()
    sampler.refresh(BASELINES + [LEARNER_RECORD], LEARNER_RECORD)
    powers = [f"player_{k}" for k in range(7)]

    def game(hero_centres, others_centres):
        outcome = {p: (hero_centres if p == "player_0" else others_centres) / 34 for p in powers}
        return Rollout("diplomacy_v1", seats={p: LEARNER if p == "player_0" else PolicyRef("bot", "random")
                                              for p in powers}, outcome=outcome)

    sampler.observe([game(2, 4), game(6, 3)])
    report = sampler.drain()
    assert [round(margin * 34, 6) for _, margin in report.results] == [-2.0, 3.0]
    assert mix_and_win_rates(report.buckets, report.results)["league/win_rate/baseline"] == 0.5


def _diplomacy_league(sampler, checkpoints=12):
    """Only checkpoints in the league's draws (every bucket weight on peers), a seven-seat game."""
    from sp_lightning.league.matchmaking import MatchmakingSettings

    sampler.matchmaker.settings = MatchmakingSettings(bucket_weights={"peer": 1.0})
    league = [LEARNER_RECORD] + [_checkpoint(s, 1000) for s in range(10, 10 * checkpoints + 1, 10)]
    sampler.refresh(league, LEARNER_RECORD)
    return GameSettings(id="diplomacy_v1")


def test_a_batch_needing_more_checkpoints_than_the_backend_serves_reuses_the_ones_drawn_first():
    """Eight seven-power games draw up to 48 checkpoint seats; with 3 adapter slots the batch
    seats exactly the first 3 distinct checkpoints drawn, every seat that drew another gets a
    copy of one of them, the learner keeps its one seat per game, and the buckets drawn stay."""
    import pytest

    pytest.importorskip("diplomacy")
    free, clustered = LeagueSampler(), LeagueSampler()
    game = _diplomacy_league(free)
    _diplomacy_league(clustered)
    clustered.adapter_slots = 3
    seatings_free = free.batch_seats([game] * 8, random.Random(5))
    seatings = clustered.batch_seats([game] * 8, random.Random(5))
    drawn = [str(p) for s in seatings_free for p in s.values() if p.kind == "checkpoint"]
    first_three = list(dict.fromkeys(drawn))[:3]
    assert len(set(drawn)) > 3, "without a limit the batch needs more than three adapters"
    seated = [str(p) for s in seatings for p in s.values() if p.kind == "checkpoint"]
    assert set(seated) == set(first_three) and len(seated) == len(drawn) == 48
    assert all([p.kind for p in s.values()].count("learner") == 1 for s in seatings)
    assert [str(p) for p in seatings[0].values()][:2] == [str(p) for p in seatings_free[0].values()][:2]
    assert clustered.step_buckets == free.step_buckets and clustered.clustered_batches == 1
    assert free.clustered_batches == 0


def test_a_batch_within_the_backend_s_slots_is_drawn_as_without_a_limit():
    import pytest

    pytest.importorskip("diplomacy")
    free, limited = LeagueSampler(), LeagueSampler()
    game = _diplomacy_league(free, checkpoints=2)
    _diplomacy_league(limited, checkpoints=2)
    limited.adapter_slots = 2
    rng_free, rng_limited = random.Random(7), random.Random(7)
    assert limited.batch_seats([game] * 8, rng_limited) == free.batch_seats([game] * 8, rng_free)
    assert rng_free.random() == rng_limited.random(), "nothing more drawn"
    assert limited.clustered_batches == 0
