"""Replace a file so that a reader, or a kill at any moment, sees the old file or the new one,
never part of one: the league registry and the Lightning checkpoints both write this way.

``atomic_write(path)`` yields a file object open on a temporary file beside ``path``
(``<name>.<32 hex digits>.tmp``: same directory, so the final move is a rename, never a copy).
On normal exit the file is flushed and fsynced, renamed over ``path`` with ``os.replace`` and the
directory is fsynced, so the new file also survives a power loss; ``durable=False`` skips the two
fsyncs (a write that reached the page cache is then lost only if the machine goes down). On an
exception the temporary file is removed and ``path`` is untouched. A kill leaves at most a stray
temporary file, which ``stray_temp_files`` finds.
"""

from __future__ import annotations

import contextlib
import glob
import os
import uuid
from collections.abc import Iterator
from typing import IO

TEMP_SUFFIX = ".tmp"


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", durable: bool = True,
                 encoding: str | None = None) -> Iterator[IO]:
    path = os.fspath(path)
    tmp = temp_path(path)  # not mkstemp: that would make the file 0600
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_directory(os.path.dirname(os.path.abspath(path)))


def temp_path(path: str | os.PathLike) -> str:
    """A fresh temporary name beside ``path``, of the pattern ``stray_temp_files`` matches."""
    return f"{os.fspath(path)}.{uuid.uuid4().hex}{TEMP_SUFFIX}"


def stray_temp_files(path: str | os.PathLike) -> list[str]:
    """Temporary files ``atomic_write(path)`` left behind when its writer was killed."""
    return glob.glob(glob.escape(os.fspath(path)) + "." + "[0-9a-f]" * 32 + TEMP_SUFFIX)


def remove_stray_temp_files(path: str | os.PathLike) -> None:
    """Delete what killed writers of ``path`` left; call it where no other writer of ``path``
    can be running (under the writers' lock, or from the only writer)."""
    for stale in stray_temp_files(path):
        with contextlib.suppress(OSError):
            os.unlink(stale)
