"""The validator's report: always valid UTF-8 JSON (ASCII-escaped), written atomically (temp file + rename).

{"status": "healthy"|"unhealthy"|"error", "vm_size", "level", "started", "duration_s", "stack", "island",
 "host", "checks": [{"id", "status": "pass"|"fail"|"skip", "value", "expected", "message"}], "error"?}
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from typing import Any, Protocol

from ndfleet_node.text import clip, decode

MESSAGE_MAX = 2000  # characters of a check's message or value kept in the report
MAX_REPORT_BYTES = 4 * 1024 * 1024  # a validator report larger than this is not one


def read_regular(path: str, limit: int = MAX_REPORT_BYTES) -> bytes:
    """At most `limit` + 1 bytes of the regular file at `path` (more than `limit` back means too large). Opened
    with O_NONBLOCK and refused unless regular: a FIFO put there would otherwise hold open() or read() until a
    writer came, and the single-threaded health endpoint with it. FileNotFoundError when absent, else OSError."""
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY), "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return f.read(limit + 1)


class CheckResult(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def expected(self) -> str: ...
    @property
    def message(self) -> str: ...


def entry(check_id: str, r: CheckResult) -> dict[str, str]:
    """A check's report entry: one-line strings, at most MESSAGE_MAX characters each."""

    def field(s: object) -> str:
        return clip(decode(str(s)).replace("\n", "; ").replace("\t", " "), MESSAGE_MAX)

    return {"id": check_id, "status": r.status, "value": field(r.value), "expected": field(r.expected),
            "message": field(r.message)}  # fmt: skip


def to_json(report: dict[str, Any]) -> str:
    # ensure_ascii: every byte is ASCII, so the file is valid UTF-8 whatever the tools printed.
    return json.dumps(report, ensure_ascii=True) + "\n"


def write_atomic(path: str, text: str, *, keep_owner: bool = False) -> None:
    """Write `text` to `path` so a reader sees the old file or the new one, never half of one. Mode 0644, or with
    `keep_owner` the mode, owner and group of the file it replaces (the health endpoint runs as another user and
    must still read a report a root process rewrote)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        old = os.stat(path) if keep_owner else None
    except FileNotFoundError:
        old = None
    fd, tmp = tempfile.mkstemp(prefix=".report.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        mine = os.stat(tmp)
        if old is not None and (old.st_uid, old.st_gid) != (mine.st_uid, mine.st_gid):
            os.chown(tmp, old.st_uid, old.st_gid)
        os.chmod(tmp, 0o644 if old is None else old.st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
