"""Tic-Tac-Toe: the pure rules with scripted move lists, the env's texts, a scripted win, and
TacticalBot. The shared contract (invalid moves, parse_move, status lines) is in
test_game_contract.py."""

import itertools

import pytest

from envs import make, play
from envs.bots import RandomBot
from envs.tictactoe import LINES, TicTacToeRules


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


def test_env_plays_a_scripted_win_with_free_text():
    env = make("tictactoe_v1")
    env.reset(seed=0)
    for action in ("Center: [4]", "[0]", "I take [ 2 ]", "[1]", "corner [6]!"):
        env.step(action)
    assert all(env.terminations.values())
    assert env._cumulative_rewards == {"player_0": 1.0, "player_1": -1.0}


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


@pytest.mark.slow
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


def test_minimax_values_of_known_positions():
    """The empty board is a draw (every first move keeps it one); a win in one is the only best
    move; a threat that must be blocked leaves the block as the only move that does not lose."""
    from envs.tictactoe import minimax_value, perfect_moves

    empty = (None,) * 9
    assert minimax_value(empty, 0) == 0
    assert perfect_moves([None] * 9, 0)  # every first move draws under perfect play: all are optimal
    assert sorted(perfect_moves([None] * 9, 0)) == list(range(9))
    # X: 0, 1; O: 3, 4; X to move wins at 2 (and only 2 wins at once)
    board = [0, 0, None, 1, 1, None, None, None, None]
    assert minimax_value(tuple(board), 0) == 1 and perfect_moves(board, 0) == [2]
    # O to move must block at 2 (X threatens 0-1-2); any other move loses
    board = [0, 0, None, None, 1, None, None, None, None]
    assert perfect_moves(board, 1) == [2]


@pytest.mark.slow
def test_the_perfect_bot_never_loses_and_draws_against_itself():
    """Against RandomBot (1000 games per seat) it loses none and wins the known share (0.968 as X,
    0.781 as O for minimax with random ties: within 4 standard errors); against itself every game
    is a draw."""
    from envs.bots import BOTS

    perfect = BOTS["tictactoe_perfect"]
    env = make("tictactoe_v1")
    for seat, expected in ((0, 0.968), (1, 0.781)):
        payoffs = [play(env, {f"player_{seat}": perfect(seed=g), f"player_{1 - seat}": RandomBot(seed=5000 + g)},
                        seed=g)[f"player_{seat}"] for g in range(1000)]
        wins = sum(p > 0 for p in payoffs) / len(payoffs)
        assert min(payoffs) >= 0.0  # never a loss
        assert abs(wins - expected) < 4 * (expected * (1 - expected) / 1000) ** 0.5
    draws = [play(env, {"player_0": perfect(seed=g), "player_1": perfect(seed=g + 1)}, seed=g)["player_0"]
             for g in range(100)]
    assert draws == [0.0] * 100


def _exact_wins_against_random(choose, seat: int) -> float:
    """The probability that the player choosing uniformly among ``choose(board, seat)`` wins from
    the empty board in ``seat`` against a uniformly random player, over every line of play."""
    from envs.tictactoe import line_owner

    def wins(board, to_move):
        owner = line_owner(board)
        if owner is not None:
            return float(owner == seat)
        empty = [i for i, cell in enumerate(board) if cell is None]
        if not empty:
            return 0.0
        cells = choose(list(board), seat) if to_move == seat else empty
        return sum(wins(board[:i] + (to_move,) + board[i + 1:], 1 - to_move) for i in cells) / len(cells)

    return wins((None,) * 9, 0)


def test_the_pressing_bot_never_loses_and_wins_more_against_random_play_than_the_perfect_bot():
    """Exactly, over every line of play: as X and as O it wins more games against a uniformly
    random player than PerfectBot does (0.995 / 0.916 against 0.968 / 0.777), every move it picks
    is a perfect move (so a perfect player only draws against it), and the bot plays them."""
    from envs.bots import BOTS
    from envs.tictactoe import MOVES, line_owner, perfect_moves, pressing_moves

    for seat, (pressing, perfect) in enumerate(((0.9948, 0.9679), (0.9164, 0.7775))):
        assert _exact_wins_against_random(pressing_moves, seat) == pytest.approx(pressing, abs=1e-4)
        assert _exact_wins_against_random(perfect_moves, seat) == pytest.approx(perfect, abs=1e-4)
    for cells in itertools.product((None, 0, 1), repeat=9):  # every board with a move to make
        to_move = 0 if cells.count(0) == cells.count(1) else 1
        if cells.count(0) - cells.count(1) not in (0, 1) or None not in cells:
            continue
        if line_owner(cells) is not None:
            continue
        chosen = pressing_moves(list(cells), to_move)
        assert chosen and set(chosen) <= set(perfect_moves(list(cells), to_move))
    env = make("tictactoe_v1")
    bot = BOTS["tictactoe_pressing"](seed=0)
    env.reset(seed=0)
    observation, *_, info = env.last()
    assert bot.act(observation["text"], info["legal_actions"]) in {MOVES[i] for i in pressing_moves([None] * 9, 0)}
