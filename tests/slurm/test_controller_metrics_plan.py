"""The Slurm controller publishes every node's Slurm state (docs/operations.md): under Pulumi's mocks, its own
identity may publish through the stack's data collection rule and nothing wider, and its VM carries the tags its
metrics agent reads (ingestion endpoint, rule immutable id); with monitoring off it has neither."""

from __future__ import annotations

from typing import Any

import pytest
from ndfleet_node.names import TAG_METRICS_DCR, TAG_METRICS_ENDPOINT

from ndfleet.plans.build import Plan, PlannedResource, _fake_uuid
from ndfleet.stackconfig.profiles import MONITORING_METRICS_PUBLISHER_ROLE_ID
from tests.conftest import ROLE, VMSS, base_config, of_type, one, plan_of

VM = "azure-native:compute:VirtualMachine"
DCR = "azure-native:monitor:DataCollectionRule"


def slurm_config(monitoring: bool) -> dict[str, Any]:
    return base_config(scheduler="slurm", monitoring={"enabled": monitoring, "emails": ["oncall@example.com"]})


@pytest.fixture(scope="module")
def plan_on() -> Plan:
    return plan_of(slurm_config(monitoring=True))


@pytest.fixture(scope="module")
def plan_off() -> Plan:
    return plan_of(slurm_config(monitoring=False))


def controller_grants(plan: Plan) -> list[PlannedResource]:
    principal = _fake_uuid("test-slurm-ctl-id", "principal")
    return [r for r in of_type(plan, ROLE) if r.inputs["principalId"] == principal]


def publisher_grants(plan: Plan) -> list[PlannedResource]:
    return [
        r for r in controller_grants(plan)
        if r.inputs["roleDefinitionId"].endswith("/" + MONITORING_METRICS_PUBLISHER_ROLE_ID)
    ]  # fmt: skip


def test_controller_may_publish_through_the_rule_only(plan_on: Plan) -> None:
    (grant,) = publisher_grants(plan_on)
    assert grant.inputs["scope"].endswith("/dataCollectionRules/" + one(plan_on, DCR).name)
    assert grant.inputs["principalType"] == "ServicePrincipal"


def test_controller_vm_waits_for_its_publisher_grant(plan_on: Plan) -> None:
    (grant,) = publisher_grants(plan_on)
    assert grant.name in one(plan_on, VM, "slurm-ctl-vm").depends_on


def test_controller_vm_tells_its_agent_where_to_write(plan_on: Plan) -> None:
    tags = one(plan_on, VM, "slurm-ctl-vm").inputs["tags"]
    nodes = one(plan_on, VMSS).inputs["tags"]
    # The same values the compute scale sets get.
    assert tags[TAG_METRICS_ENDPOINT] == nodes[TAG_METRICS_ENDPOINT] and tags[TAG_METRICS_ENDPOINT].startswith("https://")
    assert tags[TAG_METRICS_DCR] == nodes[TAG_METRICS_DCR] and tags[TAG_METRICS_DCR].startswith("dcr-")


def test_login_nodes_get_no_metrics_settings(plan_on: Plan) -> None:
    for vm in of_type(plan_on, VM):
        if "login" in vm.name:
            assert TAG_METRICS_ENDPOINT not in vm.inputs["tags"], vm.name


def test_monitoring_off_gives_the_controller_neither_grant_nor_tags(plan_off: Plan) -> None:
    assert publisher_grants(plan_off) == []
    assert controller_grants(plan_off)  # its Key Vault grants are still there: the filter finds the controller
    tags = one(plan_off, VM, "slurm-ctl-vm").inputs["tags"]
    assert TAG_METRICS_ENDPOINT not in tags and TAG_METRICS_DCR not in tags


def test_monitoring_on_or_off_never_rebuilds_the_controller(plan_on: Plan, plan_off: Plan) -> None:
    """customData is create-only: the agent ships either way, its configuration travels in userData."""
    on, off = one(plan_on, VM, "slurm-ctl-vm"), one(plan_off, VM, "slurm-ctl-vm")
    assert on.inputs["osProfile"]["customData"] == off.inputs["osProfile"]["customData"]
    assert on.inputs["userData"] != off.inputs["userData"]
