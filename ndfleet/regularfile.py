"""Read a file the user named (a stack file, a plan file) without letting the path decide how long that takes.

A FIFO blocks `open()` until a writer appears and then `read()` until it closes; a character device such as
/dev/zero or /dev/urandom never ends; a folder cannot be read at all. Only a regular file has a known end, so
only a regular file is read: the path is checked with `stat` first, opened with O_NONBLOCK (a FIFO swapped in
after the check then cannot block the open) and checked again on the open descriptor, and at most `limit` + 1
bytes are read, so the caller can tell "too large" from "exactly at the limit".
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotARegularFile(ValueError):
    """The path is a folder, FIFO, device or socket: `kind` says which, in words."""

    def __init__(self, path: Path, kind: str):
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path, self.kind = path, kind


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular_file(path: Path, limit: int) -> bytes:
    """At most `limit` + 1 bytes of the regular file at `path`. Raises NotARegularFile, or OSError
    (FileNotFoundError, PermissionError, ...) as the system reports it."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotARegularFile(path, _kind(mode))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(path, _kind(mode))
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
