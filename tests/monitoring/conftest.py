"""Fixtures for the monitoring tests: a small stack with monitoring on, and the real promtool."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config
from tests.system_tools import require_tool

# Generous: promtool starts in well under a second, but CI machines are small and busy.
PROMTOOL_TIMEOUT_S = 120


def monitoring_config(**overrides: Any) -> dict[str, Any]:
    """Two small islands (4 and 2 nodes) so island capacity is easy to reason about; monitoring on."""
    monitoring = {"enabled": True, "emails": ["oncall@example.com"], "islandCapacityAlertFraction": 0.75}
    monitoring.update(overrides)
    config = base_config(islands=[{"name": "a", "nodes": 4}, {"name": "b", "nodes": 2}], monitoring=monitoring)
    del config["nodes"]
    return config


@pytest.fixture(scope="session")
def mon_spec() -> ClusterSpec:
    return load_spec(monitoring_config(), "test")


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_tool("promtool")


def run_promtool(promtool: str, *args: str, cwd: Path | None = None, stdin: str | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        [promtool, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
    )
    return proc.returncode, proc.stdout + proc.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (loopback only)
        body: bytes = resp.read()
    return body.decode()


@contextmanager
def running(argv: Sequence[str], ready_url: str, timeout_s: float = 60) -> Iterator[subprocess.Popen[str]]:
    """Start a daemon bound to 127.0.0.1, wait until `ready_url` answers (or fail with its log), stop it after."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                http_get(ready_url)
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(f"{argv[0]} exited: {proc.stderr.read() if proc.stderr else ''}") from None
                assert time.monotonic() < deadline, f"{argv[0]} did not answer {ready_url} in {timeout_s} s"
                time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
