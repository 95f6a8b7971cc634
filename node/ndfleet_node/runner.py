"""Every external tool the node program calls goes through here: `Runner.run(argv, timeout_s)`.

Contract (burn-in and the Slurm health check reuse it):

- The tool starts in its own session (`start_new_session`), so it and everything it forks form one process
  group. At the timeout the whole group gets SIGKILL; after a normal exit the group is killed too, so no
  stray child outlives its check.
- stdout and stderr go to anonymous temporary files, never pipes: a child that escapes the group
  (`setsid`) and keeps the output open cannot make us wait. We read what was written when the tool ended.
  Output is kept up to `max_output_bytes` (bytes, undecoded; `text.decode` turns it into a str).
- Returns a `ToolResult`: rc (None when it did not exit by itself), timed_out, duration_s, stdout, stderr,
  and `error`: why the call did not succeed in one line ("" on success).
- A tool that timed out is not called again by the same Runner (one run of the validator, one set-up):
  later calls return at once with timed_out=True and say so. Calls of the same tool are serialised, so that
  a hang is found by one call, not by every concurrent one.
- A tool that is not on PATH returns rc 127 with "NAME not found on PATH"; it is never an exception.
- A tool run under HPC-X (`ndfleet_node.hpcx.with_hpcx`: a bash wrapper that loads HPC-X, then execs the tool) is
  named, timed out and remembered as a hang by the tool's name, not the wrapper's (`tool_name`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from ndfleet_node import hpcx
from ndfleet_node.text import decode, first_line

MAX_OUTPUT_BYTES = 16 * 1024 * 1024
NOT_FOUND = 127


@dataclass(frozen=True)
class ToolResult:
    argv: tuple[str, ...]
    rc: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    duration_s: float
    error: str  # "" when the tool ran and exited 0

    @property
    def ok(self) -> bool:
        return self.error == ""

    @property
    def text(self) -> str:
        """stdout decoded (never raises)."""
        return decode(self.stdout)

    @property
    def name(self) -> str:
        return tool_name(self.argv)


def tool_name(argv: Sequence[str]) -> str:
    """The tool an argv runs: its first word, or the command inside the HPC-X wrapper."""
    _, command = hpcx.unwrap(argv)
    return os.path.basename(command[0]) if command else "?"


def _read(f: IO[bytes], limit: int) -> bytes:
    f.seek(0)
    return f.read(limit)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_tool(
    argv: Sequence[str],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
) -> ToolResult:
    """Run one tool once with a timeout (see the module docstring). Never raises for the tool's behaviour."""
    argv = tuple(argv)
    name = tool_name(argv)
    t0 = time.monotonic()
    path = (env or os.environ).get("PATH", os.defpath)
    exe = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=path)
    if exe is None or not os.access(exe, os.X_OK):
        return ToolResult(argv, NOT_FOUND, b"", b"", False, 0.0, f"{name} not found on PATH")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                (exe, *argv[1:]),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as e:
            return ToolResult(argv, NOT_FOUND, b"", b"", False, 0.0, f"{name} could not start: {e.strerror}")
        timed_out = False
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            rc = None
        except BaseException:
            _kill_group(proc.pid)  # interrupted (Ctrl-C): the tool must not outlive us in its own session
            raise
        _kill_group(proc.pid)
        proc.wait()
        duration = time.monotonic() - t0
        stdout, stderr = _read(out, max_output_bytes), _read(err, max_output_bytes)
    if timed_out:
        error = f"{name} did not answer within {timeout_s:g} s (timed out)"
    elif rc != 0:
        said = first_line(decode(stderr)) or first_line(decode(stdout))
        error = f"{name} exited with status {rc}" + (f": {said}" if said else "")
    else:
        error = ""
    return ToolResult(argv, rc, stdout, stderr, timed_out, duration, error)


class Runner:
    """run_tool with memory for one run: a tool that hung is not called again; one call per tool at a time."""

    def __init__(self, env: Mapping[str, str] | None = None):
        self.env = dict(env) if env is not None else None
        self._hung: dict[str, str] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.calls: list[ToolResult] = []

    def _lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    def run(self, argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None,
            clear_prefixes: Sequence[str] = ()) -> ToolResult:
        """`clear_prefixes`: variables of the environment whose names start so are not passed on (the Slurm job's,
        which an Epilog inherits)."""
        name = tool_name(argv)
        with self._lock(name):
            if name in self._hung:
                return ToolResult(
                    tuple(argv), None, b"", b"", True, 0.0, f"{self._hung[name]} earlier in this run; not retried"
                )
            merged = {**(self.env if self.env is not None else os.environ), **(env or {})}
            merged = {k: v for k, v in merged.items() if not k.startswith(tuple(clear_prefixes))}
            result = run_tool(argv, timeout_s, env=merged)
            with self._guard:
                self.calls.append(result)
                if result.timed_out:
                    self._hung[name] = result.error
        return result

    def hung(self, name: str) -> bool:
        with self._guard:
            return name in self._hung
