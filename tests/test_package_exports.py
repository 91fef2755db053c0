"""The names notebooks import from ``sp_lightning`` itself: all resolve, and importing the
package alone stays cheap (no torch, no Lightning) for the CLI's subcommands."""

import subprocess
import sys

import pytest

import sp_lightning


def test_importing_the_package_loads_neither_torch_nor_lightning():
    code = "import sys, sp_lightning; print('torch' in sys.modules, 'lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


@pytest.mark.parametrize("name", sp_lightning.__all__)
def test_every_exported_name_resolves(name):
    assert getattr(sp_lightning, name) is not None


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        sp_lightning.Nope  # noqa: B018


def test_make_trainer_builds_the_trainer_fit_builds():
    from sp_lightning import make_trainer
    from sp_lightning.checkpoint_io import AtomicCheckpointIO

    trainer = make_trainer(max_steps=3, logger=False, enable_checkpointing=False)
    assert trainer.max_steps == 3 and trainer.num_sanity_val_steps == 0 and trainer.val_check_interval == 50
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)


def test_the_trainer_gets_our_progress_view_unless_it_has_its_own_bar(tmp_path):
    """Not a terminal under pytest: the plain-lines view; a bar the caller chose stays; with a
    TensorBoard logger, the decoded-games callback joins."""
    from lightning.pytorch.callbacks import RichProgressBar
    from lightning.pytorch.loggers import TensorBoardLogger

    from sp_lightning import make_trainer
    from sp_lightning.progress import ProgressLines
    from sp_lightning.tensorboard import TensorBoardGames

    assert type(make_trainer(logger=False).progress_bar_callback) is ProgressLines
    own = RichProgressBar(leave=True)
    assert make_trainer(logger=False, callbacks=[own]).progress_bar_callback is own
    assert make_trainer(logger=False, enable_progress_bar=False).progress_bar_callback is None
    trainer = make_trainer(logger=TensorBoardLogger(str(tmp_path)))
    assert sum(isinstance(c, TensorBoardGames) for c in trainer.callbacks) == 1
