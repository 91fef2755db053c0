"""Checkpoint files a kill cannot corrupt (sp_lightning.checkpoint_io)."""

import logging
import multiprocessing
import os
import random
import signal
import time

import pytest
import torch

from sp_lightning.checkpoint_io import AtomicCheckpointIO, previous_path

def _save_forever(path: str, out: int) -> None:
    """The writer: 16 MB checkpoints (a write takes long enough to be killed in the middle) saved
    in a loop, each step number written to ``out`` once its save returned."""
    io = AtomicCheckpointIO()
    payload = torch.randn(4_000_000)
    with os.fdopen(out, "w", buffering=1) as reported:
        step = 0
        while True:
            step += 1
            io.save_checkpoint({"step": step, "payload": payload}, path)
            print(step, file=reported, flush=True)


def test_a_save_replaces_the_file_and_keeps_the_previous_one(tmp_path):
    io, path = AtomicCheckpointIO(), tmp_path / "ckpts" / "last.ckpt"
    io.save_checkpoint({"step": 1}, path)
    assert not previous_path(path).exists()
    io.save_checkpoint({"step": 2}, path)
    assert io.load_checkpoint(path)["step"] == 2
    assert io.load_checkpoint(previous_path(path))["step"] == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt", "last.ckpt.prev"], "no temporary left"
    io.remove_checkpoint(path)
    assert list(path.parent.iterdir()) == []


def test_a_save_removes_what_a_killed_save_left(tmp_path):
    from sp_lightning.atomic_file import temp_path

    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1}, path)
    for target in (path, previous_path(path)):  # a save killed while writing, and while linking
        with open(temp_path(target), "wb") as f:
            f.write(b"partial")
    io.save_checkpoint({"step": 2}, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "last.ckpt.prev"]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "delete"])
def test_an_unreadable_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog, damage):
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1, "w": torch.ones(1000)}, path)
    io.save_checkpoint({"step": 2, "w": torch.ones(1000)}, path)
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:500])
    elif damage == "garbage":
        path.write_bytes(b"\x00" * 100)
    else:
        path.unlink()
    with caplog.at_level(logging.WARNING, logger="sp_lightning.checkpoint_io"):
        assert io.load_checkpoint(path)["step"] == 1
    assert "loading the previous one" in caplog.text


def test_no_fallback_is_an_error(tmp_path):
    path = tmp_path / "last.ckpt"
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(Exception):
        AtomicCheckpointIO().load_checkpoint(path)


@pytest.mark.slow
def test_sigkill_during_writes_never_leaves_an_unreadable_checkpoint(tmp_path):
    """A writer saving 16 MB checkpoints in a loop is killed at random moments, 3 times; after
    each kill the file itself (read without the .prev fallback) is the last save the writer
    reported, or the one it was about to report."""
    path = tmp_path / "last.ckpt"
    rng = random.Random(0)
    for _ in range(3):  # the writer: a process of its own, forked (no interpreter start-up)
        read_end, write_end = os.pipe()
        writer = multiprocessing.get_context("fork").Process(target=_save_forever, args=(str(path), write_end))
        writer.start()
        os.close(write_end)
        with os.fdopen(read_end) as reported_by_writer:
            first = reported_by_writer.readline().strip()
            assert first, "the writer saved once"
            time.sleep(rng.uniform(0.0, 0.3))
            os.kill(writer.pid, signal.SIGKILL)
            writer.join()
            reported = [int(line) for line in [first, *reported_by_writer.read().split()]]
        loaded = torch.load(path, weights_only=False)
        assert loaded["payload"].numel() == 4_000_000
        assert loaded["step"] in (reported[-1], reported[-1] + 1)
