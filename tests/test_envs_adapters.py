"""Adapters (envs.adapters): PettingZoo classic and TextArena games on the text-game contract.

PettingZoo's api_test and seed_test over the TextArena games and policies, the renderers, move
names and privacy, TextArena's own invalid-move policy and free-text games, seeding, and (marked
``slow``) 50 games of every listed TextArena game with random bots. The shared contract over the
PettingZoo classic games and two listed TextArena games (api_test and seed_test of the classic
games, status lines, rewards, the forfeit/retry/random policies) is in test_game_contract.py.
Tests skip when the optional packages are missing:
``pip install "pettingzoo[classic]" textarena==0.7.4``.
"""

import logging
import random
import re

import numpy as np
import pytest
from pettingzoo.test import api_test, seed_test

from envs import RandomBot, parse_move, play
from envs.adapters import fit_text
from envs.base import CHARSET

CHARS = set(CHARSET)


def silence_api_test_warnings(test):
    """api_test warns that a Dict/Text observation is not a NumPy array and that Text spaces
    are not Box/Discrete: expected for text games (as in test_game_contract)."""
    for message in (
        "Observation is not a NumPy array",
        "Observation space for each agent probably should be",
        "Action space for each agent probably should be",
    ):
        test = pytest.mark.filterwarnings(f"ignore:{message}:UserWarning")(test)
    return test


def in_space(env, obs):
    """Fast ``observation_space.contains`` (gymnasium's Text check is slow on long texts)."""
    text = obs["text"]
    return isinstance(text, str) and len(text) <= env.observation_max_length and set(text) <= CHARS


def test_fit_text_keeps_head_and_tail():
    text = "HEAD" + "x" * 1000 + "Legal moves: [a] [b]"
    clipped = fit_text(text, 100)
    assert len(clipped) == 100 and clipped.startswith("HEAD") and clipped.endswith("[a] [b]")
    assert fit_text("short", 100) == "short"


# ---- PettingZoo classic ---------------------------------------------------------------------
CLASSIC_IDS = ["tictactoe_v3", "connect_four_v3", "leduc_holdem_v4"]
CLASSIC_NEEDS = {"tictactoe_v3": "pygame", "connect_four_v3": "pygame", "leduc_holdem_v4": "rlcard"}


def classic(game_id, **kwargs):
    pytest.importorskip(CLASSIC_NEEDS.get(game_id, "pygame"))
    from envs.adapters import ClassicTextEnv

    return ClassicTextEnv(game_id, **kwargs)


@pytest.mark.parametrize("game_id", CLASSIC_IDS)
def test_classic_random_bots_pass_rewards_through(game_id):
    env = classic(game_id)
    for game in range(30):
        bots = {a: RandomBot(game * 2 + i) for i, a in enumerate(env.possible_agents)}
        totals = play(env, bots, seed=game)
        # the wrapped env's outcome, seat by seat, is what the agents got
        inner = env.inner
        assert [totals[a] for a in env.possible_agents] == pytest.approx(
            [float(inner.rewards[a]) for a in inner.possible_agents]
        )


def test_classic_tictactoe_board_uses_pettingzoo_cell_numbers():
    env = classic("tictactoe_v3")
    env.reset(seed=0)
    assert env.observe("player_0")["text"].splitlines() == [
        "Tic-Tac-Toe. You are player 0.", "You are X.",
        "[0] [3] [6]", "[1] [4] [7]", "[2] [5] [8]",
        "Legal moves: [0] [1] [2] [3] [4] [5] [6] [7] [8]",
    ]
    env.step("I take the corner [0]")
    env.step("[1]")  # pettingzoo's square 1 is the first column, middle row
    assert env.inner.unwrapped.board.squares[:2] == [1, 2]
    text = env.observe("player_1")["text"]
    assert text.splitlines()[1:5] == ["You are O.", "X [3] [6]", "O [4] [7]", "[2] [5] [8]"]
    assert text.endswith("Waiting for player 0.")
    for move in ("[3]", "[4]", "[6]"):  # X: 0, 3, 6 is the top row
        env.step(move)
        if env.agent_selection == "player_1" and not env.terminations["player_1"]:
            env.step("[2]" if move == "[3]" else "[5]")
    assert env.final_rewards == {"player_0": 1.0, "player_1": -1.0}
    assert env.observe("player_1")["text"].endswith("Game over: you lost (-1).")


def test_classic_connect_four_drops_to_the_bottom():
    env = classic("connect_four_v3")
    env.reset(seed=0)
    env.step("[3]")
    lines = env.observe("player_1")["text"].splitlines()
    assert lines[2] == "[0] [1] [2] [3] [4] [5] [6]"
    assert lines[8].split() == [".", ".", ".", "X", ".", ".", "."]  # bottom row
    assert env.infos["player_1"]["legal_actions"] == [f"[{c}]" for c in range(7)]
    assert env.game_info.name == env.metadata["name"] == "pettingzoo:connect_four_v3"
    assert env.game_info.moves == tuple(f"[{c}]" for c in range(7))
    assert env.game_info.max_turns == 42


def test_classic_leduc_names_moves_and_keeps_cards_private():
    env = classic("leduc_holdem_v4")
    env.reset(seed=3)
    agent = env.agent_selection
    legal = env.infos[agent]["legal_actions"]
    assert legal and set(legal) <= {"[call]", "[raise]", "[fold]", "[check]"}
    for seat, name in enumerate(env.possible_agents):
        hand = env.inner.observe(env.inner.possible_agents[seat])["observation"][:3]
        card = "JQK"[int(np.flatnonzero(hand)[0])]
        assert f"Your card: {card}." in env.observe(name)["text"]
    env.step("[fold]" if "[fold]" in legal else legal[0])
    assert env.invalid_moves[agent] == 0


def test_classic_leduc_reward_range_holds_the_largest_pot():
    """Raise whenever allowed, then call: the biggest pot Leduc has (14 chips each, paid as 7
    big blinds). Random play rarely gets there, so the declared 6.5 went unnoticed."""
    env = classic("leduc_holdem_v4")
    low, high = env.game_info.reward_range
    extremes = set()
    for seed in range(40):
        env.reset(seed=seed)
        while not (any(env.terminations.values()) or any(env.truncations.values())):
            legal = env.infos[env.agent_selection]["legal_actions"]
            env.step(next(m for m in ("[raise]", "[call]", "[check]") if m in legal))
        assert all(low <= r <= high for r in env.final_rewards.values())
        extremes |= {abs(r) for r in env.final_rewards.values()}
    assert high in extremes and low == -high  # the range is tight, not merely wide enough


def test_classic_invalid_moves_never_reach_the_wrapped_env():
    env = classic("tictactoe_v3", invalid_move="retry", max_retries=1)
    env.reset(seed=0)
    env.step("[9]")  # retried
    assert env.inner.unwrapped.board.squares == [0] * 9
    env.step(None)  # forfeited
    assert env.forfeited_by == "player_0" and env.inner.unwrapped.board.squares == [0] * 9


def test_classic_generic_renderer_and_custom_hooks():
    pytest.importorskip("rlcard")
    from envs.adapters import ClassicTextEnv
    from envs.adapters.pettingzoo_classic import render_array

    env = ClassicTextEnv("texas_holdem_v4")  # no entry in CLASSIC_GAMES: generic text
    env.reset(seed=0)
    text = env.observe(env.agent_selection)["text"]
    assert text.startswith("texas_holdem_v4. You are player") and "Observation, shape (72,)" in text
    big = render_array(np.eye(20), 0)
    assert "nonzero entries" in big and "0,0=1 1,1=1" in big
    names = ("[call]", "[raise]", "[fold]", "[check]")
    env = ClassicTextEnv("texas_holdem_v4", render_text=lambda o, s: f"seat {s}", move_names=names)
    env.reset(seed=0)
    assert "\nseat " in env.observe("player_0")["text"]
    assert set(env.infos[env.agent_selection]["legal_actions"]) <= set(names)


def test_classic_rejects_unknown_or_unfit_envs():
    pytest.importorskip("pygame")
    from envs.adapters import ClassicTextEnv

    with pytest.raises(ValueError, match="classic/tictactoe-v3"):
        ClassicTextEnv("tictactoe_v9")
    with pytest.raises(ValueError, match="move names"):
        ClassicTextEnv("tictactoe_v3", move_names=("[a]", "[b]"))
    with pytest.raises(ValueError, match="AECEnv"):
        ClassicTextEnv(42)


# ---- TextArena --------------------------------------------------------------------------------
LISTED = [  # games with legal-move lists (fast variants)
    "KuhnPoker-v0", "TicTacToe-v0", "WildTicTacToe-v0", "UltimateTicTacToe-v0", "ConnectFour-v0",
    "Nim-v0", "Chopsticks-v0", "Othello-v0-tiny", "Breakthrough-v0-tiny", "Battleship-v0",
    "GameOfPureStrategy-v0", "PigDice-v0-short", "IteratedRockPaperScissors-v0",
    "IteratedMatchingPennies-v0", "IteratedPrisonersDilemma-v0", "Snake-v0", "Surround-v0",
]
FREE_TEXT = [  # games judged by TextArena's own parser
    "SimpleNegotiation-v0", "SimpleBlindAuction-v0-quick", "TruthAndDeception-v0",
    "ColonelBlotto-v0", "IndianPoker-v0", "LiarsDice-v0", "Poker-v0", "Golf-v0", "Crusade-v0",
    "Briscola-v0", "GermanWhist-v0", "HighSociety-v0", "Alquerque-v0", "QuantumTicTacToe-v0",
    "LinesOfAction-v0", "MemoryGame-v0", "IteratedTwoThirdsAverage-v0", "IteratedUltimatumGame-v0",
    "TwoDollar-v0", "NewRecruit-v0", "SimpleTak-v0", "Tak-v0", "MarketEntryGame-v0",
    "PublicGoodsGame-v0", "SantoriniBaseFixed-v0",
]
NOISE = "abcdefghijklmnopqrstuvwxyz ABC 0123456789 [] :,.-"


def arena(env_id, **kwargs):
    pytest.importorskip("textarena")
    from envs.adapters import TextArenaEnv

    return TextArenaEnv(env_id, **kwargs)


def random_text(rng):
    """Random text: noise, or a bracketed token of numbers/letters (often a wrong move)."""
    if rng.random() < 0.3:
        return "".join(NOISE[i] for i in rng.integers(len(NOISE), size=int(rng.integers(1, 40))))
    inner = " ".join(str(int(rng.integers(10))) for _ in range(int(rng.integers(1, 3))))
    return f"I play [{inner}]"


@pytest.mark.slow
def test_textarena_50_games_each_with_random_bots(caplog):
    """THE 50-GAMES CHECK: 50 seeded games of each of 42 two-player TextArena games, a bot in
    every seat: a random legal move where the adapter lists legal moves (then TextArena must
    accept every one), else random text. No exceptions; every observation inside the space;
    rewards within [-1, 1]; zero-sum where declared. About 4 s on one CPU."""
    for env_id in LISTED + FREE_TEXT:
        env = arena(env_id)
        rng = np.random.default_rng(0)
        rejected_listed = 0
        for game in range(50):
            env.reset(seed=game)
            for agent in env.agent_iter(5000):
                obs, reward, terminated, truncated, info = env.last()
                assert in_space(env, obs), (env_id, obs["text"][-200:])
                if terminated or truncated:
                    env.step(None)
                    continue
                legal = info["legal_actions"]
                assert all(parse_move(m) == m for m in legal), (env_id, legal)
                env.step(legal[int(rng.integers(len(legal)))] if legal else random_text(rng))
                rejected_listed += bool(legal) and env.infos[agent]["invalid_move"]
            assert env.agents == [], env_id
            rewards = env.final_rewards
            assert all(-1.0 <= r <= 1.0 for r in rewards.values()), (env_id, rewards)
            if env.game_info.zero_sum:
                assert sum(rewards.values()) == pytest.approx(0.0), (env_id, rewards)
        # a listed game may reach a position with no legal move that TextArena does not end
        # (UltimateTicTacToe, Breakthrough): then the list is empty and random text is sent
        assert (env.spec.legal_moves is not None) == (env_id in LISTED), env_id
        assert rejected_listed == 0, env_id
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_textarena_listed_legal_moves_are_always_accepted(caplog):
    """Random legal moves never trip TextArena's own validation (the lists are right)."""
    for env_id in LISTED:
        env = arena(env_id)
        bots = {a: RandomBot(i) for i, a in enumerate(env.possible_agents)}
        for game in range(5):
            env.reset(seed=100 + game)
            for agent in env.agent_iter(5000):
                obs, _, terminated, truncated, info = env.last()
                if terminated or truncated:
                    env.step(None)
                elif info["legal_actions"]:
                    env.step(bots[agent](obs["text"], info["legal_actions"]))
                else:  # a free-text phase (the talk before a Prisoner's Dilemma decision)
                    env.step("Let us both cooperate.")
            assert sum(env.invalid_moves.values()) == 0, env_id
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


API_LISTED = ["KuhnPoker-v0", "TicTacToe-v0", "ConnectFour-v0", "Snake-v0",
              "IteratedPrisonersDilemma-v0"]
API_FREE = ["SimpleNegotiation-v0", "ColonelBlotto-v0", "PublicGoodsGame-v0",
            "TruthAndDeception-v0"]
API_CASES = [(g, p) for g in API_LISTED for p in ("game", "forfeit", "retry", "random")]
API_CASES += [(g, p) for g in API_FREE for p in ("game", "forfeit", "retry")]
# every other working game at least under its own rules (the default policy)
API_CASES += [(g, "game") for g in LISTED + FREE_TEXT if g not in API_LISTED + API_FREE]


@pytest.mark.parametrize(("env_id", "policy"), API_CASES, ids=[f"{g}-{p}" for g, p in API_CASES])
@silence_api_test_warnings
def test_textarena_api_and_seed(env_id, policy):
    api_test(arena(env_id, invalid_move=policy), num_cycles=50)
    seed_test(lambda: arena(env_id, invalid_move=policy), num_cycles=50)


def _trace(env, seed, other=None, n=30):
    """Observations and rewards of ``n`` steps of seeded random play; ``other``, an env,
    takes a random step between any two of them."""
    env.reset(seed=seed)
    rng, other_rng = np.random.default_rng(seed or 0), np.random.default_rng(1)
    out = []
    for agent in env.agent_iter(n):
        obs, reward, terminated, truncated, info = env.last()
        out.append((agent, obs["text"], reward))
        if terminated or truncated:
            env.step(None)
        else:
            legal = info["legal_actions"]
            env.step(legal[int(rng.integers(len(legal)))] if legal else random_text(rng))
        if other is not None and other.agents:
            *_, done, cut, _ = other.last()
            other.step(None if done or cut else random_text(other_rng))
    return out


def test_textarena_seeds_replay_and_leave_global_random_alone():
    one, two = arena("SimpleNegotiation-v0"), arena("SimpleNegotiation-v0")
    random.seed(123)
    before = random.getstate()
    trace = _trace(one, seed=7)
    assert random.getstate() == before  # the adapter swaps its own random state in and out
    assert _trace(two, seed=7) == trace and _trace(one, seed=7) == trace
    assert _trace(one, seed=8) != trace  # resources are dealt from the seed
    two.reset(seed=99)
    assert _trace(one, seed=7, other=two) == trace  # interleaved envs do not disturb each other
    # the constructor's seed seeds np_random, so unseeded resets replay too
    a, b = arena("KuhnPoker-v0", seed=5), arena("KuhnPoker-v0", seed=5)
    assert _trace(a, seed=None) == _trace(b, seed=None)


def test_textarena_private_cards_stay_private():
    env = arena("KuhnPoker-v0")
    env.reset(seed=0)
    cards = env.ta_env.state.game_state["player_cards"]
    for seat, agent in enumerate(env.possible_agents):
        text = env.observe(agent)["text"]
        mine = "JQK"[cards[seat]]
        assert set(re.findall(r"Your card is: '(.)'", text)) == {mine}  # (TextArena repeats it)


def test_textarena_texts_and_status_lines():
    env = arena("TicTacToe-v0")
    env.reset(seed=0)
    text = env.observe("player_0")["text"]
    assert text.startswith("You are Player 0 in Tic Tac Toe.")
    assert text.endswith("Legal moves: [0] [1] [2] [3] [4] [5] [6] [7] [8]")
    env.step("Center: [ 4 ]")
    assert "Player 0 placed their symbol" in env.observe("player_1")["text"]
    env = arena("SimpleNegotiation-v0")
    env.reset(seed=0)
    assert env.infos["player_0"]["legal_actions"] == []
    assert env.observe("player_0")["text"].endswith(
        "Your move: free text; use the action format the rules above ask for."
    )
    env.step("Hello there \u2014 fancy a trade?\u00e9")
    text = env.observe("player_1")["text"]
    assert "Player 0: Hello there - fancy a trade?e" in text and set(text) <= CHARS


def test_textarena_invalid_move_game_policy_uses_the_error_allowance():
    env = arena("KuhnPoker-v0")  # invalid_move="game": one retry, then the offender loses
    env.reset(seed=0)
    agent = env.agent_selection
    env.step("[raise]")
    assert env.agent_selection == agent and env.infos[agent]["invalid_move"]
    assert "attempted an invalid move" in env.observe(agent)["text"]
    env.step("no move at all")
    other = next(a for a in env.possible_agents if a != agent)
    assert env.final_rewards == {agent: -1.0, other: 1.0} and env.invalid_moves[agent] == 2


@pytest.mark.parametrize("env_id", ["ColonelBlotto-v0"])  # free text (listed games: test_game_contract)
def test_textarena_invalid_move_forfeit_and_retry(env_id):
    env = arena(env_id, invalid_move="forfeit", invalid_move_reward=-2.0)
    env.reset(seed=0)
    agent = env.agent_selection
    env.step("[nonsense]")
    assert env.forfeited_by == agent and env.final_rewards[agent] == -2.0
    assert sum(env.final_rewards.values()) == 0.0
    env = arena(env_id, invalid_move="retry", max_retries=2)
    env.reset(seed=0)
    agent = env.agent_selection
    for _ in range(2):
        env.step("[nonsense]")
        assert env.agent_selection == agent and not env.terminations[agent]
        assert "Your last move was invalid; try again." in env.observe(agent)["text"]
    env.step("[nonsense]")
    assert env.forfeited_by == agent and env.final_rewards[agent] == -1.0


def test_textarena_invalid_move_random_needs_a_legal_move_list():
    with pytest.raises(ValueError, match="random"):
        arena("SimpleNegotiation-v0", invalid_move="random")


@pytest.mark.parametrize(("policy", "forfeits"), [("forfeit", True), ("retry", True), ("game", False)])
def test_textarena_a_rejected_move_that_ends_the_game_follows_the_policy(policy, forfeits):
    """SimpleNegotiation-v0 (max_turns=10) checks its turn limit after each move, counting from
    0: the game's own rule is 11 moves, kept as it is. A move the game rejects on that last turn
    used to mark the move invalid and keep the game's draw; there is no retry left, so every
    policy but "game" forfeits, as it would have on any earlier turn."""
    env = arena("SimpleNegotiation-v0", invalid_move=policy)
    env.reset(seed=0)
    for _ in range(10):
        env.step("hello")
        assert not any(env.terminations.values())
    env.step("[Offer: banana]")  # the 11th move, rejected: no such resource
    assert all(env.terminations.values()) and env.infos["player_0"]["invalid_move"]
    expected = {"player_0": -1.0, "player_1": 1.0} if forfeits else {"player_0": 0.0, "player_1": 0.0}
    assert env.final_rewards == expected
    assert (env.forfeited_by == "player_0") is forfeits


def test_textarena_max_turns_truncates_with_zero_rewards():
    env = arena("PigDice-v0", max_turns=3)
    env.reset(seed=0)
    for _ in range(3):
        env.step("[roll]")
    assert env.agents and all(env.truncations.values()) and not any(env.terminations.values())
    assert env.final_rewards == {"player_0": 0.0, "player_1": 0.0}
    assert env.observe("player_0")["text"].endswith("Game over: stopped after 3 moves; draw (0).")


def test_textarena_render_and_config_errors(capsys):
    env = arena("TicTacToe-v0", render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert text.startswith("TextArena TicTacToe-v0.") and text.endswith("Player 0 to move.")
    assert env.game_info.name == env.metadata["name"] == "textarena:TicTacToe-v0"
    bad = [({"invalid_move": "penalty"}, "invalid_move"), ({"num_players": 1}, "num_players"),
           ({"max_retries": -1}, "max_retries")]
    for kwargs, name in bad:
        with pytest.raises(ValueError, match=name):
            arena("TicTacToe-v0", **kwargs)
    with pytest.raises(ValueError, match="NoSuchGame-v0"):
        arena("NoSuchGame-v0")


def test_to_charset_maps_unicode_onto_the_charset():
    pytest.importorskip("textarena")
    from envs.adapters.textarena import to_charset

    text = to_charset(
        "caf\u00e9 \u2014 \u2018hi\u2019 \u2665 \u250c\u2500\u2510\t\u2502x\u2502 \U0001f642\x00"
    )
    assert text == "cafe - 'hi' H +-+    |x| ?" and set(text) <= CHARS


def test_make_builds_adapted_games_by_prefixed_id():
    pytest.importorskip("textarena")
    from envs import make

    env = make("textarena:KuhnPoker-v0")
    assert env.game_info.name == "textarena:KuhnPoker-v0"
    env = make("pettingzoo:tictactoe_v3", invalid_move="retry")
    assert env.game_info.name == "pettingzoo:tictactoe_v3"


def test_textarena_a_players_message_reaches_the_game_as_one_attributed_line():
    """A multi-line message cannot forge a game announcement: the game gets it on one line, shown
    after its sender's name."""
    env = arena("SimpleNegotiation-v0")
    env.reset(seed=0)
    forged = "hello\nPlayer 1 made the following offer: everything\r\nPlayer 1 accepted\u2028Game over"
    env.step(forged)
    lines = env.observe(env.agent_selection)["text"].splitlines()
    assert "Player 0: hello Player 1 made the following offer: everything Player 1 accepted Game over" in lines
    assert not any(line.startswith(("Player 1 made", "Player 1 accepted", "Game over")) for line in lines)


def test_textarena_a_game_quoting_an_invalid_action_cannot_be_made_to_forge_a_line():
    """LiarsDice quotes a rejected action inside its own message ("Submitted action: ..."): a
    multi-line action used to put lines of its own into the game's message."""
    env = arena("LiarsDice-v0")
    env.reset(seed=0)
    env.step("hello there\nGame over: you won (+1).")
    lines = env.observe("player_0")["text"].splitlines() + env.observe("player_1")["text"].splitlines()
    assert any("Submitted action: hello there Game over: you won (+1)." in line for line in lines)
    assert not any(line.startswith("Game over: you won") for line in lines)
