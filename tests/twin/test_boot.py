"""Booted machines: compute nodes reach ndfleet-validated.target from their plan boot data; a node with a bad GPU
stops before it, says so on its health endpoint, and never starts slurmd."""

from __future__ import annotations

import json
import os

from ndfleet.nodefiles.nodebundle import ISLAND_PLACEHOLDER
from tests.twin.conftest import FAULTY_NODE
from tests.twin.machine import TwinMachine
from tests.twin.twin import Twin, wait_all

# First boot on a loaded 2-core machine: set-up, Slurm packages, validation (about a minute when idle).
BOOT_TIMEOUT_S = float(os.environ.get("NDFLEET_TWIN_TIMEOUT_S", "1200"))
NODE_UNITS = ("cloud-final.service", "ndfleet-setup.service", "ndfleet-validate.service", "ndfleet-slurm-setup.service")


def healthy_nodes(twin: Twin) -> list[TwinMachine]:
    """The fixed islands' nodes but the faulty one (an elastic island's VMs come and go: test_elastic.py)."""
    return [tm for tm in twin.role("compute") if tm.name != FAULTY_NODE and tm.spec.extra.get("scale_set")]


def health(tm: TwinMachine, port: int = 18300) -> tuple[str, str]:
    """(ApplicationHealthState, X-Ndfleet-Reason) as Azure's Application Health extension would read them."""
    out = tm.run(f"curl -si --max-time 10 http://127.0.0.1:{port}/health", check=False).stdout
    head, _, body = out.replace("\r\n", "\n").partition("\n\n")
    reason = next(
        (ln.split(":", 1)[1].strip() for ln in head.splitlines() if ln.lower().startswith("x-ndfleet-reason:")), ""
    )
    return (json.loads(body).get("ApplicationHealthState", "") if body.strip() else ""), reason


def test_every_healthy_compute_node_reaches_the_validated_target(twin: Twin) -> None:
    wait_all(
        healthy_nodes(twin), "ndfleet-validated.target active",
        lambda tm: tm.unit_state("ndfleet-validated.target") == "active", BOOT_TIMEOUT_S, NODE_UNITS,
    )  # fmt: skip
    for tm in healthy_nodes(twin):
        twin.record("boot to ndfleet-validated.target", tm.seconds_since_boot("ndfleet-validated.target"))


def test_each_compute_node_reads_its_bundle_from_the_key_vault_parts_its_manifest_names(twin: Twin) -> None:
    """The twin runs Slurm, so its compute nodes' bundle travels in the Slurm vault, not userData (docs/bootstrap.md,
    "When the bundle outgrows userData"): each node read every part its manifest names from the Key Vault stand-in,
    with its own identity's token (the stand-in answers 401 to any other), and its scale set sends no userData."""
    wait_all(
        healthy_nodes(twin), "ndfleet-validated.target active",
        lambda tm: tm.unit_state("ndfleet-validated.target") == "active", BOOT_TIMEOUT_S, NODE_UNITS,
    )  # fmt: skip
    vault = f"{twin.plan.vault_name}.vault.azure.net"
    with twin.state.lock:
        read = [(client, path) for client, host, path, status in twin.state.requests if host == vault and status == 200]
    for tm in healthy_nodes(twin):
        parts = json.loads(tm.run("cat /etc/ndfleet/bundle.json").stdout)["vault"]["parts"]
        assert tm.spec.user_data is None and len(parts) >= 2
        # Each part names its slot and the sha256 of its text (docs/bootstrap.md, "Slots, not one secret per bundle").
        slots = {p["slot"] for p in parts}
        assert {f"/secrets/{slot}" for slot in slots} <= {path for client, path in read if client == tm.spec.ip}


def test_each_node_fills_its_own_island_into_the_shared_bundle(twin: Twin) -> None:
    """Islands of one shape get the same bundle; the boot step puts in the island its customData's manifest names
    (docs/bootstrap.md, "One bundle for every island"): node.json, slurmd's Feature=island-<name>, the metrics label."""
    wait_all(
        healthy_nodes(twin), "ndfleet-validated.target active",
        lambda tm: tm.unit_state("ndfleet-validated.target") == "active", BOOT_TIMEOUT_S, NODE_UNITS,
    )  # fmt: skip
    for tm in healthy_nodes(twin):
        assert json.loads(tm.run("cat /etc/ndfleet/bundle.json").stdout)["island"] == tm.spec.island
        assert json.loads(tm.run("cat /etc/ndfleet/node.json").stdout)["island"] == tm.spec.island
        version = json.loads(tm.run("cat /etc/ndfleet/bundle.json").stdout)["boot_version"]  # issue 42
        assert json.loads(tm.run("cat /etc/ndfleet/node.json").stdout)["boot_version"] == version
        setup = tm.run("cat /usr/local/sbin/ndfleet-slurm-setup").stdout
        assert f"Feature=island-{tm.spec.island},boot-{version} " in setup
        left = tm.run(f"grep -rlF {ISLAND_PLACEHOLDER} /etc /usr/local/sbin /opt/ndfleet", check=False)
        assert left.stdout == "", f"{tm.name}: the placeholder is left in {left.stdout}"


def test_a_validated_node_answers_healthy(twin: Twin) -> None:
    for tm in healthy_nodes(twin):
        tm.wait_for("health Healthy", lambda tm=tm: health(tm)[0] == "Healthy", 120)


def test_a_node_with_a_bad_gpu_stops_before_the_target(twin: Twin) -> None:
    tm = twin.machine(FAULTY_NODE)
    tm.wait_for(
        "ndfleet-validate.service failed", lambda: tm.unit_state("ndfleet-validate.service") == "failed",
        BOOT_TIMEOUT_S, NODE_UNITS,
    )  # fmt: skip
    assert tm.unit_state("ndfleet-validated.target") != "active"


def test_a_node_with_a_bad_gpu_answers_unhealthy_with_the_check_id(twin: Twin) -> None:
    tm = twin.machine(FAULTY_NODE)
    tm.wait_for("health Unhealthy", lambda: health(tm)[0] == "Unhealthy", 120)
    assert "gpu.count" in health(tm)[1], health(tm)


def test_slurmd_never_starts_on_a_node_that_failed_validation(twin: Twin) -> None:
    tm = twin.machine(FAULTY_NODE)
    assert tm.unit_state("slurmd.service") != "active"
    assert tm.prop("slurmd.service", "ExecMainStartTimestampMonotonic") in ("0", "")
