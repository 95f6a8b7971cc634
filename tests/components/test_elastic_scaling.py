"""An elastic island's Azure side under the mocks (docs/elastic.md): the scale set has the fixed name the controller's
programs address, starts empty and leaves its capacity to Slurm; the controller's identity gets one custom role with
exactly the programs' actions, assigned at each elastic scale set and nowhere else."""

from __future__ import annotations

from typing import Any

import pytest

import ndfleet.plans.build
from ndfleet.components.elastic_scaling import ELASTIC_ACTIONS
from ndfleet.plans.build import Plan, run_plan
from tests.conftest import ROLE, VMSS, base_config, of_type, one, plan_of, stack_from

ROLE_DEFINITION = "azure-native:authorization:RoleDefinition"
CONFIG = base_config(
    scheduler="slurm",
    nodes=None,
    islands=[{"name": "ib00", "nodes": 2}, {"name": "burst", "elastic": {"maxNodes": 4}}],
)


@pytest.fixture(scope="module")
def plan() -> Plan:
    return plan_of(CONFIG)


def test_an_elastic_scale_set_has_the_fixed_name_and_starts_empty(plan: Plan) -> None:
    vmss = one(plan, VMSS, "burst")
    assert (vmss.inputs.get("vmScaleSetName"), vmss.inputs["sku"]["capacity"]) == ("test-burst-vmss", 0)


def test_a_fixed_islands_scale_set_keeps_its_generated_name_and_size(plan: Plan) -> None:
    vmss = one(plan, VMSS, "ib00")
    assert ("vmScaleSetName" not in vmss.inputs, vmss.inputs["sku"]["capacity"]) == (True, 2)


def test_the_scaling_role_has_exactly_the_programs_actions(plan: Plan) -> None:
    role = one(plan, ROLE_DEFINITION)
    assert role.inputs["permissions"] == [{"actions": list(ELASTIC_ACTIONS)}]
    assert role.inputs["assignableScopes"] == [role.inputs["scope"]]
    assert role.inputs["scope"].endswith("/resourceGroups/test-net-rg")


def test_the_scaling_role_is_assigned_at_the_elastic_scale_set_and_its_linked_resources_only(plan: Plan) -> None:
    role = one(plan, ROLE_DEFINITION)
    vmss = one(plan, VMSS, "burst")
    subnet = vmss.inputs["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"][0][
        "ipConfigurations"][0]["subnet"]["id"]
    identities = vmss.inputs["identity"]["userAssignedIdentities"]
    assigned = {r.name: r.inputs["scope"] for r in of_type(plan, ROLE) if r.name.startswith("test-elastic-")}
    assert assigned == {
        "test-elastic-burst": assigned["test-elastic-burst"],
        "test-elastic--subnet": subnet,
        "test-elastic--identity": next(iter(identities)),
    }
    assert assigned["test-elastic-burst"].endswith("/virtualMachineScaleSets/test-burst-vmss")
    assert len(identities) == 1
    scaling = [r for r in of_type(plan, ROLE) if r.name.startswith("test-elastic-")]
    assert all(r.inputs["principalType"] == "ServicePrincipal" for r in scaling)
    assert all(role.name in r.depends_on for r in scaling)


def test_the_scaling_role_may_join_the_subnet_and_assign_the_identity(plan: Plan) -> None:
    """A scale-out is a write whose new VMs join the subnet and carry the identity: linked access checks."""
    actions = one(plan, ROLE_DEFINITION).inputs["permissions"][0]["actions"]
    assert "Microsoft.Network/virtualNetworks/subnets/join/action" in actions
    assert "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action" in actions


def test_the_role_name_is_unique_in_the_tenant(plan: Plan) -> None:
    """Role names are unique per Entra tenant: the name carries the subscription and the resource group."""
    role = one(plan, ROLE_DEFINITION)
    subscription = role.inputs["scope"].split("/")[2]
    assert role.inputs["roleName"].endswith(f"; test-net-rg in {subscription})")


def test_a_stack_without_elastic_islands_has_no_scaling_role() -> None:
    assert of_type(plan_of(base_config(scheduler="slurm")), ROLE_DEFINITION) == []


def test_pulumi_leaves_an_elastic_scale_sets_capacity_to_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    ignored: dict[str, list[str]] = {}
    register = ndfleet.plans.build.RecordingMonitor.RegisterResource

    def recording(self: Any, request: Any) -> Any:
        if request.type == VMSS:
            ignored[request.name] = list(request.ignoreChanges)
        return register(self, request)

    monkeypatch.setattr(ndfleet.plans.build.RecordingMonitor, "RegisterResource", recording)
    run_plan(stack_from(CONFIG))
    assert {name: changes for name, changes in ignored.items()} == {
        "test-burst-vmss": ["sku.capacity"],
        "test-ib00-vmss": [],
    }
