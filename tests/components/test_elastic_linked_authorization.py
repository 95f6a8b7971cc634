"""The twin's Resource Manager stand-in judges the elastic scaler's role as Azure does (tests/twin/arm.py): the
call's action at the scale set, and on a write the linked resources, subnet join and identity assign
(`LinkedAuthorizationFailed` otherwise). Driven with the plan's own role definition and assignments, so the role
ndfleet deploys is what is judged; the same stand-in serves the twin's elastic tests."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from tests.conftest import base_config, plan_of
from tests.twin.arm import ARM_AUDIENCE, ResourceManager, ScaleSet
from tests.twin.plan import ROLE_DEFINITION, role_grants

CONFIG = base_config(
    scheduler="slurm",
    nodes=None,
    islands=[{"name": "ib00", "nodes": 2}, {"name": "burst", "elastic": {"maxNodes": 4}}],
)
CONTROLLER = "controller-client-id"


def plan_document(drop_actions: tuple[str, ...] = ()) -> dict[str, Any]:
    doc = json.loads(json.dumps(plan_of(CONFIG).as_json()))
    for r in doc["resources"]:
        if r["type"] == ROLE_DEFINITION:
            for perm in r["inputs"]["permissions"]:
                perm["actions"] = [a for a in perm["actions"] if a not in drop_actions]
    return doc


def resource_manager(doc: dict[str, Any]) -> tuple[ResourceManager, str]:
    from tests.twin.plan import ScaleSetTemplate

    vmss = next(r for r in doc["resources"] if r.get("inputs", {}).get("vmScaleSetName") == "test-burst-vmss")
    inputs, profile = vmss["inputs"], vmss["inputs"]["virtualMachineProfile"]
    template = ScaleSetTemplate(
        name="test-burst-vmss", resource_group=inputs["resourceGroupName"], computer_name_prefix="test-burst-",
        custom_data=b"", user_data=None, tags={}, island="burst",
        subnet_ids=tuple(ip["subnet"]["id"] for nic in profile["networkProfile"]["networkInterfaceConfigurations"]
                         for ip in nic["ipConfigurations"]),
        identity_ids=tuple(inputs["identity"]["userAssignedIdentities"]),
    )  # fmt: skip
    arm = ResourceManager(
        scale_sets={"test-burst-vmss": ScaleSet(template)},
        grants=role_grants(doc),
        allowed_client_ids={CONTROLLER},
        tokens={"token": (CONTROLLER, ARM_AUDIENCE)}.get,
        boot=lambda t, i: None,
        remove=lambda name: None,
    )
    return arm, ScaleSet(template).resource_id


def scale_out(arm: ResourceManager, resource_id: str) -> tuple[int, Any]:
    status, body, _ = arm.handle("PATCH", f"{resource_id}?api-version=2024-07-01", {"Authorization": "Bearer token"},
                                 json.dumps({"sku": {"capacity": 2}}).encode())  # fmt: skip
    return status, body


def test_the_planned_role_may_scale_out() -> None:
    arm, resource_id = resource_manager(plan_document())
    assert scale_out(arm, resource_id)[0] == 200
    assert len(arm.scale_sets["test-burst-vmss"].instances) == 2


@pytest.mark.parametrize("missing", ["Microsoft.Network/virtualNetworks/subnets/join/action",
                                     "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action"])
def test_a_role_without_a_linked_action_is_refused_as_azure_refuses_it(missing: str) -> None:
    arm, resource_id = resource_manager(plan_document(drop_actions=(missing,)))
    status, body = scale_out(arm, resource_id)
    assert (status, body["error"]["code"]) == (403, "LinkedAuthorizationFailed")
    assert missing in body["error"]["message"]
    assert arm.scale_sets["test-burst-vmss"].instances == {}


def test_a_role_assigned_only_at_the_scale_set_cannot_scale_out() -> None:
    """The linked actions must be granted where the subnet and identity are, not at the scale set."""
    doc = plan_document()
    arm, resource_id = resource_manager(doc)
    arm = replace(arm, grants={s: a for s, a in arm.grants.items() if s == resource_id})
    assert scale_out(arm, resource_id)[1]["error"]["code"] == "LinkedAuthorizationFailed"


def test_reading_needs_no_linked_action() -> None:
    arm, resource_id = resource_manager(plan_document())
    arm = replace(arm, grants={s: a for s, a in arm.grants.items() if s == resource_id})
    status, body, _ = arm.handle("GET", f"{resource_id}?api-version=2024-07-01", {"Authorization": "Bearer token"},
                                 b"")  # fmt: skip
    assert (status, body["sku"]["capacity"]) == (200, 0)
