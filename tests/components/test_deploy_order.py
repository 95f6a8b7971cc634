"""Deploy order (issue 13): storage writes one at a time, the lock last, and nodes only after what they need at
boot. Read from the plan's `dependsOn`, which is what the engine waits for."""

from __future__ import annotations

import json

import pytest

from ndfleet.plan import Plan, PlannedResource
from tests.conftest import (
    ACCOUNT,
    BLOB_SERVICE,
    CONTAINER,
    LOCK,
    LUSTRE,
    PRIVATE_ENDPOINT,
    ROLE,
    VMSS,
    of_type,
    one,
)

DNS_GROUP = "azure-native:network:PrivateDnsZoneGroup"
DNS_LINK = "azure-native:privatedns:VirtualNetworkLink"


def _waits_for(plan: Plan) -> dict[str, set[str]]:
    """name -> every resource it waits for, directly or through others."""
    direct = {r.name: set(r.depends_on) for r in plan.resources}
    closed: dict[str, set[str]] = {}

    def walk(name: str) -> set[str]:
        if name not in closed:
            closed[name] = set()
            for dep in direct.get(name, ()):
                closed[name] |= {dep, *walk(dep)}
        return closed[name]

    return {name: walk(name) for name in direct}


def _account_writes(plan: Plan) -> list[PlannedResource]:
    """Everything that writes to the blob account, in the order the program promises."""
    containers = of_type(plan, CONTAINER)
    by_name = {r.name: r for r in containers}
    # containers are chained in the configured order: datasets, then checkpoints
    ordered = [by_name[n] for n in sorted(by_name, key=lambda n: ("checkpoints" in n, n))]
    account_lock = next(r for r in of_type(plan, LOCK) if r.name.endswith("-account-lock"))
    return [
        one(plan, BLOB_SERVICE),
        *ordered,
        one(plan, PRIVATE_ENDPOINT),
        one(plan, DNS_GROUP),
        one(plan, ROLE),
        account_lock,
    ]


def test_storage_writes_run_one_after_another_lock_last(dev_plan: Plan) -> None:
    waits = _waits_for(dev_plan)
    chain = _account_writes(dev_plan)
    assert [r.type for r in chain][:2] == [BLOB_SERVICE, CONTAINER]
    for earlier, later in zip(chain, chain[1:], strict=False):
        assert earlier.name in waits[later.name], f"{later.name} does not wait for {earlier.name}"


def test_every_account_write_waits_for_the_account(dev_plan: Plan) -> None:
    waits = _waits_for(dev_plan)
    account = one(dev_plan, ACCOUNT).name
    assert all(account in waits[r.name] for r in _account_writes(dev_plan))


def test_the_lock_waits_for_everything_else_on_the_account(dev_plan: Plan) -> None:
    waits = _waits_for(dev_plan)
    lock = _account_writes(dev_plan)[-1]
    others = {r.name for r in _account_writes(dev_plan)[:-1]}
    assert others <= waits[lock.name]
    assert not any(lock.name in waits[name] for name in others)


@pytest.mark.parametrize("needed", [PRIVATE_ENDPOINT, DNS_GROUP, DNS_LINK, ROLE])
def test_scale_sets_wait_for_what_nodes_need_at_boot(zonal_lustre_plan: Plan, needed: str) -> None:
    waits = _waits_for(zonal_lustre_plan)
    target = one(zonal_lustre_plan, needed).name
    for vmss in of_type(zonal_lustre_plan, VMSS):
        assert target in vmss.depends_on, f"{vmss.name} does not wait for {target}"
    assert not any(target in waits[v.name] and v.name in waits[target] for v in of_type(zonal_lustre_plan, VMSS))


def test_lustre_lock_comes_after_the_file_system(zonal_lustre_plan: Plan) -> None:
    lock = next(r for r in of_type(zonal_lustre_plan, LOCK) if r.name.endswith("-lustre-lock"))
    assert one(zonal_lustre_plan, LUSTRE).name in lock.depends_on


def test_depends_on_is_in_the_json_sorted(dev_plan: Plan) -> None:
    doc = json.loads(dev_plan.to_json())
    vmss = next(r for r in doc["resources"] if r["type"] == VMSS)
    assert vmss["dependsOn"] == sorted(vmss["dependsOn"])
    assert one(dev_plan, ROLE).name in vmss["dependsOn"]
    assert all(isinstance(r["dependsOn"], list) for r in doc["resources"])
