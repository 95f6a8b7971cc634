"""The twin's workspace and Resource Manager stand-ins (tests/twin/workspace.py, tests/twin/status_arm.py) without
the twin: Debian's Prometheus pair on 127.0.0.1 runs ndfleet's own rendered agent rules against exporters that
serve what the node programs write (node/ndfleet_node/metrics.py, slurm_export.py), through the metrics relay; the
query endpoint checks tokens; and the real `ndfleet status` reads it all through the real transport, as the twin's
`status_now` does."""

from __future__ import annotations

import contextlib
import io
import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node import metrics as node_metrics
from ndfleet_node import slurm_export

from ndfleet.azure.http import BoundedTransport
from ndfleet.cli import build_parser
from ndfleet.commands import status as status_cmd
from ndfleet.monitoring import agent
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackload import load_stack_spec
from tests.impact.arm_server import loopback_up
from tests.status.test_status import TINY_RETRY, stack_file
from tests.system_tools import require_tool
from tests.test_preflight import SUB
from tests.twin import pki
from tests.twin.standins import CloudState, ServicesHandler, serve
from tests.twin.status_arm import StatusReads, StatusScaleSet, StatusVm
from tests.twin.workspace import MetricsRelay, OperatorCredential, Target, Workspace, free_port

WORKSPACE_HOST = "prod-amw-a1b2.eastus.prometheus.monitor.azure.com"
ARM_HOST = "management.azure.com"
GROUP = "prod-rg"
ARRIVAL_TIMEOUT_S = 120
FAILED = "prod-ib01-000000"
NODES = {"ib00": ["prod-ib00-000000", "prod-ib00-000001"], "ib01": [FAILED, "prod-ib01-000001"]}
CONTROLLER = "prod-slurm-ctl"


def node_exposition(name: str) -> bytes:
    """What node_exporter's textfile collector serves from `ndfleet-node metrics` on the node."""
    checks = [{"id": "gpu_count", "status": "fail" if name == FAILED else "pass"}, {"id": "ib_ports", "status": "pass"}]
    report = {"status": "unhealthy" if name == FAILED else "healthy", "checks": checks}
    return node_metrics.render(report, time.time(), drained=name == FAILED).encode()


def controller_exposition() -> bytes:
    states = [(n, "drained" if n == FAILED else "idle", "ndfleet: gpu_count" if n == FAILED else "")
              for nodes in NODES.values() for n in nodes]  # fmt: skip
    return slurm_export.render(states, time.time()).encode()


@dataclass
class Stand:
    spec: ClusterSpec
    stack_file: Path
    state: CloudState
    workspace: Workspace
    reads: StatusReads
    client_tls: ssl.SSLContext
    connect_to: dict[str, tuple[str, int]]
    health: dict[str, str] = field(default_factory=dict)

    def credential(self) -> OperatorCredential:
        def record(token: str, client: str, audience: str) -> None:
            with self.state.lock:
                self.state.tokens[token] = (client, audience)

        return OperatorCredential(record)

    def transport(self) -> BoundedTransport:
        return BoundedTransport(tls=self.client_tls, connect_to=self.connect_to)

    def status(self, fmt: str = "json") -> tuple[int, str, str]:
        args = build_parser().parse_args(["status", "--stack-file", str(self.stack_file), "--format", fmt])
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = status_cmd.run_cli(args, env={}, credential=self.credential(), transport=self.transport(),
                                      retry=TINY_RETRY, sleep=lambda s: None)  # fmt: skip
        return code, out.getvalue(), err.getvalue()

    def get(self, host: str, path: str, token: str | None) -> tuple[int, bytes]:
        address = self.connect_to[host]
        request = urllib.request.Request(f"https://{host}:{address[1]}{path}")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self.client_tls))
        # The certificate names the host; the socket goes to loopback (like curl --connect-to).
        with _resolving(host, address[0]):
            try:
                with opener.open(request, timeout=30) as resp:
                    return int(resp.status), bytes(resp.read())
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read()


@contextlib.contextmanager
def _resolving(host: str, ip: str) -> Iterator[None]:
    import socket

    real = socket.getaddrinfo

    def fake(name: Any, *args: Any, **kwargs: Any) -> Any:
        return real(ip if name == host else name, *args, **kwargs)

    socket.getaddrinfo = fake  # type: ignore[assignment]
    try:
        yield
    finally:
        socket.getaddrinfo = real  # type: ignore[assignment]


@pytest.fixture(scope="module")
def stand(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stand]:
    binary = require_tool("prometheus")
    loopback_up()
    folder = tmp_path_factory.mktemp("twin-workspace")
    path = stack_file(folder)
    spec, _ = load_stack_spec(None, str(path), None)
    ca, cert, key = pki.make_ca_and_server(folder / "pki", [ARM_HOST, WORKSPACE_HOST], ["127.0.0.1"])
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    client_tls = ssl.create_default_context(cafile=str(ca))
    state = CloudState()
    configs = {i.name: next(f.content for f in agent.node_files(spec, i) if f.name == "prometheus.yml.in")
               for i in spec.islands}  # fmt: skip
    configs["controller"] = agent.controller_config(spec, "")[agent.PROMETHEUS_CONFIG_TEMPLATE]
    expositions = {n: node_exposition(n) for nodes in NODES.values() for n in nodes}
    expositions[CONTROLLER] = controller_exposition()
    relay = MetricsRelay(expositions.get, lambda: list(expositions), refresh_s=1)
    targets = [Target(island, relay.address, n, f"HOST-{n}", f"/metrics/{n}")
               for island, nodes in NODES.items() for n in nodes]  # fmt: skip
    targets.append(Target("controller", relay.address, CONTROLLER, "unknown", f"/metrics/{CONTROLLER}"))
    health = {n: "Healthy" for nodes in NODES.values() for n in nodes} | {FAILED: "Unhealthy"}

    def scale_sets() -> list[StatusScaleSet]:
        return [
            StatusScaleSet(
                name=f"prod-{island}-vmss", resource_group=GROUP, island=island,
                computer_name_prefix=f"prod-{island}-", vm_size="Standard_ND96isr_H100_v5",
                tags={"ndfleet:island": island}, repairs_policy={"enabled": True, "gracePeriod": "PT10M"},
                repairs_running=True,
                vms=tuple(StatusVm(str(i), n, health[n]) for i, n in enumerate(nodes)),
            )
            for island, nodes in NODES.items()
        ]  # fmt: skip

    endpoint = f"https://{WORKSPACE_HOST}"
    reads = StatusReads(SUB, scale_sets, state.tokens.get, (GROUP, "prod-amw", endpoint))
    state.status_reads = reads
    arm_port = free_port()
    arm = serve(ServicesHandler, state, "127.0.0.1", arm_port, server_tls)
    workspace = Workspace(folder / "workspace", configs, lambda: targets, state.tokens.get, server_tls,
                          scrape_interval_s=1, binary=binary)  # fmt: skip
    try:
        workspace.start()
        connect_to = {ARM_HOST: ("127.0.0.1", arm_port), WORKSPACE_HOST: workspace.endpoint_address}
        wait_for_data(workspace)
        yield Stand(spec, path, state, workspace, reads, client_tls, connect_to, health)
    finally:
        workspace.close()
        arm.shutdown()
        arm.server_close()
        relay.close()


def wait_for_data(workspace: Workspace) -> None:
    deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
    every = {n for nodes in NODES.values() for n in nodes}
    while True:
        nodes = {s["metric"].get("node") for s in workspace.query_local("ndfleet_node_validated")}
        slurm = workspace.query_local("ndfleet_slurm_node_state")
        if nodes >= every and slurm:
            return
        assert time.monotonic() < deadline, f"nothing arrived in {ARRIVAL_TIMEOUT_S} s (nodes: {nodes})"
        time.sleep(0.5)


def query_path(promql: str) -> str:
    return "/api/v1/query?" + urllib.parse.urlencode({"query": promql})


def test_the_query_endpoint_refuses_a_request_without_a_token_for_azure_monitor(stand: Stand) -> None:
    status, body = stand.get(WORKSPACE_HOST, query_path("up"), None)
    assert status == 401 and b"prometheus.monitor.azure.com" in body
    # A token for Resource Manager is not one for the workspace.
    arm_token = stand.credential().get_token("https://management.azure.com/.default").token
    assert stand.get(WORKSPACE_HOST, query_path("up"), arm_token)[0] == 401
    token = stand.credential().get_token("https://prometheus.monitor.azure.com/.default").token
    status, body = stand.get(WORKSPACE_HOST, query_path("ndfleet_node_healthy"), token)
    assert status == 200, body
    assert json.loads(body)["data"]["resultType"] == "vector"


def test_the_query_endpoint_passes_only_the_query_apis(stand: Stand) -> None:
    token = stand.credential().get_token("https://prometheus.monitor.azure.com/.default").token
    assert stand.get(WORKSPACE_HOST, "/api/v1/admin/tsdb/snapshot", token)[0] == 404
    assert stand.get(WORKSPACE_HOST, "/-/quit", token)[0] == 404


def test_series_arrive_with_the_labels_ndfleets_agent_gives_them(stand: Stand) -> None:
    """The rendered rules ran: the external labels of each kind became the series' labels, the job is the node
    agent's, and what the keep rule drops (node_exporter's own go_ metrics were not served; the relay's up is kept
    by Prometheus) never arrives."""
    series = stand.workspace.query_local('{__name__=~"ndfleet_.+"}')
    by_node = {(s["metric"]["__name__"], s["metric"].get("node")): s["metric"] for s in series}
    labels = by_node[("ndfleet_node_healthy", FAILED)]
    assert {k: labels.get(k) for k in ("stack", "island", "node", "physical_host", "job")} == {
        "stack": "prod", "island": "ib01", "node": FAILED, "physical_host": f"HOST-{FAILED}", "job": "node"}
    ctl = by_node[("ndfleet_slurm_export_success", CONTROLLER)]
    assert ctl.get("role") == agent.CONTROLLER_ROLE_LABEL and "island" not in ctl
    # The controller's keep rule has no validation metrics and the nodes' none of the Slurm ones.
    assert ("ndfleet_slurm_node_state", FAILED) not in by_node
    assert not any(name.startswith("ndfleet_node_") and node == CONTROLLER for name, node in by_node)


def test_status_reads_the_twins_instance_views_and_workspace(stand: Stand) -> None:
    code, out, err = stand.status("json")
    assert code == 1, err  # one node unhealthy
    doc = json.loads(out)
    assert doc["notes"] == [], doc["notes"]
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert set(nodes) == {n for ns in NODES.values() for n in ns}
    failed = nodes[FAILED]
    assert failed["health"] == "unhealthy", failed
    assert failed["validation"]["state"] == "failed" and failed["validation"]["failedChecks"] == ["gpu_count"]
    assert failed["slurm"]["state"] == "drained" and failed["slurm"]["reason"] == "ndfleet: gpu_count"
    assert failed["vmHealth"] == "unhealthy"
    for name in set(nodes) - {FAILED}:
        assert nodes[name]["health"] == "healthy", nodes[name]
        assert nodes[name]["validation"]["state"] == "passed" and nodes[name]["slurm"]["state"] == "idle"
    islands = {i["name"]: i for i in doc["islands"]}
    assert (islands["ib00"]["validated"], islands["ib01"]["validated"]) == (2, 1)
    assert islands["ib01"]["scaleSets"][0]["repairs"]["serviceState"] == "Running"
    # The workspace was asked through the token-checking endpoint, not around it.
    assert [s for _, s in stand.workspace.queries[-3:]] == [200, 200, 200]

    code, table, err = stand.status("table")
    assert code == 1 and FAILED in table and "gpu_count" in table, table + err


def test_status_follows_the_health_the_repairs_stand_in_reports(stand: Stand) -> None:
    """vmHealth comes from the Application Health stand-in's state at the time of the read."""
    stand.health[FAILED] = "Initializing"
    try:
        doc = json.loads(stand.status("json")[1])
    finally:
        stand.health[FAILED] = "Unhealthy"
    failed = next(n for n in doc["nodes"] if n["name"] == FAILED)
    assert failed["vmHealth"] == "initializing"


def test_resource_manager_reads_need_a_management_token(stand: Stand) -> None:
    path = f"/subscriptions/{SUB}/providers/Microsoft.Compute/virtualMachineScaleSets?api-version=2024-07-01"
    assert stand.get(ARM_HOST, path, None)[0] == 401
    token = stand.credential().get_token("https://prometheus.monitor.azure.com/.default").token
    assert stand.get(ARM_HOST, path, token)[0] == 401


def test_goodput_reads_the_twins_workspace(stand: Stand) -> None:
    """`ndfleet goodput` finds the workspace as status does and reads the controller's states with range queries
    through the endpoint. The series are seconds old, so the period runs a minute past now: Prometheus fills the
    later steps from the last sample (its 5-minute lookback); what is checked is who was in which state."""
    from datetime import datetime, timezone

    from ndfleet.commands import goodput as goodput_cmd

    def iso(at: float) -> str:
        return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    now = time.time()
    args = build_parser().parse_args(["goodput", "--stack-file", str(stand.stack_file), "--since", iso(now - 60),
                                      "--until", iso(now + 120), "--format", "json"])  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = goodput_cmd.run_cli(args, env={}, credential=stand.credential(), transport=stand.transport(),
                                   retry=TINY_RETRY)  # fmt: skip
    assert code == 0, err.getvalue()
    islands = json.loads(out.getvalue())["islands"]
    ib00, ib01 = islands["ib00"]["hours"], islands["ib01"]["hours"]
    assert ib00["idle"] > 0 and ib00["drained"] == 0, ib00
    # ib01: one node idle, and the one ndfleet's health check drained counted in repair, for the same steps.
    assert ib01["repair"] > 0 and ib01["repair"] == ib01["idle"] and ib01["drained"] == 0, ib01
    assert any(path == "/api/v1/query_range" and status == 200 for path, status in stand.workspace.queries)


class _FakeMachine:
    """A twin machine as the twin's status wiring uses it: its plan entry, and `run` answering the node_exporter
    read with what the node programs would have written (every node healthy, each in Slurm idle)."""

    def __init__(self, spec: Any, computes: list[str]):
        self.spec, self.name, self.computes = spec, spec.name, computes

    def run(self, command: str, check: bool = True, timeout: float = 120) -> Any:
        import subprocess

        assert "127.0.0.1:9100/metrics" in command, command
        if self.spec.role == "controller":
            body = slurm_export.render([(n, "idle", "") for n in self.computes], time.time())
        else:
            body = node_metrics.render({"status": "healthy", "checks": [{"id": "gpu_count", "status": "pass"}]},
                                       time.time(), drained=False)  # fmt: skip
        return subprocess.CompletedProcess(command, 0, body, "")


def test_the_twins_status_wiring_reads_its_own_stand_ins(tmp_path: Path) -> None:
    """tests/twin/twin.py's part, offline: the twin's plan and stack, its Resource Manager reads for the fixed
    islands from the machines and the Application Health stand-in's states, the workspace with the stack's rendered
    rules for each island and the controller, the relay reading each machine, and `Twin.status` /
    `status_now` (the twin's stand-in address moved to loopback; machines are fakes that answer the exporter read)."""
    import subprocess
    import sys

    from tests.twin.arm import SUBSCRIPTION
    from tests.twin.conftest import STACK_FILE
    from tests.twin.test_status import status_now
    from tests.twin.twin import Twin

    require_tool("prometheus")
    loopback_up()
    plan = tmp_path / "plan.json"
    cp = subprocess.run([sys.executable, "-m", "ndfleet.cli", "plan", "--stack-file", str(STACK_FILE), "--format",
                         "json"], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    plan.write_text(cp.stdout)
    twin = Twin(plan, tmp_path / "twin", tmp_path, tmp_path, tmp_path, stack_file=STACK_FILE)
    twin.standin_ip = "127.0.0.1"
    twin.workspace_scrape_interval_s = 1
    ca, cert, key = pki.make_ca_and_server(tmp_path / "pki", twin._service_hosts(), ["127.0.0.1"])
    twin.ca_pem = ca.read_bytes()
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    fixed = [m for m in twin.plan.machines if m.role == "compute" and m.extra.get("scale_set")]
    for m in [*fixed, *twin.plan.by_role("controller")]:
        twin.machines[m.name] = _FakeMachine(m, [c.name for c in fixed])  # type: ignore[assignment]
    for m in fixed:
        twin.repairs.created(m.name, m.extra["scale_set"])
    twin.repairs.instances[fixed[0].name].state = "Unhealthy"
    assert twin.workspace_account is not None and twin.workspace_host
    twin.state.status_reads = StatusReads(
        SUBSCRIPTION, twin.status_scale_sets, twin.state.tokens.get,
        (twin.workspace_account[1], twin.workspace_account[0], f"https://{twin.workspace_host}"),
    )  # fmt: skip
    arm = serve(ServicesHandler, twin.state, "127.0.0.1", 443, server_tls)
    try:
        twin._workspace(server_tls)
        assert twin.workspace is not None
        deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
        while len(twin.workspace.query_local('ndfleet_node_validated{stack="twin"}')) < len(fixed) or not (
                twin.workspace.query_local("ndfleet_slurm_node_state")):  # fmt: skip
            assert time.monotonic() < deadline, "nothing arrived"
            time.sleep(0.5)
        code, table, doc = status_now(twin)
    finally:
        if twin.workspace is not None:
            twin.workspace.close()
        if twin.relay is not None:
            twin.relay.close()
        arm.shutdown()
        arm.server_close()
    assert code == 1 and doc["stack"] == "twin", table
    nodes = {n["name"]: n for n in doc["nodes"]}
    assert set(nodes) == {m.name for m in fixed}
    assert nodes[fixed[0].name]["vmHealth"] == "unhealthy" and nodes[fixed[0].name]["health"] == "unhealthy"
    for m in fixed[1:]:
        assert nodes[m.name]["vmHealth"] == "initializing", nodes[m.name]
    for node in nodes.values():
        assert node["validation"]["state"] == "passed" and node["slurm"]["state"] == "idle", node
        assert node["resourceGroup"] == twin.workspace_account[1]
    assert "ib00" in table and fixed[0].name in table



def test_an_elastic_scale_sets_own_calls_stay_with_the_elastic_stand_in() -> None:
    """The controller's elastic programs list instances without $expand and read or write the scale set: those go
    to tests/twin/arm.py (which judges the controller's role); status's reads of the same scale set come here."""
    elastic = StatusScaleSet("twin-burst-vmss", "twin-net-rg", "burst", "twin-burst-", "Standard_ND96isr_H100_v5",
                             {}, {}, False, (), fixed=False)  # fmt: skip
    fixed = StatusScaleSet("twin-ib00-vmss", "twin-net-rg", "ib00", "twin-ib00-", "Standard_ND96isr_H100_v5",
                           {}, {}, False, ())  # fmt: skip
    reads = StatusReads(SUB, lambda: [elastic, fixed], lambda token: None)
    base = f"/subscriptions/{SUB}/resourceGroups/twin-net-rg/providers/Microsoft.Compute/virtualMachineScaleSets"
    api = "api-version=2024-07-01"
    assert not reads.handles("GET", f"{base}/twin-burst-vmss/virtualMachines?{api}")
    assert not reads.handles("GET", f"{base}/twin-burst-vmss?{api}")
    assert not reads.handles("PATCH", f"{base}/twin-burst-vmss?{api}")
    assert reads.handles("GET", f"{base}/twin-burst-vmss/virtualMachines?{api}&$expand=instanceView")
    assert reads.handles("GET", f"{base}/twin-burst-vmss/instanceView?{api}")
    assert reads.handles("GET", f"{base}/twin-ib00-vmss/virtualMachines?{api}")
    assert reads.handles("GET", f"/subscriptions/{SUB}/providers/Microsoft.Compute/virtualMachineScaleSets?{api}")
    # Without a token for Resource Manager, nothing is read.
    status, doc = reads.handle("GET", f"{base}/twin-ib00-vmss/virtualMachines?{api}", {})
    assert status == 401 and doc["error"]["code"] == "InvalidAuthenticationToken"
