"""The join and the advice, one state at a time, on facts built in the test (no Azure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ndfleet.prepare import prepare_config
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.status.classify import NodeStatus, StackStatus, classify_island, wanted_nodes
from ndfleet.status.facts import Instance, ScaleSet
from ndfleet.status.metrics_view import MetricsView, SlurmNode, Validation
from tests.test_preflight import KEY

HOST = "prod-ib00-000001"
HEALTHY = Instance("1", HOST, "Succeeded", "running", "healthy", True, False)
SCALE_SET = ScaleSet("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/v",
                     "v", "rg", "ib00", "Standard_ND96isr_H100_v5", 1, True, "PT30M", "Replace", "Running", (HEALTHY,))


@pytest.fixture(scope="module")
def spec() -> ClusterSpec:
    raw = {"location": "eastus", "sshPublicKey": KEY, "namePrefix": "prod", "islands": [{"name": "ib00", "nodes": 1}]}
    return prepare_config(raw, "prod", {}).spec


def node(spec: ClusterSpec, instance: Instance = HEALTHY, scale_set: ScaleSet = SCALE_SET,
         validation: Validation | None = None, slurm: SlurmNode | None = None) -> NodeStatus:
    metrics = MetricsView({HOST: validation or Validation("passed")}, None,
                          None if slurm is None else {HOST: slurm}, None)
    island = classify_island(spec, "ib00", 1, (replace(scale_set, instances=(instance,)),), metrics)
    return island.nodes[0]


def exit_code(spec: ClusterSpec, **kwargs: object) -> int:
    metrics = MetricsView({HOST: Validation("passed")}, None, None, None)
    status = StackStatus("prod", None, "eastus", "x", False, True)
    status.islands.append(classify_island(spec, "ib00", 1, (replace(SCALE_SET, **kwargs),), metrics))  # type: ignore[arg-type]
    return status.exit_code


def test_healthy_node_needs_nothing(spec: ClusterSpec) -> None:
    n = node(spec)
    assert (n.health, n.repair, n.actions) == ("healthy", "none", ())


def test_repairs_off_means_repair_by_hand(spec: ClusterSpec) -> None:
    n = node(spec, replace(HEALTHY, vm_health="unhealthy"), replace(SCALE_SET, repairs_enabled=False))
    assert n.repair == "off"
    assert n.actions[0].startswith("unhealthy and automatic repairs are off on v: repair it by hand "
                                   "(`az vmss reimage --resource-group rg --name v --instance-ids 1`)")


def test_protected_instance_is_not_repaired(spec: ClusterSpec) -> None:
    n = node(spec, replace(HEALTHY, vm_health="unhealthy", protected=True))
    assert n.repair == "protected"
    assert "--instance-id 1 --protect-from-scale-set-actions false" in n.actions[0]


def test_instance_being_replaced_is_in_progress(spec: ClusterSpec) -> None:
    n = node(spec, replace(HEALTHY, vm_health="unhealthy", provisioning_state="Deleting"))
    assert (n.health, n.repair, n.actions) == ("unhealthy", "in-progress", ())


def test_unknown_application_health_needs_a_person(spec: ClusterSpec) -> None:
    n = node(spec, replace(HEALTHY, vm_health="unknown"))
    assert (n.health, n.repair) == ("unhealthy", "none")
    assert "automatic repairs do not act on" in n.actions[0]


def test_initializing_node_is_starting(spec: ClusterSpec) -> None:
    n = node(spec, replace(HEALTHY, vm_health="initializing"), validation=Validation("pending"))
    assert (n.health, n.actions) == ("starting", ())


def test_failed_provisioning_needs_a_person(spec: ClusterSpec) -> None:
    n = node(spec, replace(HEALTHY, provisioning_state="Failed"))
    assert n.health == "unhealthy"
    assert n.actions[0].startswith("provisioning failed: reimage it")


def test_node_drained_by_someone_else_gets_the_resume_command(spec: ClusterSpec) -> None:
    n = node(spec, slurm=SlurmNode("drained", "disk swap"))
    assert n.health == "unhealthy"
    assert n.actions == (f"drained in Slurm (disk swap): `scontrol update nodename={HOST} state=resume` when the "
                         "work on it is done",)


def test_node_awaiting_burnin_is_starting(spec: ClusterSpec) -> None:
    n = node(spec, slurm=SlurmNode("drained", "ndfleet:burnin:awaiting"))
    assert (n.health, n.actions) == ("starting", ())


def test_node_absent_from_slurm_does_not_change_health(spec: ClusterSpec) -> None:
    assert node(spec, slurm=SlurmNode("absent")).health == "healthy"


def test_capacity_below_the_stack_is_reported(spec: ClusterSpec) -> None:
    island = classify_island(spec, "ib00", 2, (SCALE_SET,), MetricsView({HOST: Validation("passed")}, None, None, None))
    assert island.missing == 1
    assert island.actions[0].startswith("scale set v has capacity 1, the stack wants 2: run `pulumi up`")


@pytest.mark.parametrize(("kwargs", "code"), [({}, 0), ({"instances": ()}, 1)], ids=["healthy", "no-instance"])
def test_exit_code(spec: ClusterSpec, kwargs: dict[str, object], code: int) -> None:
    assert exit_code(spec, **kwargs) == code


def test_node_failed_by_the_burnin_needs_a_person(spec: ClusterSpec) -> None:
    n = node(spec, slurm=SlurmNode("drained", "ndfleet:burnin:ib-bandwidth"))
    assert n.health == "unhealthy"
    assert n.actions[0].startswith("held by the fabric burn-in (ndfleet:burnin:ib-bandwidth)")



def test_a_spare_is_healthy_counted_as_held_and_not_in_slurm_service() -> None:
    raw = {"location": "eastus", "sshPublicKey": KEY, "namePrefix": "prod", "scheduler": "slurm",
           "islands": [{"name": "ib00", "nodes": 2, "spares": 1}]}
    spares_spec = prepare_config(raw, "prod", {}).spec
    metrics = MetricsView({HOST: Validation("passed")}, None, {HOST: SlurmNode("spare")}, None)
    island = classify_island(spares_spec, "ib00", 1, (SCALE_SET,), metrics)
    assert (island.spares, island.spares_wanted, island.in_slurm) == (1, 1, 0)
    assert island.nodes[0].health == "healthy" and island.nodes[0].actions == ()
    status = StackStatus("prod", None, "eastus", "x", True, True)
    status.islands.append(island)
    from ndfleet.status.render import render_table, to_json
    assert to_json(status)["islands"][0]["spares"] == 1
    assert "  ib00: 1 of 1 warm spares held (not in IN SLURM)" in render_table(status)


def test_an_idle_elastic_island_wants_no_node_and_is_no_finding() -> None:
    """An elastic island at capacity 0 (Slurm asked for no VM) is healthy, and status does not tell the operator to
    `pulumi up` it back to its maxNodes; a fixed island still wants its planned nodes."""
    islands = [{"name": "ib00", "nodes": 2}, {"name": "burst", "elastic": {"maxNodes": 4}}]  # 2: Slurm's fewest
    raw = {"location": "eastus", "sshPublicKey": KEY, "namePrefix": "prod", "scheduler": "slurm", "islands": islands}
    spec = prepare_config(raw, "prod", {}).spec
    fixed, burst = spec.islands
    idle = replace(SCALE_SET, name="b", island="burst", capacity=0, instances=())
    second = replace(HEALTHY, instance_id="2", name="prod-ib00-000002")
    pair = replace(SCALE_SET, capacity=2, instances=(HEALTHY, second))
    assert wanted_nodes(burst, (idle,)) == 0 and wanted_nodes(fixed, (pair,)) == 2
    metrics = MetricsView({HOST: Validation("passed"), second.name: Validation("passed")}, None, None, None)
    status = StackStatus("prod", None, "eastus", "x", False, True)
    status.islands.append(classify_island(spec, "ib00", wanted_nodes(fixed, (pair,)), (pair,), metrics))
    status.islands.append(classify_island(spec, "burst", wanted_nodes(burst, (idle,)), (idle,), metrics, elastic=True))
    assert status.islands[1].actions == () and status.exit_code == 0
    # Scaled out to 2 with one VM listed: one is missing, but `pulumi up` is still not the remedy.
    grown = replace(idle, capacity=2, instances=(replace(HEALTHY, name="prod-burst-000001"),))
    island = classify_island(spec, "burst", wanted_nodes(burst, (grown,)), (grown,), metrics, elastic=True)
    assert island.missing == 1 and not [a for a in island.actions if "pulumi up" in a]
