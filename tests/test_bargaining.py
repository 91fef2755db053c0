"""Bargaining (envs/bargaining.py): rules, private texts, and the scripted bargainer."""

from __future__ import annotations

import pytest

from envs import BOTS, RandomBot, make, play
from envs.bargaining import ACCEPT, PRICES, REJECT, BargainerBot, BargainingRules


def test_a_deal_pays_each_side_its_gain_and_no_deal_pays_nothing():
    rules = BargainingRules(cost=2, value=7)
    assert rules.legal_moves() == list(PRICES)  # no offer stands yet: nothing to accept
    rules.apply("[6]")
    assert rules.legal_moves() == [*PRICES, ACCEPT]
    rules.apply(ACCEPT)
    assert rules.is_terminal and rules.price == 6
    assert rules.returns() == [4 / 8, 1 / 8]
    stalled = BargainingRules(cost=2, value=7, max_offers=2)
    stalled.apply("[8]")
    stalled.apply("[3]")
    assert stalled.legal_moves() == [ACCEPT, REJECT]  # the last answer: take it or leave it
    stalled.apply(REJECT)
    assert stalled.is_terminal and stalled.price is None and stalled.returns() == [0.0, 0.0]
    with pytest.raises(ValueError, match="illegal move"):
        BargainingRules(cost=2, value=7).apply(ACCEPT)
    with pytest.raises(ValueError, match="cost must be in"):
        BargainingRules(cost=5, value=7)


def test_each_side_sees_only_its_own_limit_until_the_end():
    env = make("bargaining_v1")
    env.reset(seed=3)
    cost, value = env.game.cost, env.game.value
    seller, buyer = env.observe("player_0")["text"], env.observe("player_1")["text"]
    assert f"Your cost (private): {cost}." in seller and "Your value" not in seller
    assert f"Your value (private): {value}." in buyer and "Your cost" not in buyer
    env.step("[6]")
    assert "Standing offer: the seller asks 6." in env.observe("player_1")["text"]
    assert env.infos["player_1"]["legal_actions"] == [*PRICES, ACCEPT]
    env.step("I'll take it [ACCEPT]")
    assert all(env.terminations.values())
    assert env.final_rewards == {"player_0": (6 - cost) / 8, "player_1": (value - 6) / 8}
    end = env.observe("player_1")["text"]
    assert f"Deal at 6: the seller's cost was {cost}, the buyer's value {value}." in end
    assert env.game_info.zero_sum is False and env.game_info.max_turns == 5
    with pytest.raises(ValueError, match="max_offers must be an int >= 1"):
        make("bargaining_v1", max_offers=0)


def test_the_bargainer_concedes_toward_its_limit_and_takes_a_gain():
    bot = BOTS["bargainer"](seed=0)
    assert isinstance(bot, BargainerBot)
    env = make("bargaining_v1")
    env.reset(seed=3)
    env.game.cost, env.game.value = 2, 6
    assert bot.act(env.observe("player_0")["text"], env.infos["player_0"]["legal_actions"]) == "[8]"  # first ask
    env.step("[8]")
    assert bot.act(env.observe("player_1")["text"], env.infos["player_1"]["legal_actions"]) == "[0]"  # first bid
    env.step("[0]")
    assert bot.act(env.observe("player_0")["text"], env.infos["player_0"]["legal_actions"]) == "[7]"  # one step down
    env.step("[5]")  # the seller (not the bot) asks 5: the buyer bot gains 1, so it accepts
    assert bot.act(env.observe("player_1")["text"], env.infos["player_1"]["legal_actions"]) == ACCEPT
    last = BargainingRules(cost=2, value=6, max_offers=2)
    env.game = last
    env.step("[6]")
    env.step("[2]")  # the last offer: the bot seller answers; a price at its cost loses nothing
    assert env.infos["player_0"]["legal_actions"] == [ACCEPT, REJECT]
    assert bot.act(env.observe("player_0")["text"], [ACCEPT, REJECT]) == ACCEPT
    with pytest.raises(ValueError, match="expected a bargaining_v1 observation"):
        bot.act("Tic-Tac-Toe. You are X.", ["[0]"])


def test_the_bargainer_beats_random_play_in_either_seat():
    """The fixed reference is a real trader: against it a random seller or buyer earns less than
    the bargainer itself does in that seat."""
    def mean(seat_policy, seat):
        total = 0.0
        for seed in range(300):
            policies = {"player_0": BargainerBot(), "player_1": BargainerBot()}
            policies[seat] = seat_policy(seed)
            total += play(make("bargaining_v1"), policies, seed=seed)[seat]
        return total / 300

    for seat in ("player_0", "player_1"):
        assert mean(lambda s: RandomBot(s), seat) < mean(lambda s: BargainerBot(), seat) - 0.03
