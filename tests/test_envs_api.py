"""The envs package around the games: bots completing games of every registered game, play and
make, GameInfo's checks, lazily built spaces, no trainer import. The text-game contract itself
(PettingZoo's api_test and seed_test, parse_move, invalid moves, status lines, rewards, render,
reset, configuration errors) is tested over every game in test_game_contract.py."""

import subprocess
import sys
from pathlib import Path

import pytest

from envs import BOTS, GAMES, ChaosBot, GameInfo, RandomBot, TextGameEnv, make, parse_move, play
from tests.helpers import LONG_GAMES

POLICIES = ("forfeit", "retry", "random")


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("game_id", sorted(GAMES))
def test_bots_complete_200_games_zero_sum(game_id, policy):
    """200 games of bots (20 of a long game, as in the contract suite), every step checked."""
    env = make(game_id, invalid_move=policy)
    info = env.game_info
    pairings = [("random", "random"), ("chaos", "chaos"), ("random", "chaos"), ("chaos", "random")]
    for game in range(20 if game_id in LONG_GAMES else 200):
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


def test_chaos_bot_rejects_bad_probability():
    with pytest.raises(ValueError, match="legal_prob"):
        ChaosBot(legal_prob=1.5)


def test_envs_does_not_import_the_trainer():
    code = "import sys, envs; sys.exit(any(m.startswith('sp_lightning') for m in sys.modules))"
    root = Path(__file__).resolve().parents[1]
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0


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
