"""``sp-lightning play``: a person against a bot or a model, through piped input and in-process."""

import io

import pytest

from sp_lightning.cli.play import main as play_main


class ScriptedPerson:
    """A person typing the given lines in turn (a scripted stand-in for the keyboard), then Ctrl-D."""

    def __init__(self, lines):
        self.lines, self.prompts = list(lines), 0

    def __call__(self, prompt):
        self.prompts += 1
        if not self.lines:
            raise EOFError
        return self.lines.pop(0)


def test_a_full_game_against_a_bot_through_piped_input(monkeypatch, capsys):
    """``sp-lightning play`` reading its moves from a pipe (stdin not a terminal: ``input``
    reads lines until they run out), in this process."""
    from sp_lightning.cli import main

    # every cell in turn: the taken ones are refused and asked again, so the game always ends
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(f"{cell}\n" for cell in (4, 0, 8, 2, 6, 1, 3, 5, 7))))
    main(["play", "--game", "tictactoe_v1", "--opponent", "bot:random", "--seed", "4"])
    out = capsys.readouterr()
    text = out.out
    assert "you are player_0 (seat 0) against bot:random. Type a move, e.g. [0] (or 0)" in text
    assert "player_1 plays [" in text  # the bot's moves are announced: a board does not say which cell is new
    assert "is not a legal move" in text  # the bot took a cell the script asked for
    assert "Game over: you" in text and "Result: player_0" in text
    assert "GPU available" not in out.out + out.err


def test_kuhn_against_the_untrained_model_shows_only_your_own_card():
    written = []
    person = ScriptedPerson(["[bet]", "[call]", "[check]", "[fold]"] * 5)
    totals = play_main(["--game", "kuhn_poker_v1", "--opponent", "learner", "--seat", "1", "--seed", "0"],
                       read=person, write=written.append)
    assert totals is not None and sum(totals.values()) == pytest.approx(0.0)
    text = "\n".join(written)
    cards = {line.split("Your card: ")[1][0] for line in text.splitlines() if "Your card: " in line}
    assert len(cards) == 1  # player_1's own card, the one shown as "Your card"
    before_the_end = [view for view in written if "Game over" not in view and "Result:" not in view]
    assert before_the_end and not any("Showdown:" in v or "Cards:" in v for v in before_the_end)  # no reveal
    assert "You are player 1" in text and "Result: player_0" in text
    assert "against the untrained policy (no --checkpoint" in text and "e.g. [check] (or check)" in text
    assert "player_0 plays" in text  # the model's move, legal or not, is announced


def test_quit_and_end_of_input_leave_the_game():
    for lines in (["quit"], []):
        written = []
        assert play_main(["--game", "tictactoe_v1", "--opponent", "bot:random"], read=ScriptedPerson(lines),
                         write=written.append) is None
        assert written[-1].strip() == "You left the game."


@pytest.mark.parametrize(("args", "message"), [
    (["--game", "tictactoe_v1", "--seat", "2"], "--seat 2"),
    (["--game", "tictactoe_v1", "--opponent", "bot:nobody"], "no such bot"),
    (["--opponent", "bot:random"], "--config or --game"),
])
def test_bad_arguments_name_the_flag(args, message, capsys):
    with pytest.raises(SystemExit):
        play_main(args, read=ScriptedPerson([]), write=lambda text: None)
    assert message in capsys.readouterr().err


# ---- GameSession: the notebook's move-per-cell game ------------------------------------------
from envs import play as play_episode  # noqa: E402
from sp_lightning.games import GameSettings  # noqa: E402
from sp_lightning.play import GameSession, opponent_players  # noqa: E402


def test_a_session_plays_the_same_game_as_the_scripted_loop_and_refuses_illegal_moves():
    """Moves sent one by one give the game ``envs.play`` gives with the same moves, seeds and bot;
    an illegal or unknown move is refused and changes nothing."""
    game = GameSettings(id="tictactoe_v1")
    order = ["4", "0", "8", "2", "6", "1", "3", "5", "7"]
    session = GameSession(game, opponent_players(game, "player_0", "bot:random", None, seed=5), seed=5)
    assert session.human == "player_0" and session.legal_moves == [f"[{i}]" for i in range(9)]
    before = session.observation
    assert session.move("9").startswith("'9' is not a legal move") and session.observation == before
    sent = []
    while not session.done:
        move = next(m for m in order if f"[{m}]" in session.legal_moves)
        sent.append(f"[{move}]")
        session.move(move)
    assert session.legal_moves == [] and session.move("1").startswith("The game is over.")

    replay = iter(sent)
    scripted = {"player_0": lambda obs, legal: next(replay), **opponent_players(game, "player_0", "bot:random", None, seed=5)}
    env = game.make_env()
    totals = play_episode(env, scripted, seed=5)
    assert totals == session.totals and env.observe("player_0")["text"] == session.observation
    assert session.result() == "Result: " + ", ".join(f"{a} {r:+g}" for a, r in totals.items())


def test_a_session_serves_the_model_and_shows_only_the_persons_view(tiny_policy):
    from sp_lightning.rollout import HFRolloutWorker, SamplingSettings

    model, tok = tiny_policy
    game = GameSettings(id="kuhn_poker_v1", env_kwargs={"invalid_move": "random"})
    players = opponent_players(game, "player_1", "learner", HFRolloutWorker(model, tok), SamplingSettings(max_new_tokens=1), 0)
    session = GameSession(game, players, seed=0)
    assert session.human == "player_1" and "You are player 1" in session.observation
    assert "History: player 0 [" in session.observation  # the model moved first
    while not session.done:
        session.move(session.legal_moves[0])
    assert "Game over" in session.observation and session.observation.count("Your card") == 1


def test_opponent_players_names_what_is_wrong():
    game = GameSettings(id="tictactoe_v1")
    with pytest.raises(ValueError, match="no such bot; known: .*random"):
        opponent_players(game, "player_0", "bot:nobody", None)
    with pytest.raises(ValueError, match="needs a rollout worker"):
        opponent_players(game, "player_0", "learner", None)
    with pytest.raises(ValueError, match="every seat of tictactoe_v1 but the person's one"):
        GameSession(game, {}, seed=0)


def test_a_checkpoint_of_another_model_without_its_config_says_to_pass_the_config(tmp_path, capsys):
    """A .ckpt trained with trainable token rows does not fit the default model of ``--game``
    alone: the error names the weights and says which flag is missing."""
    import torch

    from sp_lightning.model import LoraSettings, PolicySettings
    from sp_lightning.module import SelfPlayModule

    module = SelfPlayModule(policy=PolicySettings(lora=LoraSettings(trainable_tokens=["moves"])))
    path = tmp_path / "trained.ckpt"
    torch.save({"state_dict": module.state_dict()}, path)
    with pytest.raises(SystemExit):
        play_main(["--game", "kuhn_poker_v1", "--checkpoint", str(path)], read=ScriptedPerson([]),
                  write=lambda text: None)
    err = capsys.readouterr().err
    assert "do not fit the config's model" in err and "pass the --config the checkpoint was trained with" in err


def test_a_remote_model_plays_against_the_person(serve):
    """``--opponent remote:<name>``: a model of ``data.remote_models`` answers through its server,
    prompted as the arena prompts it (it was accepted, then failed after the person's first move)."""
    import json
    import re

    server = serve(answer=lambda body: re.findall(r"\[\d\]", body["messages"][-1]["content"])[0])
    written = []
    person = ScriptedPerson([str(cell) for cell in (4, 0, 8, 2, 6, 1, 3, 5, 7)])
    remotes = json.dumps({"opp": {"base_url": server.url, "model": "m", "max_retries": 0}})
    totals = play_main(["--config", "configs/tictactoe_tiny.yaml", "--opponent", "remote:opp",
                        "--data.remote_models", remotes], read=person, write=written.append)
    text = "\n".join(written)
    assert totals is not None and "against remote:opp" in text
    moves = [line for line in text.splitlines() if line.startswith("player_1 plays")]
    assert moves and server.hits == len(moves) and not any("not a legal move" in line for line in moves)
    assert "Legal moves:" in server.bodies[0]["messages"][-1]["content"]  # the observation, as the arena sends it
