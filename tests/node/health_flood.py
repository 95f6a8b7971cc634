"""A bounded connection flood against the health endpoint on 127.0.0.1, and the probes sent through it.

What any job on a node can do: several client processes opening connections in a loop and holding them (never
sending a request), so the endpoint has more open connections than its cap, while Azure's probe connects and sends
`GET /health` as usual. `measure` counts how many probes got an answer. Everything is bounded: a fixed number of
flood processes, each holding at most `hold` sockets (the oldest is closed beyond that), a fixed number of probes,
and a deadline after which the flood stops by itself (the processes are daemons of the test, ended at its end).

Used by tests/node/test_hostile_health.py (every probe answered) and tests/bench/bench_health_flood.py (the rate).
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROBE = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: ApplicationHealthExtension\r\n\r\n"
START_TIMEOUT_S = 30


@dataclass(frozen=True)
class Flood:
    processes: int = 4  # clients opening connections in a loop (processes: threads would share one interpreter lock)
    hold: int = 300  # sockets each holds open at once (4 x 300 = 1,200, well past the endpoint's cap of 256)
    probes: int = 100  # probes sent, one after another, while the flood runs
    probe_timeout_s: float = 5.0  # what a probe waits for its answer (the extension's own timeout is similar)
    deadline_s: float = 240.0  # the whole measurement stops by then, whatever happens


@dataclass(frozen=True)
class Result:
    probes: int
    answered: int
    connections_opened: int
    failures: tuple[str, ...]

    @property
    def rate(self) -> float:
        return self.answered / self.probes if self.probes else 0.0


@dataclass(frozen=True)
class Server:
    port: int
    pid: int


@contextlib.contextmanager
def health_server(folder: Path, *extra: str) -> Iterator[Server]:
    """`ndfleet-node health` on a free 127.0.0.1 port, serving `folder/report.json`."""
    argv = [sys.executable, "-m", "ndfleet_node", "health", "--config", str(folder / "absent.json"), "--port", "0",
            "--report", str(folder / "report.json"), "--failed-marker", str(folder / "failed"), *extra]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        deadline, line = time.monotonic() + START_TIMEOUT_S, ""
        while not line and time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.2)[0]:
                line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, f"the endpoint did not start: {line!r}"
        yield Server(int(line.rsplit(":", 1)[1].split("/", 1)[0]), proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)  # in case a test left it stopped
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def probe(port: int, timeout_s: float) -> str:
    """'' when answered with a health state, else what went wrong."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(PROBE)
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    if data.startswith(b"HTTP/1.1 200 ") and b'"ApplicationHealthState"' in data:
        return ""
    return f"no answer (got {len(data)} bytes)"


def _flood(port: int, hold: int, stop: Any, opened: Any, deadline_s: float) -> None:
    held: collections.deque[socket.socket] = collections.deque()
    deadline = time.monotonic() + deadline_s
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.settimeout(1.0)
                s.connect(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            held.append(s)
            with opened.get_lock():
                opened.value += 1
            while len(held) > hold:
                held.popleft().close()
    finally:
        while held:
            held.popleft().close()


def burst_while_busy(server: Server, burst: int, rounds: int, probe_timeout_s: float = 10.0) -> Result:
    """The moment a flood does harm, made repeatable: the endpoint is busy (stopped with SIGSTOP, as a loaded node
    deschedules it), a probe connects and sends its request, then `burst` more connections arrive before the
    endpoint runs again (SIGCONT). All of them wait in the listen backlog; the probe's is the oldest."""
    failures: list[str] = []
    opened = 0
    for _ in range(rounds):
        flood: list[socket.socket] = []
        os.kill(server.pid, signal.SIGSTOP)
        try:
            client = socket.create_connection(("127.0.0.1", server.port), timeout=probe_timeout_s)
            client.sendall(PROBE)
            for _ in range(burst):
                flood.append(socket.create_connection(("127.0.0.1", server.port), timeout=probe_timeout_s))
            opened += burst
        finally:
            os.kill(server.pid, signal.SIGCONT)
        try:
            with client:
                data = b""
                while chunk := client.recv(4096):
                    data += chunk
            if not data.startswith(b"HTTP/1.1 200 "):
                failures.append(f"no answer (got {len(data)} bytes)")
        except OSError as e:
            failures.append(f"{type(e).__name__}: {e}")
        finally:
            for s in flood:
                s.close()
        # Let the endpoint take in this round's closed connections before the next round, so the next burst
        # fits in the listen backlog: the backlog is first in, first out, so this answer comes after all of them.
        probe(server.port, probe_timeout_s)
    return Result(rounds, rounds - len(failures), opened, tuple(failures))


def measure(port: int, flood: Flood) -> Result:
    """Send `flood.probes` probes while `flood.processes` clients open and hold connections; count the answers."""
    context = multiprocessing.get_context("fork")
    stop, opened = context.Event(), context.Value("q", 0)
    workers = [context.Process(target=_flood, args=(port, flood.hold, stop, opened, flood.deadline_s), daemon=True)
               for _ in range(flood.processes)]  # fmt: skip
    deadline = time.monotonic() + flood.deadline_s
    for w in workers:
        w.start()
    failures: list[str] = []
    sent = 0
    try:
        while opened.value < flood.processes * flood.hold and time.monotonic() < deadline:
            time.sleep(0.05)  # let the flood pass the cap before the first probe
        for _ in range(flood.probes):
            if time.monotonic() > deadline:
                break
            sent += 1
            why = probe(port, flood.probe_timeout_s)
            if why:
                failures.append(why)
    finally:
        stop.set()
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
                w.join(timeout=10)
    return Result(sent, sent - len(failures), int(opened.value), tuple(failures))
