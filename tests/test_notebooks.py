"""The tutorial notebooks run top to bottom: nbclient, the ``python3`` kernel of this interpreter,
cwd ``notebooks/``; any cell error fails the test (the quickstart's own cell asserts that the trained
policy's interval lies above the untrained one's). Each test then checks the outputs a reader is
promised: the lines, tables and figures the notebook's text describes."""

import re
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
WRAP = NOTEBOOKS / "wrap_your_own_game.ipynb"
GAME = NOTEBOOKS / "nim_game.py"
WRITEFILE = "%%writefile nim_game.py\n"


def _run(path: Path, tmp_path, timeout: int = 600, parameters: str | None = None) -> nbformat.NotebookNode:
    """Run the notebook; ``parameters`` (code) runs right after its cell tagged ``parameters``, as
    papermill injects them: a shorter run that still shows every output the text promises."""
    nb = nbformat.read(path, as_version=4)
    if parameters is not None:
        (index,) = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
        nb.cells.insert(index + 1, nbformat.v4.new_code_cell(parameters, metadata={"tags": ["injected-parameters"]}))
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    try:
        client.execute()  # raises CellExecutionError on the first cell that fails
    finally:
        nbformat.write(nb, tmp_path / path.name)  # the executed notebook, for a look after a failure
    return nb


def _figures(nb) -> int:
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


def _outputs(nb) -> str:
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            texts.append(out.get("text", "") or "".join(data.get("text/markdown", "")) or "".join(data.get("text/plain", "")))
    return "\n".join(texts)


def test_the_notebook_writes_the_game_module_as_it_is_in_the_repo():
    """The %%writefile cell and notebooks/nim_game.py are the same text, so running the notebook
    leaves the file unchanged and configs that name the class path see the game the notebook shows."""
    nb = nbformat.read(WRAP, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith(WRITEFILE)]
    assert len(cells) == 1
    expected = cells[0][len(WRITEFILE):].rstrip("\n")
    for _ in range(10):  # the notebook's test may be rewriting the file (the same text) on the other worker
        text = GAME.read_text().rstrip("\n")
        if len(text) >= len(expected):
            break
        time.sleep(0.1)
    assert text == expected


@pytest.mark.slow
def test_wrap_your_own_game_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's run folder lands under tmp_path
    before = GAME.read_bytes()
    out = _outputs(_run(WRAP, tmp_path, timeout=300))
    assert "invalid_move=random: api_test and seed_test passed" in out
    assert "final rewards:" in out
    assert "[eval step 4] nim_v1 vs bot:random: 20 games" in out
    assert "nim_v1 vs bot:random: 40 games" in out  # validate of the checkpoint
    assert list(tmp_path.glob("nim_tiny_*/checkpoints/last.ckpt"))
    assert GAME.read_bytes() == before


@pytest.mark.slow
def test_quickstart_notebook_trains_and_the_win_rate_rises_above_the_untrained_policy(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    # 60 steps, two fifths of the run: the legal moves are learned by step 50 (a win rate of about
    # 0.5 against RandomBot there, the untrained policy's at most 0.013), so the notebook's own check
    # (the trained policy's interval on fresh games above the untrained one's) keeps a wide margin
    nb = _run(NOTEBOOKS / "quickstart.ipynb", tmp_path, parameters="STEPS = 60\nVAL_EVERY = 20")
    out = _outputs(nb)
    assert "[eval step 0] kuhn_poker_v1 vs bot:random: 200 games" in out  # the untrained point
    assert "[eval step 60] kuhn_poker_v1 vs bot:random: 200 games" in out
    assert "the intervals do not overlap" in out  # the notebook's own assertion passed
    trained = re.search(r"^trained: +1000 games: win ([0-9.]+) \[([0-9.]+),", out, re.M)
    untrained = re.search(r"untrained: 1000 games: win ([0-9.]+) \[[0-9.]+, ([0-9.]+)\]", out)
    assert trained and untrained and float(trained.group(2)) > float(untrained.group(2))
    assert _figures(nb) == 1  # the win-rate plot
    assert out.count("seats: player_0:") == 3  # three decoded games
    assert "exploitability" in out and "[bet]" in out  # the strategy table
    assert list(tmp_path.glob("quickstart_*/checkpoints/last.ckpt"))


@pytest.mark.slow
def test_play_notebook_plays_a_hand_against_the_checkpoint_and_two_checkpoints_play(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    nb = _run(NOTEBOOKS / "play_against_a_checkpoint.ipynb", tmp_path, parameters="STEPS = 10\nEARLY = 5")  # the mechanics, not the learning
    out = _outputs(nb)
    assert "'raise' is not a legal move; legal: [check] [bet]" in out  # refused, nothing changed
    assert "Game over: you" in out and "Result: player_0" in out  # the hand was played to its end
    views = _outputs(nbformat.from_dict({"cells": [c for c in nb.cells if "session." in c.source]}))
    assert "You are player 0" in views and "You are player 1" not in views  # only the person's own seat
    assert views.count("Your card:") == views.count("You are player 0")  # one card: its own
    assert "Tic-Tac-Toe. You are X." in out  # the same against a bot
    assert out.count("seats: player_0: checkpoint:") == 2  # one game with each checkpoint in each seat
    late = re.search(r"step 10 vs step 5: 1000 games: win ([0-9.]+) \[([0-9.]+),", out)
    assert late and "step 10 vs itself:  1000 games" in out


@pytest.mark.slow
def test_league_notebook_reads_ratings_mix_and_cross_play(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    nb = _run(NOTEBOOKS / "league_analysis.ipynb", tmp_path, parameters="STEPS = 30")  # a quarter of the run a reader starts
    out = _outputs(nb)
    assert re.search(r"^learner +learner +30 ", out, re.M)  # the registry table
    assert re.search(r"^ckpt-000030 +checkpoint +30 ", out, re.M)
    assert "matches on record; best checkpoint: ckpt-" in out
    assert re.search(r"^ +random_bot +base_model +ckpt-000010 ", out, re.M)  # the cross-play table
    assert "widest 95% interval" in out
    assert _figures(nb) == 5  # ratings now, ratings over the run, mix + opponents, heatmap, exploitability
    # the run's tournaments (at steps 10 and 30, and 20 if the first had ended) in one evaluator process
    logs = sorted(tmp_path.glob("league_*/league/evaluations/ckpt-*-step*.log"))
    firsts = {log.read_text().split(":")[0] for log in logs}
    assert len(logs) >= 2 and len(firsts) == 1 and firsts.pop().startswith("evaluator process ")
