"""Checkpoint files that a kill cannot corrupt, and a previous one to fall back on.

Lightning's ``TorchCheckpointIO`` writes through an fsspec transaction: a temporary file in the
system's temp directory, moved over the target when complete. That move is a rename only when
the temp directory and the checkpoints share a filesystem (otherwise a copy, which a kill can
cut short), nothing is fsynced (after a power loss the renamed file can be empty), and once the
only ``last.ckpt`` is unreadable the run has no resume point. Here a save writes through
``sp_lightning.atomic_file.atomic_write`` (a temporary file beside the target, so the move is
always a rename, fsynced), keeps the checkpoint it replaces as ``<name>.prev`` (a hard link, so
the target path never stops existing), renames the new file over the target and fsyncs the
directory. A load that cannot read the file (truncated, corrupt, missing) warns and loads
``<name>.prev`` instead: the run resumes one checkpoint earlier rather than not at all; with no
``.prev`` either, it says which file cannot be read (``sp_lightning.checkpoints.unreadable``).

Why ``<name>.prev`` stays beside each checkpoint, although the rename alone already makes a kill
mid-write harmless (the old file stays in place until the new one is complete): the rename
protects a checkpoint while it is written, the ``.prev`` after. A file damaged once written (a
disk that filled while it was copied, a sync tool or a person who cut it short, a bad sector)
would otherwise leave a run with no resume point at all; the fallback (tested in
``tests/test_checkpoint_io.py``) needs the previous file, so it is kept, not removed once the
new one is in place. It costs one more checkpoint of disk, a small one here: with LoRA a
checkpoint holds only the trained weights. The README's first run and docs/getting-started.md
say what the two files are.

``SelfPlayCLI`` installs it on every trainer whose strategy still has Lightning's default
checkpoint IO; a ``trainer.plugins`` entry of your own wins.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from sp_lightning.atomic_file import atomic_write, remove_stray_temp_files, temp_path
from sp_lightning.checkpoints import unreadable, unreadable_reason
from sp_lightning.errors import UserError

log = logging.getLogger(__name__)


def _is_remote(path) -> bool:
    """Object storage and other fsspec URLs keep Lightning's own save and load."""
    return "://" in str(path)


def previous_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".prev")


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` with write-fsync-rename saves and a fallback on load (see module doc)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint takes no storage_options, got {storage_options!r}")
        if _is_remote(path):
            return super().save_checkpoint(checkpoint, path)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        prev = previous_path(path)
        for target in (path, prev):  # what a save killed mid-way left (rank 0 is the only writer)
            remove_stray_temp_files(target)
        with atomic_write(path) as f:
            torch.save(checkpoint, f)
            if path.exists():  # keep the checkpoint being replaced as <name>.prev
                prev_tmp = temp_path(prev)
                os.link(path, prev_tmp)  # the current file stays in place until the new one replaces it
                os.replace(prev_tmp, prev)

    def load_checkpoint(self, path, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return super().load_checkpoint(path, *args, **kwargs)
        except Exception as err:  # torch raises several kinds for a truncated or corrupt file
            prev = previous_path(path)
            if _is_remote(path):
                raise
            if not prev.exists():  # what the user named with ckpt_path is missing or not a checkpoint
                raise unreadable(path, "ckpt_path", err) from err
            log.warning("checkpoint %s cannot be read (%s: %s); loading the previous one, %s",
                        path, type(err).__name__, err, prev)
            try:
                return super().load_checkpoint(prev, *args, **kwargs)
            except Exception as prev_err:  # both unreadable: say so of both, not torch's words
                raise UserError(f"ckpt_path {path}: not a readable checkpoint ({unreadable_reason(path, err)}), and "
                                f"neither is the one before it, {prev} ({unreadable_reason(prev, prev_err)}); "
                                f"expected a Lightning .ckpt written by sp-lightning fit") from prev_err

    def remove_checkpoint(self, path) -> None:
        super().remove_checkpoint(path)
        previous_path(path).unlink(missing_ok=True)
