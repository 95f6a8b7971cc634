"""The node's health endpoint answers Azure's Application Health extension over real HTTP on 127.0.0.1.

The server is the `ndfleet-node health` subcommand of the rendered zipapp, started with python3 as its systemd
unit starts it (plus test paths and a free port).
"""

from __future__ import annotations

import fcntl
import json
import resource
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from ndfleet_node.health import health_state

from ndfleet.nodefiles.bootstrap import HEALTH_PATH, render_bootstrap
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack

START_TIMEOUT_S = 20
PROBE_TIMEOUT_S = 5  # generous for a loaded 2-core machine; latencies are printed, not asserted
IDLE_TIMEOUT_S = 2
IDLE_CONNECTIONS = 1000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up() -> None:
    """Bring `lo` up when it is down: the suite runs under `unshare -rn`, whose fresh network namespace has its
    loopback down (and lets the namespace's root bring it up). Nothing but loopback exists there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, ifreq))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def raw_get(port: int, request: bytes = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") -> bytes:
    """One request over a plain socket; the whole answer (the server closes after it)."""
    with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT_S) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def parse(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return status, headers, body


class Endpoint:
    def __init__(self, port: int, report: Path, failed: Path):
        self.port, self.report, self.failed = port, report, failed

    def get(self, path: str = HEALTH_PATH) -> tuple[int, dict[str, str], bytes]:
        return parse(raw_get(self.port, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()))

    def state(self) -> str:
        status, _, body = self.get()
        assert status == 200
        return str(json.loads(body)["ApplicationHealthState"])

    def reason(self) -> str:
        return self.get()[1]["X-Ndfleet-Reason"]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Endpoint]:
    loopback_up()
    folder = tmp_path_factory.mktemp("health")
    spec = load_spec(load_stack("dev").ndfleet_config, "dev")
    rendered = render_bootstrap(spec, spec.islands[0])
    app, config = folder / "ndfleet-node", folder / "node.json"
    app.write_bytes(rendered.binary_files["ndfleet-node"])
    config.write_text(rendered.files["node.json"])
    report, failed = folder / "report.json", folder / "failed"
    argv = [sys.executable, str(app), "health", "--config", str(config), "--port", "0", "--report", str(report),
            "--failed-marker", str(failed), "--idle-timeout", str(IDLE_TIMEOUT_S)]  # fmt: skip
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
        port = int(line.rsplit(":", 1)[1].split("/", 1)[0])
        yield Endpoint(port, report, failed)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


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


def test_healthy_with_a_check_not_run_names_it(endpoint):
    # nvbandwidth the image lacks: a skip in the report. The node is Healthy, and the reason says what was not run.
    skip = {"id": "perf.nvbandwidth", "status": "skip", "value": "", "expected": "",
            "message": "nvbandwidth is not on this image (Azure/azhpc-images installs it only for GB200 / Azure Linux)"}
    passed = {"id": "gpu.count", "status": "pass", "value": "8", "expected": "8", "message": ""}
    endpoint.report.write_text(json.dumps({"status": "healthy", "level": "full", "checks": [passed, skip]}))
    assert endpoint.state() == "Healthy"
    assert endpoint.reason() == "validate-node passed (full); not run: perf.nvbandwidth"


def test_unhealthy_after_a_failure(endpoint):
    endpoint.report.write_text(_report("unhealthy", ("ib.ports",)))
    assert endpoint.state() == "Unhealthy"


def test_unhealthy_when_validation_could_not_run(endpoint):
    endpoint.failed.write_text("ndfleet-validate: exit-code (2)\n")
    assert endpoint.state() == "Unhealthy"
    assert endpoint.reason() == "ndfleet-validate: exit-code (2)"


def test_reason_names_the_failed_checks(endpoint):
    endpoint.report.write_text(_report("unhealthy", ("gpu.xid", "ib.flap")))
    assert endpoint.reason() == "validate-node failed: gpu.xid, ib.flap"


def test_body_is_only_what_the_extension_reads(endpoint):
    status, headers, body = endpoint.get()
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"ApplicationHealthState": "Initializing"}


# A report that is damaged in any way is Unhealthy, with an answer, never silence (table-driven).
MALFORMED = {
    "truncated": b'{"status": "heal',
    "not an object": b'["healthy"]',
    "a string": b'"healthy"',
    "checks not a list": b'{"status": "unhealthy", "checks": 5}',
    "check entries not objects": b'{"status": "unhealthy", "checks": ["gpu.xid", 3]}',
    "healthy but a failed check": b'{"status": "healthy", "checks": [{"id": "gpu.xid", "status": "fail"}]}',
    "unknown status": b'{"status": "fine", "checks": []}',
    "error status": b'{"status": "error", "error": "cannot read /etc/ndfleet/node.json", "checks": []}',
    "not UTF-8": b'{"status": "\xff\xfe"}',
    "NUL bytes": b"\x00\x00\x00",
    "empty": b"",
    "deeply nested": b"[" * 100_000,
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_report_is_unhealthy_and_answered(endpoint, case):
    endpoint.report.write_bytes(MALFORMED[case])
    status, headers, body = endpoint.get()
    assert status == 200
    assert json.loads(body) == {"ApplicationHealthState": "Unhealthy"}
    assert headers["X-Ndfleet-Reason"].isascii() and headers["X-Ndfleet-Reason"].isprintable()


def test_report_directory_is_unhealthy(endpoint):
    endpoint.report.mkdir()
    try:
        assert endpoint.state() == "Unhealthy"
    finally:
        endpoint.report.rmdir()


def test_crlf_in_a_check_id_cannot_inject_a_header(endpoint):
    endpoint.report.write_text(_report("unhealthy", ("gpu.xid\r\nSet-Cookie: evil=1",)))
    raw = raw_get(endpoint.port)
    status, headers, _ = parse(raw)
    assert status == 200 and "Set-Cookie" not in headers
    assert "gpu.xid??Set-Cookie: evil=1" in headers["X-Ndfleet-Reason"]


@pytest.mark.parametrize("request_bytes", [
    b"GET /other HTTP/1.1\r\n\r\n",
    b"POST /health HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
    b"\xff\xfe garbage\r\n\r\n",
    b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n",
    b"GET /health HTTP/1.1\n\n",
])  # fmt: skip
def test_every_request_gets_200_and_a_state(endpoint, request_bytes):
    status, _, body = parse(raw_get(endpoint.port, request_bytes))
    assert status == 200
    assert json.loads(body)["ApplicationHealthState"] in ("Initializing", "Healthy", "Unhealthy")


def test_idle_connection_is_closed_after_the_timeout(endpoint):
    with socket.create_connection(("127.0.0.1", endpoint.port), timeout=IDLE_TIMEOUT_S + 20) as s:
        assert s.recv(1024) == b""  # closed by the server, no answer to a request never sent


def _raise_nofile(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= needed, "cannot raise RLIMIT_NOFILE for this test"


def test_probes_are_answered_while_1000_idle_connections_are_held(endpoint, capsys):
    endpoint.report.write_text(_report("healthy"))
    _raise_nofile(IDLE_CONNECTIONS + 256)
    idle: list[socket.socket] = []
    latencies = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            idle.append(socket.create_connection(("127.0.0.1", endpoint.port), timeout=PROBE_TIMEOUT_S))
        for _ in range(10):
            t0 = time.monotonic()
            assert endpoint.state() == "Healthy"
            latencies.append(time.monotonic() - t0)
    finally:
        for s in idle:
            s.close()
    with capsys.disabled():
        print(f"\n{IDLE_CONNECTIONS} idle connections held: probe latency max {max(latencies) * 1000:.1f} ms, "
              f"median {sorted(latencies)[len(latencies) // 2] * 1000:.1f} ms")  # fmt: skip


def test_50_concurrent_clients_are_all_answered(endpoint):
    endpoint.report.write_text(_report("healthy"))
    barrier = threading.Barrier(50)

    def probe(_: int) -> str:
        barrier.wait(timeout=30)
        return endpoint.state()

    with ThreadPoolExecutor(max_workers=50) as pool:
        assert list(pool.map(probe, range(50))) == ["Healthy"] * 50


def test_health_state_never_raises_on_an_unreadable_path(tmp_path):
    assert health_state(str(tmp_path / "missing" / "report.json"), str(tmp_path / "failed")) == (
        "Initializing",
        "set-up or validation in progress",
    )


def test_the_answer_names_the_node_boot_version_beside_the_state(tmp_path):
    """Issue 42: the node's boot version (node.json's, ndfleet/boot_version.py) in a header; the body stays Azure's."""
    from ndfleet_node import config as node_config_module
    from ndfleet_node.health import response

    answer = response(str(tmp_path / "report.json"), str(tmp_path / "failed"), "0123456789ab")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"\r\nX-Ndfleet-Boot-Version: 0123456789ab\r\n" in head
    assert body == b'{"ApplicationHealthState": "Initializing"}'
    assert b"X-Ndfleet-Boot-Version: unknown" in response(str(tmp_path / "r"), str(tmp_path / "f"))
    assert node_config_module.NodeConfig({"boot_version": "0123456789ab"}).boot_version == "0123456789ab"
    placeholder = node_config_module.NodeConfig({"boot_version": "ndfleet-boot-version-placeholder-9b3d"})
    assert placeholder.boot_version == ""
