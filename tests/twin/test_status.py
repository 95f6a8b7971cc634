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
import shlex
import ssl
import time
from typing import Any

from ndfleet_node.names import SPARES_RESERVATION_PREFIX
from ndfleet_node.scontrol import parse_reservations
from ndfleet_node.slurm_export import node_states

from ndfleet.status.metrics_view import SLURM_STATES  # the controller's states and "absent" (not in Slurm)
from tests.twin.conftest import FAULTY_NODE
from tests.twin.test_boot import healthy_nodes
from tests.twin.test_cluster import controller
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


def wait_for(what: str, predicate: Any, timeout: float = ARRIVAL_TIMEOUT_S, explain: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        why = f": {explain()}" if explain else ""
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s{why}"
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


def spare_nodes(ctl: Any) -> frozenset[str]:
    """The nodes held in the spares reservations now (`ndfleet-spares-<island>`, ndfleet_node.spares)."""
    names: set[str] = set()
    for name, held in parse_reservations(ctl.run("scontrol show reservation --oneliner", check=False).stdout).items():
        if name.startswith(SPARES_RESERVATION_PREFIX) and held.nodes:
            names.update(ctl.run(f"scontrol show hostnames {shlex.quote(held.nodes)}").stdout.split())
    return frozenset(n.lower() for n in names)


def test_status_says_what_the_twin_is(twin: Twin) -> None:
    """Every fixed-island machine is listed, with the Application Health stand-in's state as its vmHealth and the
    Slurm state the controller's scontrol gives it now (read the exporter's way, ndfleet_node.slurm_export); each
    healthy node that is validated shows validation passed, and healthy when Azure and Slurm say so; the faulty
    node, while it is there and its metrics are published, failed validation and is unhealthy once Azure says so.
    Status lags the twin by up to about two minutes (ARRIVAL_TIMEOUT_S): it is read until it agrees."""
    seen: dict[str, Any] = {}
    ctl = controller(twin)
    fixed = fixed_islands(twin)

    def agrees() -> bool:
        # Read as the controller's exporter reads it: a node in a spares reservation, idle and fit, is "spare".
        listing = ctl.run("scontrol show node --oneliner", check=False).stdout
        slurm_now = {n.lower(): state for n, state, _ in node_states(listing, spare_nodes(ctl))}
        code, table, doc = status_now(twin)
        states = {name: twin.repairs.state(name) for name in fixed_nodes(twin)}
        seen.update(code=code, table=table, doc=doc, states=states, slurm=slurm_now)
        return not disagreement(doc, states, slurm_now)

    def disagreement(doc: dict[str, Any], states: dict[str, str], slurm_now: dict[str, str]) -> str:
        seen["why"] = why = _disagreement(doc, states, slurm_now)
        return why

    def _disagreement(doc: dict[str, Any], states: dict[str, str], slurm_now: dict[str, str]) -> str:
        if not doc or doc.get("error"):
            return f"no status document: {str(doc.get('error') if doc else seen.get('code'))[:300]}"
        nodes = {n["name"]: n for n in doc["nodes"] if n["island"] in fixed}
        if set(nodes) != set(states):
            # a replacement came or went between the reads: read again
            return f"status lists {sorted(nodes)}, the twin has {sorted(states)}"
        for name, node in nodes.items():
            if node["vmHealth"] != (states[name].lower() or "none"):
                return f"{name}: vmHealth {node['vmHealth']}, the stand-in says {states[name]!r}"
            if (node["slurm"] or {}).get("state") != slurm_now.get(name, "absent"):
                return f"{name}: Slurm {node['slurm']} in status, {slurm_now.get(name, 'absent')} in scontrol"
        for tm in healthy_nodes(twin):
            node = nodes.get(tm.name)
            if node is None or tm.unit_state("ndfleet-validated.target") != "active":
                continue
            if node["validation"]["state"] != "passed":
                return f"{tm.name}: validated, but status says validation {node['validation']}"
            if states[tm.name] == "Healthy" and node["slurm"]["state"] in SERVING and node["health"] != "healthy":
                return f"{tm.name}: Healthy and {node['slurm']['state']}, but status says {node['health']}"
        faulty = nodes.get(FAULTY_NODE)
        if faulty is not None and states.get(FAULTY_NODE) == "Unhealthy" and faulty["health"] != "unhealthy":
            return f"{FAULTY_NODE}: Unhealthy to Azure, status says {faulty['health']}"
        return ""

    wait_for("status agreeing with the twin", agrees, explain=lambda: f"{seen.get('why')}\n{seen.get('table')}")
    doc, table = seen["doc"], seen["table"]
    nodes = {n["name"]: n for n in doc["nodes"] if n["island"] in fixed}
    for name, node in nodes.items():
        assert node["vmHealth"] == (seen["states"][name].lower() or "none"), node
        assert node["powerState"] == "running" and node["provisioningState"] == "Succeeded", node
        assert node["slurm"]["state"] == seen["slurm"].get(name, "absent") and node["slurm"]["state"] in SLURM_STATES
    islands = {i["name"]: i for i in doc["islands"]}
    for island, (wanted, spares) in fixed.items():
        shown = islands[island]
        assert shown["wanted"] == wanted and shown["running"] == len(
            [n for n in nodes.values() if n["island"] == island]), shown  # fmt: skip
        assert shown["scaleSets"][0]["repairs"]["enabled"] is True, shown
        if spares:
            # The spares the controller holds now: its nodes in the "spare" Slurm state (scontrol, read above).
            held = sum(1 for n in nodes.values() if n["island"] == island and seen["slurm"].get(n["name"]) == "spare")
            assert shown["sparesWanted"] == spares and shown["spares"] == held, shown
    assert twin.workspace is not None
    if FAULTY_NODE in nodes and twin.workspace.query_local(f'ndfleet_node_validated{{node="{FAULTY_NODE}"}}'):
        faulty = nodes[FAULTY_NODE]
        assert faulty["validation"]["state"] == "failed" and faulty["validation"]["failedChecks"], faulty
        assert FAULTY_NODE in table, table
    for island in fixed:
        assert any(line.split()[:1] == [island] for line in table.splitlines()), table
    print(table)
