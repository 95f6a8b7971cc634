"""Each component under Pulumi's mock runtime: what makes InfiniBand work, and the secure defaults.

Every assertion reads the inputs the program actually sent to the provider, so removing the property from
the component fails the test.
"""

from __future__ import annotations

import base64
import gzip
import ipaddress

from ndfleet.plans.build import Plan
from ndfleet.stackconfig.profiles import STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID
from ndfleet.stackconfig.summary import vcpu_quota
from tests.conftest import (
    ACCOUNT,
    BASTION,
    BLOB_SERVICE,
    CONTAINER,
    IDENTITY,
    LOCK,
    LUSTRE,
    NAT,
    NSG,
    PIP,
    PPG,
    PRIVATE_ENDPOINT,
    RESOURCE_GROUP,
    ROLE,
    SUBNET,
    VMSS,
    VNET,
    base_config,
    dig,
    of_type,
    one,
    plan_of,
)

# --- InfiniBand island scale sets ---------------------------------------------------------------------


def test_one_scale_set_per_island(zonal_lustre_plan: Plan) -> None:
    capacities = [dig(r.inputs, "sku.capacity") for r in of_type(zonal_lustre_plan, VMSS)]
    assert capacities == [100, 100, 50]


def test_scale_set_is_one_placement_group(dev_plan: Plan) -> None:
    assert one(dev_plan, VMSS).inputs["singlePlacementGroup"] is True


def test_scale_set_has_one_fault_domain(dev_plan: Plan) -> None:
    assert one(dev_plan, VMSS).inputs["platformFaultDomainCount"] == 1


def test_scale_set_does_not_overprovision(dev_plan: Plan) -> None:
    assert one(dev_plan, VMSS).inputs["overprovision"] is False


def test_scale_set_is_uniform_with_manual_upgrades(dev_plan: Plan) -> None:
    inputs = one(dev_plan, VMSS).inputs
    assert inputs["orchestrationMode"] == "Uniform"
    assert inputs["upgradePolicy"] == {"mode": "Manual"}


def test_scale_set_uses_the_vm_size_and_gen2_hpc_image(dev_plan: Plan) -> None:
    inputs = one(dev_plan, VMSS).inputs
    assert dig(inputs, "sku.name") == "Standard_ND96isr_H100_v5"
    assert dig(inputs, "virtualMachineProfile.storageProfile.imageReference") == {
        "publisher": "microsoft-dsvm",
        "offer": "ubuntu-hpc",
        "sku": "2204",
        "version": "latest",
    }


def test_scale_set_zone_when_set(zonal_lustre_plan: Plan, dev_plan: Plan) -> None:
    assert {tuple(r.inputs["zones"]) for r in of_type(zonal_lustre_plan, VMSS)} == {("2",)}
    assert "zones" not in one(dev_plan, VMSS).inputs


def test_proximity_placement_group_with_vm_size_intent(dev_plan: Plan) -> None:
    ppg = one(dev_plan, PPG)
    assert dig(ppg.inputs, "intent.vmSizes") == ["Standard_ND96isr_H100_v5"]
    assert one(dev_plan, VMSS).inputs["proximityPlacementGroup"]["id"].endswith(f"/{ppg.name}")


def test_proximity_placement_group_can_be_turned_off() -> None:
    plan = plan_of(base_config(proximityPlacementGroup=False))
    assert of_type(plan, PPG) == []
    assert "proximityPlacementGroup" not in one(plan, VMSS).inputs


def test_nodes_have_accelerated_networking_and_no_public_ip(dev_plan: Plan) -> None:
    nics = dig(one(dev_plan, VMSS).inputs, "virtualMachineProfile.networkProfile.networkInterfaceConfigurations")
    assert len(nics) == 1
    assert nics[0]["enableAcceleratedNetworking"] is True
    for ipconfig in nics[0]["ipConfigurations"]:
        assert "publicIPAddressConfiguration" not in ipconfig
        assert ipconfig["subnet"]["id"].endswith("/dev-net-compute") or "compute" in ipconfig["subnet"]["id"]


def test_ssh_key_only_login(dev_plan: Plan) -> None:
    linux = dig(one(dev_plan, VMSS).inputs, "virtualMachineProfile.osProfile.linuxConfiguration")
    assert linux["disablePasswordAuthentication"] is True
    keys = linux["ssh"]["publicKeys"]
    assert keys[0]["path"] == "/home/azureuser/.ssh/authorized_keys"
    assert keys[0]["keyData"].startswith("ssh-ed25519 ")
    assert "adminPassword" not in dig(one(dev_plan, VMSS).inputs, "virtualMachineProfile.osProfile")


def test_nodes_use_the_user_assigned_identity(dev_plan: Plan) -> None:
    identity = one(dev_plan, IDENTITY)
    vmss_identity = one(dev_plan, VMSS).inputs["identity"]
    assert vmss_identity["type"] == "UserAssigned"
    assert [i.rsplit("/", 1)[-1] for i in vmss_identity["userAssignedIdentities"]] == [identity.name]


def test_custom_data_is_base64_gzip_cloud_config(dev_plan: Plan) -> None:
    custom = dig(one(dev_plan, VMSS).inputs, "virtualMachineProfile.osProfile.customData")
    assert gzip.decompress(base64.b64decode(custom)).decode().startswith("#cloud-config")


def test_scale_set_tags_name_the_island(zonal_lustre_plan: Plan) -> None:
    islands = [r.inputs["tags"]["ndfleet:island"] for r in of_type(zonal_lustre_plan, VMSS)]
    assert islands == ["ib00", "ib01", "ib02"]


def test_user_tags_reach_every_taggable_resource(dev_plan: Plan) -> None:
    tagged = [r for r in dev_plan.resources if "tags" in r.inputs]
    assert len(tagged) >= 10
    assert all(r.inputs["tags"].get("owner") == "tests" for r in tagged)


def test_health_extension_probes_the_node_endpoint(dev_plan: Plan) -> None:
    extensions = dig(one(dev_plan, VMSS).inputs, "virtualMachineProfile.extensionProfile.extensions")
    health = [e for e in extensions if e["type"] == "ApplicationHealthLinux"]
    assert len(health) == 1
    assert health[0]["publisher"] == "Microsoft.ManagedServices"
    assert health[0]["settings"]["protocol"] == "http"
    assert health[0]["settings"]["port"] == 18300
    assert health[0]["settings"]["requestPath"] == "/health"
    assert health[0]["settings"]["gracePeriod"] >= 600


def test_automatic_repairs_replace_unhealthy_nodes(dev_plan: Plan) -> None:
    assert one(dev_plan, VMSS).inputs["automaticRepairsPolicy"] == {
        "enabled": True,
        "gracePeriod": "PT30M",
        "repairAction": "Replace",
    }


def test_repair_action_and_grace_come_from_the_stack() -> None:
    plan = plan_of(base_config(health={"repairAction": "Reimage", "repairGracePeriodMinutes": 60}))
    assert one(plan, VMSS).inputs["automaticRepairsPolicy"]["repairAction"] == "Reimage"
    assert one(plan, VMSS).inputs["automaticRepairsPolicy"]["gracePeriod"] == "PT60M"


def test_spot_priority_sets_eviction_and_price() -> None:
    profile = one(plan_of(base_config(priority="Spot")), VMSS).inputs["virtualMachineProfile"]
    assert profile["priority"] == "Spot"
    assert profile["evictionPolicy"] == "Delete"
    assert profile["billingProfile"] == {"maxPrice": -1}


def test_h200_plans_with_its_own_size() -> None:
    plan = plan_of(base_config(vmSize="Standard_ND96isr_H200_v5", nodes=16))
    assert dig(one(plan, VMSS).inputs, "sku.name") == "Standard_ND96isr_H200_v5"
    assert vcpu_quota(plan.spec) == {"standardNDISRH200V5Family": 1536}


# --- Network ------------------------------------------------------------------------------------------


def test_vnet_uses_the_configured_space(dev_plan: Plan) -> None:
    assert dig(one(dev_plan, VNET).inputs, "addressSpace.addressPrefixes") == ["10.40.0.0/16"]


def test_no_subnet_overlaps_the_rdma_range(zonal_lustre_plan: Plan) -> None:
    rdma = ipaddress.IPv4Network("172.16.0.0/16")
    for subnet in of_type(zonal_lustre_plan, SUBNET):
        assert not ipaddress.IPv4Network(subnet.inputs["addressPrefix"]).overlaps(rdma)


def test_nsg_denies_internet_inbound_and_allows_the_vnet(dev_plan: Plan) -> None:
    rules = {r["name"]: r for r in one(dev_plan, NSG).inputs["securityRules"]}
    deny = [r for r in rules.values() if r["access"] == "Deny" and r["direction"] == "Inbound"]
    assert any(r["sourceAddressPrefix"] == "Internet" for r in deny)
    allow = [r for r in rules.values() if r["access"] == "Allow" and r["direction"] == "Inbound"]
    assert any(r["sourceAddressPrefix"] == "VirtualNetwork" for r in allow)
    assert not any(r["sourceAddressPrefix"] in ("*", "Internet", "0.0.0.0/0") for r in allow)


def test_compute_subnet_goes_out_through_the_nat_gateway(dev_plan: Plan) -> None:
    compute = one(dev_plan, SUBNET, "compute")
    nat = one(dev_plan, NAT)
    assert compute.inputs["natGateway"]["id"].endswith(f"/{nat.name}")
    assert compute.inputs["defaultOutboundAccess"] is False
    assert compute.inputs["networkSecurityGroup"]["id"].endswith("/dev-net-nsg")


def test_nat_gateway_has_a_static_standard_ip(dev_plan: Plan) -> None:
    ip = one(dev_plan, PIP, "nat-ip")
    assert ip.inputs["publicIPAllocationMethod"] == "Static"
    assert ip.inputs["sku"]["name"] == "Standard"
    assert one(dev_plan, NAT).inputs["publicIpAddresses"][0]["id"].endswith(f"/{ip.name}")


def test_only_nat_and_bastion_have_public_ips(dev_plan: Plan) -> None:
    assert sorted(r.name for r in of_type(dev_plan, PIP)) == ["dev-net-bastion-ip", "dev-net-nat-ip"]


def test_bastion_with_tunnelling_when_enabled(dev_plan: Plan) -> None:
    bastion = one(dev_plan, BASTION)
    assert bastion.inputs["enableTunneling"] is True
    assert bastion.inputs["sku"] == {"name": "Standard"}
    assert one(dev_plan, SUBNET, "AzureBastionSubnet").inputs["subnetName"] == "AzureBastionSubnet"


def test_no_bastion_by_default() -> None:
    plan = plan_of(base_config())
    assert of_type(plan, BASTION) == []
    assert [r.name for r in of_type(plan, PIP)] == ["test-net-nat-ip"]


def test_given_resource_group_is_used_not_created() -> None:
    plan = plan_of(base_config(resourceGroupName="team-gpu-rg"))
    assert of_type(plan, RESOURCE_GROUP) == []
    assert one(plan, VMSS).inputs["resourceGroupName"] == "team-gpu-rg"


def test_lustre_gets_its_own_subnet(zonal_lustre_plan: Plan) -> None:
    lustre_subnet = one(zonal_lustre_plan, SUBNET, "lustre")
    assert one(zonal_lustre_plan, LUSTRE).inputs["filesystemSubnet"].endswith(f"/{lustre_subnet.inputs['subnetName']}")


# --- Storage ------------------------------------------------------------------------------------------


def test_storage_account_is_locked_down(dev_plan: Plan) -> None:
    inputs = one(dev_plan, ACCOUNT).inputs
    assert inputs["allowBlobPublicAccess"] is False
    assert inputs["allowSharedKeyAccess"] is False
    assert inputs["minimumTlsVersion"] == "TLS1_2"
    assert inputs["publicNetworkAccess"] == "Disabled"
    assert inputs["networkRuleSet"]["defaultAction"] == "Deny"


def test_storage_account_name_is_valid_and_stable(dev_plan: Plan) -> None:
    name = one(dev_plan, ACCOUNT).inputs["accountName"]
    assert 3 <= len(name) <= 24 and name.isalnum() and name.islower()
    assert (
        name == one(plan_of(base_config(bastion=True, tags={"owner": "tests"}), "dev"), ACCOUNT).inputs["accountName"]
    )


def test_storage_is_reached_through_a_private_endpoint(dev_plan: Plan) -> None:
    endpoint = one(dev_plan, PRIVATE_ENDPOINT)
    connection = endpoint.inputs["privateLinkServiceConnections"][0]
    assert connection["groupIds"] == ["blob"]
    assert connection["privateLinkServiceId"].endswith("/" + one(dev_plan, ACCOUNT).inputs["accountName"])
    assert endpoint.inputs["subnet"]["id"].endswith("/storage")


def test_blob_versioning_and_soft_delete(dev_plan: Plan) -> None:
    inputs = one(dev_plan, BLOB_SERVICE).inputs
    assert inputs["isVersioningEnabled"] is True
    assert inputs["deleteRetentionPolicy"] == {"enabled": True, "days": 14}
    assert inputs["containerDeleteRetentionPolicy"] == {"enabled": True, "days": 14}


def test_datasets_and_checkpoints_containers_are_private_and_protected(dev_plan: Plan) -> None:
    containers = of_type(dev_plan, CONTAINER)
    assert sorted(c.inputs["containerName"] for c in containers) == ["checkpoints", "datasets"]
    assert all(c.inputs["publicAccess"] == "None" and c.protect for c in containers)


def test_storage_account_is_protected_and_locked(dev_plan: Plan) -> None:
    account = one(dev_plan, ACCOUNT)
    assert account.protect is True
    locks = [lk for lk in of_type(dev_plan, LOCK) if lk.inputs["scope"].endswith("/" + account.inputs["accountName"])]
    assert [lk.inputs["level"] for lk in locks] == ["CanNotDelete"]


def test_managed_lustre_sku_capacity_protected_and_locked(zonal_lustre_plan: Plan) -> None:
    fs = one(zonal_lustre_plan, LUSTRE)
    assert fs.inputs["sku"] == {"name": "AMLFS-Durable-Premium-500"}
    assert fs.inputs["storageCapacityTiB"] == 16
    assert fs.inputs["zones"] == ["2"]
    assert fs.protect is True
    assert any(lk.inputs["scope"].endswith("/" + fs.name) for lk in of_type(zonal_lustre_plan, LOCK))


def test_no_lustre_unless_configured(dev_plan: Plan) -> None:
    assert of_type(dev_plan, LUSTRE) == []


# --- Node identity ------------------------------------------------------------------------------------


def test_node_identity_gets_blob_data_contributor_on_the_account_only(dev_plan: Plan) -> None:
    role = one(dev_plan, ROLE)
    account = one(dev_plan, ACCOUNT)
    assert role.inputs["scope"].endswith("/storageAccounts/" + account.inputs["accountName"])
    assert role.inputs["roleDefinitionId"].endswith("/roleDefinitions/" + STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID)
    assert role.inputs["principalType"] == "ServicePrincipal"
    assert len(of_type(dev_plan, ROLE)) == 1


# --- Components and outputs ---------------------------------------------------------------------------


def test_every_resource_is_parented_to_a_component(dev_plan: Plan) -> None:
    top = [r for r in dev_plan.resources if r.parent is None]
    assert [(r.type, r.name) for r in top] == [("ndfleet:cluster:Cluster", "dev")]
    components = {r.name for r in dev_plan.resources if r.type.startswith("ndfleet:")}
    assert all(r.parent in components for r in dev_plan.resources if r.parent is not None)


def test_outputs_name_each_island_and_its_node_count(zonal_lustre_plan: Plan) -> None:
    islands = zonal_lustre_plan.outputs["islands"]
    assert {k: v["nodeCount"] for k, v in islands.items()} == {"ib00": 100, "ib01": 100, "ib02": 50}
    assert all(v["scaleSetId"].startswith("/subscriptions/") for v in islands.values())


def test_outputs_carry_storage_endpoints_and_resource_group(dev_plan: Plan) -> None:
    outputs = dev_plan.outputs
    assert outputs["resourceGroupName"] == "dev-net-rg"
    assert outputs["storage"]["blobEndpoint"].startswith("https://nd") and outputs["storage"]["containers"] == [
        "datasets",
        "checkpoints",
    ]


def test_slurm_topology_selects_each_island_by_feature_not_by_host_names(zonal_lustre_plan: Plan) -> None:
    # Host names end in a base-36 instance id and change on repair: no node name may appear.
    lines = [ln for ln in zonal_lustre_plan.outputs["slurmTopology"].splitlines() if not ln.startswith("#")]
    assert lines == [
        "NodeSet=ns-ib00 Feature=island-ib00",
        "NodeSet=ns-ib01 Feature=island-ib01",
        "NodeSet=ns-ib02 Feature=island-ib02",
        "PartitionName=ib00 Nodes=ns-ib00 MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE",
        "PartitionName=ib01 Nodes=ns-ib01 MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE",
        "PartitionName=ib02 Nodes=ns-ib02 MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE",
        "JobSubmitPlugins=all_partitions",
    ]


def test_health_grace_period_outlasts_setup_and_full_validation(dev_plan: Plan) -> None:
    from ndfleet.nodefiles.bootstrap import validation_budget_s

    extension = dig(one(dev_plan, VMSS).inputs, "virtualMachineProfile.extensionProfile.extensions.0")
    assert extension["settings"]["gracePeriod"] >= validation_budget_s(dev_plan.spec)


def test_grace_period_shorter_than_validation_is_refused_before_any_resource() -> None:
    import pulumi
    import pytest

    from ndfleet.plans.build import execute_program
    from tests.conftest import stack_from

    stack = stack_from(base_config(health={"dcgmLevel": 3, "probeGracePeriodSeconds": 600}))
    with pytest.raises(pulumi.RunError, match=r"ndfleet:health.probeGracePeriodSeconds = 600: shorter than"):
        execute_program(stack)
    from pulumi.runtime.settings import get_monitor

    assert get_monitor().order == []  # type: ignore[attr-defined]


def test_node_identity_client_id_reaches_the_node_through_tags(dev_plan: Plan) -> None:
    tags = one(dev_plan, VMSS).inputs["tags"]
    identity = one(dev_plan, IDENTITY)
    assert tags["ndfleet:storage-account"] == one(dev_plan, ACCOUNT).inputs["accountName"]
    assert tags["ndfleet:identity-client-id"] and identity.name
