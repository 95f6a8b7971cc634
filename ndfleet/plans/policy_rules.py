"""The rules that guard an ndfleet cluster, as plain functions over (resource type, camelCase inputs).

The same functions run in three places: the Pulumi CrossGuard pack in policy/ (`pulumi preview --policy-pack
policy`), `ndfleet policy PLAN.json` and `ndfleet plan --policies` (offline, over the plan's resource inputs).
A rule's `check(resource_type, props)` returns the problems it finds (empty: the resource keeps the rule, or the
rule does not apply to that type). docs/policies.md lists the rules with their sources.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ndfleet.stackconfig.profiles import (
    DEFAULT_MAX_NODES_PER_ISLAND,
    HARD_MAX_NODES_PER_ISLAND,
    IMPACT_REPORTER_ROLE_ID,
    MONITORING_DATA_READER_ROLE_ID,
    MONITORING_METRICS_PUBLISHER_ROLE_ID,
    RDMA_RESERVED_CIDR,
    STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID,
)

MANDATORY = "mandatory"
ADVISORY = "advisory"

VMSS_TYPE = "azure-native:compute:VirtualMachineScaleSet"
VM_TYPE = "azure-native:compute:VirtualMachine"
VNET_TYPE = "azure-native:network:VirtualNetwork"
SUBNET_TYPE = "azure-native:network:Subnet"
NIC_TYPE = "azure-native:network:NetworkInterface"
STORAGE_ACCOUNT_TYPE = "azure-native:storage:StorageAccount"
ROLE_ASSIGNMENT_TYPE = "azure-native:authorization:RoleAssignment"

KEY_VAULT_SECRETS_USER_ROLE_ID = "4633458b-17de-408a-b874-0445c86b69e6"
# The only roles ndfleet grants, each on the one scope it needs (name, scope pattern, the scope in words): the node
# identity reads and writes blobs of its storage account, publishes metrics through the data collection rule and,
# with health.impactReporting, files impact reports (subscription-level resources: components/impact_reporting.py);
# Managed Grafana reads the Azure Monitor workspace.
LEAST_PRIVILEGE_ROLES: dict[str, tuple[str, str, str]] = {
    STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID: (
        "Storage Blob Data Contributor", r"/providers/Microsoft\.Storage/storageAccounts/[^/]+$", "one storage account"
    ),
    MONITORING_METRICS_PUBLISHER_ROLE_ID: (
        "Monitoring Metrics Publisher", r"/providers/Microsoft\.Insights/dataCollectionRules/[^/]+$",
        "one data collection rule",
    ),
    MONITORING_DATA_READER_ROLE_ID: (
        "Monitoring Data Reader", r"/providers/Microsoft\.Monitor/accounts/[^/]+$", "one Azure Monitor workspace"
    ),
    IMPACT_REPORTER_ROLE_ID: ("Impact Reporter", r"^/subscriptions/[^/]+$", "the subscription"),
    # Key Vault Secrets User (built-in role id): a Slurm host or the nodes read one secret (the munge key). The
    # vault segment is optional because the offline plan's mock ids leave it out.
    KEY_VAULT_SECRETS_USER_ROLE_ID: (
        "Key Vault Secrets User", r"/providers/Microsoft\.KeyVault/(vaults/[^/]+/)?secrets/[^/]+$",
        "one Key Vault secret",
    ),
}

MYSQL_SERVER_TYPE = "azure-native:dbformysql:Server"
KEY_VAULT_TYPE = "azure-native:keyvault:Vault"

# VM size names: ND-series (the InfiniBand training sizes) and every GPU family (N-series).
_ND_SIZE = re.compile(r"^Standard_ND", re.IGNORECASE)
_GPU_SIZE = re.compile(r"^Standard_N[A-Z]", re.IGNORECASE)

HEALTH_EXTENSION_PUBLISHER = "Microsoft.ManagedServices"
HEALTH_EXTENSION_TYPES = ("ApplicationHealthLinux", "ApplicationHealthWindows")
TLS_MINIMUM_OK = ("TLS1_2", "TLS1_3")

Props = Mapping[str, Any]
Check = Callable[[str, Props], list[str]]


@dataclass(frozen=True)
class Rule:
    id: str
    description: str
    enforcement: str  # MANDATORY | ADVISORY
    resource_types: tuple[str, ...]
    source: str
    fix: str
    check: Check


@dataclass(frozen=True)
class Violation:
    rule_id: str
    enforcement: str
    resource_type: str
    resource_name: str
    message: str
    fix: str
    source: str

    @property
    def mandatory(self) -> bool:
        return self.enforcement == MANDATORY


# ----------------------------------------------------------------------------------------------------------
# Helpers over camelCase props


def _get(props: Any, *path: str) -> Any:
    cur = props
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _list(value: Any) -> list[Any]:
    """A list from any sequence (CrossGuard hands lists over as read-only Sequence proxies), else []."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return []
    return list(value)


def _int(value: Any) -> int | None:
    """An integer from an int or an integral float (CrossGuard's props come through protobuf: numbers are floats)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def vm_size(resource_type: str, props: Props) -> str:
    """The VM size of a scale set (sku.name) or a VM (hardwareProfile.vmSize); '' for other resources."""
    if resource_type == VMSS_TYPE:
        return str(_get(props, "sku", "name") or "")
    if resource_type == VM_TYPE:
        return str(_get(props, "hardwareProfile", "vmSize") or "")
    return ""


def is_nd_scale_set(resource_type: str, props: Props) -> bool:
    return resource_type == VMSS_TYPE and bool(_ND_SIZE.match(vm_size(resource_type, props)))


def is_gpu_compute(resource_type: str, props: Props) -> bool:
    return resource_type in (VMSS_TYPE, VM_TYPE) and bool(_GPU_SIZE.match(vm_size(resource_type, props)))


def _os_profile(resource_type: str, props: Props) -> Any:
    if resource_type == VMSS_TYPE:
        return _get(props, "virtualMachineProfile", "osProfile")
    return _get(props, "osProfile")


def _nic_configs(resource_type: str, props: Props) -> list[Any]:
    if resource_type == VMSS_TYPE:
        return _list(_get(props, "virtualMachineProfile", "networkProfile", "networkInterfaceConfigurations"))
    return _list(_get(props, "networkProfile", "networkInterfaceConfigurations"))


def _extensions(resource_type: str, props: Props) -> list[Any]:
    if resource_type == VMSS_TYPE:
        return _list(_get(props, "virtualMachineProfile", "extensionProfile", "extensions"))
    return []


def _ext_field(ext: Any, key: str) -> Any:
    """An extension's field, flat (as ndfleet sends it) or under `properties` (ARM template form)."""
    if not isinstance(ext, Mapping):
        return None
    return ext.get(key) if key in ext else _get(ext, "properties", key)


def _networks(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in _list(value)]


# ----------------------------------------------------------------------------------------------------------
# The checks (each returns problems, [] when the resource keeps the rule or the rule does not apply)


def check_single_placement_group(resource_type: str, props: Props) -> list[str]:
    if not is_nd_scale_set(resource_type, props):
        return []
    value = props.get("singlePlacementGroup")
    if value is True:
        return []
    return [f"singlePlacementGroup is {value!r}: an ND-series scale set needs singlePlacementGroup: true for "
            "InfiniBand (false does not support it, and true -> false cannot be undone)"]


def check_fault_domain_count(resource_type: str, props: Props) -> list[str]:
    """Regional island: 1 (CycleCloud's setting). Zonal island: 5, since a zonal Uniform scale set takes only 1 or
    5 and 1 (max spreading) needs multiple placement groups, which InfiniBand cannot use (Microsoft Learn:
    virtual-machine-scale-sets-manage-fault-domains, virtual-machine-scale-sets-use-availability-zones)."""
    if not is_nd_scale_set(resource_type, props):
        return []
    value = props.get("platformFaultDomainCount")
    zonal = bool(_list(props.get("zones")))
    wanted = 5 if zonal else 1
    if _int(value) == wanted:
        return []
    kind = "a zonal InfiniBand island (single placement group)" if zonal else "a regional InfiniBand island"
    return [f"platformFaultDomainCount is {value!r}: {kind} uses platformFaultDomainCount: {wanted}"]


def check_no_overprovision(resource_type: str, props: Props) -> list[str]:
    if not is_nd_scale_set(resource_type, props):
        return []
    value = props.get("overprovision")
    if value is False:
        return []
    note = " (Azure's default is true)" if value is None else ""
    return [f"overprovision is {value!r}{note}: overprovisioning creates and deletes extra VMs inside the "
            "InfiniBand island; set overprovision: false"]


def _island_size_check(limit: int) -> Check:
    def check(resource_type: str, props: Props) -> list[str]:
        if not is_nd_scale_set(resource_type, props):
            return []
        capacity = _get(props, "sku", "capacity")
        nodes = _int(capacity)
        if nodes is not None and nodes <= limit:
            return []
        return [f"sku.capacity is {capacity!r}: an InfiniBand island (one scale set in a single placement group) "
                f"holds at most {limit} nodes"]

    return check


check_island_size = _island_size_check(HARD_MAX_NODES_PER_ISLAND)
check_island_default_size = _island_size_check(DEFAULT_MAX_NODES_PER_ISLAND)


def check_no_rdma_overlap(resource_type: str, props: Props) -> list[str]:
    if resource_type == VNET_TYPE:
        prefixes = _networks(_get(props, "addressSpace", "addressPrefixes"))
        for sub in _list(props.get("subnets")):
            prefixes += _networks(_get(sub, "addressPrefix")) + _networks(_get(sub, "addressPrefixes"))
            prefixes += _networks(_get(sub, "properties", "addressPrefix"))
    elif resource_type == SUBNET_TYPE:
        prefixes = _networks(props.get("addressPrefix")) + _networks(props.get("addressPrefixes"))
    else:
        return []
    reserved = ipaddress.ip_network(RDMA_RESERVED_CIDR)
    problems = []
    for prefix in prefixes:
        try:
            net = ipaddress.ip_network(prefix, strict=False)
        except ValueError:
            problems.append(f"address prefix {prefix!r} is not a valid CIDR range")
            continue
        if net.version == reserved.version and net.overlaps(reserved):
            problems.append(f"address prefix {prefix} overlaps {RDMA_RESERVED_CIDR}, which the ND-series RDMA "
                            "(InfiniBand) network reserves")
    return problems


def check_no_public_ip(resource_type: str, props: Props) -> list[str]:
    problems = []
    if resource_type in (VMSS_TYPE, VM_TYPE):
        if not is_gpu_compute(resource_type, props):
            return []
        for nic in _nic_configs(resource_type, props):
            nic_name = _get(nic, "name") or "?"
            ip_configs = _list(_get(nic, "ipConfigurations")) or _list(_get(nic, "properties", "ipConfigurations"))
            for ipc in ip_configs:
                key = "publicIPAddressConfiguration"
                if _get(ipc, key) or _get(ipc, "properties", key):
                    problems.append(f"NIC {nic_name}, IP configuration {_get(ipc, 'name') or '?'} has a "
                                    "publicIPAddressConfiguration: GPU nodes get no public IP")
    return problems


def check_ssh_password_disabled(resource_type: str, props: Props) -> list[str]:
    if resource_type not in (VMSS_TYPE, VM_TYPE):
        return []
    os_profile = _os_profile(resource_type, props)
    if _get(os_profile, "windowsConfiguration") is not None:
        return []
    problems = []
    if _get(os_profile, "linuxConfiguration", "disablePasswordAuthentication") is not True:
        problems.append("osProfile.linuxConfiguration.disablePasswordAuthentication is not true: SSH must accept "
                        "keys only")
    if _get(os_profile, "adminPassword"):
        problems.append("osProfile.adminPassword is set: use SSH keys only")
    return problems


def check_storage_no_public_blob(resource_type: str, props: Props) -> list[str]:
    if resource_type != STORAGE_ACCOUNT_TYPE:
        return []
    value = props.get("allowBlobPublicAccess")
    return [] if value is False else [f"allowBlobPublicAccess is {value!r}: set it to false explicitly"]


def check_storage_no_shared_key(resource_type: str, props: Props) -> list[str]:
    if resource_type != STORAGE_ACCOUNT_TYPE:
        return []
    value = props.get("allowSharedKeyAccess")
    return [] if value is False else [f"allowSharedKeyAccess is {value!r} (Azure's default is true): set it to false "
                                      "so only Microsoft Entra ID authorizes requests"]


def check_storage_tls12(resource_type: str, props: Props) -> list[str]:
    if resource_type != STORAGE_ACCOUNT_TYPE:
        return []
    value = props.get("minimumTlsVersion")
    return [] if value in TLS_MINIMUM_OK else [f"minimumTlsVersion is {value!r}: require TLS1_2"]


def check_health_extension(resource_type: str, props: Props) -> list[str]:
    if resource_type != VMSS_TYPE or not is_gpu_compute(resource_type, props):
        return []
    for ext in _extensions(resource_type, props):
        if _ext_field(ext, "publisher") == HEALTH_EXTENSION_PUBLISHER and _ext_field(ext, "type") in \
                HEALTH_EXTENSION_TYPES:
            return []
    return ["no Application Health extension (Microsoft.ManagedServices / ApplicationHealthLinux) in "
            "virtualMachineProfile.extensionProfile: bad nodes are not detected"]


def check_automatic_repairs(resource_type: str, props: Props) -> list[str]:
    if resource_type != VMSS_TYPE or not is_gpu_compute(resource_type, props):
        return []
    if _get(props, "automaticRepairsPolicy", "enabled") is True:
        return []
    return ["automaticRepairsPolicy.enabled is not true: unhealthy nodes are not replaced"]


def check_proximity_placement_group(resource_type: str, props: Props) -> list[str]:
    if not is_nd_scale_set(resource_type, props):
        return []
    if _get(props, "proximityPlacementGroup", "id") or props.get("proximityPlacementGroup"):
        return []
    return ["no proximityPlacementGroup: the island's VMs may land farther apart (front-end network latency)"]


def check_manual_upgrade(resource_type: str, props: Props) -> list[str]:
    if not is_nd_scale_set(resource_type, props):
        return []
    mode = _get(props, "upgradePolicy", "mode")
    if mode == "Manual":
        return []
    return [f"upgradePolicy.mode is {mode!r}: Automatic/Rolling upgrades reimage nodes under running jobs"]


def check_accelerated_networking(resource_type: str, props: Props) -> list[str]:
    if not is_nd_scale_set(resource_type, props):
        return []
    nics = _nic_configs(resource_type, props)
    off = [str(_get(n, "name") or "?") for n in nics if _get(n, "enableAcceleratedNetworking") is not True]
    if nics and not off:
        return []
    return [f"accelerated networking is off on NIC(s) {', '.join(off) or '(none configured)'}"]


def check_storage_private(resource_type: str, props: Props) -> list[str]:
    if resource_type != STORAGE_ACCOUNT_TYPE:
        return []
    if props.get("publicNetworkAccess") == "Disabled" or _get(props, "networkRuleSet", "defaultAction") == "Deny":
        return []
    return ["the account is reachable from every network: set publicNetworkAccess: Disabled (private endpoint) or "
            "networkRuleSet.defaultAction: Deny"]


def check_role_least_privilege(resource_type: str, props: Props) -> list[str]:
    if resource_type != ROLE_ASSIGNMENT_TYPE:
        return []
    role_def, scope = props.get("roleDefinitionId"), props.get("scope")
    if not isinstance(role_def, str) or not isinstance(scope, str):
        return []  # not known yet (a preview before the scope exists)
    role_id = role_def.rstrip("/").rsplit("/", 1)[-1].lower()
    if role_id not in LEAST_PRIVILEGE_ROLES:
        return [f"role {role_id} is not one ndfleet grants: the cluster's identities hold only "
                + ", ".join(name for name, _, _ in LEAST_PRIVILEGE_ROLES.values())]
    name, pattern, where = LEAST_PRIVILEGE_ROLES[role_id]
    if not re.search(pattern, scope, re.IGNORECASE):
        return [f"{name} is assigned at scope {scope!r}: grant it on {where} only"]
    return []


def check_nic_no_public_ip(resource_type: str, props: Props) -> list[str]:
    """A standalone NIC (the Slurm controller's and login nodes') has no public IP: they are reached through Bastion."""
    if resource_type != NIC_TYPE:
        return []
    problems = []
    for ipc in _list(props.get("ipConfigurations")):
        if _get(ipc, "publicIPAddress") or _get(ipc, "properties", "publicIPAddress"):
            problems.append(f"IP configuration {_get(ipc, 'name') or '?'} has a publicIPAddress: cluster machines get "
                            "no public IP")
    return problems


def check_mysql_private(resource_type: str, props: Props) -> list[str]:
    if resource_type != MYSQL_SERVER_TYPE:
        return []
    network = props.get("network")
    if _get(network, "publicNetworkAccess") == "Disabled" or _get(network, "delegatedSubnetResourceId"):
        return []
    return [f"network.publicNetworkAccess is {_get(network, 'publicNetworkAccess')!r}: the accounting database must "
            "be reachable only privately (publicNetworkAccess: Disabled with a private endpoint, or VNet integration)"]


def check_key_vault_rbac_private(resource_type: str, props: Props) -> list[str]:
    if resource_type != KEY_VAULT_TYPE:
        return []
    p = props.get("properties")
    problems = []
    if _get(p, "enableRbacAuthorization") is not True:
        problems.append("properties.enableRbacAuthorization is not true: use Azure RBAC (per-secret roles), not "
                        "access policies")
    if _get(p, "publicNetworkAccess") != "Disabled" and _get(p, "networkAcls", "defaultAction") != "Deny":
        problems.append("the vault is reachable from every network: set publicNetworkAccess: Disabled (private "
                        "endpoint) or networkAcls.defaultAction: Deny")
    if _get(p, "enablePurgeProtection") is not True:
        problems.append("properties.enablePurgeProtection is not true: a deleted vault (and the cluster's munge key) "
                        "could be purged for good")
    return problems


def check_nfs_account_private(resource_type: str, props: Props) -> list[str]:
    """An NFS (FileStorage) account authenticates by network only: it must not be reachable from the Internet."""
    if resource_type != STORAGE_ACCOUNT_TYPE or props.get("kind") != "FileStorage":
        return []
    if props.get("publicNetworkAccess") == "Disabled":
        return []
    return [f"publicNetworkAccess is {props.get('publicNetworkAccess')!r}: an NFS share has no user authentication; "
            "disable public network access and reach it through a private endpoint"]


# ----------------------------------------------------------------------------------------------------------
# The rules

_IB = "Azure docs: setup-infiniband.md; virtual-machine-scale-sets-placement-groups.md"

RULES: tuple[Rule, ...] = (
    Rule(
        "nd-single-placement-group", "An ND-series scale set has singlePlacementGroup: true (InfiniBand)",
        MANDATORY, (VMSS_TYPE,), _IB + " (large scale sets, singlePlacementGroup: false, do not support InfiniBand)",
        "keep the island in one scale set with singlePlacementGroup: true; split more nodes into more islands "
        "(ndfleet:maxNodesPerIsland)", check_single_placement_group,
    ),
    Rule(
        "nd-fault-domain-count",
        "An ND-series scale set has platformFaultDomainCount: 1 when regional, 5 when zonal",
        MANDATORY, (VMSS_TYPE,), "Azure CycleCloud (FaultDomainCount=1 on every regional IB scale set); Microsoft "
        "Learn: virtual-machine-scale-sets-manage-fault-domains (zonal Uniform: 1 or 5), "
        "virtual-machine-scale-sets-use-availability-zones (max spreading needs multiple placement groups); "
        "docs/sources.md",
        "set platformFaultDomainCount: 1 without zones, 5 with a zone", check_fault_domain_count,
    ),
    Rule(
        "nd-no-overprovision", "An ND-series scale set has overprovision: false",
        MANDATORY, (VMSS_TYPE,), "Azure docs: virtual-machine-scale-sets-design-overview.md (overprovisioning); "
        "CycleCloud overrides it for IB scale sets", "set overprovision: false", check_no_overprovision,
    ),
    Rule(
        "nd-island-size", f"An ND-series scale set holds at most {HARD_MAX_NODES_PER_ISLAND} nodes",
        MANDATORY, (VMSS_TYPE,), "Azure docs: virtual-machine-scale-sets-placement-groups.md (a single placement "
        f"group: {DEFAULT_MAX_NODES_PER_ISLAND} VMs, {HARD_MAX_NODES_PER_ISLAND} after a support request)",
        "lower ndfleet:maxNodesPerIsland (or the island's nodes) so the nodes split into more islands",
        check_island_size,
    ),
    Rule(
        "vnet-no-rdma-overlap", f"No VNet or subnet overlaps {RDMA_RESERVED_CIDR}",
        MANDATORY, (VNET_TYPE, SUBNET_TYPE), "Azure docs: setup-infiniband.md (the RDMA network reserves "
        f"{RDMA_RESERVED_CIDR})", "pick ndfleet:vnetAddressSpace outside 172.16.0.0/16, e.g. 10.40.0.0/16",
        check_no_rdma_overlap,
    ),
    Rule(
        "gpu-no-public-ip", "No GPU node NIC has a public IP",
        MANDATORY, (VMSS_TYPE, VM_TYPE), "Azure security baseline for Virtual Machines (NS-1/NS-2: no direct "
        "Internet exposure); ndfleet design: outbound through NAT gateway, admin access through Bastion",
        "remove publicIPAddressConfiguration from the node NIC; reach nodes through Azure Bastion (ndfleet:bastion)",
        check_no_public_ip,
    ),
    Rule(
        "ssh-password-disabled", "SSH password authentication is disabled",
        MANDATORY, (VMSS_TYPE, VM_TYPE), "Azure docs: linux/create-ssh-keys-detailed.md; Azure security baseline "
        "(IM: use SSH keys)", "set osProfile.linuxConfiguration.disablePasswordAuthentication: true and give "
        "ndfleet:sshPublicKey; set no adminPassword", check_ssh_password_disabled,
    ),
    Rule(
        "storage-no-public-blob", "A storage account allows no anonymous (public) blob access",
        MANDATORY, (STORAGE_ACCOUNT_TYPE,), "Azure docs: storage/blobs/anonymous-read-access-prevent.md",
        "set allowBlobPublicAccess: false", check_storage_no_public_blob,
    ),
    Rule(
        "storage-no-shared-key", "A storage account allows no shared-key access",
        MANDATORY, (STORAGE_ACCOUNT_TYPE,), "Azure docs: storage/common/shared-key-authorization-prevent.md",
        "set allowSharedKeyAccess: false and grant the node identity Storage Blob Data Contributor",
        check_storage_no_shared_key,
    ),
    Rule(
        "storage-tls12", "A storage account requires TLS 1.2 or later",
        MANDATORY, (STORAGE_ACCOUNT_TYPE,), "Azure docs: storage/common/transport-layer-security-configure-minimum-"
        "version.md", "set minimumTlsVersion: TLS1_2", check_storage_tls12,
    ),
    Rule(
        "gpu-health-extension", "A GPU scale set carries the Application Health extension",
        MANDATORY, (VMSS_TYPE,), "Azure docs: virtual-machine-scale-sets-health-extension.md",
        "add the ApplicationHealthLinux extension (publisher Microsoft.ManagedServices, typeHandlerVersion 2.0) "
        "probing the node health endpoint (ndfleet:health.probePort)", check_health_extension,
    ),
    Rule(
        "gpu-automatic-repairs", "A GPU scale set has automatic repairs enabled",
        MANDATORY, (VMSS_TYPE,), "Azure docs: virtual-machine-scale-sets-automatic-instance-repairs.md",
        "set automaticRepairsPolicy: {enabled: true, gracePeriod: PT30M, repairAction: Replace} "
        "(ndfleet:health.repairAction)", check_automatic_repairs,
    ),
    Rule(
        "identity-least-privilege", "A role assignment grants only the role an ndfleet identity needs, on its one "
        "resource", MANDATORY, (ROLE_ASSIGNMENT_TYPE,), "Azure docs: role-based-access-control/best-practices.md "
        "(least privilege, narrowest scope); azure-monitor/metrics/prometheus-remote-write-virtual-machines.md "
        "(Monitoring Metrics Publisher on the data collection rule); managed-grafana/how-to-permissions.md",
        "grant the node identity Storage Blob Data Contributor on its storage account, Monitoring Metrics "
        "Publisher on the data collection rule, Key Vault Secrets User on one secret and (impact reporting) "
        "Impact Reporter on the subscription, and Grafana Monitoring Data Reader on the Azure Monitor workspace; "
        "nothing broader",
        check_role_least_privilege,
    ),
    Rule(
        "nic-no-public-ip", "No cluster NIC (Slurm controller, login node) has a public IP",
        MANDATORY, (NIC_TYPE,), "Azure security baseline for Virtual Machines (NS-1/NS-2: no direct Internet "
        "exposure); Azure docs: bastion/bastion-overview.md", "remove publicIPAddress from the NIC's IP configuration; "
        "reach the login node through Azure Bastion (ndfleet:bastion)", check_nic_no_public_ip,
    ),
    Rule(
        "mysql-private", "The Slurm accounting database (MySQL Flexible Server) allows no public network access",
        MANDATORY, (MYSQL_SERVER_TYPE,), "Azure docs: mysql/flexible-server/concepts-networking-private-link.md; "
        "concepts-networking.md", "set network.publicNetworkAccess: Disabled and add a private endpoint (ndfleet does)",
        check_mysql_private,
    ),
    Rule(
        "keyvault-rbac-private", "A Key Vault uses RBAC authorization, purge protection and no public network access",
        MANDATORY, (KEY_VAULT_TYPE,), "Azure docs: key-vault/general/rbac-guide.md; key-vault/general/"
        "private-link-service.md; key-vault/general/soft-delete-overview.md (purge protection)",
        "set properties.enableRbacAuthorization: true, enablePurgeProtection: true, publicNetworkAccess: Disabled",
        check_key_vault_rbac_private,
    ),
    Rule(
        "nfs-account-private", "An NFS (FileStorage) account is not reachable from public networks",
        MANDATORY, (STORAGE_ACCOUNT_TYPE,), "Azure docs: storage/files/files-nfs-protocol.md (NFS shares rely on "
        "network-level security); storage-files-networking-overview.md", "set publicNetworkAccess: Disabled and "
        "mount the share through its private endpoint", check_nfs_account_private,
    ),
    # --- advisory
    Rule(
        "nd-island-default-size", f"An ND-series scale set holds at most {DEFAULT_MAX_NODES_PER_ISLAND} nodes "
        "without a support request", ADVISORY, (VMSS_TYPE,),
        "Azure docs: virtual-machine-scale-sets-placement-groups.md",
        f"file an Azure support request to raise the single placement group limit to {HARD_MAX_NODES_PER_ISLAND}, "
        f"or keep ndfleet:maxNodesPerIsland at {DEFAULT_MAX_NODES_PER_ISLAND}", check_island_default_size,
    ),
    Rule(
        "nd-proximity-placement-group", "An ND-series scale set is in a proximity placement group",
        ADVISORY, (VMSS_TYPE,), "Azure docs: co-location.md (proximity placement groups; one zone or none)",
        "set ndfleet:proximityPlacementGroup: true", check_proximity_placement_group,
    ),
    Rule(
        "nd-manual-upgrade", "An ND-series scale set uses upgradePolicy.mode Manual",
        ADVISORY, (VMSS_TYPE,), "Azure docs: virtual-machine-scale-sets-upgrade-policy.md",
        "set upgradePolicy: {mode: Manual} and roll out model changes between jobs", check_manual_upgrade,
    ),
    Rule(
        "nd-accelerated-networking", "An ND-series scale set NIC has accelerated networking",
        ADVISORY, (VMSS_TYPE,), "Azure docs: sizes/gpu-accelerated/ndh100v5-series.md (accelerated networking "
        "supported); accelerated-networking-overview.md", "set enableAcceleratedNetworking: true on the node NIC",
        check_accelerated_networking,
    ),
    Rule(
        "storage-private-network", "A storage account is not reachable from every network",
        ADVISORY, (STORAGE_ACCOUNT_TYPE,), "Azure docs: storage/common/storage-network-security.md",
        "set publicNetworkAccess: Disabled with a private endpoint, or networkRuleSet.defaultAction: Deny",
        check_storage_private,
    ),
)

RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}


# ----------------------------------------------------------------------------------------------------------
# Evaluating


def check_resource(resource_type: str, props: Props, name: str = "", rules: Sequence[Rule] = RULES) -> list[Violation]:
    """Every violation of `rules` by one resource."""
    out = []
    for rule in rules:
        if resource_type not in rule.resource_types:
            continue
        for message in rule.check(resource_type, props):
            out.append(Violation(rule.id, rule.enforcement, resource_type, name, message, rule.fix, rule.source))
    return out


def evaluate_plan(plan: Mapping[str, Any], rules: Sequence[Rule] = RULES) -> list[Violation]:
    """Every violation in an offline plan (`ndfleet plan --format json`), mandatory first, then by resource."""
    out: list[Violation] = []
    for res in plan.get("resources") or []:
        if not isinstance(res, Mapping):
            continue
        out += check_resource(str(res.get("type", "")), res.get("inputs") or {}, str(res.get("name", "")), rules)
    out.sort(key=lambda v: (not v.mandatory, v.resource_type, v.resource_name, v.rule_id))
    return out


def has_mandatory(violations: Iterable[Violation]) -> bool:
    return any(v.mandatory for v in violations)


def format_violations(violations: Sequence[Violation]) -> str:
    """Every violation: resource, rule, problem and fix; mandatory ones as errors, advisory ones as warnings."""
    if not violations:
        return f"policy: all {len(RULES)} rules pass\n"
    lines = []
    for v in violations:
        level = "ERROR" if v.mandatory else "WARNING"
        lines.append(f"{level} [{v.rule_id}] {v.resource_type} {v.resource_name}: {v.message}")
        lines.append(f"    fix: {v.fix}")
        lines.append(f"    source: {v.source}")
    mandatory = sum(1 for v in violations if v.mandatory)
    lines.append(f"policy: {mandatory} mandatory violation(s), {len(violations) - mandatory} advisory warning(s)")
    return "\n".join(lines) + "\n"


def rules_table_markdown() -> str:
    """The rules as a markdown table (docs/policies.md carries the same table; a test keeps them equal)."""
    lines = ["| id | level | rule | resource types | how to fix | source |", "|---|---|---|---|---|---|"]
    for r in RULES:
        types = ", ".join(f"`{t.split(':', 1)[1]}`" for t in r.resource_types)
        lines.append(f"| `{r.id}` | {r.enforcement} | {r.description} | {types} | {r.fix} | {r.source} |")
    return "\n".join(lines)
