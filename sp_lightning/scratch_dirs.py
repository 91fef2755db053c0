"""Scratch directories a process owns, and the sweep of those a killed process left behind.

A run writes files it needs only while it lives into temp directories: the learner's adapter
versions for a vLLM engine or server (rewritten every optimizer step, in RAM-backed ``/dev/shm``
where there is one) and a DDP follower's copies of league adapters. It deletes them when it ends,
but a process killed with SIGKILL (a pre-empted job, the OOM killer, our own resume tests) never
gets to, and on a machine that runs many jobs the leftovers pile up, in RAM for ``/dev/shm``.
So each directory carries its process id in its name, and making one first removes the
directories of the same kind whose process no longer exists.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile


def process_temp_dir(prefix: str, ram: bool = False) -> str:
    """A new directory ``<prefix>pid<pid>-<random>`` in the system temp dir (``ram``: in
    ``/dev/shm`` where the machine has a writable one), after removing the directories with the
    same prefix there whose process has died."""
    parent = "/dev/shm" if ram and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    parent = parent or tempfile.gettempdir()
    sweep_dead(parent, prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}pid{os.getpid()}-", dir=parent)


def sweep_dead(parent: str, prefix: str) -> list[str]:
    """Remove the directories ``<prefix>pid<pid>-...`` in ``parent`` whose process is gone; returns
    their paths. A directory of a live process, of another user, or of another name is left."""
    owner = re.compile(re.escape(prefix) + r"pid(\d+)-")
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        match = owner.match(name)
        path = os.path.join(parent, name)
        if match and not _alive(int(match.group(1))) and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
