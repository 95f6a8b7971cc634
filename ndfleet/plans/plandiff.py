"""Compare two offline plans (`ndfleet plan --format json`) and say what the change does to the cluster.

Pure functions only: no Pulumi, no Azure, no files. `ndfleet diff` (ndfleet/commands/diff.py) reads the plans and
prints what `render_markdown` / `render_text` return.

What a diff holds, per stack:
- resources added, removed and changed, keyed by (type, name); for a change, every property path with its old
  and new value (long values, such as `customData`, as a size and a sha256 prefix, plus the changed lines of the
  decoded bootstrap);
- the consequences of the change, from `CONSEQUENCE_RULES` (a table per resource type, each rule with its source;
  docs/plan-diff.md prints the same table): replacements, changes that reach existing nodes only after a reimage,
  InfiniBand loss, changes Azure refuses while the resource is in use, and the deletion or replacement of a resource
  that holds data;
- capacity per island: nodes and GPUs before and after.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The plan document's schema and reader live in ndfleet.plans.plandoc; these names stay importable from here.
from ndfleet.plans.plandoc import PLAN_SCHEMA_VERSION as PLAN_SCHEMA_VERSION
from ndfleet.plans.plandoc import PlanFormatError as PlanFormatError
from ndfleet.plans.plandoc import TooLarge, decode_custom_data
from ndfleet.plans.plandoc import validate_plan as validate_plan
from ndfleet.stackconfig.profiles import PROFILES

# Values longer than this (as compact JSON) are shown as a size and a hash, not verbatim.
LONG_VALUE_CHARS = 200
HASH_PREFIX_CHARS = 12
# A GitHub comment holds at most 65,536 characters; past this the details are left out of the markdown.
MARKDOWN_MAX_CHARS = 60_000
# The hidden first line of the pull-request comment; the workflow finds (and updates) its comment by it.
MARKDOWN_MARKER = "<!-- ndfleet-plan-diff -->"

VMSS_TYPE = "azure-native:compute:VirtualMachineScaleSet"
VM_TYPE = "azure-native:compute:VirtualMachine"
STORAGE_ACCOUNT_TYPE = "azure-native:storage:StorageAccount"
BLOB_CONTAINER_TYPE = "azure-native:storage:BlobContainer"
AML_FILESYSTEM_TYPE = "azure-native:storagecache:AmlFilesystem"
VNET_TYPE = "azure-native:network:VirtualNetwork"
SUBNET_TYPE = "azure-native:network:Subnet"
PRIVATE_ENDPOINT_TYPE = "azure-native:network:PrivateEndpoint"
ROLE_ASSIGNMENT_TYPE = "azure-native:authorization:RoleAssignment"
# The Slurm cluster's data stores (components/slurm_*.py) and its controller.
MYSQL_SERVER_TYPE = "azure-native:dbformysql:Server"
MYSQL_DATABASE_TYPE = "azure-native:dbformysql:Database"
KEY_VAULT_TYPE = "azure-native:keyvault:Vault"
FILE_SHARE_TYPE = "azure-native:storage:FileShare"
DISK_TYPE = "azure-native:compute:Disk"
# Resources whose deletion or replacement loses data.
# The Azure Monitor workspace holds the fleet's metrics history (18 months): deleting it loses that history.
MONITOR_WORKSPACE_TYPE = "azure-native:monitor:AzureMonitorWorkspace"
DATA_HOLDING_TYPES = (
    STORAGE_ACCOUNT_TYPE,
    BLOB_CONTAINER_TYPE,
    AML_FILESYSTEM_TYPE,
    MYSQL_SERVER_TYPE,
    MYSQL_DATABASE_TYPE,
    KEY_VAULT_TYPE,
    FILE_SHARE_TYPE,
    DISK_TYPE,
    MONITOR_WORKSPACE_TYPE,
)
# Management locks (CanNotDelete on what holds data): removing one is worth a warning.
LOCK_TYPES = (
    "azure-native:authorization:ManagementLockByScope",
    "azure-native:authorization:ManagementLockAtResourceGroupLevel",
    "azure-native:authorization:ManagementLockAtResourceLevel",
)
# Resources that cannot be deleted (so not replaced either) while a CanNotDelete or ReadOnly lock covers them: the
# lock is inherited by everything below its scope, containers and role assignments at the account included, and
# deleting a private endpoint deletes its connection on the locked account (docs/sources.md, "Locks").
LOCK_BLOCKED_TYPES = (
    PRIVATE_ENDPOINT_TYPE,
    ROLE_ASSIGNMENT_TYPE,
    BLOB_CONTAINER_TYPE,
    STORAGE_ACCOUNT_TYPE,
    AML_FILESYSTEM_TYPE,
)
ISLAND_TAG = "ndfleet:island"
CUSTOM_DATA_PATH = "virtualMachineProfile.osProfile.customData"

SEVERITIES = ("danger", "warning", "info")
_SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


class _Missing:
    """The value of a property that one side does not have."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "(absent)"


MISSING: Any = _Missing()


# ----------------------------------------------------------------------------------------------------------
# The result


@dataclass(frozen=True)
class PropertyChange:
    path: str
    old: Any  # MISSING when the base has no such property
    new: Any  # MISSING when the head has no such property


@dataclass(frozen=True)
class ResourceChange:
    type: str
    name: str
    op: str  # "create" | "delete" | "update"
    properties: tuple[PropertyChange, ...] = ()
    old_protect: bool = False
    new_protect: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.type, self.name)


@dataclass(frozen=True)
class Consequence:
    rule: str  # a ConsequenceRule id, or one of the built-in ids (island-*, data-*, protect-removed)
    severity: str  # "danger" | "warning" | "info"
    resource_type: str
    resource_name: str
    message: str
    path: str | None = None


@dataclass(frozen=True)
class IslandCapacity:
    island: str
    resource: str
    old_nodes: int
    new_nodes: int
    old_gpus: int
    new_gpus: int

    @property
    def changed(self) -> bool:
        return self.old_nodes != self.new_nodes or self.old_gpus != self.new_gpus


@dataclass(frozen=True)
class StackDiff:
    stack: str
    changes: tuple[ResourceChange, ...]
    consequences: tuple[Consequence, ...]
    capacity: tuple[IslandCapacity, ...]
    outputs: tuple[PropertyChange, ...] = ()
    in_base: bool = True
    in_head: bool = True

    def count(self, op: str) -> int:
        return sum(1 for c in self.changes if c.op == op)

    @property
    def empty(self) -> bool:
        return not self.changes and not self.outputs


# ----------------------------------------------------------------------------------------------------------
# The consequences table


def _always(old: Any, new: Any) -> bool:
    return True


def _true_to_false(old: Any, new: Any) -> bool:
    return old is True and new is not True


def _false_to_true(old: Any, new: Any) -> bool:
    return old is not True and new is True


@dataclass(frozen=True)
class ConsequenceRule:
    """What happens when a property of a resource type changes, and where that is written down."""

    id: str
    resource_type: str  # a type token, or "azure-native:*" for every azure-native resource
    path: str  # a property path; matches it and everything below it
    effect: str  # replace | infiniband | reimage | deallocate | refused
    severity: str
    what: str  # what happens, in a sentence (without the resource)
    source: str
    when: Callable[[Any, Any], bool] = field(default=_always, compare=False)
    condition: str = ""  # the `when` test in words, for the docs table

    def matches(self, resource_type: str, path: str) -> bool:
        if self.resource_type.endswith(":*"):
            if not resource_type.startswith(self.resource_type[:-1]):
                return False
            if self.path == "*Name":  # a top-level resource-name input (a URL path parameter)
                return _is_top_level_name(path)
            return path == self.path
        if resource_type != self.resource_type:
            return False
        return path == self.path or path.startswith(self.path + ".") or path.startswith(self.path + "[")


_NAME_INPUT = re.compile(r"^[a-z][A-Za-z0-9]*Name$")
# Top-level inputs ending in "Name" that are ordinary properties, not part of the resource id.
_NOT_PATH_PARAMETERS = frozenset({"displayName", "friendlyName"})


def _is_top_level_name(path: str) -> bool:
    return bool(_NAME_INPUT.match(path)) and path not in _NOT_PATH_PARAMETERS


_REPAIRS = (
    "Azure docs: virtual-machine-scale-sets-automatic-instance-repairs.md, 'Configure a repair action on automatic "
    "repairs policy' ('you must first disable automatic repairs on the scale set and re-enable with the updated "
    "repair action')"
)
_ROLE_ASSIGNMENT_IMMUTABLE = (
    "Azure Resource Manager: a PUT that changes an existing role assignment is refused with "
    "RoleAssignmentUpdateNotPermitted ('Tenant ID, application ID, principal ID, and scope are not allowed to be "
    "updated'); Pulumi replaces it (scope is part of its id)"
)
_MODIFY_VMSS = "Azure docs: Modify a Virtual Machine Scale Set (virtual-machine-scale-sets-upgrade-scale-set.md)"
_PULUMI_FORCE_NEW = (
    "Pulumi azure-native: inputs that are part of the resource id (URL path parameters) and `location` are "
    "replace-on-change (forceNew in the provider's metadata)"
)

# First matching rule wins for a property path: specific rules come before general ones.
CONSEQUENCE_RULES: tuple[ConsequenceRule, ...] = (
    # --- scale sets (InfiniBand islands)
    ConsequenceRule(
        "vmss-spg-off", VMSS_TYPE, "singlePlacementGroup", "infiniband", "danger",
        "leaves its single placement group: InfiniBand stops working for the island, and Azure cannot turn it "
        "back on (true -> false is one-way; recreate the scale set to get InfiniBand back)",
        "Azure docs: setup-infiniband.md and virtual-machine-scale-sets-placement-groups.md; REST API "
        "VirtualMachineScaleSetProperties.singlePlacementGroup ('if false, it may not be modified to true')",
        when=_true_to_false, condition="true -> false",
    ),
    ConsequenceRule(
        "vmss-spg-on", VMSS_TYPE, "singlePlacementGroup", "replace", "danger",
        "cannot be switched back to a single placement group in place: Azure refuses the update; the scale set "
        "(every node of the island) must be recreated",
        "REST API VirtualMachineScaleSetProperties.singlePlacementGroup ('if false, it may not be modified to true')",
        when=_false_to_true, condition="false -> true",
    ),
    ConsequenceRule(
        "vmss-vm-size", VMSS_TYPE, "sku.name", "replace", "danger",
        "changes VM size: every node of the island is deallocated and comes back on other hardware (or the "
        "scale set is recreated); running jobs die and the InfiniBand fabric re-forms",
        _MODIFY_VMSS + ", 'Properties that require deallocation to change: SKU name'; resize-vm.md",
    ),
    ConsequenceRule(
        "vmss-zones", VMSS_TYPE, "zones", "replace", "danger",
        "changes availability zones: existing instances cannot move between zones, so nodes are recreated",
        _MODIFY_VMSS + ", 'Properties that can only be changed based on the current value: zones'",
    ),
    ConsequenceRule(
        "vmss-orchestration", VMSS_TYPE, "orchestrationMode", "replace", "danger",
        "changes orchestration mode, which is fixed at creation: the scale set is recreated (and Flexible "
        "mode is not documented as InfiniBand-capable)",
        "Azure docs: virtual-machine-scale-sets-orchestration-modes.md ('defined when you create the scale set and "
        "cannot be changed or updated later')",
    ),
    ConsequenceRule(
        "vmss-fault-domains", VMSS_TYPE, "platformFaultDomainCount", "replace", "danger",
        "changes the fault domain count, a create-time property: the scale set is recreated",
        _MODIFY_VMSS + ", 'Create-time properties: ... fault domains'",
    ),
    ConsequenceRule(
        "vmss-os-disk-type", VMSS_TYPE, "virtualMachineProfile.storageProfile.osDisk.managedDisk.storageAccountType",
        "replace", "danger",
        "changes the OS disk storage type, a create-time property: the scale set is recreated",
        _MODIFY_VMSS + ", 'Create-time properties: Managed OS disk storage account type'",
    ),
    ConsequenceRule(
        "vmss-subnet", VMSS_TYPE,
        "virtualMachineProfile.networkProfile.networkInterfaceConfigurations", "reimage", "warning",
        "changes the node network configuration: existing nodes keep the old one until they are updated "
        "(upgrade policy Manual) and a subnet may only change within the same VNet",
        _MODIFY_VMSS + ", 'subnet' among the properties changeable only based on the current value",
    ),
    ConsequenceRule(
        "vmss-ppg", VMSS_TYPE, "proximityPlacementGroup", "deallocate", "danger",
        "changes the proximity placement group: every node of the island must be deallocated first",
        "Azure docs: co-location.md / proximity-placement-groups ('to move an existing scale set into a proximity "
        "placement group, deallocate all its VMs')",
    ),
    ConsequenceRule(
        "vmss-bootstrap", VMSS_TYPE, CUSTOM_DATA_PATH, "reimage", "warning",
        "changes the node bootstrap (customData): new nodes get it, existing nodes only after a model update "
        "and a reimage (`az vmss update-instances` then `az vmss reimage`)",
        "Azure docs: custom-data.md (customData on a scale set reaches existing instances after reimage)",
    ),
    ConsequenceRule(
        "vmss-model", VMSS_TYPE, "virtualMachineProfile", "reimage", "warning",
        "changes the scale set model: with upgrade policy Manual existing nodes keep the old model until "
        "`az vmss update-instances` (image changes take effect on reimage)",
        _MODIFY_VMSS + " ('the models for the existing VMs ... must still be brought up-to-date', latestModelApplied)",
    ),
    ConsequenceRule(
        "vmss-repair-action", VMSS_TYPE, "automaticRepairsPolicy.repairAction", "refused", "warning",
        "changes the automatic repair action: Azure takes a new repairAction only on a scale set whose automatic "
        "repairs are off. First `az vmss update --resource-group <rg> --name <scale set> --enable-automatic-repairs "
        "false` for each island, then `pulumi up` turns them on again with the new action",
        _REPAIRS,
    ),
    # --- role assignments
    ConsequenceRule(
        "role-assignment-principal", ROLE_ASSIGNMENT_TYPE, "principalId", "replace", "warning",
        "changes who the role assignment is for: Azure does not update that in place, so it is deleted and created "
        "again (the nodes lose blob access in between, and a CanNotDelete lock on its scope blocks the delete)",
        _ROLE_ASSIGNMENT_IMMUTABLE,
    ),
    ConsequenceRule(
        "role-assignment-scope", ROLE_ASSIGNMENT_TYPE, "scope", "replace", "warning",
        "changes the scope of the role assignment: it is deleted and created again",
        _ROLE_ASSIGNMENT_IMMUTABLE,
    ),
    # --- storage that holds data
    ConsequenceRule(
        "storage-kind", STORAGE_ACCOUNT_TYPE, "kind", "replace", "danger",
        "changes the account kind: only Storage/BlobStorage -> StorageV2 upgrades in place (one-way); any other "
        "change needs a new account",
        "Azure docs: storage-account-upgrade.md (upgrade to general-purpose v2 is one-way)",
    ),
    ConsequenceRule(
        "storage-hns", STORAGE_ACCOUNT_TYPE, "isHnsEnabled", "replace", "danger",
        "changes the hierarchical namespace, which is set at creation (enabling it later is a separate, one-way "
        "Data Lake Gen2 migration): a new account",
        "Azure docs: data-lake-storage-migrate-gen2 / upgrade-to-data-lake-storage-gen2 (HNS is a create-time "
        "choice; the upgrade is one-way)",
    ),
    ConsequenceRule(
        "amlfs-sku", AML_FILESYSTEM_TYPE, "sku", "replace", "danger",
        "changes the Managed Lustre SKU, fixed at creation: a new file system (its data is lost unless exported)",
        "Azure docs: azure-managed-lustre create-file-system-resource-manager.md (SKU, zone, subnet and capacity "
        "are chosen at creation); ARM create-only properties of Microsoft.StorageCache/amlFilesystems",
    ),
    ConsequenceRule(
        "amlfs-zones", AML_FILESYSTEM_TYPE, "zones", "replace", "danger",
        "changes the Managed Lustre zone, fixed at creation: a new file system",
        "Azure docs: azure-managed-lustre create-file-system-resource-manager.md; ARM create-only property",
    ),
    ConsequenceRule(
        "amlfs-subnet", AML_FILESYSTEM_TYPE, "filesystemSubnet", "replace", "danger",
        "changes the Managed Lustre subnet, fixed at creation: a new file system",
        "Azure docs: azure-managed-lustre create-file-system-resource-manager.md; ARM create-only property",
    ),
    ConsequenceRule(
        "amlfs-capacity", AML_FILESYSTEM_TYPE, "storageCapacityTiB", "replace", "danger",
        "changes the Managed Lustre capacity, chosen at creation: a new file system",
        "Azure docs: azure-managed-lustre create-file-system-resource-manager.md; ARM create-only property",
    ),
    # --- the Slurm cluster (components/slurm_*.py)
    ConsequenceRule(
        "vm-os-profile", VM_TYPE, "osProfile", "replace", "danger",
        "changes the VM's OS profile (customData, computer name, admin user), which is set at creation: the VM is "
        "recreated. For the Slurm controller, slurmctld is down until the new VM has booted (the queue is kept on "
        "its managed data disk); for a login node, users' sessions end",
        "Azure docs: custom-data.md (custom data is only available at VM creation); REST API VirtualMachines "
        "osProfile ('cannot be changed after the VM is provisioned': computerName, adminUsername, customData)",
    ),
    ConsequenceRule(
        "vm-image", VM_TYPE, "storageProfile.imageReference", "replace", "danger",
        "changes the VM's image: the OS disk is recreated from the new image (the VM is rebuilt)",
        "Azure docs: REST API VirtualMachines storageProfile.imageReference (set at creation)",
    ),
    ConsequenceRule(
        "vm-size", VM_TYPE, "hardwareProfile.vmSize", "deallocate", "warning",
        "changes the VM size: Azure restarts the VM (the Slurm controller or login node is unavailable meanwhile)",
        "Azure docs: resize-vm.md (resizing restarts a running VM)",
    ),
    ConsequenceRule(
        "mysql-version", MYSQL_SERVER_TYPE, "version", "refused", "danger",
        "changes the MySQL major version: only an in-place major version upgrade 5.7 -> 8.0 is possible, with "
        "downtime; anything else needs a new server (the Slurm job history would be lost)",
        "Azure docs: mysql/flexible-server/how-to-upgrade.md (major version upgrade)",
    ),
    ConsequenceRule(
        "mysql-network", MYSQL_SERVER_TYPE, "network.delegatedSubnetResourceId", "refused", "danger",
        "moves the database into or out of VNet integration, a connectivity method fixed at creation: a new server "
        "(the Slurm job history would be lost unless restored from backup)",
        "Azure docs: mysql/flexible-server/concepts-networking.md ('you can't change the connectivity method after "
        "creating the server')",
    ),
    ConsequenceRule(
        "mysql-sku", MYSQL_SERVER_TYPE, "sku", "deallocate", "warning",
        "changes the database compute size: the server restarts (slurmdbd queues accounting records meanwhile)",
        "Azure docs: mysql/flexible-server/concepts-compute.md (scaling compute restarts the server)",
    ),
    ConsequenceRule(
        "fileshare-protocol", FILE_SHARE_TYPE, "enabledProtocols", "replace", "danger",
        "changes the share's protocol (NFS / SMB), fixed at creation: a new, empty share (users' home directories "
        "would be lost)",
        "Azure docs: storage/files/files-nfs-protocol.md (a share is NFS or SMB, chosen at creation)",
    ),
    ConsequenceRule(
        "disk-size", DISK_TYPE, "diskSizeGB", "deallocate", "warning",
        "changes the size of the controller's state disk: growing needs the disk detached or the VM deallocated "
        "(on some sizes), shrinking is refused",
        "Azure docs: linux/expand-disks.md (disks can't be shrunk)",
    ),
    # --- network
    ConsequenceRule(
        "subnet-prefix", SUBNET_TYPE, "addressPrefix", "refused", "danger",
        "changes the address range of a subnet: Azure refuses while anything (the nodes' NICs, a private "
        "endpoint, Lustre) is in it; the islands in it must be deleted first",
        "Azure docs: virtual-network-manage-subnet.md ('you can change the address range only if there are no "
        "resources in the subnet')",
    ),
    ConsequenceRule(
        "subnet-prefixes", SUBNET_TYPE, "addressPrefixes", "refused", "danger",
        "changes the address ranges of a subnet: Azure refuses while anything is in it",
        "Azure docs: virtual-network-manage-subnet.md",
    ),
    ConsequenceRule(
        "vnet-address-space", VNET_TYPE, "addressSpace", "refused", "warning",
        "changes the VNet address space: adding a range works, but removing or changing one that a subnet uses is "
        "refused",
        "Azure docs: manage-virtual-network.md ('you can't remove an address range if a subnet exists in it')",
    ),
    ConsequenceRule(
        "vnet-subnets-inline", VNET_TYPE, "subnets", "refused", "warning",
        "changes subnets declared inside the VNet: a subnet that holds resources cannot change its range or be "
        "removed",
        "Azure docs: virtual-network-manage-subnet.md",
    ),
    # --- every azure-native resource
    ConsequenceRule(
        "azure-location", "azure-native:*", "location", "replace", "danger",
        "changes region: the resource is deleted and created again",
        _PULUMI_FORCE_NEW,
    ),
    ConsequenceRule(
        "azure-resource-group", "azure-native:*", "resourceGroupName", "replace", "danger",
        "moves to another resource group: the resource is deleted and created again",
        _PULUMI_FORCE_NEW,
    ),
    ConsequenceRule(
        "azure-name", "azure-native:*", "*Name", "replace", "danger",
        "changes a name that is part of the resource id: the resource is deleted and created again",
        _PULUMI_FORCE_NEW,
    ),
)

# Built-in consequences (not tied to one property); docs/plan-diff.md lists them with the table above.
BUILTIN_CONSEQUENCES: tuple[tuple[str, str, str, str], ...] = (
    ("data-deleted", "danger", "A StorageAccount, BlobContainer or AmlFilesystem, or a Slurm data store (MySQL "
     "server or database, Key Vault, NFS FileShare, the controller's state Disk) is deleted: its data is lost "
     "(protect/management locks make `pulumi up` fail first)", "Azure docs: storage-account-create / "
     "amlfs delete; Pulumi `protect`"),
    ("data-replaced", "danger", "A data-holding resource is replaced (any replace rule above): delete then "
     "create, its data is lost", "the replace rule that fired"),
    ("protect-removed", "warning", "Pulumi `protect` is turned off on a data-holding resource",
     "Pulumi docs: resource option protect"),
    ("lock-removed", "warning", "A management lock is deleted: Azure no longer blocks deleting what it guards",
     "Azure docs: azure-resource-manager/management/lock-resources.md"),
    ("locked-replace", "danger", "A private endpoint, role assignment, container, storage account or Managed Lustre "
     "under a CanNotDelete/ReadOnly lock of the base plan is deleted or replaced: Azure refuses the delete "
     "(ScopeLocked) and `pulumi up` stops half-way; the message says how to proceed (remove the lock, "
     "`pulumi refresh`, `pulumi up`, which recreates the lock)",
     "Azure docs: lock-resources.md ('When you apply a lock at a parent scope, all resources within that scope "
     "inherit the same lock'); issue 13 item 3"),
    ("island-added", "info", "A scale set (island) is created: nodes and GPUs added", "the plan's summary / "
     "ndfleet/spec/profiles.py"),
    ("island-removed", "danger", "A scale set (island) is deleted: every node of it goes, running jobs die, "
     "local NVMe scratch is lost", "the plan"),
    ("island-replaced", "danger", "A replace rule fired on a scale set: every node of the island is recreated",
     "the replace rule that fired"),
    ("island-scale-out", "info", "sku.capacity grows: nodes and GPUs added (needs vCPU quota)",
     "Azure docs: virtual-machine-scale-sets-autoscale-overview / quotas"),
    ("island-scale-in", "warning", "sku.capacity shrinks: nodes are deleted (per the scale-in policy), jobs on "
     "them die, local NVMe scratch is lost", "Azure docs: virtual-machine-scale-sets-scale-in-policy.md"),
)


def rules_table_markdown() -> str:
    """The consequences table as markdown (docs/plan-diff.md carries the same table; a test keeps them equal)."""
    lines = ["| id | resource type | property | when | effect | severity | source |", "|---|---|---|---|---|---|---|"]
    for r in CONSEQUENCE_RULES:
        lines.append(
            f"| `{r.id}` | `{r.resource_type}` | `{r.path}` | {r.condition or 'any change'} | {r.effect} | "
            f"{r.severity} | {r.source} |"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------
# Reading plans


def _index(plan: Mapping[str, Any] | None) -> dict[tuple[str, str], Mapping[str, Any]]:
    if plan is None:
        return {}
    return {(r["type"], r["name"]): r for r in plan.get("resources", [])}


# ----------------------------------------------------------------------------------------------------------
# Property paths


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _child(path: str, key: str) -> str:
    part = key if _IDENT.match(key) else json.dumps(key)
    if not path:
        return part if _IDENT.match(key) else f"[{part}]"
    return f"{path}.{part}" if _IDENT.match(key) else f"{path}[{part}]"


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _named_items(items: Sequence[Any]) -> bool:
    names = [i.get("name") for i in items if isinstance(i, dict)]
    return (
        len(names) == len(items) > 0 and all(isinstance(n, str) for n in names) and len(set(names)) == len(names)
    )


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    """Leaf values by property path. Dicts recurse; a list of named objects recurses by name (`a[nic0].b`),
    another list of objects by index (`a[0].b`); scalars, empty containers and lists of scalars are leaves."""
    out: dict[str, Any] = {}
    if isinstance(value, dict) and value:
        for k in sorted(value):
            out.update(flatten(value[k], _child(path, str(k))))
    elif isinstance(value, list) and value and not all(_is_scalar(v) for v in value):
        if _named_items(value):
            for item in sorted(value, key=lambda i: i["name"]):
                out.update(flatten(item, f"{path}[{item['name']}]"))
        else:
            for i, item in enumerate(value):
                out.update(flatten(item, f"{path}[{i}]"))
    else:
        out[path] = value
    return out


def diff_values(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[PropertyChange, ...]:
    """Every leaf property path whose value differs, sorted by path."""
    a, b = flatten(dict(old)), flatten(dict(new))
    changes = []
    for path in sorted(set(a) | set(b)):
        va, vb = a.get(path, MISSING), b.get(path, MISSING)
        if va is MISSING or vb is MISSING or va != vb or type(va) is not type(vb):
            changes.append(PropertyChange(path, va, vb))
    return tuple(changes)


# ----------------------------------------------------------------------------------------------------------
# Long values and the bootstrap


def decode_bootstrap(value: Any) -> str | None:
    """The cloud-config text inside a customData value (base64, optionally of gzip); None if it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        # Bounded: a plan's customData never decompresses past 1 MiB here (plandoc refuses such plans on reading).
        raw = decode_custom_data(value)
    except TooLarge:
        return None
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def bootstrap_diff(old: Any, new: Any) -> list[str]:
    """The changed lines of the decoded bootstrap, as a unified diff without context; [] if neither decodes."""
    a, b = decode_bootstrap(old), decode_bootstrap(new)
    if a is None and b is None:
        return []
    return list(
        difflib.unified_diff(
            (a or "").splitlines(), (b or "").splitlines(), "base/customData", "head/customData", n=0, lineterm=""
        )
    )


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def format_value(value: Any, path: str = "") -> str:
    """A value for display: verbatim when short, else its size and a sha256 prefix (customData: and the size of
    the decoded bootstrap)."""
    if value is MISSING:
        return "(absent)"
    text = _compact(value)
    if len(text) <= LONG_VALUE_CHARS:
        if isinstance(value, str) and "\n" not in value:
            return value
        return json.dumps(value, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:HASH_PREFIX_CHARS]
    decoded = decode_bootstrap(value) if path.endswith("customData") else None
    extra = f", {len(decoded.encode())} bytes decoded" if decoded is not None else ""
    return f"<{len(text.encode())} bytes{extra}, sha256 {digest}>"


# ----------------------------------------------------------------------------------------------------------
# Consequences and capacity


def _rule_for(resource_type: str, change: PropertyChange) -> ConsequenceRule | None:
    for rule in CONSEQUENCE_RULES:
        if rule.matches(resource_type, change.path) and rule.when(change.old, change.new):
            return rule
    return None


def _island_name(res: Mapping[str, Any]) -> str:
    tags = res.get("inputs", {}).get("tags")
    if isinstance(tags, dict) and isinstance(tags.get(ISLAND_TAG), str):
        return str(tags[ISLAND_TAG])
    return str(res["name"])


def _gpus_per_node(res: Mapping[str, Any], plan: Mapping[str, Any] | None) -> int:
    """GPUs per node: from the plan's summary (islands[].gpus / nodes) when it names the island, else from the
    VM-size profile of sku.name, else 0 (not a known GPU size)."""
    island = _island_name(res)
    summary = (plan or {}).get("summary") or {}
    for entry in summary.get("islands") or []:
        if isinstance(entry, dict) and entry.get("name") == island:
            nodes, gpus = entry.get("nodes"), entry.get("gpus")
            if isinstance(nodes, int) and isinstance(gpus, int) and nodes > 0:
                return gpus // nodes
    sku = res.get("inputs", {}).get("sku") or {}
    profile = PROFILES.get(str(sku.get("name", "")))
    return profile.gpus_per_vm if profile is not None else 0


def _capacity(res: Mapping[str, Any] | None) -> int:
    if res is None:
        return 0
    cap = (res.get("inputs", {}).get("sku") or {}).get("capacity", 0)
    return cap if isinstance(cap, int) and not isinstance(cap, bool) else 0


def _short_type(rtype: str) -> str:
    return rtype.split(":", 1)[1] if rtype.startswith("azure-native:") else rtype


def _capacity_and_island_consequences(
    base: Mapping[str, Any] | None,
    head: Mapping[str, Any] | None,
    replaced: set[tuple[str, str]],
) -> tuple[list[IslandCapacity], list[Consequence]]:
    old_idx, new_idx = _index(base), _index(head)
    keys = sorted({k for k in (*old_idx, *new_idx) if k[0] == VMSS_TYPE})
    capacity: list[IslandCapacity] = []
    out: list[Consequence] = []
    for key in keys:
        old_res, new_res = old_idx.get(key), new_idx.get(key)
        any_res = new_res if new_res is not None else old_res
        assert any_res is not None
        island = _island_name(any_res)
        old_n, new_n = _capacity(old_res), _capacity(new_res)
        old_g = old_n * _gpus_per_node(old_res, base) if old_res is not None else 0
        new_g = new_n * _gpus_per_node(new_res, head) if new_res is not None else 0
        cap = IslandCapacity(island, key[1], old_n, new_n, old_g, new_g)
        capacity.append(cap)
        what = f"island {island}: {old_n} -> {new_n} nodes, {old_g} -> {new_g} GPUs"
        if old_res is None:
            out.append(Consequence("island-added", "info", key[0], key[1], f"new {what}"))
        elif new_res is None:
            out.append(Consequence("island-removed", "danger", key[0], key[1],
                                   f"scale set deleted: {what}; running jobs die, local NVMe scratch is lost"))
        else:
            if key in replaced:
                out.append(Consequence("island-replaced", "danger", key[0], key[1],
                                       f"every node of island {island} is recreated ({old_n} nodes, {old_g} GPUs "
                                       f"before, {new_n} nodes, {new_g} GPUs after)"))
            if new_n > old_n:
                out.append(Consequence("island-scale-out", "info", key[0], key[1],
                                       f"{what} (+{new_n - old_n} nodes, +{new_g - old_g} GPUs)", "sku.capacity"))
            elif new_n < old_n:
                out.append(Consequence("island-scale-in", "warning", key[0], key[1],
                                       f"{what} ({new_n - old_n} nodes, {new_g - old_g} GPUs): nodes are deleted, "
                                       "jobs on them die, local NVMe scratch is lost", "sku.capacity"))
    return capacity, out


def _describe(prop: PropertyChange) -> str:
    """`path: old -> new`; for the bootstrap, how many of its lines change instead of two hashes."""
    if prop.path.endswith("customData"):
        lines = bootstrap_diff(prop.old, prop.new)
        if lines:
            added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
            removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
            return f"{prop.path}: bootstrap {added} lines added, {removed} removed"
    return f"{prop.path}: {format_value(prop.old, prop.path)} -> {format_value(prop.new, prop.path)}"


@dataclass(frozen=True)
class _Lock:
    name: str  # the lock's resource name in the plan
    lock_name: str  # its Azure name
    level: str
    scope: str


def _plan_locks(plan: Mapping[str, Any] | None) -> list[_Lock]:
    """The CanNotDelete / ReadOnly locks of a plan that have a resource-id scope."""
    locks = []
    for (rtype, name), res in _index(plan).items():
        inputs = res.get("inputs") or {}
        scope, level = inputs.get("scope"), inputs.get("level")
        if rtype in LOCK_TYPES and isinstance(scope, str) and scope.startswith("/") and level in (
            "CanNotDelete",
            "ReadOnly",
        ):
            locks.append(_Lock(name, str(inputs.get("lockName") or name), str(level), scope.rstrip("/")))
    return locks


def _lock_type(plan: Mapping[str, Any] | None, name: str) -> str:
    return next((t for (t, n) in _index(plan) if n == name and t in LOCK_TYPES), "")


def _ids_touched(rtype: str, inputs: Mapping[str, Any]) -> list[str]:
    """Resource ids (or id suffixes, starting with '/') whose deletion a delete of this resource implies."""
    ids: list[str] = []
    if rtype == ROLE_ASSIGNMENT_TYPE and isinstance(inputs.get("scope"), str):
        ids.append(inputs["scope"])
    if rtype == PRIVATE_ENDPOINT_TYPE:
        for key in ("privateLinkServiceConnections", "manualPrivateLinkServiceConnections"):
            for conn in inputs.get(key) or []:
                if isinstance(conn, dict) and isinstance(conn.get("privateLinkServiceId"), str):
                    ids.append(conn["privateLinkServiceId"])
    if rtype in (BLOB_CONTAINER_TYPE, STORAGE_ACCOUNT_TYPE) and isinstance(inputs.get("accountName"), str):
        ids.append(f"/storageAccounts/{inputs['accountName']}")
    if rtype == AML_FILESYSTEM_TYPE and isinstance(inputs.get("amlFilesystemName"), str):
        ids.append(f"/amlFilesystems/{inputs['amlFilesystemName']}")
    return ids


def _under(resource_id: str, scope: str) -> bool:
    """Whether a lock on `scope` covers `resource_id` (a full id, or a suffix such as /storageAccounts/<name>)."""
    rid, scope = resource_id.lower().rstrip("/"), scope.lower()
    if rid.startswith("/subscriptions/"):
        return rid == scope or rid.startswith(scope + "/")
    return scope.endswith(rid)


def _locked_consequences(
    changes: Sequence[ResourceChange], replaced: set[tuple[str, str]], base: Mapping[str, Any] | None
) -> list[Consequence]:
    """A delete or replace that a lock of the base plan blocks: say so, and how to proceed. A lock that the same
    change deletes is left out: Pulumi deletes it before what it guards (it depends on it), and `lock-removed`
    already says so."""
    deleted = {ch.key for ch in changes if ch.op == "delete"}
    locks = [lk for lk in _plan_locks(base) if (_lock_type(base, lk.name), lk.name) not in deleted]
    if not locks:
        return []
    old_idx = _index(base)
    out = []
    for ch in changes:
        if ch.type not in LOCK_BLOCKED_TYPES or not (ch.op == "delete" or ch.key in replaced):
            continue
        inputs = (old_idx.get(ch.key) or {}).get("inputs") or {}
        touched = _ids_touched(ch.type, inputs)
        lock = next((lk for lk in locks if any(_under(i, lk.scope) for i in touched)), None)
        if lock is None:
            continue
        verb = "deleted" if ch.op == "delete" else "replaced (deleted, then created)"
        out.append(Consequence(
            "locked-replace", "danger", ch.type, ch.name,
            f"{_short_type(ch.type)} {verb} under the {lock.level} lock {lock.lock_name} on {lock.scope}: Azure "
            "refuses the delete (ScopeLocked) and `pulumi up` stops half-way. To proceed: `az lock delete --ids "
            f"{lock.scope}/providers/Microsoft.Authorization/locks/{lock.lock_name}`, `pulumi refresh` (Pulumi sees "
            "the lock gone), `pulumi up` (it makes the change and creates the lock again); or keep the old value",
        ))
    return out


def consequences_for(
    changes: Sequence[ResourceChange],
    base: Mapping[str, Any] | None = None,
    head: Mapping[str, Any] | None = None,
) -> tuple[tuple[Consequence, ...], tuple[IslandCapacity, ...]]:
    """The consequences of `changes` (and the per-island capacity), most severe first."""
    out: list[Consequence] = []
    replaced: set[tuple[str, str]] = set()
    for ch in changes:
        if ch.op == "update":
            for prop in ch.properties:
                rule = _rule_for(ch.type, prop)
                if rule is None:
                    continue
                if rule.effect == "replace":
                    replaced.add(ch.key)
                out.append(Consequence(rule.id, rule.severity, ch.type, ch.name,
                                       f"{_describe(prop)}: {rule.what}", prop.path))
            if ch.type in DATA_HOLDING_TYPES and ch.old_protect and not ch.new_protect:
                out.append(Consequence("protect-removed", "warning", ch.type, ch.name,
                                       "Pulumi protect is turned off: `pulumi up` may now delete it"))
        if ch.type in LOCK_TYPES and ch.op == "delete":
            out.append(Consequence("lock-removed", "warning", ch.type, ch.name,
                                   "management lock deleted: Azure no longer blocks deleting what it guards"))
        if ch.type in DATA_HOLDING_TYPES:
            if ch.op == "delete":
                out.append(Consequence("data-deleted", "danger", ch.type, ch.name,
                                       f"{_short_type(ch.type)} deleted: the data it holds is lost"))
            elif ch.key in replaced:
                out.append(Consequence("data-replaced", "danger", ch.type, ch.name,
                                       f"{_short_type(ch.type)} replaced (deleted, then created empty): the data it "
                                       "holds is lost"))
    out.extend(_locked_consequences(changes, replaced, base))
    capacity, island = _capacity_and_island_consequences(base, head, replaced)
    out.extend(island)
    out.sort(key=lambda c: (_SEVERITY_RANK[c.severity], c.resource_type, c.resource_name, c.rule, c.path or ""))
    return tuple(out), tuple(capacity)


# ----------------------------------------------------------------------------------------------------------
# Diffing


def diff_plans(base: Mapping[str, Any] | None, head: Mapping[str, Any] | None, stack: str | None = None) -> StackDiff:
    """Compare two plans of one stack; either may be None (a stack present on one side only)."""
    if base is None and head is None:
        raise ValueError("diff_plans needs at least one plan")
    name = stack or str((head or base or {}).get("stack") or "stack")
    old_idx, new_idx = _index(base), _index(head)
    changes: list[ResourceChange] = []
    for key in sorted(set(old_idx) | set(new_idx)):
        old, new = old_idx.get(key), new_idx.get(key)
        if old is None:
            assert new is not None
            changes.append(ResourceChange(key[0], key[1], "create", new_protect=bool(new.get("protect"))))
        elif new is None:
            changes.append(ResourceChange(key[0], key[1], "delete", old_protect=bool(old.get("protect"))))
        else:
            props = diff_values(old.get("inputs") or {}, new.get("inputs") or {})
            old_p, new_p = bool(old.get("protect")), bool(new.get("protect"))
            parent_changed = old.get("parent") != new.get("parent")
            if parent_changed:
                props = (PropertyChange("(parent)", old.get("parent"), new.get("parent")), *props)
            if old_p != new_p:
                props = (PropertyChange("(protect)", old_p, new_p), *props)
            if props:
                changes.append(ResourceChange(key[0], key[1], "update", props, old_p, new_p))
    consequences, capacity = consequences_for(changes, base, head)
    outputs = diff_values((base or {}).get("outputs") or {}, (head or {}).get("outputs") or {})
    return StackDiff(name, tuple(changes), consequences, capacity, outputs, base is not None, head is not None)


def diff_stacks(
    bases: Mapping[str, Mapping[str, Any]], heads: Mapping[str, Mapping[str, Any]]
) -> list[StackDiff]:
    """Diff every stack found on either side, in name order; a stack on one side only is all-added/all-removed."""
    return [diff_plans(bases.get(s), heads.get(s), s) for s in sorted(set(bases) | set(heads))]


# ----------------------------------------------------------------------------------------------------------
# Rendering


_OP_SIGN = {"create": "+", "delete": "-", "update": "~"}
_SEVERITY_MD = {"danger": ":stop_sign: danger", "warning": ":warning: warning", "info": ":information_source: info"}


def _counts(d: StackDiff) -> str:
    if not d.in_base:
        return f"new stack, {d.count('create')} to create"
    if not d.in_head:
        return f"stack removed, {d.count('delete')} to delete"
    if d.empty:
        return "no changes"
    parts = [f"{d.count('create')} to create", f"{d.count('update')} to update", f"{d.count('delete')} to delete"]
    if d.outputs:
        parts.append(f"{len(d.outputs)} output changes")
    return ", ".join(parts)


def summary_line(diffs: Sequence[StackDiff]) -> str:
    danger = sum(1 for d in diffs for c in d.consequences if c.severity == "danger")
    warning = sum(1 for d in diffs for c in d.consequences if c.severity == "warning")
    stacks = "; ".join(f"{d.stack}: {_counts(d)}" for d in diffs) or "no stacks"
    flags = f"{danger} dangerous, {warning} warnings" if danger or warning else "nothing dangerous"
    return f"{len(diffs)} stack{'s' if len(diffs) != 1 else ''} ({stacks}); {flags}"


def _md_cell(text: str) -> str:
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("`", "'")
    return text


def _md_code(text: str) -> str:
    return f"`{_md_cell(text)}`" if text else ""


def _changed_paths(ch: ResourceChange, limit: int = 6) -> str:
    paths = [p.path for p in ch.properties]
    shown = ", ".join(paths[:limit])
    return shown + (f", ... ({len(paths) - limit} more)" if len(paths) > limit else "")


def _md_details(d: StackDiff) -> list[str]:
    lines = [f"<details><summary>Details: {d.stack} ({len(d.changes)} resources)</summary>", ""]
    for ch in d.changes:
        lines.append(f"**{_OP_SIGN[ch.op]} {_md_cell(ch.name)}** ({_md_code(ch.type)})")
        lines.append("")
        if ch.op == "update":
            lines += ["| property | base | head |", "|---|---|---|"]
            for p in ch.properties:
                lines.append(
                    f"| {_md_code(p.path)} | {_md_code(format_value(p.old, p.path))} | "
                    f"{_md_code(format_value(p.new, p.path))} |"
                )
            lines.append("")
            for p in ch.properties:
                if p.path.endswith("customData"):
                    bdiff = bootstrap_diff(p.old, p.new)
                    if bdiff:
                        fence = "~~~~" if any("```" in line for line in bdiff) else "```"
                        lines += ["Bootstrap changes (decoded customData):", "", fence + "diff", *bdiff, fence, ""]
    if d.outputs:
        lines += ["**Stack outputs**", "", "| output | base | head |", "|---|---|---|"]
        for p in d.outputs:
            lines.append(f"| {_md_code(p.path)} | {_md_code(format_value(p.old))} | {_md_code(format_value(p.new))} |")
        lines.append("")
    lines += ["</details>", ""]
    return lines


def render_markdown(diffs: Sequence[StackDiff], *, max_chars: int = MARKDOWN_MAX_CHARS, title: str = "") -> str:
    """A pull-request comment: marker, summary line, consequences, capacity, a table per stack, folded details.
    When the whole text would pass `max_chars`, the folded details are left out (and it says so)."""
    full = _markdown(diffs, details=True, title=title)
    if len(full) <= max_chars:
        return full
    short = _markdown(diffs, details=False, title=title)
    note = "\n_Details left out: the full diff is longer than a comment allows; run `ndfleet diff` locally or " \
           "see the workflow's artifact._\n"
    return short + note


def _markdown(diffs: Sequence[StackDiff], *, details: bool, title: str) -> str:
    lines = [MARKDOWN_MARKER, f"## {title or 'ndfleet plan diff'}", "", f"**{_md_cell(summary_line(diffs))}**", ""]
    cons = [(d.stack, c) for d in diffs for c in d.consequences]
    cons.sort(key=lambda sc: _SEVERITY_RANK[sc[1].severity])
    if cons:
        lines += ["### Consequences", "", "| | stack | resource | what happens | rule |", "|---|---|---|---|---|"]
        for stack, c in cons:
            lines.append(
                f"| {_SEVERITY_MD[c.severity]} | {_md_cell(stack)} | {_md_code(c.resource_name)} "
                f"({_md_cell(_short_type(c.resource_type))}) | {_md_cell(c.message)} | {_md_code(c.rule)} |"
            )
        lines.append("")
    caps = [(d.stack, c) for d in diffs for c in d.capacity if c.changed]
    if caps:
        lines += ["### Capacity", "", "| stack | island | nodes | GPUs |", "|---|---|---|---|"]
        for stack, cap in caps:
            lines.append(
                f"| {_md_cell(stack)} | {_md_cell(cap.island)} | {cap.old_nodes} -> {cap.new_nodes} "
                f"({cap.new_nodes - cap.old_nodes:+d}) | {cap.old_gpus} -> {cap.new_gpus} "
                f"({cap.new_gpus - cap.old_gpus:+d}) |"
            )
        lines.append("")
    for d in diffs:
        lines += [f"### Stack `{_md_cell(d.stack)}`: {_counts(d)}", ""]
        if not d.changes:
            continue
        lines += ["| | type | name | changed properties |", "|---|---|---|---|"]
        for ch in d.changes:
            lines.append(
                f"| {_OP_SIGN[ch.op]} {ch.op} | {_md_code(_short_type(ch.type))} | {_md_code(ch.name)} | "
                f"{_md_cell(_changed_paths(ch))} |"
            )
        lines.append("")
        if details:
            lines += _md_details(d)
    return "\n".join(lines).rstrip() + "\n"


def render_text(diffs: Sequence[StackDiff]) -> str:
    """The same content for a terminal."""
    lines = [summary_line(diffs), ""]
    cons = [(d.stack, c) for d in diffs for c in d.consequences]
    cons.sort(key=lambda sc: _SEVERITY_RANK[sc[1].severity])
    if cons:
        lines.append("Consequences:")
        for stack, c in cons:
            lines.append(f"  {c.severity.upper():7} [{stack}] {c.resource_name} ({_short_type(c.resource_type)}): "
                         f"{c.message}  [{c.rule}]")
        lines.append("")
    caps = [(d.stack, c) for d in diffs for c in d.capacity if c.changed]
    if caps:
        lines.append("Capacity:")
        for stack, cap in caps:
            lines.append(f"  [{stack}] {cap.island}: nodes {cap.old_nodes} -> {cap.new_nodes} "
                         f"({cap.new_nodes - cap.old_nodes:+d}), GPUs {cap.old_gpus} -> {cap.new_gpus} "
                         f"({cap.new_gpus - cap.old_gpus:+d})")
        lines.append("")
    for d in diffs:
        lines.append(f"== stack {d.stack}: {_counts(d)}")
        for ch in d.changes:
            lines.append(f"  {_OP_SIGN[ch.op]} {ch.type} {ch.name}")
            for p in ch.properties:
                lines.append(f"      {p.path}: {format_value(p.old, p.path)} -> {format_value(p.new, p.path)}")
                if p.path.endswith("customData"):
                    lines += [f"        {line}" for line in bootstrap_diff(p.old, p.new)]
        for p in d.outputs:
            lines.append(f"  output {p.path}: {format_value(p.old)} -> {format_value(p.new)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
