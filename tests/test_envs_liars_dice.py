"""Liar's Dice: bid ordering, calls that succeed and fail, the env's texts, a forfeit without a
reveal, the longest game, and the opponent's dice never reaching a player before the call. The
shared contract (invalid moves, the PettingZoo API, parse_move) is in test_game_contract.py."""

import re

import numpy as np
import pytest

from envs import ChaosBot, RandomBot
from envs.liars_dice import LIAR, LiarsDiceEnv, LiarsDiceRules, bid_moves, parse_bid


def env_with_dice(dice, **kwargs):
    """A reset env whose players hold ``dice`` (e.g. [(3, 4), (2, 5)]: player 0's first)."""
    env = LiarsDiceEnv(dice_per_player=len(dice[0]), **kwargs)
    env.reset(seed=0)
    env.game = LiarsDiceRules(dice)
    return env


def play_moves(dice, moves):
    rules = LiarsDiceRules(dice)
    for move in moves:
        rules.apply(move)
    return rules


def test_bids_are_ordered_by_quantity_then_face():
    bids = bid_moves(4)
    assert len(bids) == 24 and bids[:7] == ("[1x1]", "[1x2]", "[1x3]", "[1x4]", "[1x5]", "[1x6]", "[2x1]")
    assert bids[-1] == "[4x6]"
    assert [parse_bid(b) for b in bids] == sorted(parse_bid(b) for b in bids)
    assert parse_bid("[10x6]") == (10, 6)


def test_legal_moves_are_the_strictly_higher_bids_and_a_call():
    rules = LiarsDiceRules([(1, 2), (3, 4)])
    assert rules.legal_moves() == list(bid_moves(4))  # no [liar] on the first move
    rules.apply("[2x3]")
    assert rules.current_player == 1
    assert rules.legal_moves() == ["[2x4]", "[2x5]", "[2x6]"] + [f"[{q}x{f}]" for q in (3, 4) for f in range(1, 7)] + [LIAR]
    rules.apply("[3x1]")  # a higher quantity may bid a lower face
    assert rules.legal_moves()[0] == "[3x2]" and rules.current_player == 0
    rules.apply("[4x6]")  # the highest bid: only the call remains
    assert rules.legal_moves() == [LIAR] and rules.last_bid == "[4x6]"


@pytest.mark.parametrize(
    ("moves", "bad"),
    [([], LIAR), (["[2x3]"], "[2x3]"), (["[2x3]"], "[2x2]"), (["[2x3]"], "[1x6]"), ([], "[5x1]"), ([], "[1x7]"), ([], "[0x1]")],
    ids=["call-first", "equal", "lower-face", "lower-quantity", "too-many-dice", "no-face-7", "zero"],
)
def test_rules_reject_illegal_moves(moves, bad):
    rules = play_moves([(1, 2), (3, 4)], moves)
    with pytest.raises(ValueError, match="expected one of"):
        rules.apply(bad)


def test_rules_reject_moves_after_the_call_and_bad_dice():
    rules = play_moves([(1, 2), (3, 4)], ["[1x1]", LIAR])
    assert rules.is_terminal and rules.legal_moves() == []
    with pytest.raises(ValueError):
        rules.apply("[4x6]")
    with pytest.raises(ValueError, match="not over"):
        _ = LiarsDiceRules([(1, 2), (3, 4)]).loser
    for bad in ([], [(1, 2)], [(1, 2), (3,)], [(), ()], [(0, 1), (2, 3)], [(1, 7), (2, 3)]):
        with pytest.raises(ValueError, match="dice"):
            LiarsDiceRules(bad)


# (dice of player 0 and 1, moves, loser); player 0 moves first, the last move is the call.
CALLS = [
    pytest.param([(3, 3), (3, 5)], ["[2x3]", LIAR], 1, id="met-with-room-caller-loses"),
    pytest.param([(3, 3), (3, 5)], ["[3x3]", LIAR], 1, id="met-exactly-caller-loses"),
    pytest.param([(3, 3), (3, 5)], ["[4x3]", LIAR], 0, id="not-met-bidder-loses"),
    pytest.param([(1, 1), (2, 2)], ["[3x2]", LIAR], 0, id="ones-are-not-wild"),
    pytest.param([(6, 6), (1, 2)], ["[1x5]", LIAR], 0, id="face-nobody-holds"),
    pytest.param([(5, 6), (2, 5)], ["[1x1]", "[2x5]", LIAR], 0, id="player-0-calls-a-met-bid"),
    pytest.param([(5, 6), (2, 5)], ["[1x1]", "[3x5]", LIAR], 1, id="player-0-calls-a-bluff"),
    # 36 bids, player 1 bids [6x6] last and player 0 calls: true with six 6s, a bluff otherwise.
    pytest.param([(6, 6, 6), (6, 6, 6)], bid_moves(6) + (LIAR,), 0, id="every-bid-then-call-met"),
    pytest.param([(6, 6, 6), (6, 6, 5)], bid_moves(6) + (LIAR,), 1, id="every-bid-then-call-bluff"),
]


@pytest.mark.parametrize(("dice", "moves", "loser"), CALLS)
def test_calls_reveal_and_pay_the_right_player(dice, moves, loser):
    rules = play_moves(dice, moves)
    assert rules.is_terminal and rules.loser == loser
    assert rules.returns() == [-1.0 if seat == loser else 1.0 for seat in (0, 1)]
    quantity, face = parse_bid(rules.last_bid)
    assert rules.bid_met == (rules.count(face) >= quantity)


def test_count_ignores_ones_for_other_faces():
    rules = LiarsDiceRules([(1, 6, 6), (1, 1, 2)])
    assert [rules.count(f) for f in range(1, 7)] == [3, 1, 0, 0, 0, 2]
    assert rules.dice == ((1, 6, 6), (1, 1, 2))


def test_observation_format_before_and_after_the_call():
    env = env_with_dice([(4, 3), (5, 2)])
    assert env.observe("player_0")["text"] == (
        "Liar's Dice, 4 dice in play. You are player 0. Your dice: 3 4.\n"
        "History: none\n"
        "Legal moves: " + " ".join(bid_moves(4))
    )
    env.step("I claim [3X4]")
    assert env.observe("player_1")["text"] == (
        "Liar's Dice, 4 dice in play. You are player 1. Your dice: 2 5.\n"
        "History: player 0 [3x4]\n"
        "Legal moves: [3x5] [3x6] [4x1] [4x2] [4x3] [4x4] [4x5] [4x6] [liar]"
    )
    assert env.observe("player_0")["text"].endswith("History: player 0 [3x4]\nWaiting for player 1.")
    assert env.infos["player_1"]["legal_actions"][-1] == LIAR
    env.step("You are a [ LIAR ]")
    assert env._cumulative_rewards == {"player_0": -1.0, "player_1": 1.0}
    assert env.observe("player_1")["text"] == (
        "Liar's Dice, 4 dice in play. You are player 1. Your dice: 2 5.\n"
        "History: player 0 [3x4], player 1 [liar]\n"
        "Reveal: player 0 has 3 4, player 1 has 2 5. Dice showing 4: 1 (bid [3x4] not met); player 0 loses.\n"
        "Game over: you won (+1)."
    )
    assert env.observe("player_0")["text"].endswith("player 0 loses.\nGame over: you lost (-1).")


def test_render_shows_every_die():
    env = env_with_dice([(6, 6), (1, 6)], render_mode="ansi")
    assert env.render() == (
        "Liar's Dice (spectator view). Dice: player 0 6 6, player 1 1 6.\nHistory: none\nplayer 0 to move."
    )
    env.step("[3x6]")
    env.step("[liar]")
    assert env.render().endswith("Dice showing 6: 3 (bid [3x6] met); player 1 loses.")


def test_forfeit_ends_the_game_without_a_reveal():
    env = env_with_dice([(1, 2), (3, 4)], invalid_move_reward=-2.0)
    env.step("[liar]")  # not legal on the first move
    text = env.observe("player_1")["text"]
    assert "Reveal" not in text and "1 2" not in text
    assert text.endswith("History: none\nGame over: player 0 forfeited (invalid move); you won (+2).")


def test_dice_per_player_scales_the_game_facts():
    env = LiarsDiceEnv(dice_per_player=3)
    assert env.game_info.moves == bid_moves(6) + (LIAR,) and env.game_info.max_turns == 37
    assert type(env).game_info.max_turns == 25 and type(env).game_info.moves == bid_moves(4) + (LIAR,)
    env.reset(seed=1)
    assert all(len(d) == 3 for d in env.game.dice)
    for bad in (0, -1, 2.0, True, "2"):
        with pytest.raises(ValueError, match="dice_per_player"):
            LiarsDiceEnv(dice_per_player=bad)


@pytest.mark.parametrize("dice_per_player", [1, 2, 5])
def test_longest_game_fits_the_observation_space_and_max_turns(dice_per_player):
    """Every bid from lowest to highest, then the call: 6N + 1 moves, the longest texts."""
    env = LiarsDiceEnv(dice_per_player=dice_per_player, invalid_move="retry")
    env.reset(seed=0)
    moves = 0
    for agent in env.agent_iter():
        obs, _, terminated, _, info = env.last()
        assert env.observation_space(agent).contains(obs)
        if terminated:
            env.step(None)
            continue
        env.step("[oops]")  # a retry line as well
        assert env.observation_space(agent).contains(env.observe(agent))
        env.step(info["legal_actions"][0])
        moves += 1
    assert moves == env.game_info.max_turns == 12 * dice_per_player + 1


DICE_LIST = re.compile(r"dice: ([1-6](?: [1-6])*)\.")


@pytest.mark.parametrize("dice_per_player", [1, 2, 3])
def test_opponent_dice_never_seen_before_the_call_in_random_games(dice_per_player):
    env = LiarsDiceEnv(dice_per_player=dice_per_player, invalid_move="random")
    bots = {"player_0": RandomBot(0), "player_1": ChaosBot(1, legal_prob=0.7)}
    for game in range(300):
        env.reset(seed=game)
        dice = [" ".join(map(str, d)) for d in env.game.dice]
        for agent in env.agent_iter():
            obs, _, terminated, _, info = env.last()
            seat = int(agent[-1])
            text = obs["text"]
            if env.game.is_terminal:
                assert f"player 0 has {dice[0]}, player 1 has {dice[1]}." in text
            else:
                assert DICE_LIST.findall(text) == [dice[seat]]
                assert "Reveal" not in text and " has " not in text
            assert set(info) == {"legal_actions", "invalid_move", "parsed_move"}  # no dice in infos
            env.step(None if terminated else bots[agent](text, info["legal_actions"]))


@pytest.mark.parametrize("seed", range(40))
def test_rerolling_the_opponent_dice_changes_nothing_before_the_call(seed):
    """Each seat's observations and infos are identical whatever dice the opponent rolled,
    until someone calls [liar] (random bids, 2 or 3 dice each)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 4))
    dice = rng.integers(1, 7, size=(2, n)).tolist()
    for seat in (0, 1):
        rerolled = [list(d) for d in dice]
        rerolled[1 - seat] = rng.integers(1, 7, size=n).tolist()
        envs = [env_with_dice(ds) for ds in (dice, rerolled)]
        bot = RandomBot(seed)
        agent = f"player_{seat}"
        while not envs[0].game.is_terminal:
            assert envs[0].observe(agent) == envs[1].observe(agent)
            assert envs[0].infos[agent] == envs[1].infos[agent]
            move = bot.act("", envs[0].game.legal_moves())
            for env in envs:
                env.step(move)


def test_game_facts():
    info = LiarsDiceEnv.game_info
    assert info.num_players == 2 and info.zero_sum and info.reward_range == (-1.0, 1.0)
    assert len(info.moves) == 25 and info.moves[-1] == LIAR
