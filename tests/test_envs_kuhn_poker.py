"""Kuhn Poker: every betting line and payoff, several hands, texts, and the opponent's card
never reaching a player before showdown. The shared contract (invalid moves, rewards at the
end, parse_move) is in test_game_contract.py."""

import re

import numpy as np
import pytest

from envs import RandomBot, make
from envs.kuhn_poker import CARDS, KuhnPokerRules

J, Q, K = 0, 1, 2


def deal(cards):
    return tuple(CARDS.index(c) for c in cards)


def env_with_deals(deals, **kwargs):
    """A reset env whose hands are dealt ``deals`` (e.g. ["KJ", "QK"]: player 0's card first)."""
    env = make("kuhn_poker_v1", num_hands=len(deals), **kwargs)
    env.reset(seed=0)
    env.game = KuhnPokerRules([deal(d) for d in deals])
    return env


# (betting line, cards of player 0 and 1, player 0's chips); player 0 acts first.
LINES = [
    (["[check]", "[check]"], "KQ", 1),
    (["[check]", "[check]"], "JQ", -1),
    (["[check]", "[bet]", "[call]"], "KJ", 2),
    (["[check]", "[bet]", "[call]"], "QK", -2),
    (["[check]", "[bet]", "[fold]"], "KJ", -1),  # folding loses the ante, whatever the cards
    (["[check]", "[bet]", "[fold]"], "JQ", -1),
    (["[bet]", "[call]"], "QJ", 2),
    (["[bet]", "[call]"], "JK", -2),
    (["[bet]", "[fold]"], "JK", 1),
    (["[bet]", "[fold]"], "KQ", 1),
]


@pytest.mark.parametrize(("moves", "cards", "chips"), LINES)
def test_every_betting_line_and_payoff(moves, cards, chips):
    rules = KuhnPokerRules([deal(cards)])
    pots = [2]
    for move in moves:
        assert not rules.is_terminal
        assert rules.legal_moves() == (["[call]", "[fold]"] if pots[-1] == 3 else ["[check]", "[bet]"])
        rules.apply(move)
        pots.append(rules.hands[0].pot)
    assert rules.is_terminal and rules.legal_moves() == []
    assert rules.returns() == [chips, -chips]
    assert rules.hands[0].showdown == (moves[-1] != "[fold]")
    assert pots[-1] == {"[check]": 2, "[call]": 4, "[fold]": 3}[moves[-1]]


def test_rules_reject_illegal_moves_and_bad_deals():
    rules = KuhnPokerRules([(K, J)])
    with pytest.raises(ValueError, match="expected one of"):
        rules.apply("[call]")
    rules.apply("[bet]")
    with pytest.raises(ValueError):
        rules.apply("[check]")
    rules.apply("[fold]")
    with pytest.raises(ValueError, match="over"):
        rules.apply("[bet]")
    for bad in ([], [(K, K)], [(0, 3)], [(0,)]):
        with pytest.raises(ValueError, match="deal"):
            KuhnPokerRules(bad)


def test_hands_alternate_who_acts_first_and_chips_add_up():
    rules = KuhnPokerRules([(K, J), (K, J), (J, Q)])
    assert rules.current_player == 0
    for move in ("[bet]", "[call]"):  # hand 1: player 0 wins 2 at showdown
        rules.apply(move)
    assert rules.hand_index == 1 and rules.current_player == 1
    for move in ("[check]", "[bet]", "[fold]"):  # hand 2: player 1 checks, then folds: -1
        rules.apply(move)
    assert [h.actor(i) for h in rules.hands[1:2] for i in range(3)] == [1, 0, 1]
    assert rules.current_player == 0 and not rules.is_terminal
    for move in ("[check]", "[check]"):  # hand 3: Q beats J, player 1 wins 1
        rules.apply(move)
    assert rules.is_terminal and rules.returns() == [2 + 1 - 1, -2]


def test_game_info_scales_with_num_hands():
    env = make("kuhn_poker_v1", num_hands=4)
    assert env.game_info.reward_range == (-8.0, 8.0) and env.game_info.max_turns == 12
    assert type(env).game_info.max_turns == 3
    with pytest.raises(ValueError, match="num_hands"):
        make("kuhn_poker_v1", num_hands=0)


def test_observation_format_of_one_hand():
    env = env_with_deals(["JK"])
    assert env.observe("player_0")["text"] == (
        "Kuhn Poker. You are player 0. Your card: J.\nHistory: none\nPot: 2\nLegal moves: [check] [bet]"
    )
    env.step("I'll go [ Bet ]")
    assert env.observe("player_1")["text"] == (
        "Kuhn Poker. You are player 1. Your card: K.\n"
        "History: player 0 [bet]\n"
        "Pot: 3\n"
        "Legal moves: [call] [fold]"
    )
    assert env.observe("player_0")["text"].endswith("Pot: 3\nWaiting for player 1.")
    env.step("[call]")
    assert env._cumulative_rewards == {"player_0": -2.0, "player_1": 2.0}
    assert env.observe("player_0")["text"] == (
        "Kuhn Poker. You are player 0. Your card: J.\n"
        "Hand 1: player 0 [bet], player 1 [call]. Showdown: player 0 J, player 1 K. player 1 wins 2.\n"
        "Game over: you lost (-2)."
    )


def test_observation_format_of_several_hands():
    env = env_with_deals(["QK", "KJ"])
    for move in ("[bet]", "[fold]"):
        env.step(move)
    assert env.agent_selection == "player_1"
    assert env.observe("player_1")["text"] == (
        "Kuhn Poker, hand 2 of 2. You are player 1. Your card: J.\n"
        "Hand 1: player 0 [bet], player 1 [fold]. player 0 wins 1.\n"
        "Your chips: -1.\n"
        "History: none\n"
        "Pot: 2\n"
        "Legal moves: [check] [bet]"
    )
    for move in ("[check]", "[check]"):
        env.step(move)
    assert env._cumulative_rewards == {"player_0": 2.0, "player_1": -2.0}
    assert env.observe("player_1")["text"].endswith(
        "Hand 2: player 1 [check], player 0 [check]. Showdown: player 0 K, player 1 J. player 0 wins 1.\n"
        "Your chips: -2.\n"
        "Game over: you lost (-2)."
    )


def test_observation_after_a_check_and_a_bet():
    env = env_with_deals(["KJ"])
    env.step("[check]")
    env.step("[bet]")
    assert env.agent_selection == "player_0" and env.observe("player_0")["text"].endswith(
        "History: player 0 [check], player 1 [bet]\nPot: 3\nLegal moves: [call] [fold]"
    )


CARD = re.compile(r"\b[JQK]\b")


def test_opponent_card_never_seen_before_showdown_in_random_games():
    env = make("kuhn_poker_v1")
    bots = {"player_0": RandomBot(0), "player_1": RandomBot(1)}
    for game in range(300):
        env.reset(seed=game)
        hand = env.game.hands[0]
        for agent in env.agent_iter():
            obs, _, terminated, _, info = env.last()
            seat = int(agent[-1])
            if not hand.showdown:
                assert CARD.findall(obs["text"]) == [CARDS[hand.cards[seat]]]
            assert not CARD.search(str(info))
            env.step(None if terminated else bots[agent](obs["text"], info["legal_actions"]))


@pytest.mark.parametrize("seed", range(40))
def test_swapping_the_opponent_card_changes_nothing_before_showdown(seed):
    """Each seat's observations and infos are identical whatever card the opponent holds in the
    current hand, until that hand goes to showdown (several hands, random betting)."""
    rng = np.random.default_rng(seed)
    deals = [tuple(int(c) for c in rng.permutation(3)[:2]) for _ in range(3)]
    target = int(rng.integers(3))  # the hand whose opponent card is swapped
    for seat in (0, 1):
        other = 1 - seat
        swapped = [list(d) for d in deals]
        swapped[target][other] = 3 - sum(deals[target])  # the card nobody holds
        envs = [env_with_deals(["".join(CARDS[c] for c in d) for d in ds]) for ds in (deals, swapped)]
        bot = RandomBot(seed)
        while not envs[0].game.is_terminal and not envs[0].game.hands[target].showdown:
            agent = f"player_{seat}"
            assert envs[0].observe(agent) == envs[1].observe(agent)
            assert envs[0].infos[agent] == envs[1].infos[agent]
            move = bot.act("", envs[0].game.legal_moves())
            for env in envs:
                env.step(move)


def test_the_nash_bot_is_unexploitable_and_plays_its_probabilities():
    """OpenSpiel's exact exploitability of the bot's table is 0, for every alpha of the family;
    and the bot's moves in play follow the table (5000 draws at a mixed state)."""
    from envs.bots import BOTS
    from envs.kuhn_poker import nash_bet_probabilities
    from sp_lightning.evaluation.exploitability import kuhn_exploitability, kuhn_information_states

    for alpha in (0.0, 1 / 6, 1 / 3):
        table = nash_bet_probabilities(alpha)

        def probs(batch, table=table):
            out = []
            for text, legal in batch:
                d = next(d for d in kuhn_information_states() if d.text == text)
                bet = table[(d.card, d.history)]
                passive, aggressive = d.action_moves
                out.append({passive: 1 - bet, aggressive: bet})
            return out

        assert kuhn_exploitability(probs).exploitability == pytest.approx(0.0, abs=1e-9)
    bot = BOTS["kuhn_poker_nash"](seed=0)
    state = next(d for d in kuhn_information_states() if d.card == "Q" and d.history == "pb")
    calls = sum(bot.act(state.text, list(state.legal_moves)) == "[call]" for _ in range(5000)) / 5000
    assert calls == pytest.approx(1 / 6 + 1 / 3, abs=0.03)
    with pytest.raises(ValueError, match="one-hand kuhn_poker_v1"):
        bot.act("Tic-Tac-Toe ...", ["[4]"])
