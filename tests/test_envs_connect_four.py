"""Connect Four: the pure rules with scripted move lists (wins in every direction, a draw, full
columns), the env's texts and a scripted win. The shared contract (invalid moves, among them a
full column, the PettingZoo API, parse_move) is in test_game_contract.py."""

import pytest

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
    assert env.render().endswith("X wins.")


def test_game_facts():
    info = ConnectFourEnv.game_info
    assert info.num_players == 2 and info.zero_sum and info.reward_range == (-1.0, 1.0)
    assert info.max_turns == 42 and info.moves == MOVES
