"""The text-game contract over every registered game: PettingZoo's api_test and seed_test,
bots, parse_move, make/play, configuration errors."""

import dataclasses
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pettingzoo.test import api_test, seed_test

from envs import BOTS, GAMES, ChaosBot, GameInfo, RandomBot, TextGameEnv, make, parse_move, play
from envs.base import CHARSET

POLICIES = ("forfeit", "retry", "random")
CASES = [(game_id, {"invalid_move": policy}) for game_id in GAMES for policy in POLICIES]
CASES.append(("kuhn_poker_v1", {"num_hands": 3, "invalid_move": "random"}))
ALL_MOVES = sorted({m for cls in GAMES.values() for m in cls.game_info.moves})


@pytest.mark.parametrize(("game_id", "kwargs"), CASES, ids=[f"{g}-{k}" for g, k in CASES])
# api_test warns that a Dict/Text observation is not a NumPy array and that Text spaces are
# not Box/Discrete: expected for text games, so these three (and only these) are silenced.
@pytest.mark.filterwarnings("ignore:Observation is not a NumPy array:UserWarning")
@pytest.mark.filterwarnings("ignore:Observation space for each agent probably should be:UserWarning")
@pytest.mark.filterwarnings("ignore:Action space for each agent probably should be:UserWarning")
def test_pettingzoo_api_and_seed(game_id, kwargs):
    # A sampled Text action is almost never a legal move: "forfeit" ends each game at once,
    # "retry" exercises retries, "random" plays whole games from seeded substitutions.
    api_test(make(game_id, **kwargs), num_cycles=50)
    seed_test(lambda: make(game_id, **kwargs), num_cycles=50)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("game_id", sorted(GAMES))
def test_bots_complete_200_games_zero_sum(game_id, policy):
    env = make(game_id, invalid_move=policy)
    info = env.game_info
    pairings = [("random", "random"), ("chaos", "chaos"), ("random", "chaos"), ("chaos", "random")]
    for game in range(200):
        names = pairings[game % 4]
        seat_names = [names[i % 2] for i in range(len(env.possible_agents))]
        bots = {a: BOTS[n](seed=game * 2 + i) for i, (a, n) in enumerate(zip(env.possible_agents, seat_names))}
        env.reset(seed=game)
        totals = {a: 0.0 for a in env.possible_agents}
        for agent in env.agent_iter(10_000):
            obs, reward, terminated, truncated, inf = env.last()
            totals[agent] += reward
            assert env.observation_space(agent).contains(obs)
            assert set(inf) >= {"legal_actions", "invalid_move", "parsed_move"}
            for other in env.agents:  # only the agent to move has legal actions
                if other != agent or terminated:
                    assert env.infos[other]["legal_actions"] == []
            if terminated or truncated:
                env.step(None)
                continue
            assert inf["legal_actions"] and all(parse_move(a) == a for a in inf["legal_actions"])
            fixed = [a for a in inf["legal_actions"] if not a.startswith("[offer")]  # offers: an open grammar
            assert set(fixed) <= set(info.moves)
            assert obs["text"].endswith("Legal moves: " + " ".join(inf["legal_actions"]))
            env.step(bots[agent](obs["text"], inf["legal_actions"]))
        assert env.agents == []
        if info.zero_sum:
            assert sum(totals.values()) == pytest.approx(0.0)
        low, high = info.reward_range
        for agent, total in totals.items():
            forfeit_values = (env.invalid_move_reward, -env.invalid_move_reward)
            assert low <= total <= high or total in forfeit_values
            if seat_names[env.possible_agents.index(agent)] == "random":
                assert env.invalid_moves[agent] == 0


@pytest.mark.parametrize("game_id", sorted(GAMES))
def test_play_returns_final_rewards_and_is_reproducible(game_id):
    env = make(game_id)
    def policies():  # a bot object and a bare callable: play accepts both
        return {a: (RandomBot(i) if i % 2 == 0 else RandomBot(i).act) for i, a in enumerate(env.possible_agents)}

    results = [play(env, policies(), seed=3) for _ in range(2)]
    assert results[0] == results[1] == env.final_rewards
    assert set(results[0]) == set(env.possible_agents)
    if env.game_info.zero_sum:
        assert sum(results[0].values()) == 0


@pytest.mark.parametrize("game_id", sorted(GAMES))
def test_infos_handed_out_are_not_mutated_by_step(game_id):
    env = make(game_id, invalid_move="retry")
    env.reset(seed=0)
    *_, info = env.last()
    before = {k: list(v) if isinstance(v, list) else v for k, v in info.items()}
    env.step("garbage")
    env.step(info["legal_actions"][0])
    assert info == before


@given(st.text())
def test_parse_move_never_raises_and_returns_a_token(text):
    move = parse_move(text)
    assert move is None or re.fullmatch(r"\[[^\[\]\n]*\]", move)


@given(st.one_of(st.none(), st.binary(), st.integers(), st.floats(), st.lists(st.text())))
def test_parse_move_rejects_non_str(action):
    assert parse_move(action) is None


@given(st.text(), st.sampled_from(ALL_MOVES), st.text())
def test_parse_move_takes_the_last_token(prefix, move, suffix):
    suffix = suffix.replace("[", "").replace("]", "")
    assert parse_move(prefix + move + suffix) == move


@pytest.mark.parametrize("game_id", sorted(GAMES))
def test_game_facts_are_declared_as_data(game_id):
    cls = GAMES[game_id]
    assert issubclass(cls, TextGameEnv) and isinstance(cls.game_info, GameInfo)
    assert cls.game_info.name == game_id
    assert cls.metadata == {"name": game_id, "render_modes": ["ansi", "human"], "is_parallelizable": False}
    assert all(parse_move(m) == m for m in cls.game_info.moves)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cls.game_info.name = "other"
    env = make(game_id)
    assert env.possible_agents == [f"player_{i}" for i in range(cls.game_info.num_players)]
    assert set(env.action_space("player_0").character_set) == set(CHARSET)


def test_game_info_rejects_non_canonical_moves():
    with pytest.raises(ValueError, match="moves"):
        GameInfo("g", 2, True, (-1.0, 1.0), 9, ("[Bet]",))


def test_make_by_id_and_class_path():
    assert type(make("tictactoe_v1")) is GAMES["tictactoe_v1"]
    env = make("envs.kuhn_poker.KuhnPokerEnv", num_hands=2)
    assert type(env) is GAMES["kuhn_poker_v1"] and env.num_hands == 2


@pytest.mark.parametrize("name", ["chess_v9", "envs.nowhere.Game", "envs.tictactoe.Nope", "envs.bots.RandomBot"])
def test_make_rejects_unknown_games_listing_known_ids(name):
    with pytest.raises(ValueError, match="kuhn_poker_v1.*tictactoe_v1"):
        make(name)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"invalid_move": "penalty"}, "invalid_move"),
        ({"invalid_move_reward": 1.0}, "invalid_move_reward"),
        ({"invalid_move_reward": "x"}, "invalid_move_reward"),
        ({"invalid_move_reward": float("-inf")}, "invalid_move_reward"),
        ({"max_retries": -1}, "max_retries"),
        ({"render_mode": "rgb_array"}, "render_mode"),
        ({"list_legal_moves": "no"}, "list_legal_moves"),
    ],
)
@pytest.mark.parametrize("game_id", sorted(GAMES))
def test_bad_config_raises_naming_the_kwarg(game_id, kwargs, name):
    with pytest.raises(ValueError, match=name):
        make(game_id, **kwargs)


def test_chaos_bot_rejects_bad_probability():
    with pytest.raises(ValueError, match="legal_prob"):
        ChaosBot(legal_prob=1.5)


@pytest.mark.parametrize("game_id", sorted(GAMES))
def test_non_str_actions_are_invalid_moves_and_logged(game_id, caplog):
    env = make(game_id, invalid_move="retry", max_retries=3)
    env.reset(seed=0)
    agent = env.agent_selection
    with caplog.at_level(logging.DEBUG, logger="envs.base"):
        for action in (None, b"[0]", 7):
            env.step(action)
            assert env.agent_selection == agent
            assert env.infos[agent]["invalid_move"] is True and env.infos[agent]["parsed_move"] is None
    assert env.invalid_moves[agent] == 3
    assert sum("invalid move" in r.getMessage() for r in caplog.records) == 3


@pytest.mark.parametrize("game_id", sorted(GAMES))
def test_render_modes(game_id, capsys):
    env = make(game_id, render_mode="ansi")
    env.reset(seed=0)
    assert isinstance(env.render(), str) and env.render()
    env = make(game_id, render_mode="human")
    env.reset(seed=0)
    assert env.render() is None and capsys.readouterr().out.strip()
    env = make(game_id)
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None


def test_envs_does_not_import_the_trainer():
    code = "import sys, envs; sys.exit(any(m.startswith('sp_lightning') for m in sys.modules))"
    root = Path(__file__).resolve().parents[1]
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0


@pytest.mark.parametrize("game_id", sorted(GAMES))
def test_list_legal_moves_false_ends_the_prompt_with_your_move(game_id):
    # for games whose view already shows every legal move (Tic-Tac-Toe's empty cells): the
    # same observation without its longest line, and the same legal_actions in infos
    env, listed = make(game_id, list_legal_moves=False), make(game_id)
    env.reset(seed=3)
    listed.reset(seed=3)
    api_test(make(game_id, list_legal_moves=False), num_cycles=20)
    mover = env.agent_selection
    text, full = env.observe(mover)["text"], listed.observe(mover)["text"]
    assert text.endswith("\nYour move.") and "Legal moves:" not in text
    assert full.rsplit("\n", 1)[0] == text.rsplit("\n", 1)[0]
    assert env.infos[mover]["legal_actions"] == listed.infos[mover]["legal_actions"] != []


def test_spaces_are_built_on_first_read_and_are_each_envs_own():
    """The arena makes an env per game and never reads its spaces, so they are built lazily;
    once built they stay, and two envs never share one (a space carries its own sampling RNG)."""
    first, second = make("tictactoe_v1"), make("tictactoe_v1")
    assert "observation_spaces" not in vars(first) and "action_spaces" not in vars(first)
    space = first.observation_space("player_0")
    assert first.observation_space("player_0") is space and first.observation_spaces["player_1"].spaces["text"]
    assert first.action_space("player_0").max_length == TextGameEnv.action_max_length
    assert second.observation_space("player_0") is not space
    assert second.action_space("player_0") is not first.action_space("player_0")
