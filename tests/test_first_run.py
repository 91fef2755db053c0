"""The README's first command is tidy: nothing from our dependencies on stderr that a user could
take for a fault (sp_lightning.trainer filters each with its reason), and nothing in the
checkpoint folder that the README and docs/getting-started.md do not explain. Checked on the
pieces (no fit here: the fits of tests/test_e2e.py run the same code)."""

import logging
import os
import warnings

from sp_lightning.checkpoint_io import AtomicCheckpointIO
from sp_lightning.trainer import DEPENDENCY_NOTICES, DEPENDENCY_WARNINGS, quiet_known_warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_dependencies_deprecations_and_tips_are_left_out(caplog):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_known_warnings()
        for category, pattern in DEPENDENCY_WARNINGS:
            text = pattern.replace(".*", "").replace("\\", "")
            warnings.warn(f"{text} (as the dependency words it)", category)
        warnings.warn("a warning of our own", UserWarning)
    assert [str(w.message) for w in seen] == ["a warning of our own"]
    lightning = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    with caplog.at_level(logging.INFO, logger=lightning.name):
        lightning.info(f"{DEPENDENCY_NOTICES[0]} For seamless cloud logging, try installing litlogger")
        lightning.info("GPU available: False, used: False")
    assert [r.getMessage() for r in caplog.records] == ["GPU available: False, used: False"]


def test_every_file_of_the_checkpoint_folder_is_explained(tmp_path):
    """A run saves each checkpoint many times: what the folder then holds is named in the README's
    first run and in docs/getting-started.md."""
    io = AtomicCheckpointIO()
    for name in ("best.ckpt", "last.ckpt"):
        for step in (1, 2):
            io.save_checkpoint({"step": step}, tmp_path / name)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["best.ckpt", "best.ckpt.prev", "last.ckpt", "last.ckpt.prev"]
    for doc in ("README.md", os.path.join("docs", "getting-started.md")):
        text = open(os.path.join(ROOT, doc)).read()
        for name in files:
            assert name in text or (name.endswith(".prev") and "<name>.prev" in text), f"{doc} does not name {name}"
