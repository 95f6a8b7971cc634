"""The checks behind the policy rules (policy_rules.py): plain functions over (resource type, camelCase inputs),
each returning the problems it finds ([] when the resource keeps the rule or the rule does not apply)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ndfleet.plans.resource_types import (
    KEY_VAULT_TYPE,
    MYSQL_SERVER_TYPE,
    NIC_TYPE,
    ROLE_ASSIGNMENT_TYPE,
    ROLE_DEFINITION_TYPE,
    STORAGE_ACCOUNT_TYPE,
    SUBNET_TYPE,
    VM_TYPE,
    VMSS_TYPE,
    VNET_TYPE,
)
from ndfleet.stackconfig.profiles import (
    DEFAULT_MAX_NODES_PER_ISLAND,
    HARD_MAX_NODES_PER_ISLAND,
    IMPACT_REPORTER_ROLE_ID,
    KEY_VAULT_SECRETS_USER_ROLE_ID,
    MONITORING_DATA_READER_ROLE_ID,
    MONITORING_METRICS_PUBLISHER_ROLE_ID,
    RDMA_RESERVED_CIDR,
    STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID,
)

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

# ndfleet's custom roles, the elastic scaler (components/elastic_scaling.py) and the roll (components/roll_access.py,
# at every compute scale set): defined in the stack's
# resource group (so its id is under it; built-in roles' ids are not), assigned only at an island's scale set,
# the compute subnet and the nodes' identity (the offline plan's mock ids leave out a subnet's virtual network and
# spell the identities' type `userAssignedIdentitys`), and
# granting only the scaler's actions (check_custom_role_actions).
_CUSTOM_ROLE_ID = re.compile(r"/resourceGroups/[^/]+/providers/Microsoft\.Authorization/roleDefinitions/[^/]+$", re.I)
_SCALER_SCOPE = re.compile(
    r"/providers/(Microsoft\.Compute/virtualMachineScaleSets|Microsoft\.Network/(virtualNetworks/[^/]+/)?subnets"
    r"|Microsoft\.ManagedIdentity/userAssignedIdentit(ie|y)s)/[^/]+$", re.I,
)  # fmt: skip


# VM size names: ND-series (the InfiniBand training sizes) and every GPU family (N-series).
_ND_SIZE = re.compile(r"^Standard_ND", re.IGNORECASE)
_GPU_SIZE = re.compile(r"^Standard_N[A-Z]", re.IGNORECASE)

HEALTH_EXTENSION_PUBLISHER = "Microsoft.ManagedServices"
HEALTH_EXTENSION_TYPES = ("ApplicationHealthLinux", "ApplicationHealthWindows")
TLS_MINIMUM_OK = ("TLS1_2", "TLS1_3")

Props = Mapping[str, Any]
Check = Callable[[str, Props], list[str]]



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
    if role_id not in LEAST_PRIVILEGE_ROLES and _CUSTOM_ROLE_ID.search(role_def.rstrip("/")):
        if _SCALER_SCOPE.search(scope):
            return []
        return [f"the custom role {role_id} is assigned at scope {scope!r}: ndfleet's one custom role (the elastic "
                "scaler) is granted on an elastic island's scale set, the compute subnet and the nodes' identity only"]
    if role_id not in LEAST_PRIVILEGE_ROLES:
        return [f"role {role_id} is not one ndfleet grants: the cluster's identities hold only "
                + ", ".join(name for name, _, _ in LEAST_PRIVILEGE_ROLES.values())]
    name, pattern, where = LEAST_PRIVILEGE_ROLES[role_id]
    if not re.search(pattern, scope, re.IGNORECASE):
        return [f"{name} is assigned at scope {scope!r}: grant it on {where} only"]
    return []


def check_custom_role_actions(resource_type: str, props: Props) -> list[str]:
    """A custom role grants the elastic scaler's actions or the roll's (components/roll_access.py), and nothing else,
    assignable in a resource group only."""
    if resource_type != ROLE_DEFINITION_TYPE:
        return []
    from ndfleet.components.elastic_scaling import ELASTIC_ACTIONS
    from ndfleet.components.roll_access import ROLL_ACTIONS

    problems = []
    for i, permission in enumerate(_list(props.get("permissions"))):
        actions = _list(_get(permission, "actions"))
        if not any(all(a in allowed for a in actions) for allowed in (ELASTIC_ACTIONS, ROLL_ACTIONS)):
            extra = [a for a in actions if a not in ELASTIC_ACTIONS]
            problems.append(f"permissions[{i}].actions {extra} are not the elastic scaler's: {list(ELASTIC_ACTIONS)}"
                            f", nor are {[a for a in actions if a not in ROLL_ACTIONS]} the roll's: "
                            f"{list(ROLL_ACTIONS)}")  # fmt: skip
        for key in ("notActions", "dataActions", "notDataActions"):
            if _list(_get(permission, key)):
                problems.append(f"permissions[{i}].{key} is set: the elastic scaler needs none")
    scopes = _list(props.get("assignableScopes"))
    wide = [s for s in scopes if not re.fullmatch(r"/subscriptions/[^/]+/resourceGroups/[^/]+", str(s), re.I)]
    if wide or not scopes:
        problems.append(f"assignableScopes {wide or scopes}: a custom role is assignable in one resource group only")
    return problems


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


