"""The tutorial notebooks run top to bottom: nbclient, the ``python3`` kernel of this interpreter,
cwd ``notebooks/``; any cell error fails the test."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
WRAP = NOTEBOOKS / "wrap_your_own_game.ipynb"
GAME = NOTEBOOKS / "nim_game.py"
WRITEFILE = "%%writefile nim_game.py\n"


def _outputs(nb) -> str:
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", "") or "".join(out.get("data", {}).get("text/plain", "")))
    return "\n".join(texts)


def test_the_notebook_writes_the_game_module_as_it_is_in_the_repo():
    """The %%writefile cell and notebooks/nim_game.py are the same text, so running the notebook
    leaves the file unchanged and configs that name the class path see the game the notebook shows."""
    nb = nbformat.read(WRAP, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith(WRITEFILE)]
    assert len(cells) == 1
    assert cells[0][len(WRITEFILE):].rstrip("\n") == GAME.read_text().rstrip("\n")


@pytest.mark.slow
def test_wrap_your_own_game_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's run folder lands under tmp_path
    before = GAME.read_bytes()
    nb = nbformat.read(WRAP, as_version=4)
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    client.execute()  # raises CellExecutionError on the first cell that fails
    nbformat.write(nb, tmp_path / WRAP.name)  # the executed notebook, for a look after a failure
    out = _outputs(nb)
    assert "invalid_move=random: api_test and seed_test passed" in out
    assert "final rewards:" in out
    assert "[eval step 4] nim_v1 vs bot:random: 20 games" in out
    assert "nim_v1 vs bot:random: 40 games" in out  # validate of the checkpoint
    assert list(tmp_path.glob("nim_tiny_*/checkpoints/last.ckpt"))
    assert GAME.read_bytes() == before
