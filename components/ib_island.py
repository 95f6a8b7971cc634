"""One InfiniBand island: one Uniform scale set in one placement group, which is one IB fabric.

InfiniBand is configured only between VMs of the same scale set with `singlePlacementGroup: true`
(Microsoft Learn, "Set up InfiniBand"); peers (CycleCloud) use Uniform orchestration with one fault domain and no
overprovisioning. Nodes boot with the rendered bootstrap, validate themselves, and report health to the
Application Health extension; automatic repairs replace a node that stays unhealthy.

Usable from any Pulumi Python program: `IbIslandArgs` takes plain values (a VM-size profile by name, a node
count, a subnet id, an identity, an SSH key, the rendered customData and userData) and no ndfleet stack spec.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_azure_native.compute as compute
from ndfleet_node.names import TAG_BOOT_VERSION, TAG_ELASTIC, TAG_ISLAND, TAG_SLURM_RELEASE

from ndfleet.azure.text import terminal_safe
from ndfleet.boot_contract import (
    CUSTOM_DATA_MAX_BYTES,
    HEALTH_PATH,
    HEALTH_PROBE_INTERVAL_S,
    HEALTH_PROBES_TO_AGREE,
    USER_DATA_MAX_BYTES,
)
from ndfleet.components.linux_login import ssh_key_only
from ndfleet.stackconfig.profiles import PROFILES
from ndfleet.stackconfig.settings import DEFAULT_VM_SIZE

# On an elastic island's scale set: Slurm owns its capacity (`ndfleet diff` reads this tag and says so).

# Fault domains of a scale set with singlePlacementGroup: true (decided per case, sources next to each):
# - regional (no zone): 1, what Azure CycleCloud (and CycleCloud Workspace for Slurm) sets on every IB scale set;
#   Uniform regional scale sets accept 1-5 (Microsoft Learn, "Choosing the right number of fault domains for
#   Virtual Machine Scale Set", supported values table).
# - zonal: 5. Uniform zonal scale sets accept only 1 or 5 (same table), and 1 (max spreading) requires multiple
#   placement groups (Microsoft Learn, "Create a Virtual Machine Scale Set that uses availability zones",
#   Placement groups: "If you use max spreading, you must use multiple placement groups"), which InfiniBand rules
#   out; so a zonal island uses fixed spreading over 5.
REGIONAL_FAULT_DOMAINS = 1
ZONAL_FAULT_DOMAINS = 5


# An elastic island's capacity belongs to the controller (docs/elastic.md, "`pulumi up` and Slurm do not fight over
# capacity"). pulumi-azure-native updates a scale set with a full PUT whose sku.capacity wins, and `ignoreChanges`
# would send the capacity kept in Pulumi's state (Pulumi docs, "Resource option: ignoreChanges"): so the program
# reads the live capacity while `pulumi up` runs and sends that (`live_capacity`); `ndfleet diff` reads the elastic
# tag and says so.
# Azure's answer to a GET of a scale set or a resource group that does not exist (yet): its first deployment.
_NOT_FOUND = re.compile(r"\b(ResourceNotFound|ResourceGroupNotFound)\b|\b404\b")
# Scale-in order of an elastic island: the newest VMs first ("NewestVM: ... the newest virtual machines that are
# not protected from scale-in will be chosen for removal", Compute REST API, ScaleInPolicy.rules). A capacity lowered
# by a racing deployment then removes only VMs created after the program read the capacity, never an older one
# that runs a job; an island is in one zone, so no balancing across zones comes first.
ELASTIC_SCALE_IN_RULES = ["NewestVM"]


def live_capacity(resource_group_name: str, scale_set_name: str, when_absent: int) -> int:
    """The scale set's capacity as Azure has it now (`GET` through the provider's invoke), or `when_absent` when
    the scale set or its resource group does not exist yet. Any other failure stops the deployment with a named
    error: sending a guessed capacity is what deletes VMs."""
    try:
        found = compute.get_virtual_machine_scale_set(
            resource_group_name=resource_group_name, vm_scale_set_name=scale_set_name
        )
    except Exception as exc:  # the provider's error: its text is all there is to tell "absent" from a failure
        if _NOT_FOUND.search(str(exc)):
            return when_absent
        raise ValueError(
            f"elastic scale set {scale_set_name!r} in {resource_group_name!r}: its live capacity could not be read "
            f"({terminal_safe(exc)}); not deploying it with a guessed capacity (docs/elastic.md)"
        ) from None
    capacity = found.sku.capacity if found.sku is not None else None
    if isinstance(capacity, float) and capacity.is_integer():
        capacity = int(capacity)  # a number crosses Pulumi's RPC as a protobuf double
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
        raise ValueError(
            f"elastic scale set {scale_set_name!r} in {resource_group_name!r}: sku.capacity = "
            f"{terminal_safe(repr(capacity), 60)} read from Azure, expected a whole number >= 0"
        )
    return capacity


def fault_domain_count(zone: str | None) -> int:
    """platformFaultDomainCount of an InfiniBand island (single placement group), zonal or regional."""
    return ZONAL_FAULT_DOMAINS if zone else REGIONAL_FAULT_DOMAINS


@dataclass(frozen=True)
class ImageArgs:
    publisher: str = "microsoft-dsvm"
    offer: str = "ubuntu-hpc"
    sku: str = "2204"
    version: str = "latest"
    # An Azure Compute Gallery image's resource id: the reference is then `id` alone (ImageReference.id).
    gallery_id: str = ""


@dataclass(frozen=True)
class HealthArgs:
    """Application Health extension (rich health states) and automatic repairs."""

    probe_port: int = 18300
    # Let the node's set-up and validation finish before its health counts. ndfleet.prepare derives it from the
    # stack (PreparedCluster.probe_grace_period_s); 2,400 s is what it derives for ND H100 v5 at the default
    # full validation with DCGM level 1 (a test keeps the two equal).
    probe_grace_period_seconds: int = 2400
    repair_action: Literal["Replace", "Reimage", "Restart"] = "Replace"
    repair_grace_period_minutes: int = 30
    interval_seconds: int = HEALTH_PROBE_INTERVAL_S
    number_of_probes: int = HEALTH_PROBES_TO_AGREE


@dataclass(frozen=True)
class IbIslandArgs:
    resource_group_name: pulumi.Input[str]
    location: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    # The user-assigned identity the nodes run as (resource id).
    identity_id: pulumi.Input[str]
    ssh_public_key: str
    # base64 customData the nodes boot with (ndfleet.prepare renders it: PreparedIsland.bootstrap.custom_data).
    custom_data: pulumi.Input[str]
    node_count: int
    # base64 VM userData (PreparedIsland.bootstrap.vm_user_data: the node bundle the customData's boot step fetches
    # from the instance metadata service); None: the scale set has no userData.
    user_data: pulumi.Input[str] | None = None
    vm_size: str = DEFAULT_VM_SIZE  # a VM-size profile by name (ndfleet.stackconfig.profiles.PROFILES)
    island_name: str | None = None  # tag ndfleet:island; default: the component's name
    computer_name_prefix: str | None = None  # default: "<component name>-"
    admin_username: str = "azureuser"
    zone: str | None = None
    image: ImageArgs = field(default_factory=ImageArgs)
    os_disk_size_gb: int = 256
    health: HealthArgs = field(default_factory=HealthArgs)
    priority: Literal["Regular", "Spot"] = "Regular"
    spot_max_price: float = -1
    proximity_placement_group: bool = True
    tags: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    # What the nodes need at boot (storage private endpoint, its DNS records, their role assignment): the scale
    # set is created only after these exist.
    boot_dependencies: Sequence[pulumi.Resource] = ()
    # Elastic (docs/elastic.md): Slurm owns the capacity once the scale set exists (`pulumi up` sends the capacity
    # the scale set has at that moment, read live), node_count is the capacity it is created with, and the scale set
    # gets a fixed name the controller's programs can address before deployment (required when elastic).
    elastic: bool = False
    scale_set_name: str | None = None
    # The island's boot version and the Slurm release its nodes install (PreparedIsland: ndfleet/boot_version.py),
    # tagged on the scale set so `status` and the roll read which version its model holds. Tags are the resource's,
    # not the VM profile's (Microsoft Learn, "Modify a Virtual Machine Scale Set": the model is the scale set's
    # `virtualMachineProfile`; tags sit beside it in the resource, Compute REST API, Virtual Machine Scale Sets -
    # Create Or Update), so a tag change is no model change; the version changes with the boot data, which is.
    boot_version: str = ""
    slurm_release: str = ""


def _check(args: IbIslandArgs) -> None:
    problems = []
    if args.vm_size not in PROFILES:
        problems.append(f"vm_size = {args.vm_size!r}: no VM-size profile; known: {', '.join(sorted(PROFILES))}")
    if args.node_count < (0 if args.elastic else 1):
        problems.append(f"node_count = {args.node_count}: at least {0 if args.elastic else 1}")
    if args.elastic and not args.scale_set_name:
        problems.append("scale_set_name: required when elastic (its live capacity is read by that name)")
    for name, value, limit in (
        ("custom_data", args.custom_data, CUSTOM_DATA_MAX_BYTES),
        ("user_data", args.user_data, USER_DATA_MAX_BYTES),
    ):
        if not isinstance(value, str):
            continue  # an Output, or no userData: Azure checks it
        try:
            size = len(base64.b64decode(value, validate=True))
        except binascii.Error:
            problems.append(f"{name}: not base64")
        else:
            if size > limit:
                problems.append(f"{name}: {size:,} bytes decoded, over Azure's limit of {limit:,}")
    if problems:
        raise ValueError("IbIslandArgs: " + "; ".join(problems))


class IbIsland(pulumi.ComponentResource):
    scale_set_id: pulumi.Output[str]
    scale_set_name: pulumi.Output[str]
    node_count: int

    def __init__(self, name: str, args: IbIslandArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        _check(args)
        super().__init__("ndfleet:cluster:IbIsland", name, None, opts)
        profile = PROFILES[args.vm_size]
        zones = [args.zone] if args.zone else None
        tags: dict[str, pulumi.Input[str]] = {**args.tags, TAG_ISLAND: args.island_name or name}
        if args.elastic:
            tags[TAG_ELASTIC] = "capacity managed by Slurm"
        # The scale set's own tags only: the proximity placement group and the extensions carry no version.
        versions = {TAG_BOOT_VERSION: args.boot_version, TAG_SLURM_RELEASE: args.slurm_release}
        scale_set_tags = {**tags, **{k: v for k, v in versions.items() if v}}

        ppg_ref: compute.SubResourceArgs | None = None
        if args.proximity_placement_group:
            # Intent = the VM size lets Azure pick a datacenter that has the size before the first VM lands.
            ppg = compute.ProximityPlacementGroup(
                f"{name}-ppg",
                resource_group_name=args.resource_group_name,
                location=args.location,
                proximity_placement_group_type="Standard",
                intent=compute.ProximityPlacementGroupPropertiesIntentArgs(vm_sizes=[profile.name]),
                zones=zones,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self),
            )
            ppg_ref = compute.SubResourceArgs(id=ppg.id)

        spot = args.priority == "Spot"
        health = args.health
        capacity: pulumi.Input[int] = args.node_count
        if args.elastic:
            name_of_set = str(args.scale_set_name)
            capacity = pulumi.Output.from_input(args.resource_group_name).apply(
                lambda group: live_capacity(group, name_of_set, args.node_count)
            )
        vmss = compute.VirtualMachineScaleSet(
            f"{name}-vmss",
            resource_group_name=args.resource_group_name,
            location=args.location,
            sku=compute.SkuArgs(name=profile.name, tier="Standard", capacity=capacity),
            vm_scale_set_name=args.scale_set_name,
            orchestration_mode="Uniform",
            single_placement_group=True,
            platform_fault_domain_count=fault_domain_count(args.zone),
            overprovision=False,
            upgrade_policy=compute.UpgradePolicyArgs(mode=compute.UpgradeMode.MANUAL),
            scale_in_policy=compute.ScaleInPolicyArgs(rules=ELASTIC_SCALE_IN_RULES) if args.elastic else None,
            zones=zones,
            proximity_placement_group=ppg_ref,
            identity=compute.VirtualMachineScaleSetIdentityArgs(
                type=compute.ResourceIdentityType.USER_ASSIGNED,
                user_assigned_identities=[args.identity_id],
            ),
            automatic_repairs_policy=compute.AutomaticRepairsPolicyArgs(
                enabled=True,
                grace_period=f"PT{health.repair_grace_period_minutes}M",
                repair_action=health.repair_action,
            ),
            virtual_machine_profile=compute.VirtualMachineScaleSetVMProfileArgs(
                priority="Spot" if spot else "Regular",
                eviction_policy="Delete" if spot else None,
                billing_profile=compute.BillingProfileArgs(max_price=args.spot_max_price) if spot else None,
                storage_profile=compute.VirtualMachineScaleSetStorageProfileArgs(
                    image_reference=compute.ImageReferenceArgs(id=args.image.gallery_id)
                    if args.image.gallery_id
                    else compute.ImageReferenceArgs(
                        publisher=args.image.publisher,
                        offer=args.image.offer,
                        sku=args.image.sku,
                        version=args.image.version,
                    ),
                    # No deleteOption: it is documented for Flexible orchestration only ("Specifies whether OS
                    # Disk should be deleted or detached upon VMSS Flex deletion (This feature is available for
                    # VMSS with Flexible OrchestrationMode only)", Compute REST API 2024-11-01,
                    # VirtualMachineScaleSetOSDisk.deleteOption); a Uniform instance's OS disk goes with it.
                    os_disk=compute.VirtualMachineScaleSetOSDiskArgs(
                        create_option="FromImage",
                        caching=compute.CachingTypes.READ_WRITE,
                        disk_size_gb=args.os_disk_size_gb,
                        managed_disk=compute.VirtualMachineScaleSetManagedDiskParametersArgs(
                            storage_account_type="Premium_LRS"
                        ),
                    ),
                ),
                os_profile=compute.VirtualMachineScaleSetOSProfileArgs(
                    computer_name_prefix=args.computer_name_prefix or f"{name}-",
                    admin_username=args.admin_username,
                    custom_data=args.custom_data,
                    linux_configuration=ssh_key_only(args.admin_username, args.ssh_public_key),
                ),
                network_profile=compute.VirtualMachineScaleSetNetworkProfileArgs(
                    network_interface_configurations=[
                        compute.VirtualMachineScaleSetNetworkConfigurationArgs(
                            name="eth0",
                            primary=True,
                            enable_accelerated_networking=True,
                            ip_configurations=[
                                # No publicIPAddressConfiguration: nodes are private; outbound via the NAT gateway.
                                compute.VirtualMachineScaleSetIPConfigurationArgs(
                                    name="ipconfig",
                                    primary=True,
                                    subnet=compute.ApiEntityReferenceArgs(id=args.subnet_id),
                                )
                            ],
                        )
                    ]
                ),
                # The node bundle: updatable in place (no reimage), read by the node from the instance metadata
                # service (Microsoft Learn, "User data for Azure Virtual Machine").
                user_data=args.user_data,
                diagnostics_profile=compute.DiagnosticsProfileArgs(
                    boot_diagnostics=compute.BootDiagnosticsArgs(enabled=True)
                ),
                extension_profile=compute.VirtualMachineScaleSetExtensionProfileArgs(
                    extensions=[
                        compute.VirtualMachineScaleSetExtensionArgs(
                            name="health",
                            publisher="Microsoft.ManagedServices",
                            type="ApplicationHealthLinux",
                            type_handler_version="2.0",
                            auto_upgrade_minor_version=True,
                            # Rich health states: the node's endpoint answers Initializing while it validates,
                            # then Healthy or Unhealthy; automatic repairs act on Unhealthy.
                            settings={
                                "protocol": "http",
                                "port": health.probe_port,
                                "requestPath": HEALTH_PATH,
                                "intervalInSeconds": health.interval_seconds,
                                "numberOfProbes": health.number_of_probes,
                                "gracePeriod": health.probe_grace_period_seconds,
                            },
                        )
                    ]
                ),
            ),
            tags=scale_set_tags,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=list(args.boot_dependencies),
            ),
        )

        self.scale_set_id = vmss.id
        self.scale_set_name = vmss.name
        self.node_count = args.node_count
        self.register_outputs({"scaleSetId": self.scale_set_id, "nodeCount": args.node_count})
