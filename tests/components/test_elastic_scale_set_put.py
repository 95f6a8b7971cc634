"""A later deployment of an elastic island's scale set, as Azure answers it (docs/elastic.md, "`pulumi up` and Slurm
do not fight over capacity"): the twin's Resource Manager stand-in (tests/twin/arm.py) takes a PUT's capacity as the
new one and merges a PATCH's members only; the program's own PUT body (the plan's inputs, as pulumi-azure-native
sends them) with the capacity it reads live leaves the VMs Slurm created running. Driven without booting."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

import ndfleet.plans.build
from ndfleet.plans.build import GET_SCALE_SET, Plan, run_plan
from tests.conftest import VMSS, base_config, one, plan_of, stack_from
from tests.twin.arm import ARM_AUDIENCE, READ, SUBSCRIPTION, WRITE, ResourceManager, ScaleSet
from tests.twin.plan import ScaleSetTemplate, put_body

CONFIG = base_config(
    scheduler="slurm",
    nodes=None,
    islands=[{"name": "ib00", "nodes": 2}, {"name": "burst", "elastic": {"maxNodes": 4}}],
)
NAME = "test-burst-vmss"
CONTROLLER = "controller-client-id"
AUTH = {"Authorization": "Bearer token"}


def template(inputs: dict[str, Any]) -> ScaleSetTemplate:
    profile = inputs["virtualMachineProfile"]
    return ScaleSetTemplate(
        name=NAME, resource_group=inputs["resourceGroupName"], computer_name_prefix="test-burst-",
        custom_data=base64.b64decode(profile["osProfile"]["customData"]), user_data=profile.get("userData"),
        tags=dict(inputs["tags"]), island="burst", body=put_body(inputs),
    )  # fmt: skip


class Azure:
    """The stand-in with the plan's elastic scale set, what it booted and removed; every call allowed (the role is
    tests/components/test_elastic_linked_authorization.py's business)."""

    def __init__(self, inputs: dict[str, Any]) -> None:
        self.booted: list[tuple[str, bytes]] = []
        self.removed: list[str] = []
        self.arm = ResourceManager(
            scale_sets={NAME: ScaleSet(template(inputs))},
            grants={f"/subscriptions/{SUBSCRIPTION}": frozenset({WRITE, READ})},
            allowed_client_ids={CONTROLLER},
            tokens={"token": (CONTROLLER, ARM_AUDIENCE)}.get,
            boot=lambda t, i: self.booted.append((i.computer_name, t.custom_data)),
            remove=self.removed.append,
        )  # fmt: skip
        self.resource_id = self.arm.scale_sets[NAME].resource_id

    def call(self, method: str, body: Any = None) -> tuple[int, Any]:
        status, answer, _ = self.arm.handle(method, f"{self.resource_id}?api-version=2024-07-01", AUTH,
                                            b"" if body is None else json.dumps(body).encode())  # fmt: skip
        return status, answer

    def running(self) -> list[str]:
        return sorted(i.computer_name for i in self.arm.scale_sets[NAME].instances.values())


@pytest.fixture(scope="module")
def plan() -> Plan:
    return plan_of(CONFIG)


@pytest.fixture
def azure(plan: Plan) -> Azure:
    """Slurm's resume has scaled the island out to 3 VMs (the controller's PATCH)."""
    azure = Azure(one(plan, VMSS, "burst").inputs)
    assert azure.call("PATCH", {"sku": {"capacity": 3}})[0] == 200
    assert azure.running() == ["test-burst-000000", "test-burst-000001", "test-burst-000002"]
    return azure


def later_put(plan: Plan, capacity: int) -> dict[str, Any]:
    """The body of a later deployment that changes the scale set (a tag here), with the capacity it sends."""
    body = put_body(copy.deepcopy(one(plan, VMSS, "burst").inputs))
    body["tags"]["owner"] = "a later change"
    body["sku"]["capacity"] = capacity
    return body


def test_a_put_with_the_capacity_pulumi_kept_in_its_state_deletes_the_vms(plan: Plan, azure: Azure) -> None:
    """What `ignoreChanges: [sku.capacity]` sent: the 0 the scale set was created with. Azure deletes every VM."""
    assert azure.arm.deploy(NAME, later_put(plan, 0))[0] == 200
    assert (azure.running(), len(azure.removed)) == ([], 3)


def test_a_put_with_the_live_capacity_keeps_every_vm_and_changes_the_model(plan: Plan, azure: Azure) -> None:
    status, answer = azure.arm.deploy(NAME, later_put(plan, 3))
    assert (status, answer["sku"]["capacity"], answer["tags"]["owner"]) == (200, 3, "a later change")
    assert (azure.running(), azure.removed) == (["test-burst-000000", "test-burst-000001", "test-burst-000002"], [])


@pytest.mark.parametrize(("rules", "removed"), [(["NewestVM"], ["test-burst-000002", "test-burst-000001"]),
                                                (None, ["test-burst-000002", "test-burst-000001"]),
                                                (["OldestVM"], ["test-burst-000000", "test-burst-000001"])])
def test_a_lower_put_capacity_removes_vms_in_the_scale_in_policys_order(
    plan: Plan, azure: Azure, rules: list[str] | None, removed: list[str]
) -> None:
    body = later_put(plan, 1)
    body["properties"].pop("scaleInPolicy", None)
    if rules is not None:
        body["properties"]["scaleInPolicy"] = {"rules": rules}
    azure.arm.deploy(NAME, body)
    assert azure.removed == removed


@pytest.mark.parametrize("without", ["sku.capacity", "sku"])
def test_a_put_without_a_capacity_keeps_the_current_one(plan: Plan, azure: Azure, without: str) -> None:
    body = later_put(plan, 0)
    if without == "sku":
        del body["sku"]
    else:
        del body["sku"]["capacity"]
    assert azure.arm.deploy(NAME, body)[0] == 200
    assert len(azure.running()) == 3


def test_a_put_replaces_the_model_and_new_vms_boot_from_it(plan: Plan, azure: Azure) -> None:
    body = later_put(plan, 4)
    body["properties"]["virtualMachineProfile"]["osProfile"]["customData"] = base64.b64encode(b"new").decode()
    del body["tags"]["owner"]
    azure.arm.deploy(NAME, body)
    assert azure.booted[-1] == ("test-burst-000003", b"new")
    assert "owner" not in azure.call("GET")[1]["tags"]


def test_a_patch_merges_only_what_it_is_given(azure: Azure) -> None:
    status, answer = azure.call("PATCH", {"tags": {"owner": "patched"}})
    assert (status, answer["sku"]["capacity"], answer["tags"]["owner"]) == (200, 3, "patched")
    assert answer["properties"]["virtualMachineProfile"]["osProfile"]["computerNamePrefix"] == "test-burst-"
    assert answer["properties"]["scaleInPolicy"] == {"rules": ["NewestVM"]}
    assert len(azure.running()) == 3
    assert azure.call("PATCH", {"sku": {"capacity": 2}})[1]["sku"]["capacity"] == 2
    assert azure.removed == ["test-burst-000002"]


@pytest.mark.parametrize("body", [{"sku": {"capacity": -1}}, {"sku": {"capacity": "3"}}, {"sku": {"capacity": True}},
                                  {"sku": 3}, [1]])  # fmt: skip
def test_a_bad_capacity_is_refused_and_changes_nothing(azure: Azure, body: Any) -> None:
    status, answer = azure.call("PATCH", body)
    assert (status, answer["error"]["code"]) in ((400, "InvalidParameter"), (400, "InvalidRequestContent"))
    assert len(azure.running()) == 3


def test_a_put_without_location_is_refused_and_changes_nothing(plan: Plan, azure: Azure) -> None:
    body = later_put(plan, 3)
    del body["location"]
    assert azure.arm.deploy(NAME, body)[0] == 400
    assert azure.arm.scale_sets[NAME].model["tags"].get("owner") is None


def test_the_programs_next_deployment_keeps_the_vms_slurm_created(monkeypatch: pytest.MonkeyPatch, plan: Plan) -> None:
    """End to end without booting: Slurm scaled out to 3; the program, run again (its invoke answered by the
    stand-in's GET, as the provider reads Azure), puts its own body; the 3 VMs keep running."""
    azure = Azure(one(plan, VMSS, "burst").inputs)
    azure.call("PATCH", {"sku": {"capacity": 3}})
    call = ndfleet.plans.build.RecordingMocks.call

    def reading_azure(self: Any, args: Any) -> Any:
        return (azure.call("GET")[1], []) if args.token == GET_SCALE_SET else call(self, args)

    monkeypatch.setattr(ndfleet.plans.build.RecordingMocks, "call", reading_azure)
    again = run_plan(stack_from(CONFIG))
    inputs = one(again, VMSS, "burst").inputs
    inputs["tags"]["owner"] = "a later change"
    assert azure.arm.deploy(NAME, put_body(inputs))[0] == 200
    assert (len(azure.running()), azure.removed) == (3, [])
