"""The roll's Azure side under the mocks (docs/upgrades.md): the controller's identity gets one custom role with
exactly the roll's actions, assigned at every island's scale set (fixed and elastic) and nowhere else."""

from __future__ import annotations

import pytest

from ndfleet.components.roll_access import ROLL_ACTIONS
from ndfleet.plans.build import Plan
from tests.conftest import ROLE, VMSS, base_config, of_type, one, plan_of

ROLE_DEFINITION = "azure-native:authorization:RoleDefinition"
CONFIG = base_config(
    scheduler="slurm",
    nodes=None,
    islands=[{"name": "ib00", "nodes": 2}, {"name": "burst", "elastic": {"maxNodes": 4}}],
)


@pytest.fixture(scope="module")
def plan() -> Plan:
    return plan_of(CONFIG)


def test_the_roll_role_has_exactly_its_actions_and_no_write(plan: Plan) -> None:
    role = one(plan, ROLE_DEFINITION, "roll")
    assert role.inputs["permissions"] == [{"actions": list(ROLL_ACTIONS)}]
    assert "Microsoft.Compute/virtualMachineScaleSets/write" not in ROLL_ACTIONS
    assert role.inputs["assignableScopes"] == [role.inputs["scope"]]


def test_the_roll_role_is_assigned_at_every_islands_scale_set_only(plan: Plan) -> None:
    assigned = {r.name: r.inputs["scope"] for r in of_type(plan, ROLE) if r.name.startswith("test-roll-")}
    assert set(assigned) == {"test-roll-ib00", "test-roll-burst"}
    assert all("/virtualMachineScaleSets/" in scope for scope in assigned.values()), assigned
    assert len({one(plan, VMSS, island).name for island in ("ib00", "burst")}) == 2


def test_a_stack_without_slurm_has_no_roll_role() -> None:
    assert [r for r in of_type(plan_of(base_config()), ROLE_DEFINITION) if "roll" in r.name] == []
