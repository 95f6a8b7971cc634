"""One InfiniBand island: one Uniform scale set in one placement group, which is one IB fabric.

InfiniBand is configured only between VMs of the same scale set with `singlePlacementGroup: true`
(setup-infiniband.md); peers (CycleCloud) use Uniform orchestration with one fault domain and no
overprovisioning. Nodes boot with the rendered bootstrap, validate themselves, and report health to the
Application Health extension; automatic repairs replace a node that stays unhealthy.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.compute as compute

from ndfleet.bootstrap import (
    HEALTH_PATH,
    TAG_IDENTITY_CLIENT_ID,
    TAG_LUSTRE_MGS,
    TAG_STORAGE_ACCOUNT,
    render_bootstrap,
)
from ndfleet.spec.config import ClusterSpec, IslandSpec

TAG_ISLAND = "ndfleet:island"


@dataclass(frozen=True)
class IbIslandArgs:
    spec: ClusterSpec
    island: IslandSpec
    resource_group_name: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    identity_id: pulumi.Input[str]
    identity_client_id: pulumi.Input[str]
    storage_account_name: pulumi.Input[str]
    lustre_mgs_address: pulumi.Input[str] | None
    # More values for the nodes' tags (the Slurm cluster's vault and NFS account, components/slurm.py).
    extra_tags: dict[str, pulumi.Input[str]] | None = None


class IbIsland(pulumi.ComponentResource):
    scale_set_id: pulumi.Output[str]
    scale_set_name: pulumi.Output[str]
    node_count: int

    def __init__(self, name: str, args: IbIslandArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:IbIsland", name, None, opts)
        spec, island, profile = args.spec, args.island, args.spec.profile
        zones = [spec.zone] if spec.zone else None
        # Values only known after deployment reach the node through its scale set's tags, which it reads from
        # the instance metadata service at boot: customData stays deterministic and holds no secrets.
        tags: dict[str, pulumi.Input[str]] = {
            **spec.tags,
            TAG_ISLAND: island.name,
            TAG_STORAGE_ACCOUNT: args.storage_account_name,
            TAG_IDENTITY_CLIENT_ID: args.identity_client_id,
        }
        if args.lustre_mgs_address is not None:
            tags[TAG_LUSTRE_MGS] = args.lustre_mgs_address
        tags.update(args.extra_tags or {})

        ppg_ref: compute.SubResourceArgs | None = None
        if spec.proximity_placement_group:
            # Intent = the VM size lets Azure pick a datacenter that has the size before the first VM lands.
            ppg = compute.ProximityPlacementGroup(
                f"{name}-ppg",
                resource_group_name=args.resource_group_name,
                location=spec.location,
                proximity_placement_group_type="Standard",
                intent=compute.ProximityPlacementGroupPropertiesIntentArgs(vm_sizes=[profile.name]),
                zones=zones,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self),
            )
            ppg_ref = compute.SubResourceArgs(id=ppg.id)

        bootstrap = render_bootstrap(spec, island)
        spot = spec.priority == "Spot"

        vmss = compute.VirtualMachineScaleSet(
            f"{name}-vmss",
            resource_group_name=args.resource_group_name,
            location=spec.location,
            sku=compute.SkuArgs(name=profile.name, tier="Standard", capacity=island.nodes),
            orchestration_mode="Uniform",
            single_placement_group=True,
            platform_fault_domain_count=1,
            overprovision=False,
            upgrade_policy=compute.UpgradePolicyArgs(mode=compute.UpgradeMode.MANUAL),
            zones=zones,
            proximity_placement_group=ppg_ref,
            identity=compute.VirtualMachineScaleSetIdentityArgs(
                type=compute.ResourceIdentityType.USER_ASSIGNED,
                user_assigned_identities=[args.identity_id],
            ),
            automatic_repairs_policy=compute.AutomaticRepairsPolicyArgs(
                enabled=True,
                grace_period=f"PT{spec.health.repair_grace_period_minutes}M",
                repair_action=spec.health.repair_action,
            ),
            virtual_machine_profile=compute.VirtualMachineScaleSetVMProfileArgs(
                priority="Spot" if spot else "Regular",
                eviction_policy="Delete" if spot else None,
                billing_profile=compute.BillingProfileArgs(max_price=spec.spot_max_price) if spot else None,
                storage_profile=compute.VirtualMachineScaleSetStorageProfileArgs(
                    image_reference=compute.ImageReferenceArgs(
                        publisher=spec.image.publisher,
                        offer=spec.image.offer,
                        sku=spec.image.sku,
                        version=spec.image.version,
                    ),
                    os_disk=compute.VirtualMachineScaleSetOSDiskArgs(
                        create_option="FromImage",
                        caching=compute.CachingTypes.READ_WRITE,
                        disk_size_gb=spec.os_disk_size_gb,
                        delete_option="Delete",
                        managed_disk=compute.VirtualMachineScaleSetManagedDiskParametersArgs(
                            storage_account_type="Premium_LRS"
                        ),
                    ),
                ),
                os_profile=compute.VirtualMachineScaleSetOSProfileArgs(
                    computer_name_prefix=f"{spec.name_prefix}-{island.name}-",
                    admin_username=spec.admin_username,
                    custom_data=bootstrap.custom_data,
                    linux_configuration=compute.LinuxConfigurationArgs(
                        disable_password_authentication=True,
                        provision_vm_agent=True,
                        ssh=compute.SshConfigurationArgs(
                            public_keys=[
                                compute.SshPublicKeyArgs(
                                    path=f"/home/{spec.admin_username}/.ssh/authorized_keys",
                                    key_data=spec.ssh_public_key,
                                )
                            ]
                        ),
                    ),
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
                                "port": spec.health.probe_port,
                                "requestPath": HEALTH_PATH,
                                "intervalInSeconds": 30,
                                "numberOfProbes": 3,
                                "gracePeriod": spec.health.probe_grace_period_seconds,
                            },
                        )
                    ]
                ),
            ),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.scale_set_id = vmss.id
        self.scale_set_name = vmss.name
        self.node_count = island.nodes
        self.register_outputs({"scaleSetId": self.scale_set_id, "nodeCount": island.nodes})
