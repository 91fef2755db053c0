"""The text-game contract of ``envs.base`` (its module docstring), checked once over every game.

Every test of a game is parametrized over every registered game (``envs.GAMES``: registering a
game covers it), a few configurations that change a game's facts (more hands, more dice, the win
bonus) and, where the shared base class drives them, the adapted games: PettingZoo classic
through ``ClassicTextEnv`` and two TextArena games with legal-move lists (TextArena's own
policy "game" and its free-text games are tested in ``test_envs_adapters.py``).

Games are driven through the contract alone: legal moves come from
``infos[agent]["legal_actions"]`` (seeded random choices), illegal actions are a token of
``game_info.moves`` that is illegal now, a made-up token, text without a token, or a non-str
object. Expected values (rewards, who moves, infos, status lines) are exact. The rules of each
game (scoring, win detection, deals, texts, privacy) are tested in ``test_envs_<game>.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pettingzoo.test import api_test, seed_test

from envs import GAMES, GameInfo, TextGameEnv, make, parse_move
from tests.helpers import LONG_GAMES
from envs.base import CHARSET

# ---- the games -----------------------------------------------------------------------------
VARIANTS = [
    ("kuhn_poker_v1", {"num_hands": 3}),  # chips won before the end; the first actor alternates
    ("liars_dice_v1", {"dice_per_player": 3}),
    ("liars_dice_v1", {"dice_per_player": 5}),  # two-digit bids, the longest texts
    ("simple_negotiation_v1", {"win_bonus": True}),  # the zero-sum scoring
]
NATIVE = [(game_id, {}) for game_id in GAMES] + VARIANTS

CLASSIC = [
    ("pettingzoo:tictactoe_v3", {}), ("pettingzoo:connect_four_v3", {}), ("pettingzoo:leduc_holdem_v4", {}),
]
ARENA = [("textarena:TicTacToe-v0", {}), ("textarena:KuhnPoker-v0", {})]
NEEDS = {"pettingzoo:tictactoe_v3": "pygame", "pettingzoo:connect_four_v3": "pygame",
         "pettingzoo:leduc_holdem_v4": "rlcard", "textarena:TicTacToe-v0": "textarena",
         "textarena:KuhnPoker-v0": "textarena"}
POLICIES = ("forfeit", "retry", "random")


def config_id(config):
    game_id, kwargs = config
    return game_id + "".join(f"[{k}={v}]" for k, v in kwargs.items())


def configs(*groups):
    return [pytest.param(c, id=config_id(c)) for group in groups for c in group]


ALL = configs(NATIVE, CLASSIC, ARENA)


def build(config, **kwargs):
    """The env of ``config`` with ``kwargs`` for its constructor (skipped if an adapter's
    optional package is missing)."""
    game_id, base = config
    if game_id in NEEDS:
        pytest.importorskip(NEEDS[game_id])
    return make(game_id, **base, **kwargs)


# ---- driving a game through the contract ------------------------------------------------------
RETRY = "Your last move was invalid; try again."
UNKNOWN = "[xyzzy]"  # a move token in no game's vocabulary
MARKER = "qzqx"  # text that must never reach an observation
KINDS = {  # the kinds of invalid action, each forfeited with its own penalty (None: default)
    "vocab": -0.5,  # a token of game_info.moves that is illegal now
    "unknown": -2.0,  # a made-up token, after a legal move in the same text: the last one counts
    "no-token": None,  # a legal move without its brackets
    "non-str": -1.0,  # a legal move as bytes
    "none": -3.0,  # None
}


def legal(env):
    return env.infos[env.agent_selection]["legal_actions"]


def running(env):
    return bool(env.agents) and not any(env.terminations.values()) and not any(env.truncations.values())


def seat(env, agent):
    return env.possible_agents.index(agent)


def started(config, seed, moves, **kwargs):
    """A new env of ``config`` after ``reset(seed=seed)`` and ``moves``."""
    env = build(config, **kwargs)
    env.reset(seed=seed)
    for move in moves:
        env.step(move)
    return env


def running_line(config, depth, want=lambda env: True, **kwargs):
    """``(seed, moves)``: seeded random legal moves after ``reset(seed=seed)``, at least ``depth``
    of them (fewer if no game of these seeds lasts that long), that leave the game running in a
    position where ``want(env)`` holds. Every seed is tried on a new env."""
    best = None
    for seed in range(40):
        env = build(config, **kwargs)
        env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        moves = []
        while running(env):
            if want(env) and (best is None or len(moves) > len(best[1])):
                best = (seed, list(moves))
            if len(moves) >= depth and want(env):
                return seed, moves
            options = legal(env)
            move = options[int(rng.integers(len(options)))]
            env.step(move)
            moves.append(move)
    if best is None:
        pytest.skip("no position of the game has what the test needs")
    return best


def snapshot(env):
    """Everything an agent can see of the game: who moves, every observation, legal actions,
    rewards and terminations."""
    return (
        env.agent_selection,
        tuple(env.agents),
        tuple(env.observe(a)["text"] for a in env.agents),
        tuple(tuple(env.infos[a]["legal_actions"]) for a in env.agents),
        tuple(env.rewards.items()),
        tuple(env.terminations.items()),
        tuple(env.truncations.items()),
    )


def illegal(env, kind):
    """``(action, parsed_move)``: an invalid action of ``kind`` for the agent to move, or None
    when the game has none of that kind now."""
    options = legal(env)
    if kind == "vocab":
        tokens = [m for m in env.game_info.moves if not env.is_legal(m, options)]
        return (f"{MARKER} I play [ {tokens[0][1:-1].upper()} ]", tokens[0]) if tokens else None
    if kind == "unknown":
        assert not env.is_legal(UNKNOWN, options)
        return f"{MARKER} {options[0]} or rather {UNKNOWN}", UNKNOWN
    if kind == "no-token":
        return f"{MARKER} I play {options[0][1:-1]}", None
    if kind == "non-str":
        return options[0].encode(), None
    return None, None


def invalid_actions(env):
    """Every kind of invalid action available now, then an int."""
    found = [illegal(env, kind) for kind in KINDS]
    return [a for a in found if a is not None] + [(7, None)]


def in_space(env, obs):
    """``observation_space.contains`` without gymnasium's slow Text check: a dict holding only
    ``text``, 1..observation_max_length characters of the charset."""
    text = obs["text"] if isinstance(obs, dict) and set(obs) == {"text"} else None
    fits = isinstance(text, str) and 1 <= len(text) <= env.observation_max_length
    return fits and set(text) <= set(CHARSET)


def result_line(reward, forfeited=""):
    outcome = "draw (0)" if reward == 0 else f"you {'won' if reward > 0 else 'lost'} ({reward:+g})"
    return f"Game over: {forfeited}{outcome}."


def finish(env, expected):
    """Step every finished agent out with None; each reads its whole reward in ``last()``."""
    seen = {}
    for agent in env.agent_iter(len(env.possible_agents)):
        _, reward, terminated, truncated, info = env.last()
        assert terminated and not truncated and info["legal_actions"] == []
        seen[agent] = reward
        env.step(None)
    assert seen == expected and env.agents == [] and env.final_rewards == expected


# ---- facts -----------------------------------------------------------------------------------
@pytest.mark.parametrize("game_id", sorted(GAMES))
def test_registered_game_classes_declare_their_facts_as_data(game_id):
    cls = GAMES[game_id]
    assert issubclass(cls, TextGameEnv) and isinstance(cls.game_info, GameInfo)
    assert cls.game_info.name == game_id
    assert cls.metadata == {"name": game_id, "render_modes": ["ansi", "human"], "is_parallelizable": False}
    assert all(parse_move(m) == m for m in cls.game_info.moves)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cls.game_info.name = "other"


@pytest.mark.parametrize("config", ALL)
def test_game_facts_describe_each_configured_env(config):
    env = build(config)
    info = env.game_info
    assert isinstance(info, GameInfo) and info.name == config[0]
    assert env.metadata == {"name": info.name, "render_modes": ["ansi", "human"], "is_parallelizable": False}
    assert env.possible_agents == [f"player_{i}" for i in range(info.num_players)]
    assert [parse_move(m) for m in info.moves] == list(info.moves)  # the configured vocabulary too
    assert info.reward_range[0] < info.reward_range[1] and info.max_turns >= 1
    assert set(env.action_space("player_0").character_set) == set(CHARSET)


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
@pytest.mark.parametrize("config", configs(NATIVE))
def test_bad_config_raises_naming_the_kwarg(config, kwargs, name):
    with pytest.raises(ValueError, match=name):
        build(config, **kwargs)


# ---- the PettingZoo API ---------------------------------------------------------------------
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("config", configs(NATIVE, CLASSIC))
# api_test warns that a Dict/Text observation is not a NumPy array and that Text spaces are
# not Box/Discrete: expected for text games, so these three (and only these) are silenced.
@pytest.mark.filterwarnings("ignore:Observation is not a NumPy array:UserWarning")
@pytest.mark.filterwarnings("ignore:Observation space for each agent probably should be:UserWarning")
@pytest.mark.filterwarnings("ignore:Action space for each agent probably should be:UserWarning")
def test_pettingzoo_api_and_seed(config, policy):
    # A sampled Text action is almost never a legal move: "forfeit" ends each game at once,
    # "retry" exercises retries, "random" plays whole games from seeded substitutions.
    api_test(build(config, invalid_move=policy), num_cycles=50)
    seed_test(lambda: build(config, invalid_move=policy), num_cycles=50)


# ---- legal play: status lines, infos, rewards at the end ---------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("config", ALL)
def test_random_games_keep_status_lines_infos_and_rewards(config):
    """400 seeded games of random legal moves (30 of an adapted game). Before the end: the
    agent to move reads ``Legal moves: ...`` (its legal actions), every other agent ``Waiting for
    player k.``; only the agent to move has legal actions; ``invalid_move`` is False and
    ``parsed_move`` the agent's last move (None before it acts); every reward is 0. At the end:
    every agent is terminated with the game's returns as its reward, given on the final step
    and kept in ``final_rewards``, reads ``Game over: ...`` and has no legal actions; the facts
    hold (turns, reward range, zero-sum); observations stay inside the observation space."""
    env = build(config)
    info = env.game_info
    for game in range(LONG_GAMES.get(config[0], 400) if config[0] in GAMES else 30):
        env.reset(seed=game)
        rng = np.random.default_rng(game)
        assert env.agents == env.possible_agents and env.invalid_moves == dict.fromkeys(env.agents, 0)
        last_move = dict.fromkeys(env.possible_agents)
        moves = 0
        while running(env):
            mover = env.agent_selection
            options = env.infos[mover]["legal_actions"]
            assert options and all(parse_move(m) == m for m in options)
            # moves outside the vocabulary only in a game with an open grammar (offers)
            assert set(options) <= set(info.moves) or type(env).is_legal is not TextGameEnv.is_legal
            for agent in env.possible_agents:
                obs = env.observe(agent)
                assert in_space(env, obs)
                status = obs["text"].rsplit("\n", 1)[-1]
                if agent == mover:
                    assert status == "Legal moves: " + " ".join(options)
                else:
                    assert status == f"Waiting for player {seat(env, mover)}."
                    assert env.infos[agent]["legal_actions"] == []
                assert env.infos[agent]["invalid_move"] is False
                assert env.infos[agent]["parsed_move"] == last_move[agent]
                assert env.rewards[agent] == 0 and env.final_rewards == {}
            move = options[int(rng.integers(len(options)))]
            env.step(move)
            last_move[mover] = move
            moves += 1
        assert moves <= info.max_turns
        returns = env.game.returns()
        expected = {a: float(returns[seat(env, a)]) for a in env.possible_agents}
        assert env.rewards == expected and env.final_rewards == expected
        assert all(env.terminations.values()) and not any(env.truncations.values())
        assert env.forfeited_by is None and env.invalid_moves == dict.fromkeys(env.agents, 0)
        for agent in env.possible_agents:
            assert env.infos[agent]["legal_actions"] == []
            assert env.observe(agent)["text"].endswith("\n" + result_line(expected[agent]))
            assert in_space(env, env.observe(agent))
        low, high = info.reward_range
        assert all(low <= r <= high for r in expected.values())
        if info.zero_sum:
            assert sum(expected.values()) == pytest.approx(0.0)
        finish(env, expected)


@pytest.mark.parametrize("config", ALL)
def test_the_last_token_of_free_text_is_the_move_and_the_text_is_never_shown(config):
    """``parse_move``'s move, not the text, is played: another legal move earlier in the text,
    padding and capitals inside the brackets change nothing any agent sees, and no observation
    echoes the text."""
    env, twin = build(config), build(config)
    for game in range(3):
        env.reset(seed=game)
        twin.reset(seed=game)
        rng = np.random.default_rng(game)
        while running(twin):
            agent = env.agent_selection
            options = legal(env)
            move = options[int(rng.integers(len(options)))]
            decoy = options[-1] if move == options[0] else options[0]
            env.step(f"{MARKER} I could play {decoy}, but I choose [  {move[1:-1].upper()} ]!")
            twin.step(move)
            assert env.infos[agent]["parsed_move"] == move and env.infos[agent]["invalid_move"] is False
            assert snapshot(env) == snapshot(twin)
            assert not any(MARKER in env.observe(a)["text"] for a in env.possible_agents)


# ---- invalid moves ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("depth", [0, 1, 2, 3])
@pytest.mark.parametrize("config", ALL)
def test_an_invalid_move_forfeits(config, depth, kind):
    """"forfeit" ends the game at once, whoever offends and whatever was scored so far: the
    offender gets ``invalid_move_reward`` and every other agent an equal share of its negative;
    the infos, counts and ``Game over`` lines say who forfeited."""
    penalty = KINDS[kind]
    kwargs = {"invalid_move": "forfeit"} | ({} if penalty is None else {"invalid_move_reward": penalty})
    seed, line = running_line(config, depth, lambda env: illegal(env, kind) is not None, **kwargs)
    env = started(config, seed, line, **kwargs)
    offender = env.agent_selection
    action, parsed = illegal(env, kind)
    env.step(action)
    reward = -1.0 if penalty is None else penalty
    share = -reward / (len(env.possible_agents) - 1)
    expected = {a: reward if a == offender else share for a in env.possible_agents}
    assert env.forfeited_by == offender
    assert all(env.terminations.values()) and not any(env.truncations.values())
    assert env.rewards == expected and env.final_rewards == expected
    assert env.infos[offender] == {"legal_actions": [], "invalid_move": True, "parsed_move": parsed}
    assert env.invalid_moves == {a: int(a == offender) for a in env.possible_agents}
    for agent in env.possible_agents:
        text = env.observe(agent)["text"]
        if agent == offender:
            assert text.endswith("\n" + result_line(reward, "you forfeited (invalid move); "))
        else:
            assert env.infos[agent]["legal_actions"] == [] and env.infos[agent]["invalid_move"] is False
            forfeited = f"player {seat(env, offender)} forfeited (invalid move); "
            assert text.endswith("\n" + result_line(share, forfeited))
        assert MARKER not in text
    finish(env, expected)


def _score_so_far(env):
    try:
        return env.game.returns()
    except (ValueError, IndexError, TypeError):
        return None  # a game with no score before its end


@pytest.mark.parametrize("config", configs(NATIVE, CLASSIC))  # TextArena scores only at the end
def test_a_forfeit_replaces_the_score_so_far(config):
    """Where a game scores before its end (chips of finished hands, trades), a forfeit still
    gives exactly the forfeit rewards (a game that scores only at its end is skipped)."""
    env = build(config, invalid_move="forfeit")
    for game in range(30):
        env.reset(seed=game)
        rng = np.random.default_rng(game)
        while running(env):
            score = _score_so_far(env)
            if score and any(score):
                offender = env.agent_selection
                env.step(UNKNOWN)
                expected = {a: -1.0 if a == offender else 1.0 / (len(env.possible_agents) - 1)
                            for a in env.possible_agents}
                assert env.final_rewards == expected and env.rewards == expected
                finish(env, expected)
                return
            options = legal(env)
            env.step(options[int(rng.integers(len(options)))])
    pytest.skip("no score before the end of a game")


def _retry_turn(env, retries, counts):
    """The agent to move sends ``retries`` invalid actions of every kind and stays to move."""
    agent = env.agent_selection
    options = list(legal(env))
    actions = invalid_actions(env)
    for i in range(retries):
        action, parsed = actions[i % len(actions)]
        env.step(action)
        counts[agent] += 1
        assert env.agent_selection == agent and running(env) and env.forfeited_by is None
        assert env.infos[agent] == {"legal_actions": options, "invalid_move": True, "parsed_move": parsed}
        assert env.invalid_moves == {a: counts[a] for a in env.possible_agents}
        assert all(r == 0 for r in env.rewards.values())
        assert env.observe(agent)["text"].endswith(f"\n{RETRY}\nLegal moves: " + " ".join(options))
        for other in env.possible_agents:
            text = env.observe(other)["text"]
            assert MARKER not in text
            if other != agent:
                assert RETRY not in text and text.endswith(f"\nWaiting for player {seat(env, agent)}.")


def _forfeit_now(env, counts):
    agent = env.agent_selection
    env.step(UNKNOWN)
    counts[agent] += 1
    share = 1.0 / (len(env.possible_agents) - 1)
    expected = {a: -1.0 if a == agent else share for a in env.possible_agents}
    assert env.forfeited_by == agent and env.final_rewards == expected and env.rewards == expected
    assert env.invalid_moves == {a: counts[a] for a in env.possible_agents}
    assert env.infos[agent] == {"legal_actions": [], "invalid_move": True, "parsed_move": UNKNOWN}
    finish(env, expected)


@pytest.mark.parametrize("max_retries", [0, 1, 2, 3])
@pytest.mark.parametrize("config", ALL)
def test_retry_keeps_the_offender_to_move_then_forfeits(config, max_retries):
    """"retry": the offender stays to move with a line asking it to try again, ``max_retries``
    times per turn; a valid move resets the allowance (and so does a reset); the next invalid
    action forfeits."""
    seed, line = running_line(config, 1)
    env = started(config, seed, [], invalid_move="retry", max_retries=max_retries)
    counts = Counter()
    first = env.agent_selection
    _retry_turn(env, max_retries, counts)
    env.step(f"Then [ {line[0][1:-1].upper()} ]")  # a valid move
    assert env.infos[first]["invalid_move"] is False and env.infos[first]["parsed_move"] == line[0]
    assert running(env) and not any("invalid" in env.observe(a)["text"] for a in env.possible_agents)
    _retry_turn(env, max_retries, counts)  # the next agent has its whole allowance
    _forfeit_now(env, counts)

    env.reset(seed=seed)
    _retry_turn(env, max_retries, Counter())
    env.reset(seed=seed)  # mid-turn: the allowance starts afresh
    counts = Counter()
    assert not any(RETRY in env.observe(a)["text"] for a in env.possible_agents)
    _retry_turn(env, max_retries, counts)
    assert env.agent_selection == first
    _forfeit_now(env, counts)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("depth", [0, 1, 2])
@pytest.mark.parametrize("config", ALL)
def test_random_plays_one_legal_move_in_place_of_an_invalid_one(config, depth, kind):
    """"random": exactly one of the legal moves is played instead, as if the agent had sent it;
    only the offender's ``invalid_move`` and count tell the difference; the same seed draws the
    same move."""
    seed, line = running_line(config, depth, lambda env: illegal(env, kind) is not None)
    env = started(config, seed, line, invalid_move="random")
    offender = env.agent_selection
    options = list(legal(env))
    action, parsed = illegal(env, kind)
    env.step(action)
    assert env.forfeited_by is None
    assert env.invalid_moves == {a: int(a == offender) for a in env.possible_agents}
    after = snapshot(env)
    played = [m for m in options if snapshot(started(config, seed, [*line, m])) == after]
    assert len(played) == 1
    twin = started(config, seed, [*line, *played])
    assert env.infos[offender] == {**twin.infos[offender], "invalid_move": True, "parsed_move": parsed}
    assert all(env.infos[a] == twin.infos[a] for a in env.possible_agents if a != offender)
    assert env.final_rewards == twin.final_rewards
    assert not any(MARKER in env.observe(a)["text"] for a in env.agents)
    again = started(config, seed, line, invalid_move="random")
    again.step(action)
    assert snapshot(again) == after


@pytest.mark.parametrize("config", ALL)
def test_random_draws_each_legal_move_uniformly_from_np_random(config):
    """The substitute is ``np_random``'s draw: over 30 draws per legal move (the same deal, the
    generator reseeded) every legal move comes up, none rarely."""
    options = list(legal(started(config, 0, [])))
    outcome = {snapshot(started(config, 0, [m])): m for m in options}
    assert len(outcome) == len(options)
    counts = Counter()
    for k in range(30 * len(options)):
        env = started(config, 0, [], invalid_move="random")
        env.np_random = np.random.default_rng(k)  # the generator the "random" policy draws from
        env.step(UNKNOWN)
        counts[outcome[snapshot(env)]] += 1
    assert set(counts) == set(options)
    assert min(counts.values()) >= 10  # 30 expected


@pytest.mark.parametrize("config", ALL)
def test_non_str_actions_are_invalid_moves_and_logged(config, caplog):
    env = build(config, invalid_move="retry", max_retries=3)
    env.reset(seed=0)
    agent = env.agent_selection
    with caplog.at_level(logging.DEBUG, logger="envs"):
        for action in (None, b"[0]", 7):
            env.step(action)
            assert env.agent_selection == agent
            assert env.infos[agent]["invalid_move"] is True and env.infos[agent]["parsed_move"] is None
    assert env.invalid_moves[agent] == 3
    assert sum("invalid move" in r.getMessage() for r in caplog.records) == 3


@pytest.mark.parametrize("config", ALL)
def test_infos_handed_out_are_not_mutated_by_step(config):
    env = build(config, invalid_move="retry")
    env.reset(seed=0)
    *_, info = env.last()
    before = {k: list(v) if isinstance(v, list) else v for k, v in info.items()}
    env.step("garbage")
    env.step(info["legal_actions"][0])
    assert info == before


# ---- list_legal_moves, render, reset ------------------------------------------------------------
@pytest.mark.parametrize("config", configs(NATIVE))
@pytest.mark.filterwarnings("ignore:Observation is not a NumPy array:UserWarning")
@pytest.mark.filterwarnings("ignore:Observation space for each agent probably should be:UserWarning")
@pytest.mark.filterwarnings("ignore:Action space for each agent probably should be:UserWarning")
def test_list_legal_moves_false_ends_the_prompt_with_your_move(config):
    # for games whose view already shows every legal move (Tic-Tac-Toe's empty cells): the
    # same observation without its longest line, and the same legal_actions in infos
    env, listed = build(config, list_legal_moves=False, invalid_move="retry"), build(config)
    env.reset(seed=3)
    listed.reset(seed=3)
    api_test(build(config, list_legal_moves=False), num_cycles=20)
    mover = env.agent_selection
    text, full = env.observe(mover)["text"], listed.observe(mover)["text"]
    assert text.endswith("\nYour move.") and "Legal moves:" not in text
    assert full.rsplit("\n", 1)[0] == text.rsplit("\n", 1)[0]
    assert env.infos[mover]["legal_actions"] == listed.infos[mover]["legal_actions"] != []
    env.step(UNKNOWN)
    assert env.observe(mover)["text"] == text.rsplit("\n", 1)[0] + f"\n{RETRY}\nYour move."


@pytest.mark.parametrize("config", ALL)
def test_render_modes(config, capsys):
    env = build(config, render_mode="ansi")
    env.reset(seed=0)
    assert isinstance(env.render(), str) and env.render()
    env = build(config, render_mode="human")
    env.reset(seed=0)
    assert env.render() is None and capsys.readouterr().out.strip()
    env = build(config)
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None


# TextArena's KuhnPoker shuffles one deck in place, kept from one game to the next, so the
# deal after reset(seed=s) depends on the env's earlier games (envs/adapters/textarena.py does
# not rebuild it): a known departure from the contract, left to the adapter's owners.
RESET_CONFIGS = [
    pytest.param(*p.values, id=p.id, marks=pytest.mark.xfail(
        strict=True, reason="TextArena KuhnPoker keeps its shuffled deck across resets"))
    if p.values[0][0] == "textarena:KuhnPoker-v0" else p
    for p in ALL
]


@pytest.mark.parametrize("config", RESET_CONFIGS)
def test_reset_seeds_every_draw_and_starts_afresh(config):
    """``reset(seed=s)`` seeds ``np_random`` (deals and the "random" policy): two envs reset with
    the same seed, or one reset again after an episode, show the same; ``options`` is ignored;
    unseeded resets continue the seeded generator; nothing of the last episode remains."""
    one, two = (build(config, invalid_move="random", render_mode="ansi") for _ in range(2))
    one.reset(seed=11)
    two.reset(seed=11)
    assert isinstance(one.np_random, np.random.Generator)
    start = (snapshot(one), one.render())
    assert (snapshot(two), two.render()) == start
    for _ in range(3):  # a game under way, with random substitutions
        if running(one):
            one.step(UNKNOWN)
    one.reset(seed=11, options={"ignored": True})
    assert (snapshot(one), one.render()) == start
    assert one.agents == one.possible_agents and one.forfeited_by is None
    assert one.invalid_moves == dict.fromkeys(one.agents, 0)
    for agent in one.agents:
        assert one.infos[agent]["invalid_move"] is False and one.infos[agent]["parsed_move"] is None
        assert one.rewards[agent] == 0 and not one.terminations[agent] and not one.truncations[agent]
    for env in (one, two):
        env.reset()
        env.step(UNKNOWN)
    assert snapshot(one) == snapshot(two)


# ---- parse_move ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "move"),
    [
        ("[4]", "[4]"),
        ("I'll go [ 4 ]", "[4]"),
        ("[4] no wait, [7]", "[7]"),
        ("**[8]**", "[8]"),
        ("[[3]]", "[3]"),
        ("column [ 6 ] please", "[6]"),
        ("I'll go [ Bet ]", "[bet]"),
        ("[CALL]!", "[call]"),
        ("[check] or [fold]", "[fold]"),
        ("[2X3]", "[2x3]"),
        ("you [ Liar ]!", "[liar]"),
        ("[1x2] no, [2x2]", "[2x2]"),
        ("[ ]", "[]"),  # whitespace only: no game accepts it
        ("[" + "1" * 32 + "]", "[" + "1" * 32 + "]"),
        ("nothing here", None),
        ("3", None),
        ("2x3", None),
        ("[]", None),
        ("[4", None),
        ("[4\n]", None),
        ("[" + "1" * 33 + "]", None),
        (None, None),
        (b"[4]", None),
    ],
)
def test_parse_move_examples(text, move):
    assert parse_move(text) == move


ALL_MOVES = sorted({m for cls in GAMES.values() for m in cls.game_info.moves})


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


# ---- 9. snapshot ------------------------------------------------------------------------------
def _view(env):
    """Everything the contract exposes of a position: every seat's text, infos, rewards, flags."""
    return ([env.observe(a)["text"] for a in env.possible_agents], env.agent_selection, list(env.agents),
            {a: dict(i) for a, i in env.infos.items()}, dict(env._cumulative_rewards), dict(env.terminations),
            dict(env.invalid_moves))


def _play_out(env, rng):
    """Random legal moves to the end; the moves played and the final rewards."""
    moves = []
    while running(env):
        options = legal(env)
        move = options[int(rng.integers(len(options)))] if options else None
        moves.append(move)
        env.step(move)
    return moves, dict(env.final_rewards)


@pytest.mark.parametrize("config", ALL)
@pytest.mark.parametrize("depth", [0, 1, 3])
def test_a_snapshot_is_the_position_and_playing_it_leaves_the_original_untouched(config, depth):
    seed, moves = running_line(config, depth)
    env = started(config, seed, moves, invalid_move="random")
    before = _view(env)
    twin = env.snapshot(seed=123)
    assert _view(twin) == before, "the copy is the position as it stands"
    _play_out(twin, np.random.default_rng(1))
    assert _view(env) == before, "playing the copy changed the original"
    # the original plays on exactly as an env that was never copied
    fresh = started(config, seed, moves, invalid_move="random")
    assert _play_out(env, np.random.default_rng(2)) == _play_out(fresh, np.random.default_rng(2))


@pytest.mark.parametrize("config", configs(ARENA))
def test_a_move_the_wrapped_game_rejects_in_a_snapshot_counts_in_the_snapshot_only(config):
    """Under ``invalid_move="game"`` TextArena rejects a text itself (its error allowance): the
    copy counts it; the original neither sees it nor plays differently after."""
    seed, moves = running_line(config, 1, invalid_move="game")
    env = started(config, seed, moves, invalid_move="game")
    before = _view(env)
    twin = env.snapshot(seed=123)
    mover = twin.agent_selection
    twin.step(UNKNOWN)
    assert twin.invalid_moves[mover] == env.invalid_moves[mover] + 1 and twin.infos[mover]["invalid_move"]
    _play_out(twin, np.random.default_rng(1))
    assert _view(env) == before, "a move rejected in the copy counted in the original"
    fresh = started(config, seed, moves, invalid_move="game")
    assert _play_out(env, np.random.default_rng(2)) == _play_out(fresh, np.random.default_rng(2))


@pytest.mark.parametrize("config", ALL)
def test_two_snapshots_with_one_seed_play_alike_and_an_invalid_move_draws_from_the_new_stream(config):
    """Same seed, same actions: the same game (the random invalid-move policy included, drawing
    from the copy's own stream)."""
    seed, moves = running_line(config, 1)
    env = started(config, seed, moves, invalid_move="random")
    games = []
    for _ in range(2):
        twin = env.snapshot(seed=7)
        twin.step(UNKNOWN)  # invalid: a random legal move from the copy's stream is played
        games.append((_view(twin), _play_out(twin, np.random.default_rng(3))))
    assert games[0] == games[1]


@pytest.mark.parametrize("game_id, kwargs, move", [
    ("kuhn_poker_v1", {"num_hands": 3}, "[check]"),  # hands 2 and 3 were dealt at reset
    ("textarena:PigDice-v0", {}, "[roll]"),  # the game's own random state, swapped in around each call
])
def test_a_snapshot_draws_its_future_chance_from_its_own_seed(game_id, kwargs, move):
    """Item 9: chance from the copy on draws from ``seed``; copies with other seeds play other
    deals and rolls (they replayed the original's, known to a continuation, before)."""
    if game_id.startswith("textarena"):
        pytest.importorskip("textarena")
    env = make(game_id, **kwargs)
    env.reset(seed=0)
    futures = set()
    for seed in range(12):
        twin = env.snapshot(seed=seed)
        views = []
        for _ in range(6):
            if not running(twin):
                break
            options = legal(twin)
            twin.step(move if move in options else options[0])
            views.append(twin.observe(twin.possible_agents[0])["text"])
        futures.add(tuple(views))
    assert len(futures) > 1


def test_a_deep_copy_of_a_wrapped_pettingzoo_game_plays_to_its_end():
    """``copy.deepcopy`` replays the game on a fresh wrapped env, as a snapshot does (a deep copy
    of the wrapped env raised AttributeError at the game's end); the original plays on alike."""
    import copy

    pytest.importorskip("pygame")
    env = make("pettingzoo:tictactoe_v3")
    env.reset(seed=0)
    env.step(legal(env)[0])
    twin = copy.deepcopy(env)
    assert _view(twin) == _view(env)
    assert _play_out(twin, np.random.default_rng(5)) == _play_out(env, np.random.default_rng(5))


def test_a_wrapped_game_that_cannot_be_copied_says_so_naming_it():
    pytest.importorskip("pygame")
    from envs.adapters.pettingzoo_classic import ClassicTextEnv, make_pettingzoo_env

    env = ClassicTextEnv(make_pettingzoo_env("tictactoe_v3"))
    env.reset(seed=0)
    with pytest.raises(NotImplementedError, match=r"^pettingzoo:tictactoe_v3: built from an AECEnv instance"):
        env.snapshot(seed=0)
