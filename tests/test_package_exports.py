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
