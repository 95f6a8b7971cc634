"""One Slurm machine: the controller (slurmctld, slurmdbd, state on a managed data disk) or a login node.

Private only: a NIC with a static address at the top of the compute subnet and no public IP (users reach a login
node through Azure Bastion), SSH keys only, its own user-assigned identity allowed to read exactly the Key Vault
secrets it needs (Key Vault Secrets User on each secret, nothing wider). It boots the rendered cloud-config
(ndfleet/slurm/machines.py), which fetches those secrets with that identity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native.authorization as authorization
import pulumi_azure_native.compute as compute
import pulumi_azure_native.managedidentity as managedidentity
import pulumi_azure_native.network as network
from ndfleet_node.names import TAG_IDENTITY_CLIENT_ID, TAG_SLURM_ROLE

from ndfleet.boot_contract import STATE_DISK_LUN
from ndfleet.components.identity import role_definition_id
from ndfleet.components.linux_login import ssh_key_only
from ndfleet.components.slurm_private_link import cannot_delete_lock
from ndfleet.stackconfig.profiles import KEY_VAULT_SECRETS_USER_ROLE_ID, MONITORING_METRICS_PUBLISHER_ROLE_ID

# Ubuntu 22.04 LTS Gen2: Microsoft's Slurm packages are built for it (slurm-ubuntu-jammy).
HOST_IMAGE = compute.ImageReferenceArgs(
    publisher="Canonical", offer="0001-com-ubuntu-server-jammy", sku="22_04-lts-gen2", version="latest"
)


@dataclass(frozen=True)
class SlurmHostArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    role: str  # "controller" | "login" (the tag ndfleet:slurm-role)
    computer_name: str
    vm_size: str
    private_ip: str  # static, in the subnet (ndfleet.slurm.conf.slurm_addresses)
    subnet_id: pulumi.Input[str]
    subscription_id: pulumi.Input[str]  # for the role definition id
    admin_username: str
    ssh_public_key: str
    custom_data: str  # base64 cloud-config (ndfleet.prepare.PreparedMachine.custom_data): fixed for the VM's life
    user_data: str  # base64 Slurm release and configuration (PreparedMachine.user_data): updated in place
    secret_ids: Sequence[pulumi.Input[str]] = ()  # the Key Vault secrets (resource ids) this machine may read
    # Values the machine reads at boot from its tags (vault, NFS account, database host), besides `tags`.
    boot_tags: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    state_disk_gb: int | None = None  # the controller's managed data disk (slurmctld's StateSaveLocation)
    # What the machine reaches at first boot (the vault's, share's and database's private endpoints, their DNS):
    # the VM waits for them, and for its own secret role assignments.
    boot_dependencies: Sequence[pulumi.Resource] = ()
    # The data collection rule this machine's metrics agent publishes through (the controller, monitoring on): its
    # identity gets Monitoring Metrics Publisher on that rule only, and the VM waits for the grant.
    metrics_rule_id: pulumi.Input[str] | None = None
    zone: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)


class SlurmHost(pulumi.ComponentResource):
    private_ip: str
    principal_id: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmHostArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:slurm:SlurmHost", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        zones = [args.zone] if args.zone else None
        base_tags = dict(args.tags)
        identity = managedidentity.UserAssignedIdentity(
            f"{name}-id", resource_group_name=args.resource_group_name, location=args.location, tags=base_tags,
            opts=child,
        )
        grants: list[pulumi.Resource] = []
        for i, secret_id in enumerate(args.secret_ids):
            # Narrowest scope: the one secret, not the vault, group or subscription.
            grant = authorization.RoleAssignment(
                f"{name}-secret-{i}",
                scope=secret_id,
                principal_id=identity.principal_id,
                principal_type="ServicePrincipal",
                role_definition_id=role_definition_id(args.subscription_id, KEY_VAULT_SECRETS_USER_ROLE_ID),
                opts=child,
            )
            grants.append(grant)
        if args.metrics_rule_id is not None:
            # Least privilege, as the nodes' grant (components/monitoring.py): publish through this rule, nothing else.
            grants.append(
                authorization.RoleAssignment(
                    f"{name}-metrics-publish",
                    scope=args.metrics_rule_id,
                    principal_id=identity.principal_id,
                    principal_type="ServicePrincipal",
                    role_definition_id=role_definition_id(args.subscription_id, MONITORING_METRICS_PUBLISHER_ROLE_ID),
                    opts=child,
                )
            )
        tags: dict[str, pulumi.Input[str]] = {
            **base_tags,
            **args.boot_tags,
            TAG_SLURM_ROLE: args.role,
            TAG_IDENTITY_CLIENT_ID: identity.client_id,
        }
        nic = network.NetworkInterface(
            f"{name}-nic",
            resource_group_name=args.resource_group_name,
            location=args.location,
            enable_accelerated_networking=True,
            ip_configurations=[
                # No public IP: reached through Bastion or from inside the VNet.
                network.NetworkInterfaceIPConfigurationArgs(
                    name="ipconfig",
                    primary=True,
                    private_ip_allocation_method="Static",
                    private_ip_address=args.private_ip,
                    subnet=network.SubnetArgs(id=args.subnet_id),
                )
            ],
            tags=base_tags,
            opts=child,
        )
        data_disks: list[compute.DataDiskArgs] | None = None
        if args.state_disk_gb is not None:
            disk = compute.Disk(
                f"{name}-state",
                resource_group_name=args.resource_group_name,
                location=args.location,
                disk_size_gb=args.state_disk_gb,
                sku=compute.DiskSkuArgs(name="Premium_ZRS" if args.zone is None else "Premium_LRS"),
                creation_data=compute.CreationDataArgs(create_option="Empty"),
                network_access_policy="DenyAll",
                public_network_access="Disabled",
                zones=zones,
                tags=base_tags,
                opts=pulumi.ResourceOptions(parent=self, protect=True),
            )
            cannot_delete_lock(f"{name}-state-lock", disk.id, "slurmctld's state (the job queue)", self)
            data_disks = [
                compute.DataDiskArgs(
                    lun=STATE_DISK_LUN,
                    create_option="Attach",
                    caching=compute.CachingTypes.NONE,
                    delete_option="Detach",
                    managed_disk=compute.ManagedDiskParametersArgs(id=disk.id),
                )
            ]
        vm = compute.VirtualMachine(
            f"{name}-vm",
            resource_group_name=args.resource_group_name,
            location=args.location,
            zones=zones,
            hardware_profile=compute.HardwareProfileArgs(vm_size=args.vm_size),
            identity=compute.VirtualMachineIdentityArgs(
                type=compute.ResourceIdentityType.USER_ASSIGNED, user_assigned_identities=[identity.id]
            ),
            storage_profile=compute.StorageProfileArgs(
                image_reference=HOST_IMAGE,
                os_disk=compute.OSDiskArgs(
                    create_option="FromImage",
                    caching=compute.CachingTypes.READ_WRITE,
                    delete_option="Delete",
                    managed_disk=compute.ManagedDiskParametersArgs(storage_account_type="Premium_LRS"),
                ),
                data_disks=data_disks,
            ),
            os_profile=compute.OSProfileArgs(
                computer_name=args.computer_name,
                admin_username=args.admin_username,
                custom_data=args.custom_data,
                linux_configuration=ssh_key_only(args.admin_username, args.ssh_public_key),
            ),
            network_profile=compute.NetworkProfileArgs(
                network_interfaces=[compute.NetworkInterfaceReferenceArgs(id=nic.id, primary=True)]
            ),
            # The Slurm release and configuration: updated in place, picked up by the machine (no rebuild).
            user_data=args.user_data,
            diagnostics_profile=compute.DiagnosticsProfileArgs(boot_diagnostics=compute.BootDiagnosticsArgs(enabled=True)),
            tags=tags,
            # The set-up at first boot reads the secrets and mounts the share: everything it reaches exists first.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.boot_dependencies, *grants]),
        )
        self.private_ip = args.private_ip
        self.principal_id = identity.principal_id
        self.vm_id = vm.id
        self.vm_name = vm.name
        self.register_outputs({"vmId": self.vm_id, "privateIp": self.private_ip})
