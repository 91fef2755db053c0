"""Three-player Kuhn Poker: every betting line and payoff, texts, and no player ever seeing
another's card before showdown. The shared contract (invalid moves and the forfeit split among
three, the PettingZoo API, rewards at the end) is in test_game_contract.py."""

import re

import numpy as np
import pytest

from envs import RandomBot
from envs.kuhn_poker_3p import CARDS, MOVES, KuhnPoker3Env, KuhnPoker3Rules

AGENTS = ["player_0", "player_1", "player_2"]


def deal(cards):
    """``"JQK"`` -> (0, 1, 2): player 0's card first."""
    return tuple(CARDS.index(c) for c in cards)


def env_with_cards(cards, **kwargs):
    """A reset env whose hand is dealt ``cards`` (e.g. "JQK")."""
    env = KuhnPoker3Env(**kwargs)
    env.reset(seed=0)
    env.game = KuhnPoker3Rules(deal(cards))
    return env


C, B, CA, F = MOVES  # check, bet, call, fold
# (betting line, cards of players 0 1 2, chips of players 0 1 2, final pot); player 0 acts
# first, seat i % 3 makes move i. Pot = 3 antes + the bet + each call; the winner gets the pot
# minus its own stake, every other player loses its stake.
LINES = [
    ([C, C, C], "JQK", [-1, -1, 2], 3),  # all check: K wins the antes
    ([C, C, B, CA, CA], "AQK", [4, -2, -2], 6),  # player 2 bets, both call, A wins
    ([C, C, B, CA, F], "JQK", [-2, -1, 3], 5),  # player 0 calls with J and loses to K
    ([C, C, B, F, CA], "JAK", [-1, 3, -2], 5),  # player 1 calls and beats the bettor
    ([C, C, B, F, F], "AKJ", [-1, -1, 2], 4),  # folding loses the ante, even holding A
    ([C, B, CA, CA], "QJK", [-2, -2, 4], 6),  # player 1 bets; players 2 and 0 call
    ([C, B, CA, F], "AJQ", [-1, -2, 3], 5),
    ([C, B, F, CA], "KAQ", [-2, 3, -1], 5),
    ([C, B, F, F], "JQA", [-1, 2, -1], 4),  # the bettor wins without a showdown
    ([B, CA, CA], "KQJ", [4, -2, -2], 6),
    ([B, CA, F], "JQK", [-2, 3, -1], 5),
    ([B, F, CA], "QKA", [-2, -1, 3], 5),
    ([B, F, F], "JQK", [2, -1, -1], 4),
]


@pytest.mark.parametrize(("moves", "cards", "chips", "pot"), LINES)
def test_every_betting_line_and_payoff(moves, cards, chips, pot):
    rules = KuhnPoker3Rules(deal(cards))
    for i, move in enumerate(moves):
        assert not rules.is_terminal and rules.current_player == i % 3
        assert rules.legal_moves() == ([C, B] if B not in moves[:i] else [CA, F])
        rules.apply(move)
    assert rules.is_terminal and rules.legal_moves() == []
    assert rules.returns() == chips and sum(rules.returns()) == 0
    assert rules.pot == pot
    folded = {i % 3 for i, m in enumerate(moves) if m == F}
    assert rules.in_hand == [s for s in range(3) if s not in folded]
    assert rules.showdown == (len(folded) < 2)


def test_all_thirteen_betting_lines_are_covered():
    """Three checks, or a bet by player 0, 1 or 2 followed by two call/fold answers: 1 + 3 * 4."""
    assert len({tuple(line) for line, *_ in LINES}) == 13 == 1 + 3 * 4


def test_rules_reject_illegal_moves_and_bad_deals():
    rules = KuhnPoker3Rules(deal("JQK"))
    with pytest.raises(ValueError, match="expected one of"):
        rules.apply(CA)
    rules.apply(B)
    with pytest.raises(ValueError, match="expected one of"):
        rules.apply(C)
    with pytest.raises(ValueError, match="expected one of"):
        rules.apply(B)  # one bet per hand: no raise
    rules.apply(F)
    rules.apply(F)
    with pytest.raises(ValueError, match="over"):
        rules.apply(C)
    with pytest.raises(ValueError, match="not over"):
        _ = KuhnPoker3Rules(deal("JQK")).winner
    for bad in ((0, 1), (0, 1, 1), (0, 1, 4), (0, 1, 2, 3)):
        with pytest.raises(ValueError, match="cards"):
            KuhnPoker3Rules(bad)


def test_game_facts():
    info = KuhnPoker3Env.game_info
    assert (info.name, info.num_players, info.zero_sum) == ("kuhn_poker_3p_v1", 3, True)
    assert info.reward_range == (-2.0, 4.0) and info.max_turns == 5
    assert info.moves == MOVES


def test_observation_texts():
    env = env_with_cards("QJA")
    assert env.agent_selection == "player_0"
    assert env.observe("player_0")["text"] == (
        "Kuhn Poker, 3 players. You are player 0. Your card: Q.\n"
        "History: none\n"
        "Pot: 3\n"
        "Legal moves: [check] [bet]"
    )
    env.step("[check]")
    env.step("I bet. [ BET ]")
    assert env.agent_selection == "player_2"
    assert env.observe("player_2")["text"] == (
        "Kuhn Poker, 3 players. You are player 2. Your card: A.\n"
        "History: player 0 [check], player 1 [bet]\n"
        "Pot: 4\n"
        "Legal moves: [call] [fold]"
    )
    assert env.observe("player_0")["text"].endswith("Pot: 4\nWaiting for player 2.")
    env.step("[call]")
    env.step("[fold]")
    assert env.final_rewards == {"player_0": -1.0, "player_1": -2.0, "player_2": 3.0}
    assert env.observe("player_0")["text"] == (
        "Kuhn Poker, 3 players. You are player 0. Your card: Q.\n"
        "History: player 0 [check], player 1 [bet], player 2 [call], player 0 [fold]\n"
        "Showdown: player 1 J, player 2 A. player 2 wins the pot of 5.\n"
        "Game over: you lost (-1)."
    )
    assert env.observe("player_2")["text"].endswith("Game over: you won (+3).")


def test_bettor_wins_without_showdown_and_keeps_cards_hidden():
    env = env_with_cards("JQK")
    for move in ("[bet]", "[fold]", "[fold]"):
        env.step(move)
    assert env.final_rewards == {"player_0": 2.0, "player_1": -1.0, "player_2": -1.0}
    text = env.observe("player_1")["text"]
    assert text.endswith("player 0 wins the pot of 4.\nGame over: you lost (-1).")
    assert "Showdown" not in text and re.findall(r"\b[JQKA]\b", text) == ["Q"]


def test_random_bots_reach_every_betting_line():
    env = KuhnPoker3Env()
    bots = {a: RandomBot(i) for i, a in enumerate(AGENTS)}
    lines = set()
    for game in range(400):
        env.reset(seed=game)
        for agent in env.agent_iter():
            obs, _, terminated, _, inf = env.last()
            env.step(None if terminated else bots[agent](obs["text"], inf["legal_actions"]))
        lines.add(tuple(env.game.moves))
    assert len(lines) == 13


CARD = re.compile(r"\b[JQKA]\b")


def test_other_cards_never_seen_before_showdown_in_random_games():
    env = KuhnPoker3Env()
    bots = {a: RandomBot(10 + i) for i, a in enumerate(AGENTS)}
    for game in range(300):
        env.reset(seed=game)
        g = env.game
        for agent in env.agent_iter():
            obs, _, terminated, _, info = env.last()
            seat = AGENTS.index(agent)
            shown = [CARDS[g.cards[seat]]]  # its own card, then the showdown's cards
            if g.showdown:
                shown += [CARDS[g.cards[s]] for s in g.in_hand]
            assert CARD.findall(obs["text"]) == shown
            assert not CARD.search(str(info))
            env.step(None if terminated else bots[agent](obs["text"], info["legal_actions"]))


@pytest.mark.parametrize("seed", range(30))
def test_swapping_another_card_changes_nothing_before_showdown(seed):
    """A seat's observations and infos are identical whether another seat holds its card or the
    card nobody holds, until the showdown (random betting)."""
    rng = np.random.default_rng(seed)
    cards = [int(c) for c in rng.permutation(4)]
    dealt, hidden = cards[:3], cards[3]
    for seat in range(3):
        for other in (s for s in range(3) if s != seat):
            swapped = list(dealt)
            swapped[other] = hidden
            envs = [env_with_cards("".join(CARDS[c] for c in d)) for d in (dealt, swapped)]
            bot = RandomBot(seed)
            while not (envs[0].game.showdown or envs[1].game.showdown):
                agent = AGENTS[seat]
                assert envs[0].observe(agent) == envs[1].observe(agent)
                assert envs[0].infos[agent] == envs[1].infos[agent]
                if envs[0].game.is_terminal:
                    break
                move = bot.act("", envs[0].game.legal_moves())
                for env in envs:
                    env.step(move)


def test_render_shows_every_card():
    env = KuhnPoker3Env(render_mode="ansi")
    env.reset(seed=0)
    env.game = KuhnPoker3Rules(deal("KAQ"))
    assert env.render() == (
        "Kuhn Poker, 3 players (spectator view). Cards: player 0 K, player 1 A, player 2 Q.\n"
        "History: none\n"
        "Pot: 3."
    )
