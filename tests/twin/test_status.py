"""`ndfleet status` against the booted twin (docs/twin.md, "What is real and what is stood in"): the real command, in
process, reads the Resource Manager stand-in's scale sets and instance views (vmHealth from the Application Health
stand-in, tests/twin/status_arm.py) and the workspace stand-in's real Prometheus (tests/twin/workspace.py), fed by
an agent that runs the stack's own rendered agent rules against every machine's node_exporter.

Independent of the repair loop: whatever state the fixed islands are in when this runs (test_repair.py may have
replaced nodes before), what status says must be what the twin is. `status_now(twin)` is the helper the repair loop
calls at each of its stages.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from typing import Any

from tests.twin.test_boot import healthy_nodes
from tests.twin.twin import Twin

# Metrics reach the workspace within about two minutes of a change: the node's metrics timer (60 s) or the
# controller's Slurm export (60 s), the relay's read (10 s), the agent's scrape (the stack's 30 s) and remote write.
ARRIVAL_TIMEOUT_S = 600
SERVING = ("idle", "allocated", "mixed", "completing")


def fixed_islands(twin: Twin) -> dict[str, tuple[int, int]]:
    """island -> (nodes, spares) of the stack's fixed islands (ib00: 3 with a warm spare; ib01: 3)."""
    assert twin.spec is not None
    return {i.name: (i.nodes, i.spares) for i in twin.spec.islands if i.elastic is None}


def status_now(twin: Twin) -> tuple[int, str, dict[str, Any]]:
    """`ndfleet status --stack-file tests/twin/Pulumi.twin.yaml` now: (the exit code of the JSON read, the table
    with anything the command printed on stderr after it, the JSON document; {} when it printed none). Two reads,
    one for each format, a second or so apart."""
    _, table, table_err = twin.status("table")
    code, out, err = twin.status("json")
    return code, table + table_err, json.loads(out) if out.strip() else {}


def fixed_nodes(twin: Twin) -> set[str]:
    return {tm.name for tm in twin.role("compute") if tm.spec.extra.get("scale_set")}


def wait_for(what: str, predicate: Any, timeout: float = ARRIVAL_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(5)


def test_the_workspace_receives_each_machines_metrics_with_the_labels_its_agent_gives(twin: Twin) -> None:
    assert twin.workspace is not None, f"the workspace stand-in did not start: {twin.workspace_error}"
    names = {tm.name for tm in healthy_nodes(twin)}

    def arrived() -> bool:
        nodes = {s["metric"].get("node") for s in twin.workspace.query_local('ndfleet_node_validated{stack="twin"}')}
        slurm = {s["metric"].get("slurm_node") for s in twin.workspace.query_local("ndfleet_slurm_node_state")}
        return names <= nodes and names <= slurm

    wait_for("every healthy node's validation and Slurm state in the workspace", arrived)
    for series in twin.workspace.query_local('ndfleet_node_healthy{stack="twin"}'):
        labels = series["metric"]
        if labels["node"] in names:
            tm = twin.machine(labels["node"])
            assert labels["island"] == tm.spec.island and labels["job"] == "node", labels
            assert labels["physical_host"] == twin.hosts[tm.name], labels  # from the node's KVP, as its set-up reads
    controller = twin.workspace.query_local("ndfleet_slurm_export_success")
    assert controller and all(s["metric"].get("role") == "slurm-controller" for s in controller), controller


def test_the_workspace_query_endpoint_wants_a_token_for_azure_monitor(twin: Twin) -> None:
    assert twin.workspace is not None, f"the workspace stand-in did not start: {twin.workspace_error}"
    ip, port = twin.workspace.endpoint_address
    context = ssl.create_default_context(cadata=twin.ca_pem.decode())
    connection = http.client.HTTPSConnection(ip, port, context=context, timeout=30)
    try:
        connection.request("GET", "/api/v1/query?query=up", headers={"Host": twin.workspace_host or ""})
        response = connection.getresponse()
        assert response.status == 401, response.read()[:200]
    finally:
        connection.close()
