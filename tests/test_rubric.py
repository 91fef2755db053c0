"""Rubric: weighted outcome functions per role and step functions on single moves."""

import pytest

from sp_lightning.rubric import RewardSettings, Rubric, game_payoff, invalid_move, win_loss
from sp_lightning.types import LEARNER, Completion, Rollout, Step


def _rollout():
    steps = [Step("player_0", Completion("[bet]")), Step("player_1", Completion("x"), info={"invalid_move": True})]
    return Rollout("kuhn", steps=steps, seats={"player_0": LEARNER, "player_1": LEARNER},
                   outcome={"player_0": 2.0, "player_1": -2.0})


def test_weighted_outcome_and_step_functions():
    """rewards = 0.5*payoff + 1*win_loss: p0 = 0.5*2 + 1 = 2, p1 = 0.5*-2 - 1 = -2;
    the invalid step alone gets 3 * -1 = -3."""
    rollout = _rollout()
    Rubric(outcome=[(game_payoff, 0.5), (win_loss, 1.0)], step=[(invalid_move, 3.0)]).score(rollout)
    assert rollout.rewards == {"player_0": 2.0, "player_1": -2.0}
    assert [s.reward for s in rollout.steps] == [0.0, -3.0]


def test_reward_settings_build_and_reject_unknown_outcome():
    rollout = _rollout()
    RewardSettings(outcome="win_loss", invalid_move_penalty=0.5).build().score(rollout)
    assert rollout.rewards == {"player_0": 1.0, "player_1": -1.0}
    assert rollout.steps[1].reward == -0.5
    with pytest.raises(ValueError, match="reward.outcome"):
        RewardSettings(outcome="elo").build()


def _two_seat_rollout():
    return Rollout("debate", seats={"pro": LEARNER, "con": LEARNER}, outcome={"pro": 1.0, "con": -1.0})


def test_sync_and_async_functions_give_the_weighted_sum():
    """0.5 * payoff (sync) + 2 * a bonus read from extras (async) + 1 * a constant (async
    callable object): pro = 0.5 + 2*0.25 + 1 = 2.0, con = -0.5 + 2*0 + 1 = 0.5."""
    import asyncio

    async def bonus(rollout, extras):
        await asyncio.sleep(0)
        return {"pro": extras["bonus"]}

    class Constant:
        async def __call__(self, rollout):
            return {"pro": 1.0, "con": 1.0}

    rollout = _two_seat_rollout()
    rubric = Rubric(outcome=[(game_payoff, 0.5), (bonus, 2.0), (Constant(), 1.0)])
    asyncio.run(rubric.ascore(rollout, extras={"bonus": 0.25}))
    assert rollout.rewards == {"pro": 2.0, "con": 0.5}


def test_sync_score_refuses_async_functions_and_functions_that_need_a_model():
    async def judged(rollout):
        return {"pro": 1.0}

    def needs_model(rollout, ctx):
        return {"pro": 1.0}

    with pytest.raises(ValueError, match="judged is async"):
        Rubric(outcome=[(judged, 1.0)]).score(_two_seat_rollout())
    with pytest.raises(ValueError, match="needs_model needs a running episode's ctx"):
        Rubric(outcome=[(needs_model, 1.0)]).score(_two_seat_rollout())


def test_a_function_returning_no_dict_is_a_clear_error():
    with pytest.raises(TypeError, match="expected a dict role -> reward"):
        Rubric(outcome=[(lambda rollout: 1.0, 1.0)]).score(_two_seat_rollout())
