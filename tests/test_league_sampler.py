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
    assert report.results == [("baseline", 1.0), ("mirror", 0.0)]
    assert sampler.drain().matches == [], "drained: the next batch starts empty"
    assert sampler.win_rates["random_bot"] == 0.75
    state = sampler.state_dict()
    fresh = LeagueSampler()
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
