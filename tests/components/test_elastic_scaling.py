"""An elastic island's Azure side under the mocks (docs/elastic.md): the scale set has the fixed name the controller's
programs address, starts empty and is deployed later with the capacity it has live; the controller's identity gets
one custom role with exactly the programs' actions, assigned at each elastic scale set and nowhere else."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import pytest

import ndfleet.plans.build
from ndfleet.components import ib_island
from ndfleet.components.elastic_scaling import ELASTIC_ACTIONS
from ndfleet.plans.build import GET_SCALE_SET, Plan, run_plan
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
    role = one(plan, ROLE_DEFINITION, "elastic")
    assert role.inputs["permissions"] == [{"actions": list(ELASTIC_ACTIONS)}]
    assert role.inputs["assignableScopes"] == [role.inputs["scope"]]
    assert role.inputs["scope"].endswith("/resourceGroups/test-net-rg")


def test_the_scaling_role_is_assigned_at_the_elastic_scale_set_and_its_linked_resources_only(plan: Plan) -> None:
    role = one(plan, ROLE_DEFINITION, "elastic")
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
    actions = one(plan, ROLE_DEFINITION, "elastic").inputs["permissions"][0]["actions"]
    assert "Microsoft.Network/virtualNetworks/subnets/join/action" in actions
    assert "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action" in actions


def test_the_role_name_is_unique_in_the_tenant(plan: Plan) -> None:
    """Role names are unique per Entra tenant: the name carries the subscription and the resource group."""
    role = one(plan, ROLE_DEFINITION, "elastic")
    subscription = role.inputs["scope"].split("/")[2]
    assert role.inputs["roleName"].endswith(f"; test-net-rg in {subscription})")


def test_a_stack_without_elastic_islands_has_no_scaling_role() -> None:
    roles = of_type(plan_of(base_config(scheduler="slurm")), ROLE_DEFINITION)
    assert [r for r in roles if "elastic" in r.name] == []


def _registrations(monkeypatch: pytest.MonkeyPatch, live: Any) -> dict[str, tuple[list[str], Any]]:
    """Plan CONFIG with `live` answering the scale-set GET (a dict: the scale set as Azure returns it; a string: the
    provider's error), and return each scale set's (ignoreChanges, sku.capacity) as registered."""
    seen: dict[str, tuple[list[str], Any]] = {}
    register = ndfleet.plans.build.RecordingMonitor.RegisterResource
    call = ndfleet.plans.build.RecordingMocks.call

    def recording(self: Any, request: Any) -> Any:
        if request.type == VMSS:
            capacity = dict(request.object)["sku"]["capacity"]
            seen[request.name] = (list(request.ignoreChanges), capacity)
        return register(self, request)

    def answering(self: Any, args: Any) -> Any:
        if args.token != GET_SCALE_SET:
            return call(self, args)
        assert (args.args["resourceGroupName"], args.args["vmScaleSetName"]) == ("test-net-rg", "test-burst-vmss")
        return ({}, [("vmScaleSetName", live)]) if isinstance(live, str) else (live, [])

    monkeypatch.setattr(ndfleet.plans.build.RecordingMonitor, "RegisterResource", recording)
    monkeypatch.setattr(ndfleet.plans.build.RecordingMocks, "call", answering)
    run_plan(stack_from(CONFIG))
    return seen


def test_a_later_pulumi_up_sends_the_capacity_the_scale_set_has_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """pulumi-azure-native updates with a full PUT whose sku.capacity wins: the program sends the live capacity
    (3 VMs Slurm created), not the 0 it was created with, and no ignoreChanges (which would send the 0 kept in
    Pulumi's state); a fixed island keeps its configured size."""
    live = {"sku": {"name": "Standard_ND96isr_H100_v5", "tier": "Standard", "capacity": 3}}
    assert _registrations(monkeypatch, live) == {"test-burst-vmss": ([], 3), "test-ib00-vmss": ([], 2)}


def test_the_first_deployment_creates_the_elastic_scale_set_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _registrations(monkeypatch, "GET .../test-burst-vmss: RESPONSE 404: 404 Not Found, ERROR CODE: "
                                       "ResourceNotFound")  # fmt: skip
    assert seen["test-burst-vmss"] == ([], 0)


def test_a_capacity_that_cannot_be_read_stops_the_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never a guessed capacity: a failed read (throttled here) is a named error that stops the program."""
    with pytest.raises(Exception, match="(?s)test-burst-vmss.*could not be read.*TooManyRequests"):
        _registrations(monkeypatch, "RESPONSE 429: Too Many Requests, ERROR CODE: TooManyRequests")


@pytest.mark.parametrize(("answer", "expected"), [
    (SimpleNamespace(sku=SimpleNamespace(capacity=3.0)), 3),  # a number crosses Pulumi's RPC as a double
    (SimpleNamespace(sku=SimpleNamespace(capacity=3)), 3),
    (SimpleNamespace(sku=SimpleNamespace(capacity="3")), "sku.capacity = '3'"),
    (SimpleNamespace(sku=SimpleNamespace(capacity=2.5)), "sku.capacity = 2.5"),
    (SimpleNamespace(sku=SimpleNamespace(capacity=-1)), "sku.capacity = -1"),
    (SimpleNamespace(sku=SimpleNamespace(capacity=True)), "sku.capacity = True"),
    (SimpleNamespace(sku=None), "sku.capacity = None"),
    (RuntimeError("GET ...: RESPONSE 404: 404 Not Found, ERROR CODE: ResourceGroupNotFound"), 0),
    (RuntimeError("RESPONSE 403: 403 Forbidden, ERROR CODE: AuthorizationFailed"), "could not be read"),
])  # fmt: skip
def test_the_live_capacity_is_a_whole_number_or_a_named_error(
    monkeypatch: pytest.MonkeyPatch, answer: Any, expected: int | str
) -> None:
    def get(**kwargs: str) -> Any:
        assert kwargs == {"resource_group_name": "rg", "vm_scale_set_name": "x-burst-vmss"}
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(ib_island.compute, "get_virtual_machine_scale_set", get)
    if isinstance(expected, int):
        assert ib_island.live_capacity("rg", "x-burst-vmss", when_absent=0) == expected
    else:
        with pytest.raises(ValueError, match=re.escape(expected)) as err:
            ib_island.live_capacity("rg", "x-burst-vmss", when_absent=0)
        assert "x-burst-vmss" in str(err.value)


def test_an_elastic_scale_set_removes_its_newest_vms_first(plan: Plan) -> None:
    """A racing capacity can then only remove VMs created after the program read it (docs/elastic.md)."""
    assert one(plan, VMSS, "burst").inputs["scaleInPolicy"] == {"rules": ["NewestVM"]}
    assert "scaleInPolicy" not in one(plan, VMSS, "ib00").inputs
