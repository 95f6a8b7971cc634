"""Deploy order (issue 13): storage writes one at a time, the lock last, and nodes only after what they need at
boot. Read from the plan's `dependsOn`, which is what the engine waits for."""

from __future__ import annotations

import json

import pytest

from ndfleet.plans.build import Plan, PlannedResource
from tests.conftest import (
    ACCOUNT,
    BLOB_SERVICE,
    CONTAINER,
    LOCK,
    LUSTRE,
    PRIVATE_ENDPOINT,
    ROLE,
    VMSS,
    base_config,
    of_type,
    one,
    plan_of,
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


# Slurm, monitoring and impact reporting (issue 17): every machine waits for the private endpoints it reaches at
# first boot, their DNS and its role assignments; the NFS account's writes run one after another, its lock last.
VM = "azure-native:compute:VirtualMachine"
FILE_SHARE = "azure-native:storage:FileShare"


@pytest.fixture(scope="module")
def full_plan() -> Plan:
    return plan_of(
        base_config(
            scheduler="slurm",
            monitoring={"enabled": True, "emails": ["oncall@example.com"]},
            health={"impactReporting": True},
        )
    )


def _named(plan: Plan, suffix: str) -> str:
    (found,) = [r.name for r in plan.resources if r.name.endswith(suffix)]
    return found


# (what the machine reaches, resource name suffixes it must wait for)
NODE_NEEDS = [
    ("Key Vault private endpoint", "-secrets-kv-pe"),
    ("Key Vault DNS zone group", "-secrets-kv-dns-group"),
    ("Key Vault DNS VNet link", "-secrets-kv-dns-link"),
    ("file-share private endpoint", "-shared-file-pe"),
    ("file-share DNS zone group", "-shared-file-dns-group"),
    ("file-share DNS VNet link", "-shared-file-dns-link"),
    ("munge-key role assignment", "-slurm-nodes-munge"),
    ("Azure Monitor private endpoint", "-mon-ampls-pe"),
    ("Azure Monitor DNS zone group", "-mon-ampls-dns-group"),
    ("Azure Monitor DNS VNet link", "-mon-monitor-dns-link"),
    ("data collection endpoint in the scope", "-mon-ampls-dce"),
    ("Monitoring Metrics Publisher role assignment", "-mon-nodes-publish"),
    ("Impact Reporter role assignment", "-impact-reporter"),
    ("blob private endpoint", "-data-blob-pe"),
    ("blob role assignment", "-data-blob-data"),
]
HOST_NEEDS = [n for n in NODE_NEEDS if n[1].startswith(("-secrets-", "-shared-"))]


@pytest.mark.parametrize(("what", "suffix"), NODE_NEEDS, ids=[n[0] for n in NODE_NEEDS])
def test_scale_sets_wait_for_slurm_and_monitoring_boot_needs(full_plan: Plan, what: str, suffix: str) -> None:
    target = _named(full_plan, suffix)
    for vmss in of_type(full_plan, VMSS):
        assert target in vmss.depends_on, f"{vmss.name} does not wait for the {what} ({target})"


@pytest.mark.parametrize(("what", "suffix"), HOST_NEEDS, ids=[n[0] for n in HOST_NEEDS])
def test_controller_and_login_wait_for_vault_and_share(full_plan: Plan, what: str, suffix: str) -> None:
    target = _named(full_plan, suffix)
    for vm in of_type(full_plan, VM):
        assert target in vm.depends_on, f"{vm.name} does not wait for the {what} ({target})"


def test_each_slurm_machine_waits_for_its_own_secret_role_assignments(full_plan: Plan) -> None:
    for vm in of_type(full_plan, VM):
        host = vm.name.removesuffix("-vm")
        grants = [r.name for r in of_type(full_plan, ROLE) if r.name.startswith(f"{host}-secret-")]
        assert grants and set(grants) <= set(vm.depends_on), vm.name


def test_controller_waits_for_the_database_private_endpoint(full_plan: Plan) -> None:
    controller = one(full_plan, VM, "-ctl-")
    for suffix in ("-accounting-mysql-pe", "-accounting-mysql-dns-group", "-accounting-mysql-dns-link"):
        assert _named(full_plan, suffix) in controller.depends_on


def test_nfs_account_writes_run_one_after_another_lock_last(full_plan: Plan) -> None:
    waits = _waits_for(full_plan)
    chain = [
        _named(full_plan, "-shared-account"),
        _named(full_plan, "-shared-home"),
        _named(full_plan, "-shared-shared"),
        _named(full_plan, "-shared-file-pe"),
        _named(full_plan, "-shared-file-dns-group"),
        _named(full_plan, "-shared-account-lock"),
    ]
    for earlier, later in zip(chain, chain[1:], strict=False):
        assert earlier in waits[later], f"{later} does not wait for {earlier}"


@pytest.mark.parametrize("service", ["-secrets-kv", "-accounting-mysql"])
def test_slurm_data_service_locks_come_after_their_private_link(full_plan: Plan, service: str) -> None:
    lock = next(r for r in of_type(full_plan, LOCK) if r.name.endswith(f"{service}-lock"))
    assert {_named(full_plan, f"{service}-pe"), _named(full_plan, f"{service}-dns-group")} <= set(lock.depends_on)


def test_no_boot_dependency_waits_for_a_machine(full_plan: Plan) -> None:
    waits = _waits_for(full_plan)
    machines = {r.name for r in [*of_type(full_plan, VMSS), *of_type(full_plan, VM)]}
    for machine in machines:
        for needed in full_plan.resources:
            if needed.name in waits[machine]:
                assert not machines & waits[needed.name], f"{needed.name} waits for a machine: a cycle"
