"""Simple Negotiation: the offer grammar, offers/accept/deny with inventory bounds, scoring in
both modes, texts, which offers are valid moves, and private values staying private. The shared
contract (invalid-move policies, the PettingZoo API, status lines) is in test_game_contract.py."""

import numpy as np
import pytest

from envs import RandomBot, parse_move
from envs.negotiation import (
    MOVES,
    RESOURCES,
    NegotiationRules,
    Offer,
    SimpleNegotiationEnv,
    parse_offer,
)

# Resources in order: wheat, wood, sheep, brick, ore.
INVENTORIES = [[2, 3, 4, 5, 0], [0, 4, 5, 1, 1]]
VALUES = [[9, 5, 3, 9, 3], [5, 7, 6, 1, 1]]


def rules(max_turns=10, win_bonus=False, inventories=INVENTORIES, values=VALUES):
    return NegotiationRules(inventories, values, max_turns, win_bonus)


def env_with(game_rules, **kwargs):
    env = SimpleNegotiationEnv(max_turns=game_rules.max_turns, **kwargs)
    env.reset(seed=0)
    env.game = game_rules
    env._update_legal_actions()  # the infos of the swapped-in game
    return env


def play(game_rules, moves):
    for move in moves:
        game_rules.apply(move)
    return game_rules


# ---- grammar -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "token"),
    [
        ("[offer: 2 wood, 1 ore -> 3 wheat]", "[offer: 2 wood, 1 ore -> 3 wheat]"),
        ("I propose [Offer: 1 ORE, 2 Wood -> 3 wheat]", "[offer: 2 wood, 1 ore -> 3 wheat]"),
        ("[offer:2wood,1ore->1sheep,1brick]", "[offer: 2 wood, 1 ore -> 1 sheep, 1 brick]"),
        ("[offer :  5 brick  ->  02 sheep]", "[offer: 5 brick -> 2 sheep]"),
        ("[offer: 12 wheat -> 1 ore]", "[offer: 12 wheat -> 1 ore]"),
    ],
)
def test_well_formed_offers_parse_to_their_canonical_token(text, token):
    offer = parse_offer(parse_move(text))
    assert offer is not None and offer.token == token
    assert parse_offer(token) == offer


@pytest.mark.parametrize(
    "move",
    [
        "[offer: 1 gold -> 1 wood]",  # unknown resource
        "[offer: 0 wheat -> 1 wood]",  # zero units
        "[offer: -1 wheat -> 1 wood]",
        "[offer: 1.5 wheat -> 1 wood]",
        "[offer: wheat -> 1 wood]",  # no count
        "[offer: 1 wheat, 2 wheat -> 1 wood]",  # a resource twice
        "[offer: 1 wheat -> 1 wheat]",  # on both sides
        "[offer: 1 wheat, 1 ore -> 1 wood, 1 ore]",
        "[offer: -> 1 wood]",  # an empty side
        "[offer: 1 wheat ->]",
        "[offer: 1 wheat, -> 1 wood]",
        "[offer 1 wheat -> 1 wood]",  # no colon
        "[offer: 1 wheat => 1 wood]",
        "[offer: 1 wheat -> 1 wood -> 1 ore]",
        "[offer: 1 wheat and 1 wood -> 1 ore]",
        "[trade: 1 wheat -> 1 wood]",
        "[pass]",
        "[]",
    ],
)
def test_malformed_offers_are_rejected(move):
    assert parse_offer(move) is None


def test_a_long_offer_fits_in_a_token_only_without_the_optional_spaces():
    spaced = "[offer: 2 wood, 1 ore -> 1 sheep, 1 brick]"
    assert parse_move(spaced) is None  # more than 32 characters inside the brackets
    assert parse_offer(parse_move("[offer:2wood,1ore->1sheep,1brick]")).token == spaced


def test_legal_moves_contain_every_offer_within_the_inventories():
    game = rules()  # player 0 to move, no offer pending
    legal = game.is_legal
    assert game.legal_moves()[0] == "[pass]" and all(m.startswith("[offer") for m in game.legal_moves()[1:])
    assert legal("[pass]") and not legal("[accept]")
    assert legal("[offer: 2 wheat, 5 brick -> 5 sheep, 1 ore]")  # everything both hold
    assert not legal("[offer: 3 wheat -> 1 wood]")  # player 0 has 2 wheat
    assert not legal("[offer: 1 ore -> 1 wood]")  # player 0 has no ore
    assert not legal("[offer: 1 wheat -> 2 brick]")  # player 1 has 1 brick
    assert not legal("[offer: 1 wheat -> 1 wheat]") and not legal(None) and not legal(3)


# ---- rules ---------------------------------------------------------------------------------
def test_offer_accept_pass_deny_and_scoring_in_both_modes():
    for win_bonus, returns in ((False, [4.0, 6.0]), (True, [-1.0, 1.0])):
        g = rules(max_turns=6, win_bonus=win_bonus)
        assert g.legal_moves()[0] == "[pass]" and "[accept]" not in g.legal_moves()
        g.apply("[offer: 1 wood -> 1 brick]")  # player 0 gives wood (5 to it, 7 to player 1)
        assert g.current_player == 1 and g.pending == Offer((0, 1, 0, 0, 0), (0, 0, 0, 1, 0))
        assert g.legal_moves()[:3] == ["[accept]", "[deny]", "[pass]"]
        g.apply("[accept]")  # ... for brick (9 to player 0, 1 to player 1): +4 and +6
        assert g.inventories == [[2, 2, 4, 6, 0], [0, 5, 5, 0, 1]] and g.pending is None
        assert g.gains() == [4, 6]
        with pytest.raises(ValueError, match="expected one of"):
            g.apply("[offer: 1 wheat -> 1 brick]")  # player 1 has no brick left
        play(g, ["[pass]", "[offer: 2 sheep -> 1 wheat]", "[deny]"])
        assert g.inventories == [[2, 2, 4, 6, 0], [0, 5, 5, 0, 1]]
        g.apply("[offer: 1 ore -> 1 wheat]")  # on the last turn: expires unanswered
        assert g.is_terminal and g.legal_moves() == []
        assert g.returns() == returns
        with pytest.raises(ValueError, match="over"):
            g.apply("[pass]")


def test_accept_and_deny_only_answer_the_other_players_offer_of_the_previous_turn():
    g = rules()
    for move in ("[accept]", "[deny]"):
        with pytest.raises(ValueError, match="expected one of"):
            g.apply(move)  # nothing pending
    play(g, ["[offer: 1 wheat -> 1 ore]", "[pass]"])  # the pass drops player 0's offer
    assert g.pending is None and "[accept]" not in g.legal_moves()
    with pytest.raises(ValueError):
        g.apply("[accept]")  # player 0 cannot accept its own offer
    play(g, ["[offer: 2 brick -> 1 ore]", "[offer: 2 sheep -> 1 wheat]"])  # a counter-offer
    g.apply("[accept]")  # player 0 accepts player 1's counter-offer, not its own offer
    assert g.inventories == [[1, 3, 6, 5, 0], [1, 4, 3, 1, 1]]
    assert g.gains() == [-9 + 6, 5 - 12]


def test_trades_are_bounded_by_the_inventories_at_the_time():
    g = rules(inventories=[[1, 0, 0, 0, 0], [0, 1, 0, 0, 0]])
    assert g.legal_moves() == ["[pass]", "[offer: 1 wheat -> 1 wood]"]
    for move in ("[offer: 2 wheat -> 1 wood]", "[offer: 1 wheat -> 2 wood]", "[offer: 1 sheep -> 1 wood]"):
        with pytest.raises(ValueError):
            g.apply(move)
    play(g, ["[offer: 1 wheat -> 1 wood]", "[accept]"])
    assert g.inventories == [[0, 1, 0, 0, 0], [1, 0, 0, 0, 0]]
    assert g.legal_moves() == ["[pass]", "[offer: 1 wood -> 1 wheat]"]
    g = rules(inventories=[[0] * 5, [3] * 5])
    assert g.legal_moves() == ["[pass]"]  # nothing to give: no offer is legal


def test_win_bonus_on_equal_gains_is_a_draw():
    g = play(rules(max_turns=2, win_bonus=True), ["[pass]", "[pass]"])
    assert g.gains() == [0, 0] and g.returns() == [0.0, 0.0]
    g = play(rules(max_turns=2), ["[offer: 1 brick -> 1 ore]", "[accept]"])  # +3-9, +1-1
    assert g.returns() == [-6.0, 0.0]


def test_example_offers_are_legal_canonical_tokens_and_rotate():
    g = rules()
    seen = set()
    for turn in range(8):
        examples = g.example_offers()
        assert len(examples) == 3 and all(parse_move(m) == m for m in examples)
        assert all(parse_offer(m).token == m and m in g.legal_moves() for m in examples)
        seen.update(examples)
        g.apply("[pass]")
    assert len(seen) > 6


def test_rules_reject_bad_inventories():
    for inventories in ([[1] * 5], [[1] * 4, [1] * 5], [[1] * 5, [-1] + [1] * 4]):
        with pytest.raises(ValueError, match="inventories"):
            NegotiationRules(inventories, VALUES)


# ---- env -----------------------------------------------------------------------------------
def test_observation_texts():
    env = env_with(rules())
    env.step("[offer: 1 wheat -> 1 brick]")
    assert env.observe("player_1")["text"] == (
        "Simple Negotiation, turn 2 of 10. You are player 1.\n"
        "Your inventory: 0 wheat, 4 wood, 5 sheep, 1 brick, 1 ore (value 60, +0 so far).\n"
        "Your values (private): wheat 5, wood 7, sheep 6, brick 1, ore 1.\n"
        "Player 0's inventory: 2 wheat, 3 wood, 4 sheep, 5 brick, 0 ore.\n"
        "History: player 0 [offer: 1 wheat -> 1 brick]\n"
        "Pending: player 0 gives 1 wheat for your 1 brick.\n"
        "Offers: [offer: <n> <resource>, ... -> <n> <resource>, ...], you give -> you get.\n"
        "Legal moves: [accept] [deny] [pass] [offer: 1 sheep -> 1 wheat] [offer: 1 sheep -> 1 wood] "
        "[offer: 1 sheep -> 1 brick]"
    )
    assert env.observe("player_0")["text"].endswith(
        "Pending: you give 1 wheat for 1 brick.\n"
        "Offers: [offer: <n> <resource>, ... -> <n> <resource>, ...], you give -> you get.\n"
        "Waiting for player 1."
    )
    env.step("Deal. [Accept]")
    assert env.observe("player_0")["text"].startswith(
        "Simple Negotiation, turn 3 of 10. You are player 0.\n"
        "Your inventory: 1 wheat, 3 wood, 4 sheep, 6 brick, 0 ore (value 90, +0 so far).\n"
    )
    assert "(value 64, +4 so far)" in env.observe("player_1")["text"]


def test_game_over_text_and_rewards():
    env = env_with(rules(max_turns=2))
    env.step("[offer: 1 wood -> 1 brick]")
    env.step("[accept]")
    assert env.final_rewards == {"player_0": 4.0, "player_1": 6.0}
    text = env.observe("player_1")["text"]
    assert text.endswith(
        "History: player 0 [offer: 1 wood -> 1 brick]; player 1 [accept]\nGame over: you won (+6)."
    )
    assert "Pending" not in text and "Offers" not in text


def test_any_legal_offer_is_a_valid_move_listed_or_not():
    env = env_with(rules(), invalid_move="forfeit")
    listed = env.infos["player_0"]["legal_actions"]
    move = "[offer: 1 wheat, 2 sheep -> 3 wood]"
    assert move not in listed and env.is_legal(move, listed)
    env.step("[Offer: 2 Sheep,1 wheat -> 3 wood]")
    assert not env.infos["player_0"]["invalid_move"] and env.forfeited_by is None
    assert env.infos["player_0"]["parsed_move"] == "[offer: 2 sheep,1 wheat -> 3 wood]"
    assert env.game.history == [(0, move)]  # texts show the canonical token


@pytest.mark.parametrize(
    "action",
    ["[offer: 3 wheat -> 1 wood]", "[offer: 1 wheat -> 5 wood]", "[offer: 1 gold -> 1 wood]", "[accept]"],
)
def test_offers_beyond_the_inventories_or_the_grammar_are_invalid_moves(action):
    env = env_with(rules())
    env.step(action)
    assert env.forfeited_by == "player_0"
    assert env.final_rewards == {"player_0": -1.0, "player_1": 1.0}
    assert env.infos["player_0"]["invalid_move"] and env.infos["player_0"]["parsed_move"] == parse_move(action)


def test_game_facts_follow_the_configuration():
    info = SimpleNegotiationEnv.game_info
    assert (info.name, info.num_players, info.zero_sum, info.max_turns) == ("simple_negotiation_v1", 2, False, 10)
    assert info.moves == MOVES == ("[accept]", "[deny]", "[pass]") and info.reward_range == (-250.0, 250.0)
    env = SimpleNegotiationEnv(max_turns=4, win_bonus=True)
    assert env.game_info.zero_sum and env.game_info.reward_range == (-1.0, 1.0)
    assert env.game_info.max_turns == 4 and SimpleNegotiationEnv.game_info.max_turns == 10


@pytest.mark.parametrize(("kwargs", "name"), [({"max_turns": 0}, "max_turns"), ({"max_turns": True}, "max_turns"), ({"win_bonus": 1}, "win_bonus")])
def test_bad_config_raises_naming_the_kwarg(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SimpleNegotiationEnv(**kwargs)


@pytest.mark.parametrize("win_bonus", [False, True])
def test_random_bots_play_the_whole_game_and_score_the_gains(win_bonus):
    env = SimpleNegotiationEnv(win_bonus=win_bonus)
    bots = {"player_0": RandomBot(0), "player_1": RandomBot(1)}
    trades = 0
    for game in range(200):
        env.reset(seed=game)
        totals = {a: 0.0 for a in env.possible_agents}
        for agent in env.agent_iter():
            obs, reward, terminated, _, inf = env.last()
            totals[agent] += reward
            env.step(None if terminated else bots[agent](obs["text"], inf["legal_actions"]))
        assert env.game.turn == env.game_info.max_turns
        trades += sum(move == "[accept]" for _, move in env.game.history)
        gains = env.game.gains()
        if win_bonus:
            assert totals["player_0"] == np.sign(gains[0] - gains[1]) == -totals["player_1"]
        else:
            assert [totals["player_0"], totals["player_1"]] == gains
    assert trades > 50


def test_longest_offers_fit_the_observation_space():
    """Every turn an offer as long as a move token allows: the texts stay inside the space."""
    env = SimpleNegotiationEnv(max_turns=30)
    env.reset(seed=0)
    env.game = rules(max_turns=30, inventories=[[9] * 5, [9] * 5])
    offers = ["[offer:9wheat,9wood,9ore->9sheep]", "[offer:9sheep->9wheat,9wood,9ore]"]
    for agent in env.agent_iter():
        obs, _, terminated, _, _ = env.last()
        assert env.observation_space(agent).contains(obs)
        env.step(None if terminated else offers[env.game.turn % 2])
    assert env.invalid_moves == {"player_0": 0, "player_1": 0}
    assert len(env.game.history[0][1]) > 34  # the canonical token is longer than the typed one


@pytest.mark.parametrize("seed", range(20))
def test_the_other_players_values_change_nothing_it_sees(seed):
    """A seat's observations and infos are the same whatever the other player's values are,
    over a random game (values are never shown to the other player)."""
    rng = np.random.default_rng(seed)
    inventories = rng.integers(0, 6, size=(2, 5)).tolist()
    values = rng.integers(1, 11, size=(2, 5)).tolist()
    for seat in (0, 1):
        other_values = [list(v) for v in values]
        other_values[1 - seat] = rng.integers(1, 11, size=5).tolist()
        envs = [env_with(rules(inventories=inventories, values=v)) for v in (values, other_values)]
        bot = RandomBot(seed)
        agent = f"player_{seat}"
        while not envs[0].game.is_terminal:
            assert envs[0].observe(agent) == envs[1].observe(agent)
            assert envs[0].infos[agent] == envs[1].infos[agent]
            own = ", ".join(f"{r} {v}" for r, v in zip(RESOURCES, values[seat]))
            assert f"Your values (private): {own}." in envs[0].observe(agent)["text"]
            move = bot.act("", envs[0].game.legal_moves())
            for env in envs:
                env.step(move)


def test_render_shows_both_players_values():
    env = SimpleNegotiationEnv(render_mode="ansi")
    env.reset(seed=0)
    env.game = rules()
    env.step("[offer: 1 wood -> 1 brick]")
    assert env.render() == (
        "Simple Negotiation (spectator view), 1 of 10 turns played.\n"
        "player 0: 2 wheat, 3 wood, 4 sheep, 5 brick, 0 ore; values wheat 9, wood 5, sheep 3, brick 9, ore 3; gain +0.\n"
        "player 1: 0 wheat, 4 wood, 5 sheep, 1 brick, 1 ore; values wheat 5, wood 7, sheep 6, brick 1, ore 1; gain +0.\n"
        "History: player 0 [offer: 1 wood -> 1 brick]\n"
        "Pending: [offer: 1 wood -> 1 brick] by player 0."
    )
