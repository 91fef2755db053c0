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
