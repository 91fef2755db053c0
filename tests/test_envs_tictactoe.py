"""Tic-Tac-Toe: the pure rules with scripted move lists, the env's texts and invalid moves."""

import itertools

import pytest

from envs import make, parse_move
from envs.tictactoe import LINES, MOVES, TicTacToeRules


def play_moves(cells):
    rules = TicTacToeRules()
    for cell in cells:
        rules.apply(f"[{cell}]")
    return rules


def interleave(x_cells, o_cells):
    return [c for pair in itertools.zip_longest(x_cells, o_cells) for c in pair if c is not None]


@pytest.mark.parametrize("line", LINES)
def test_x_wins_on_every_line(line):
    others = [c for c in range(9) if c not in line][:2]
    rules = play_moves(interleave(line, others))
    assert rules.is_terminal and rules.winner == 0
    assert rules.returns() == [1.0, -1.0] and rules.legal_moves() == []


@pytest.mark.parametrize("line", LINES)
def test_o_wins_on_every_line(line):
    rest = [c for c in range(9) if c not in line]
    x_cells = next(t for t in itertools.combinations(rest, 3) if t not in LINES)
    rules = play_moves(interleave(x_cells, line))
    assert rules.is_terminal and rules.winner == 1 and rules.returns() == [-1.0, 1.0]


def test_full_board_without_a_line_is_a_draw():
    rules = play_moves([0, 1, 2, 4, 3, 5, 7, 6, 8])  # X O X / X O O / O X X
    assert rules.is_terminal and rules.winner is None and rules.returns() == [0.0, 0.0]


def test_win_on_the_last_cell_is_a_win_not_a_draw():
    rules = play_moves([0, 1, 2, 4, 3, 5, 6])  # X completes the left column: 0, 3, 6
    assert rules.winner == 0
    before = play_moves([0, 1, 2, 3, 4, 5, 7, 6])
    assert not before.is_terminal and before.legal_moves() == ["[8]"]
    rules = play_moves([0, 1, 2, 3, 4, 5, 7, 6, 8])  # X O X / O X O / O X X: the 9th move wins
    assert rules.winner == 0 and rules.returns() == [1.0, -1.0]


def test_rules_reject_illegal_moves():
    rules = play_moves([4])
    with pytest.raises(ValueError, match="expected one of"):
        rules.apply("[4]")
    with pytest.raises(ValueError):
        rules.apply("[9]")
    with pytest.raises(ValueError):
        play_moves([0, 3, 1, 4, 2]).apply("[8]")  # game over


def test_observation_shows_empty_cells_as_move_tokens():
    env = make("tictactoe_v1")
    env.reset(seed=0)
    for move in ("[0]", "[2]", "[7]"):
        env.step(move)
    assert env.agent_selection == "player_1"
    assert env.observe("player_1")["text"] == (
        "Tic-Tac-Toe. You are O.\n"
        "X [1] O\n"
        "[3] [4] [5]\n"
        "[6] X [8]\n"
        "Legal moves: [1] [3] [4] [5] [6] [8]"
    )
    assert env.observe("player_0")["text"].splitlines()[0] == "Tic-Tac-Toe. You are X."
    assert env.observe("player_0")["text"].endswith("[6] X [8]\nWaiting for player 1.")
    assert env.infos["player_1"]["legal_actions"] == ["[1]", "[3]", "[4]", "[5]", "[6]", "[8]"]
    assert env.infos["player_0"]["legal_actions"] == []


def test_env_plays_a_scripted_win_with_free_text():
    env = make("tictactoe_v1")
    env.reset(seed=0)
    for action in ("Center: [4]", "[0]", "I take [ 2 ]", "[1]", "corner [6]!"):
        env.step(action)
    assert all(env.terminations.values())
    assert env._cumulative_rewards == {"player_0": 1.0, "player_1": -1.0}
    assert env.observe("player_0")["text"].endswith("Game over: you won (+1).")
    assert env.observe("player_1")["text"].endswith("Game over: you lost (-1).")
    env.step(None)
    env.step(None)
    assert env.agents == []


def test_forfeit_ends_the_game_with_the_penalty():
    env = make("tictactoe_v1", invalid_move_reward=-2.0)
    env.reset(seed=0)
    env.step("[4]")
    env.step("[4]")  # occupied: invalid
    assert all(env.terminations.values())
    assert env.rewards == {"player_0": 2.0, "player_1": -2.0}
    assert env.infos["player_1"]["invalid_move"] is True and env.infos["player_1"]["parsed_move"] == "[4]"
    assert env.infos["player_0"]["invalid_move"] is False
    assert env.invalid_moves == {"player_0": 0, "player_1": 1}
    assert env.observe("player_1")["text"].endswith("Game over: you forfeited (invalid move); you lost (-2).")
    assert env.observe("player_0")["text"].endswith("Game over: player 1 forfeited (invalid move); you won (+2).")


def test_retry_keeps_the_offender_to_move_then_forfeits():
    env = make("tictactoe_v1", invalid_move="retry", max_retries=2)
    env.reset(seed=0)
    for attempt in range(2):
        env.step("no idea")
        assert env.agent_selection == "player_0" and not any(env.terminations.values())
        assert env.infos["player_0"]["invalid_move"] is True
        assert "Your last move was invalid; try again.\nLegal moves:" in env.observe("player_0")["text"]
    env.step("[4]")  # a valid move resets the retry count
    assert env.infos["player_0"]["invalid_move"] is False
    assert "invalid" not in env.observe("player_1")["text"]
    for attempt in range(2):
        env.step("[4]")
        assert env.agent_selection == "player_1"
    env.step("[4]")
    assert all(env.terminations.values()) and env.rewards == {"player_0": 1.0, "player_1": -1.0}
    assert env.invalid_moves == {"player_0": 2, "player_1": 3}


def test_retry_with_zero_retries_forfeits_at_once():
    env = make("tictactoe_v1", invalid_move="retry", max_retries=0)
    env.reset(seed=0)
    env.step("pass")
    assert env.rewards == {"player_0": -1.0, "player_1": 1.0}


def test_random_policy_plays_a_seeded_legal_move():
    boards = []
    for _ in range(2):
        env = make("tictactoe_v1", invalid_move="random")
        env.reset(seed=7)
        env.step("[9]")
        assert env.agent_selection == "player_1" and not any(env.terminations.values())
        assert env.infos["player_0"] == {"legal_actions": [], "invalid_move": True, "parsed_move": "[9]"}
        boards.append(list(env.game.board))
    assert boards[0] == boards[1] and boards[0].count(0) == 1
    env.step("[x]")
    assert env.game.board.count(1) == 1


@pytest.mark.parametrize(
    ("text", "move"),
    [
        ("[4]", "[4]"),
        ("I'll go [ 4 ]", "[4]"),
        ("[4] no wait, [7]", "[7]"),
        ("**[8]**", "[8]"),
        ("[[3]]", "[3]"),
        ("nothing here", None),
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


def test_every_move_parses_to_itself():
    assert [parse_move(m) for m in MOVES] == list(MOVES)


# ---- TacticalBot: win, else block, else random ----------------------------------------------------
def _observe(cells, seat):
    """The observation of ``player_<seat>`` after the moves ``cells`` in a real env."""
    env = make("tictactoe_v1")
    env.reset(seed=0)
    for cell in cells:
        env.step(f"[{cell}]")
    assert env.agent_selection == f"player_{seat}"
    observation, _, _, _, info = env.last()
    return observation["text"], info["legal_actions"]


def test_parse_board_reads_the_env_observation():
    from envs.tictactoe import parse_board

    text, _ = _observe([4, 0, 8], seat=1)  # X center, O corner, X opposite corner
    board, me = parse_board(text)
    assert me == 1
    assert board == [1, None, None, None, 0, None, None, None, 0]
    with pytest.raises(ValueError, match="tictactoe_v1 observation"):
        parse_board("Kuhn Poker. You hold the King.")


def test_tactical_bot_takes_a_win_before_blocking():
    from envs.tictactoe import TacticalBot

    text, legal = _observe([0, 3, 1, 4], seat=0)  # X: 0 1 (wins at 2); O: 3 4 (wins at 5)
    assert {TacticalBot(seed=s).act(text, legal) for s in range(20)} == {"[2]"}


def test_tactical_bot_blocks_when_it_cannot_win():
    from envs.tictactoe import TacticalBot

    text, legal = _observe([0, 4, 1], seat=1)  # X threatens [2]; O cannot win yet
    assert {TacticalBot(seed=s).act(text, legal) for s in range(20)} == {"[2]"}


def test_tactical_bot_otherwise_plays_every_legal_move_at_random():
    from envs.tictactoe import TacticalBot

    text, legal = _observe([], seat=0)
    bot = TacticalBot(seed=0)
    assert {bot.act(text, legal) for _ in range(200)} == set(legal)


def test_tactical_bot_is_registered_and_beats_random_more_often_than_random_does():
    """500 games per seat, fixed seeds: scripted win-or-block play wins ~0.80 of games against
    RandomBot (0.90 as X, 0.69 as O); RandomBot against RandomBot ~0.44."""
    from envs import BOTS, RandomBot, play

    env = make("tictactoe_v1")
    wins = {"tictactoe_tactical": 0, "random": 0}
    for name in wins:
        for seat in (0, 1):
            hero, other = BOTS[name](seed=1), RandomBot(seed=2)
            for game in range(500):
                seats = {f"player_{seat}": hero, f"player_{1 - seat}": other}
                wins[name] += play(env, seats, seed=game)[f"player_{seat}"] > 0
    assert wins["tictactoe_tactical"] / 1000 > 0.75
    assert wins["tictactoe_tactical"] > wins["random"] + 250
