"""The consequences table: per resource type and property, what a change does (replacement, reimage,
InfiniBand loss, refused while in use, data lost), each rule with its source; docs/plan-diff.md prints it."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ndfleet.plans.plandiff.resources import (
    CUSTOM_DATA_PATH,
    IMAGE_REFERENCE_PATH,
)
from ndfleet.plans.resource_types import (
    AML_FILESYSTEM_TYPE,
    DISK_TYPE,
    FILE_SHARE_TYPE,
    MYSQL_SERVER_TYPE,
    NIC_TYPE,
    ROLE_ASSIGNMENT_TYPE,
    STORAGE_ACCOUNT_TYPE,
    SUBNET_TYPE,
    VM_TYPE,
    VMSS_TYPE,
    VNET_TYPE,
)

# ----------------------------------------------------------------------------------------------------------
# The consequences table


def _always(old: Any, new: Any) -> bool:
    return True


def _is_ipv4(value: Any) -> bool:
    try:
        ipaddress.IPv4Address(value)
    except (ipaddress.AddressValueError, ValueError, TypeError):
        return False
    return True


def _address_moves(old: Any, new: Any) -> bool:
    """A fixed address changes from one IPv4 address to another (not the subnet id or allocation method beside it)."""
    return _is_ipv4(old) and _is_ipv4(new) and old != new


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
    # One consequence per resource for every changed property under `path` (an image is four properties, one change).
    grouped: bool = False

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
_IMAGE_ROLLOUT = (
    "Azure docs: virtual-machine-scale-sets-upgrade-policy.md (upgrade policy Manual: existing VMs are left alone when "
    "the model changes, new ones get the new model; image reference updates need a reimage) and "
    "virtual-machine-scale-sets-upgrade-scale-set.md, 'OS Updates' (create, scale-out and reimage use the model's "
    "image)"
)
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
        "changes the node bootstrap (customData) and so the island's boot version: new nodes get it, running nodes "
        "only when rolled (`ndfleet-roll start --island <island>` on the controller, docs/upgrades.md: each node "
        "drained, brought to the model and reimaged once it has no job, then validated and burned in)",
        "Azure docs: custom-data.md (customData on a scale set reaches existing instances after reimage)",
    ),
    ConsequenceRule(
        "vmss-image", VMSS_TYPE, IMAGE_REFERENCE_PATH, "reimage", "danger",
        "changes the island's image: a rolling replacement of its nodes. `pulumi up` changes only the scale set model "
        "(upgrade policy Manual): from then on every repaired or added node boots the new image while the others keep "
        "the old one, so the island runs two images (GPU driver, OFED, NCCL) until every node is brought to the new "
        "model (`az vmss update-instances`), which reimages it: its jobs die and it validates again. Roll it in "
        "batches that wait for their jobs: `ndfleet-roll start --island <island>` on the controller "
        "(docs/upgrades.md)",
        _IMAGE_ROLLOUT, grouped=True,
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
        "endpoint, Lustre) is in it; the islands in it must be deleted first. ndfleet's address plan moves no subnet "
        "as a stack grows (docs/network.md): this comes from a changed vnetAddressSpace or a stack planned with the "
        "earlier, node-count-sized layout",
        "Azure docs: virtual-network-manage-subnet.md ('you can change the address range only if there are no "
        "resources in the subnet')",
    ),
    ConsequenceRule(
        "subnet-prefixes", SUBNET_TYPE, "addressPrefixes", "refused", "danger",
        "changes the address ranges of a subnet: Azure refuses while anything is in it",
        "Azure docs: virtual-network-manage-subnet.md",
    ),
    ConsequenceRule(
        "nic-fixed-address", NIC_TYPE, "ipConfigurations", "reimage", "danger",
        "moves a fixed private address. ndfleet renders the controller's (`<prefix>-slurm-ctl-nic`) into boot data "
        "before deployment: slurm.conf on the controller and the login nodes (`SlurmctldHost=<name>(<address>)`; "
        "`AccountingStorageHost`, where slurmctld reaches slurmdbd), updated in place through their userData; every "
        "fixed island's `/etc/default/slurmd` (`--conf-server <address>:6817`, where slurmd fetches its configuration "
        "and registers) and every elastic island's `ndfleet-slurm-name` (the controller it asks for the node's name), "
        "in the node bootstrap, which running nodes read only at boot. Until each node is reimaged it talks to the old "
        "address, so its slurmd loses the controller and its jobs fail. A login node's (`<prefix>-slurm-login<i>-nic`) "
        "is the stack output `slurm.loginAddresses` and the `--target-ip-address` of its `connect` command: users' "
        "saved commands and SSH configurations point at the old address. The address plan never moves them as a stack "
        "grows (docs/network.md); this comes from a changed `vnetAddressSpace`",
        "slurm.conf(5) SlurmctldHost ('the hostname ... optionally followed by the NodeAddr in parentheses') and "
        "AccountingStorageHost; slurmd(8) --conf-server; ndfleet.slurm.conf.slurm_addresses, "
        "templates/slurm/slurm.conf.j2, ndfleet-slurm-setup.sh.j2 and ndfleet-slurm-name.sh.j2 (where the address is "
        "written)",
        when=_address_moves, condition="an IPv4 address (privateIPAddress) changes",
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
     "ndfleet/stackconfig/profiles.py"),
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


