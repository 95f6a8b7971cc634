"""The node's health endpoint answers Azure's Application Health extension over real HTTP on 127.0.0.1."""

from __future__ import annotations

import fcntl
import json
import select
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ndfleet.bootstrap import HEALTH_PATH, render_bootstrap
from ndfleet.spec.config import load_spec
from ndfleet.spec.stackfile import load_stack

START_TIMEOUT_S = 10
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """Bring `lo` up when it is down: the suite runs under `unshare -rn`, whose fresh network namespace has its
    loopback down (and lets the namespace's root bring it up). Nothing but loopback exists there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, ifreq))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


class Endpoint:
    def __init__(self, base: str, report: Path, failed: Path):
        self.base, self.report, self.failed = base, report, failed

    def get(self, path: str = HEALTH_PATH) -> tuple[int, dict[str, str], bytes]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=5) as resp:  # noqa: S310 (loopback only)
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def state(self) -> str:
        status, _, body = self.get()
        assert status == 200
        return json.loads(body)["ApplicationHealthState"]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Endpoint]:
    loopback_up()
    folder = tmp_path_factory.mktemp("health")
    spec = load_spec(load_stack("dev").ndfleet_config, "dev")
    script = folder / "ndfleet-health"
    script.write_text(render_bootstrap(spec, spec.islands[0]).files["ndfleet-health"])
    report, failed = folder / "report.json", folder / "failed"
    argv = [sys.executable, str(script), "--port", "0", "--report", str(report), "--failed-marker", str(failed)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        line = ""
        assert proc.stdout is not None
        while not line and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if ready:
                line = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, f"the endpoint did not start: {line!r}"
        base = line.split("listening on ", 1)[1].strip()
        yield Endpoint(base[: -len(HEALTH_PATH)], report, failed)
    finally:
        proc.terminate()
        proc.wait(timeout=5)


@pytest.fixture
def endpoint(server: Endpoint) -> Iterator[Endpoint]:
    for f in (server.report, server.failed):
        f.unlink(missing_ok=True)
    yield server


def _report(status: str, failed: tuple[str, ...] = ()) -> str:
    checks = [{"id": c, "status": "fail", "value": "", "expected": "", "message": ""} for c in failed]
    return json.dumps({"status": status, "vm_size": "Standard_ND96isr_H100_v5", "level": "full", "checks": checks})


def test_initializing_while_validation_runs(endpoint):
    assert endpoint.state() == "Initializing"


def test_healthy_after_a_pass(endpoint):
    endpoint.report.write_text(_report("healthy"))
    assert endpoint.state() == "Healthy"


def test_unhealthy_after_a_failure(endpoint):
    endpoint.report.write_text(_report("unhealthy", ("ib.ports",)))
    assert endpoint.state() == "Unhealthy"


def test_unhealthy_when_validation_could_not_run(endpoint):
    endpoint.failed.write_text("ndfleet-validate: exit-code (2)\n")
    assert endpoint.state() == "Unhealthy"


def test_unhealthy_on_a_damaged_report(endpoint):
    endpoint.report.write_text('{"status": "heal')
    assert endpoint.state() == "Unhealthy"


def test_reason_names_the_failed_checks(endpoint):
    endpoint.report.write_text(_report("unhealthy", ("gpu.xid", "ib.flap")))
    _, headers, _ = endpoint.get()
    assert headers["X-Ndfleet-Reason"] == "validate-node failed: gpu.xid, ib.flap"


def test_body_is_only_what_the_extension_reads(endpoint):
    status, headers, body = endpoint.get()
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"ApplicationHealthState": "Initializing"}


def test_other_paths_are_not_found(endpoint):
    status, _, _ = endpoint.get("/other")
    assert status == 404
