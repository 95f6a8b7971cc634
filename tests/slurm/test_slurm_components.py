"""The Slurm cluster's Azure resources under Pulumi's mock runtime: private, least privilege, data protected."""

from __future__ import annotations

import base64
import gzip
import json

import pytest
from ndfleet_node.names import TAG_NFS_ACCOUNT, TAG_VAULT

from ndfleet.plans import plandiff
from ndfleet.plans.build import MOCK_SECRET_PREFIX, Plan
from ndfleet.plans.policy_rules import evaluate_plan, has_mandatory
from tests.conftest import IDENTITY, LOCK, PRIVATE_ENDPOINT, ROLE, VMSS, base_config, dig, of_type, one, plan_of

VM = "azure-native:compute:VirtualMachine"
NIC = "azure-native:network:NetworkInterface"
DISK = "azure-native:compute:Disk"
VAULT = "azure-native:keyvault:Vault"
SECRET = "azure-native:keyvault:Secret"
MYSQL = "azure-native:dbformysql:Server"
MYSQL_DB = "azure-native:dbformysql:Database"
SHARE = "azure-native:storage:FileShare"
ACCOUNT = "azure-native:storage:StorageAccount"
ZONE = "azure-native:privatedns:PrivateZone"
SECRETS_USER = "4633458b-17de-408a-b874-0445c86b69e6"


@pytest.fixture(scope="module")
def slurm_plan() -> Plan:
    return plan_of(base_config(scheduler="slurm", bastion=True, slurm={"loginCount": 2}), "dev")


def test_no_slurm_resources_without_the_scheduler() -> None:
    plan = plan_of(base_config(), "dev")
    assert not [r for r in plan.resources if r.type in (VM, VAULT, MYSQL, SHARE)]
    assert "slurm" not in plan.outputs


def test_controller_and_logins_are_private_with_static_addresses(slurm_plan: Plan) -> None:
    nics = of_type(slurm_plan, NIC)
    assert len(nics) == 3
    for nic in nics:
        (ipc,) = nic.inputs["ipConfigurations"]
        assert "publicIPAddress" not in ipc
        assert ipc["privateIPAllocationMethod"] == "Static"
    assert sorted(n.inputs["ipConfigurations"][0]["privateIPAddress"] for n in nics) == [
        "10.40.255.252", "10.40.255.253", "10.40.255.254"]
    for vm in of_type(slurm_plan, VM):
        linux = dig(vm.inputs, "osProfile.linuxConfiguration")
        assert linux["disablePasswordAuthentication"] is True
        assert "adminPassword" not in vm.inputs["osProfile"]


def test_each_machine_reads_only_the_secrets_it_needs(slurm_plan: Plan) -> None:
    secrets = {s.name: s for s in of_type(slurm_plan, SECRET)}
    names = {s.inputs["secretName"] for s in secrets.values()}
    parts = {n for n in names if n.startswith("ndfleet-bundle-")}  # the compute nodes' bundle (docs/bootstrap.md)
    assert names - parts == {"munge-key", "slurmdbd-password"} and parts
    grants = [r for r in of_type(slurm_plan, ROLE) if r.inputs["roleDefinitionId"].endswith(SECRETS_USER)]
    by_scope: dict[str, int] = {}
    for grant in grants:
        scope = grant.inputs["scope"]
        assert "/secrets/" in scope, f"{grant.name}: scope {scope} is wider than one secret"
        by_scope[scope.rsplit("/", 1)[1]] = by_scope.get(scope.rsplit("/", 1)[1], 0) + 1
    # munge key: controller, 2 logins, the compute nodes; database password: the controller only; each part of the
    # bundle: the compute nodes only.
    assert by_scope == {"munge-key": 4, "slurmdbd-password": 1, **{part: 1 for part in parts}}
    assert len(of_type(slurm_plan, IDENTITY)) == 4  # nodes, controller, 2 logins


def test_secrets_never_reach_the_plan(slurm_plan: Plan) -> None:
    text = slurm_plan.to_json()
    assert MOCK_SECRET_PREFIX not in text
    assert one(slurm_plan, MYSQL).inputs["administratorLoginPassword"] == "[secret]"
    for secret in of_type(slurm_plan, SECRET):
        if secret.inputs["secretName"].startswith("ndfleet-bundle-"):
            # A part of the compute nodes' bundle: the node program and its files, no secret (the same bytes went in
            # userData before), kept in the vault for its size (docs/bootstrap.md).
            assert secret.inputs["properties"]["contentType"].startswith("ndfleet node bundle")
            continue
        assert "[secret]" in json.dumps(secret.inputs["properties"])
    for vm in of_type(slurm_plan, VM):
        user_data = base64.b64decode(vm.inputs["osProfile"]["customData"])
        assert MOCK_SECRET_PREFIX.encode() not in gzip.decompress(user_data)


def test_data_stores_are_private_protected_and_locked(slurm_plan: Plan) -> None:
    vault = one(slurm_plan, VAULT)
    props = vault.inputs["properties"]
    assert props["enableRbacAuthorization"] is True and props["enablePurgeProtection"] is True
    assert props["publicNetworkAccess"] == "Disabled"
    mysql = one(slurm_plan, MYSQL)
    assert mysql.inputs["network"] == {"publicNetworkAccess": "Disabled"}
    nfs = next(a for a in of_type(slurm_plan, ACCOUNT) if a.inputs["kind"] == "FileStorage")
    assert nfs.inputs["publicNetworkAccess"] == "Disabled" and nfs.inputs["allowSharedKeyAccess"] is False
    assert {s.inputs["shareName"]: s.inputs["enabledProtocols"] for s in of_type(slurm_plan, SHARE)} == {
        "home": "NFS", "shared": "NFS"}
    disk = one(slurm_plan, DISK)
    for res in (vault, mysql, one(slurm_plan, MYSQL_DB), nfs, disk, *of_type(slurm_plan, SHARE)):
        assert res.protect, f"{res.type} {res.name} is not protected"
    locked = {lock.inputs["scope"].rsplit("/", 1)[1] for lock in of_type(slurm_plan, LOCK)
              if lock.inputs["level"] == "CanNotDelete"}
    physical = [vault.inputs["vaultName"], mysql.inputs["serverName"], nfs.inputs["accountName"], disk.name]
    assert set(physical) <= locked, f"not locked: {set(physical) - locked}"


def test_every_service_has_a_private_endpoint_and_dns_zone(slurm_plan: Plan) -> None:
    groups = sorted(pe.inputs["privateLinkServiceConnections"][0]["groupIds"][0]
                    for pe in of_type(slurm_plan, PRIVATE_ENDPOINT))
    assert groups == ["blob", "file", "mysqlServer", "vault"]
    zones = {z.inputs["privateZoneName"] for z in of_type(slurm_plan, ZONE)}
    assert {"privatelink.vaultcore.azure.net", "privatelink.mysql.database.azure.com",
            "privatelink.file.core.windows.net"} <= zones


def test_nodes_learn_the_vault_and_share_from_their_tags(slurm_plan: Plan) -> None:
    tags = one(slurm_plan, VMSS).inputs["tags"]
    assert tags[TAG_VAULT] == one(slurm_plan, VAULT).inputs["vaultName"]
    assert tags[TAG_NFS_ACCOUNT].startswith("nf")


def test_outputs_say_how_to_connect(slurm_plan: Plan) -> None:
    out = slurm_plan.outputs["slurm"]
    assert out["loginAddresses"] == ["10.40.255.253", "10.40.255.252"]
    assert "az network bastion ssh" in out["connect"] and "10.40.255.253" in out["connect"]
    assert out["partitions"] == ["ib00"]


def test_the_slurm_plan_keeps_every_mandatory_policy(slurm_plan: Plan) -> None:
    assert not has_mandatory(evaluate_plan(slurm_plan.as_json()))


def _without(plan: Plan, rtype: str) -> dict[str, object]:
    doc = json.loads(plan.to_json())
    doc["resources"] = [r for r in doc["resources"] if r["type"] != rtype]
    return doc


@pytest.mark.parametrize("rtype", [MYSQL, VAULT, SHARE, DISK])
def test_diff_names_deleting_a_slurm_data_store_as_data_loss(slurm_plan: Plan, rtype: str) -> None:
    diff = plandiff.diff_plans(json.loads(slurm_plan.to_json()), _without(slurm_plan, rtype))
    assert any(c.rule == "data-deleted" and c.resource_type == rtype for c in diff.consequences)


def test_diff_says_when_the_controller_is_rebuilt(slurm_plan: Plan) -> None:
    head = json.loads(slurm_plan.to_json())
    controller = next(r for r in head["resources"] if r["type"] == VM and "-ctl-" in r["name"])
    controller["inputs"]["osProfile"]["computerName"] = "renamed"
    diff = plandiff.diff_plans(json.loads(slurm_plan.to_json()), head)
    assert [(c.rule, c.resource_name) for c in diff.consequences] == [("vm-os-profile", controller["name"])]


def test_scaling_an_island_does_not_rebuild_the_controller() -> None:
    base = plan_of(base_config(scheduler="slurm", nodes=2), "dev")
    head = plan_of(base_config(scheduler="slurm", nodes=6), "dev")
    diff = plandiff.diff_plans(json.loads(base.to_json()), json.loads(head.to_json()))
    assert [c.rule for c in diff.consequences] == ["island-scale-out"]
