"""Rollout-only runs (``sp-lightning rollout``) on the local backend and on a remote server, and
evaluation against a remote model: the real client against a scripted server on loopback."""

import json
import re

import pytest

from sp_lightning.cli.evaluate import main as evaluate_main
from sp_lightning.cli.rollout import main as rollout_main
from tests.helpers import fit_batches

TICTACTOE = "configs/tictactoe_tiny.yaml"


def _first_legal_move(body):
    return re.findall(r"\[\d\]", body["messages"][-1]["content"])[0]


def test_rollout_plays_and_prints_batches_without_training(capsys, tmp_path):
    log = tmp_path / "episodes.log"
    history = rollout_main(["--config", TICTACTOE, "--steps", "2", "--show", "1", "--data.episodes_per_batch", "4",
                            "--data.episode_log.path", str(log)])
    out = capsys.readouterr().out
    assert len(history) == 2 and all(m["rollout/records"] > 0 for m in history)
    assert "batch 0: 4 episodes" in out and "batch 1: 4 episodes" in out
    assert "episode tictactoe_v1 (level 0;" in out and "--- record 0:" in out and "Tic-Tac-Toe" in out
    text = log.read_text()
    assert text.count(" episode_end ") == 8 and text.count(" batch batch=") == 2


def _remote_rollout(server) -> str:
    return json.dumps({"class_path": "sp_lightning.rollout.remote.RemoteRolloutWorker",
                       "init_args": {"base_url": server.url, "served_model": "hero", "max_retries": 0,
                                     "version_url": server.url + "/version"}})


def test_rollout_on_a_remote_server(serve, capsys):
    """Every model move of the run goes to the server (learner moves as the served model), the
    games are played and printed, and nothing becomes a training record (text only)."""
    server = serve(answer=_first_legal_move)
    history = rollout_main(["--config", TICTACTOE, "--steps", "1", "--show", "1", "--data.episodes_per_batch", "6",
                            "--data.rollout", _remote_rollout(server)])
    out = capsys.readouterr().out
    assert "batch 0: 6 episodes, 0 records" in out
    assert history[0]["rollout/records"] == 0.0
    assert server.hits > 6 and {body["model"] for body in server.bodies} == {"hero"}
    assert "(invalid)" not in out  # the server's first legal move is always legal


def test_fit_refuses_a_text_only_backend(serve, tmp_path):
    server = serve()
    with pytest.raises(ValueError, match="data.rollout: RemoteRolloutWorker answers with text only"):
        fit_batches(TICTACTOE, tmp_path, 1, "--data.rollout", _remote_rollout(server))
    assert server.hits == 0


def test_evaluate_against_a_remote_opponent(serve, tmp_path):
    server = serve(answer=_first_legal_move)
    remotes = json.dumps({"opp": {"base_url": server.url, "model": "first-legal"}})
    output = tmp_path / "eval.json"
    report = evaluate_main(["--config", TICTACTOE, "--opponent", "remote:opp", "--games_per_seat", "3",
                            "--data.remote_models", remotes, "--output", str(output)])
    assert report["tictactoe_v1"]["games"] == 6
    # the remote model opens the 3 games where the policy sits second (the untrained policy may
    # forfeit at its first move, so that is all that is sure)
    assert server.hits >= 3 and {body["model"] for body in server.bodies} == {"first-legal"}
    assert json.loads(output.read_text())["tictactoe_v1"]["games"] == 6
