"""Loopback HTTPS stand-ins for Resource Manager and a workspace's query endpoint, and `ndfleet status` run against
them through the real bounded transport (ndfleet.azure.http), for the hostile-answer tests.

Resource Manager's answers are the recorded ones of tests/data/status (Microsoft Learn, REST API reference:
"Virtual Machine Scale Sets - List All", "Virtual Machine Scale Set VMs - List", "Azure Monitor Workspaces - List
By Resource Group": `{"value": [...], "nextLink": url}`); the workspace answers the Prometheus HTTP API
(https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries). A certificate authority made for the
test run (tests/twin/pki.py) signs the stand-in's certificate; only the client built here trusts it."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ndfleet.azure.http import BoundedTransport
from ndfleet.cli import build_parser
from ndfleet.commands import status as status_cmd
from tests.impact.arm_server import FakeArm, Reply, serve
from tests.status.test_status import DATA, IB00, IB01, TINY_RETRY, stack_file
from tests.test_preflight import SUB as SUBSCRIPTION
from tests.test_preflight import FakeCredential
from tests.twin import pki

VMSS_LIST = ("GET", f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Compute/virtualMachineScaleSets?")
ACCOUNTS = "/providers/Microsoft.Monitor/accounts?"
WORKSPACE = "prod-monitoring-amw3d4e5f6a-a1b2.eastus.prometheus.monitor.azure.com"


def recorded(name: str) -> bytes:
    return (DATA / "status" / name).read_bytes()


def healthy_routes(base: str) -> dict[tuple[str, str], list[Reply]]:
    """A healthy stack (tests/status/test_status.py's recordings), answered over HTTPS on loopback."""

    def arm(name: str) -> list[Reply]:
        return [Reply(200, raw=recorded(name).replace(b"https://management.azure.com", base.encode()))]

    rg = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/"
    return {
        VMSS_LIST: arm("vmss-list.json"),
        ("GET", f"{rg}prod-net-rg7c1d2e3f/providers/Microsoft.Compute/virtualMachineScaleSets/{IB00}/instanceView"):
            arm("vmss-instance-view-repairs-running.json"),
        ("GET", f"{rg}prod-net-rg7c1d2e3f/providers/Microsoft.Compute/virtualMachineScaleSets/{IB01}/instanceView"):
            arm("vmss-instance-view-repairs-running.json"),
        ("GET", f"{rg}prod-net-rg7c1d2e3f/providers/Microsoft.Compute/virtualMachineScaleSets/{IB00}/virtualMachines"):
            arm("vms-ib00-healthy.json"),
        ("GET", f"{rg}prod-net-rg7c1d2e3f/providers/Microsoft.Compute/virtualMachineScaleSets/{IB01}/virtualMachines"):
            arm("vms-ib01-healthy.json"),
        ("GET", f"{rg}prod-net-rg7c1d2e3f{ACCOUNTS}"): arm("monitor-accounts.json"),
        ("GET", "/api/v1/query?query=%7B__name__"): arm("prom-node-metrics-healthy.json"),
        ("GET", "/api/v1/query?query=ndfleet_validation_check_status"): arm("prom-failed-checks-none.json"),
        ("GET", "/api/v1/query?query=ndfleet_slurm_node_state"): arm("prom-slurm-healthy.json"),
    }  # fmt: skip


@dataclass
class Tls:
    server: ssl.SSLContext
    client: ssl.SSLContext


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    folder = tmp_path_factory.mktemp("pki")
    ca, cert, key = pki.make_ca_and_server(folder, ["localhost", WORKSPACE], ["127.0.0.1"])
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    return Tls(server, ssl.create_default_context(cafile=str(ca)))


@contextmanager
def standin(tls: Tls, **override: list[Reply]) -> Iterator[FakeArm]:
    """The healthy stack's routes with some replaced: keys are route names of `healthy_routes` ("vmss_list",
    "accounts", "nodes", "checks", "slurm") mapped to their replies."""
    names = {"vmss_list": 0, "vms_ib00": 3, "accounts": 5, "nodes": 6, "checks": 7, "slurm": 8}
    with serve({}, tls=tls.server) as arm:
        routes = healthy_routes(arm.base)
        keys = list(routes)
        for name, replies in override.items():
            routes[keys[names[name]]] = replies
        arm.routes = routes
        yield arm


@dataclass
class Run:
    code: int
    out: str
    err: str

    def doc(self) -> dict[str, Any]:
        return json.loads(self.out)


def run_status(capsys: pytest.CaptureFixture[str], tmp_path: Path, arm: FakeArm, tls: Tls, fmt: str = "json") -> Run:
    """`ndfleet status` against the stand-in: Resource Manager at its address, the workspace's host name served
    by it too (like curl --connect-to), the real transport and pipeline in between."""
    port = int(arm.base.rsplit(":", 1)[1])
    transport = BoundedTransport(tls=tls.client, connect_to={WORKSPACE: ("127.0.0.1", port)})
    args = build_parser().parse_args(["status", "--stack-file", str(stack_file(tmp_path)), "--format", fmt])
    env = {"AZURE_RESOURCE_MANAGER_ENDPOINT": arm.base}
    code = status_cmd.run_cli(args, env=env, credential=FakeCredential(), transport=transport, retry=TINY_RETRY,
                              sleep=lambda s: None)  # fmt: skip
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def assert_clean(text: str) -> None:
    """No traceback, and every line printable: nothing from a server moved the cursor or broke a line."""
    assert "Traceback" not in text
    for line in text.split("\n"):
        assert line.isprintable(), repr(line)
