"""Host names for the burn-in: which strings are host names, and reading a hostfile within bounds.

A host name reaches `mpirun -H`, `ssh` and `srun -w` as an argument, so it must never read as an option or carry
anything a shell or a launcher interprets: letters, digits, `-`, `.` and `_` only (RFC 952 / 1123 labels, plus
`_` that Azure computer names allow), starting with a letter or digit (so never `-F...`), at most 253 characters.

A hostfile is read in bounded size and lines (`MAX_HOSTFILE_BYTES`, `MAX_HOSTFILE_LINES`): `/dev/zero`, a huge
file or a pipe that never ends cannot grow memory without limit. It must be UTF-8 text; anything else is a named
error, not a traceback. Duplicates are found with a set, so 40,000 hosts read in well under a second.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# An island holds at most 300 VMs (ndfleet.stackconfig.profiles.HARD_MAX_NODES_PER_ISLAND); a hostfile may list a few
# islands with comments. 64 Ki lines of up to 64 bytes each is far above that and still reads in milliseconds.
MAX_HOSTFILE_LINES = 65_536
MAX_HOSTFILE_BYTES = 4 * 1024 * 1024
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


class HostfileError(Exception):
    pass


def is_host_name(text: str) -> bool:
    return _HOST.fullmatch(text) is not None


def host_name_problem(text: str) -> str:
    """Why `text` is not a host name ('' when it is one)."""
    if is_host_name(text):
        return ""
    why = "starts with '-' (it would read as an option)" if text.startswith("-") else "is not a host name"
    return f"{text[:60]!r} {why}: letters, digits, '-', '.', '_', starting with a letter or digit"


def _read_bounded(path: Path) -> bytes:
    # O_NONBLOCK: opening a FIFO with no writer must not hang; the read itself blocks again (a directory fails it).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fd, True)
    with open(fd, "rb") as f:
        data = f.read(MAX_HOSTFILE_BYTES + 1)
    if len(data) > MAX_HOSTFILE_BYTES:
        raise HostfileError(f"hostfile {path} is larger than {MAX_HOSTFILE_BYTES} bytes")
    return data


def read_hostfile(path: Path) -> list[str]:
    """One host per line; blank lines and `#` comments ignored; Open MPI's `host slots=8` form accepted."""
    try:
        data = _read_bounded(path)
    except OSError as exc:
        raise HostfileError(f"cannot read hostfile {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HostfileError(
            f"hostfile {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    lines = text.splitlines()
    if len(lines) > MAX_HOSTFILE_LINES:
        raise HostfileError(f"hostfile {path} has more than {MAX_HOSTFILE_LINES} lines")
    hosts: list[str] = []
    seen: set[str] = set()
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host = line.split()[0]
        if problem := host_name_problem(host):
            raise HostfileError(f"{path}:{number}: {problem}")
        if host in seen:
            raise HostfileError(f"{path}:{number}: host {host} listed twice")
        seen.add(host)
        hosts.append(host)
    if len(hosts) < 2:
        raise HostfileError(f"{path}: burn-in needs at least 2 hosts, found {len(hosts)}")
    return hosts
