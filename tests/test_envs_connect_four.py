"""Connect Four: the pure rules with scripted move lists (wins in every direction, a draw, full
columns), the env's texts, invalid moves, and PettingZoo's api_test and seed_test."""

import pytest
from pettingzoo.test import api_test, seed_test

from envs import parse_move
from envs.base import GameInfo
from envs.connect_four import COLS, MOVES, ROWS, ConnectFourEnv, ConnectFourRules


def play_moves(columns):
    rules = ConnectFourRules()
    for col in columns:
        rules.apply(f"[{col}]")
    return rules


def mirror(columns):
    return [COLS - 1 - c for c in columns]


# (columns played, X moving first; winner; the four cells (row, col), row 0 on top)
WINS = [
    pytest.param([0, 0, 1, 1, 2, 2, 3], 0, [(5, 0), (5, 1), (5, 2), (5, 3)], id="x-horizontal"),
    pytest.param([0, 0, 1, 1, 3, 3, 2], 0, [(5, 0), (5, 1), (5, 2), (5, 3)], id="x-horizontal-filled-in-the-middle"),
    pytest.param([0, 3, 1, 4, 0, 5, 1, 6], 1, [(5, 3), (5, 4), (5, 5), (5, 6)], id="o-horizontal-right-edge"),
    pytest.param([0, 1, 0, 1, 0, 1, 0], 0, [(5, 0), (4, 0), (3, 0), (2, 0)], id="x-vertical"),
    pytest.param([0, 6, 0, 6, 0, 6, 1, 6], 1, [(5, 6), (4, 6), (3, 6), (2, 6)], id="o-vertical"),
    pytest.param([0, 1, 1, 2, 2, 3, 2, 3, 3, 5, 3], 0, [(5, 0), (4, 1), (3, 2), (2, 3)], id="x-diagonal-up-right"),
    pytest.param(mirror([0, 1, 1, 2, 2, 3, 2, 3, 3, 5, 3]), 0, [(5, 6), (4, 5), (3, 4), (2, 3)], id="x-diagonal-up-left"),
    # O: (5,1) (4,2) (3,3) (2,4); X's discs below them never line up four.
    pytest.param([0, 1, 2, 2, 3, 3, 4, 3, 4, 4, 6, 4], 1, [(5, 1), (4, 2), (3, 3), (2, 4)], id="o-diagonal-up-right"),
    pytest.param(mirror([0, 1, 2, 2, 3, 3, 4, 3, 4, 4, 6, 4]), 1, [(5, 5), (4, 4), (3, 3), (2, 2)], id="o-diagonal-up-left"),
]


@pytest.mark.parametrize(("columns", "winner", "cells"), WINS)
def test_four_in_a_row_wins_in_every_direction(columns, winner, cells):
    before = play_moves(columns[:-1])
    assert not before.is_terminal and before.winner is None
    rules = play_moves(columns)
    assert all(rules.board[r][c] == winner for r, c in cells)
    assert rules.is_terminal and rules.winner == winner and rules.legal_moves() == []
    assert rules.returns() == ([1.0, -1.0] if winner == 0 else [-1.0, 1.0])


def test_three_in_a_row_and_lines_broken_by_the_edge_do_not_win():
    rules = play_moves([0, 0, 1, 1, 2, 2])  # X X X on the bottom row, O O O above
    assert not rules.is_terminal and rules.winner is None
    # X on columns 4, 5, 6 of the bottom row and on column 0 of the row above: no wrap-around.
    rules = play_moves([4, 0, 5, 1, 6, 2, 0])
    assert rules.board[4][0] == 0 and [rules.board[5][c] for c in (4, 5, 6)] == [0, 0, 0]
    assert rules.winner is None


def test_full_board_without_four_is_a_draw():
    """Columns 0-1, 2-3, 4-5 each filled X0 O1 X0 O1 X0 O1 X1 O0 X1 O0 X1 O0 (bottom up: XXXOOO
    and OOOXXX), then column 6 alternates: columns 0-5 alternate along every row and along
    every diagonal within the bottom or top half, so no line of four is one colour."""
    pair = [0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0]
    columns = pair + [c + 2 for c in pair] + [c + 4 for c in pair] + [6] * ROWS
    rules = play_moves(columns[:-1])
    assert not rules.is_terminal and rules.legal_moves() == ["[6]"]
    rules.apply("[6]")
    assert rules.is_terminal and rules.winner is None and rules.num_moves == ROWS * COLS
    assert rules.returns() == [0.0, 0.0] and rules.legal_moves() == []
    assert rules.board_text().splitlines()[0] == "O X O X O X O"
    assert rules.board_text().splitlines()[5] == "X O X O X O X"


def test_discs_stack_and_a_full_column_is_illegal():
    rules = play_moves([3] * ROWS)
    assert [rules.board[r][3] for r in range(ROWS)] == [1, 0, 1, 0, 1, 0]
    assert "[3]" not in rules.legal_moves() and len(rules.legal_moves()) == COLS - 1
    with pytest.raises(ValueError, match="expected one of"):
        rules.apply("[3]")
    for bad in ("[7]", "[-1]", "3"):
        with pytest.raises(ValueError):
            rules.apply(bad)
    with pytest.raises(ValueError):
        play_moves([0, 1, 0, 1, 0, 1, 0]).apply("[2]")  # game over


def test_observation_shows_board_column_numbers_and_legal_moves():
    env = ConnectFourEnv()
    env.reset(seed=0)
    for move in ("[3]", "[3]", "[2]"):
        env.step(move)
    assert env.agent_selection == "player_1"
    empty = ". . . . . . .\n"
    assert env.observe("player_1")["text"] == (
        "Connect Four. You are O.\n"
        + empty * 4
        + ". . . O . . .\n"
        ". . X X . . .\n"
        "0 1 2 3 4 5 6\n"
        "Legal moves: [0] [1] [2] [3] [4] [5] [6]"
    )
    assert env.observe("player_0")["text"].startswith("Connect Four. You are X.\n")
    assert env.observe("player_0")["text"].endswith("0 1 2 3 4 5 6\nWaiting for player 1.")
    assert env.infos["player_1"]["legal_actions"] == list(MOVES)
    assert env.infos["player_0"]["legal_actions"] == []
    for _ in range(ROWS):
        env.step("[0]")
    assert env.infos["player_1"]["legal_actions"] == ["[1]", "[2]", "[3]", "[4]", "[5]", "[6]"]
    assert env.observe("player_1")["text"].endswith("Legal moves: [1] [2] [3] [4] [5] [6]")


def test_env_plays_a_scripted_win_with_free_text():
    env = ConnectFourEnv(render_mode="ansi")
    env.reset(seed=0)
    for action in ("[0]", "[1]", "Again [ 0 ]", "[1]", "[0]", "I copy: [1]", "stack it **[0]**"):
        env.step(action)
    assert all(env.terminations.values())
    assert env._cumulative_rewards == {"player_0": 1.0, "player_1": -1.0}
    assert env.final_rewards == {"player_0": 1.0, "player_1": -1.0}
    assert env.observe("player_0")["text"].endswith("Game over: you won (+1).")
    assert env.observe("player_1")["text"].endswith("Game over: you lost (-1).")
    assert env.render().endswith("X wins.")
    env.step(None)
    env.step(None)
    assert env.agents == []


def test_forfeit_on_a_full_column():
    env = ConnectFourEnv(invalid_move_reward=-2.0)
    env.reset(seed=0)
    for _ in range(ROWS):
        env.step("[5]")
    env.step("[5]")  # column 5 is full: invalid
    assert all(env.terminations.values())
    assert env.rewards == {"player_0": -2.0, "player_1": 2.0}
    assert env.infos["player_0"]["invalid_move"] is True and env.infos["player_0"]["parsed_move"] == "[5]"
    assert env.invalid_moves == {"player_0": 1, "player_1": 0}
    assert env.observe("player_0")["text"].endswith("Game over: you forfeited (invalid move); you lost (-2).")
    assert env.observe("player_1")["text"].endswith("Game over: player 0 forfeited (invalid move); you won (+2).")


def test_retry_keeps_the_offender_to_move_then_forfeits():
    env = ConnectFourEnv(invalid_move="retry", max_retries=2)
    env.reset(seed=0)
    for _ in range(2):
        env.step("[7]")
        assert env.agent_selection == "player_0" and not any(env.terminations.values())
        assert "Your last move was invalid; try again.\nLegal moves:" in env.observe("player_0")["text"]
    env.step("[3]")  # a valid move resets the retry count
    assert env.infos["player_0"]["invalid_move"] is False
    for _ in range(2):
        env.step("drop it in the middle")
        assert env.agent_selection == "player_1"
    env.step(None)
    assert all(env.terminations.values()) and env.rewards == {"player_0": 1.0, "player_1": -1.0}
    assert env.invalid_moves == {"player_0": 2, "player_1": 3}


def test_random_policy_plays_a_seeded_legal_move():
    boards = []
    for _ in range(2):
        env = ConnectFourEnv(invalid_move="random")
        env.reset(seed=7)
        env.step("[9]")
        assert env.agent_selection == "player_1" and not any(env.terminations.values())
        assert env.infos["player_0"] == {"legal_actions": [], "invalid_move": True, "parsed_move": "[9]"}
        boards.append([row[:] for row in env.game.board])
    assert boards[0] == boards[1] and sum(row.count(0) for row in boards[0]) == 1
    env.step("[x]")
    assert sum(row.count(1) for row in env.game.board) == 1 and env.game.num_moves == 2


@pytest.mark.parametrize("policy", ["forfeit", "retry", "random"])
# api_test warns that a Dict/Text observation is not a NumPy array and that Text spaces are
# not Box/Discrete: expected for text games, so these three (and only these) are silenced.
@pytest.mark.filterwarnings("ignore:Observation is not a NumPy array:UserWarning")
@pytest.mark.filterwarnings("ignore:Observation space for each agent probably should be:UserWarning")
@pytest.mark.filterwarnings("ignore:Action space for each agent probably should be:UserWarning")
def test_pettingzoo_api_and_seed(policy):
    api_test(ConnectFourEnv(invalid_move=policy), num_cycles=50)
    seed_test(lambda: ConnectFourEnv(invalid_move=policy), num_cycles=50)


def test_game_facts_are_declared_as_data():
    info = ConnectFourEnv.game_info
    assert isinstance(info, GameInfo) and info.name == "connect_four_v1"
    assert info.num_players == 2 and info.zero_sum and info.reward_range == (-1.0, 1.0)
    assert info.max_turns == 42 and info.moves == MOVES
    assert ConnectFourEnv.metadata["name"] == "connect_four_v1"


@pytest.mark.parametrize(("text", "move"), [("[3]", "[3]"), ("column [ 6 ] please", "[6]"), ("[2] no, [4]", "[4]"), ("3", None)])
def test_parse_move_examples(text, move):
    assert parse_move(text) == move


def test_every_move_parses_to_itself():
    assert [parse_move(m) for m in MOVES] == list(MOVES)
