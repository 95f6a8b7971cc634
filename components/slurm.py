"""The Slurm cluster on the validated islands (`ndfleet:scheduler: slurm`): vault, accounting database, shared NFS
home, controller and login node(s); compute nodes join by themselves (see ndfleet/slurm/ and docs/slurm.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import pulumi
import pulumi_azure_native.authorization as authorization
from ndfleet_node.names import TAG_DB_HOST, TAG_NFS_ACCOUNT, TAG_VAULT

from ndfleet.components.identity import role_definition_id
from ndfleet.components.slurm_database import SlurmDatabase, SlurmDatabaseArgs, server_name
from ndfleet.components.slurm_host import SlurmHost, SlurmHostArgs
from ndfleet.components.slurm_share import SlurmShare, SlurmShareArgs, share_account_name
from ndfleet.components.slurm_vault import SlurmVault, SlurmVaultArgs
from ndfleet.slurm.conf import controller_host, slurm_addresses
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.profiles import KEY_VAULT_SECRETS_USER_ROLE_ID


@dataclass(frozen=True)
class ControllerMetrics:
    """What the controller's metrics agent needs from the stack's Monitoring component."""

    rule_id: pulumi.Input[str]  # the data collection rule: Monitoring Metrics Publisher on it, nothing wider
    # The agent's settings the controller reads from its tags (ingestion endpoint, rule immutable id).
    tags: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    # The private path to the ingestion endpoint (private endpoint, DNS): the controller waits for it.
    boot_dependencies: Sequence[pulumi.Resource] = ()


@dataclass(frozen=True)
class SlurmMachineBoot:
    """What one kind of Slurm machine boots with, as ndfleet.prepare rendered it (PreparedMachine): the values the
    VM receives, base64, nothing to render here."""

    custom_data: str  # the cloud-config: fixed for the VM's life
    user_data: str  # the Slurm release and configuration (the controller's after its library bundle): updated in place


@dataclass(frozen=True)
class SlurmClusterArgs:
    spec: ClusterSpec
    resource_group_name: pulumi.Input[str]
    vnet_id: pulumi.Input[str]
    compute_subnet_id: pulumi.Input[str]
    storage_subnet_id: pulumi.Input[str]  # private endpoints
    subscription_id: pulumi.Input[str]
    tenant_id: pulumi.Input[str]
    node_principal_id: pulumi.Input[str]  # the compute nodes' identity: reads the munge key
    controller_boot: SlurmMachineBoot
    login_boot: SlurmMachineBoot  # every login node's: they boot the same
    # Monitoring on: the controller's agent publishes the Slurm states through the stack's data collection rule.
    metrics: ControllerMetrics | None = None
    # Every slot of the vault -> its value, as prepared (ndfleet.prepare.PreparedCluster.vault_slots): the compute
    # bundles' parts, which the nodes' boot step reads (docs/bootstrap.md, "When the bundle outgrows userData"), and
    # a placeholder in the slots no bundle uses.
    vault_slots: Mapping[str, str] = field(default_factory=dict)


class SlurmCluster(pulumi.ComponentResource):
    node_tags: dict[str, pulumi.Input[str]]
    outputs: dict[str, pulumi.Input[object]]

    def __init__(self, name: str, args: SlurmClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:slurm:SlurmCluster", name, None, opts)
        spec = args.spec
        assert spec.slurm is not None
        child = pulumi.ResourceOptions(parent=self)
        rg = args.resource_group_name
        sub = pulumi.Output.from_input(args.subscription_id)
        endpoints = {"private_endpoint_subnet_id": args.storage_subnet_id, "vnet_id": args.vnet_id}
        vault = SlurmVault(
            f"{name}-secrets",
            SlurmVaultArgs(
                resource_group_name=rg, location=spec.location, tenant_id=args.tenant_id, tags=spec.tags,
                name_prefix=spec.name_prefix, bundle_slots=args.vault_slots, **endpoints,
            ),
            opts=child,
        )
        database = SlurmDatabase(
            f"{name}-accounting",
            SlurmDatabaseArgs(
                resource_group_name=rg, location=spec.location, admin_password=vault.db_password,
                server_name=sub.apply(lambda s: server_name(spec.name_prefix, s, spec.stack)),
                sku=spec.slurm.database_sku, storage_gb=spec.slurm.database_storage_gb, zone=spec.zone,
                tags=spec.tags, **endpoints,
            ),
            opts=child,
        )
        share = SlurmShare(
            f"{name}-shared",
            SlurmShareArgs(
                resource_group_name=rg, location=spec.location,
                account_name=sub.apply(lambda s: share_account_name(spec.name_prefix, s, spec.stack)),
                home_gib=spec.slurm.home_share_gib, shared_gib=spec.slurm.shared_share_gib, zone=spec.zone,
                tags=spec.tags, **endpoints,
            ),
            opts=child,
        )
        # The compute nodes read the munge key only.
        munge_grant = authorization.RoleAssignment(
            f"{name}-nodes-munge",
            scope=vault.munge_secret_id,
            principal_id=args.node_principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=role_definition_id(args.subscription_id, KEY_VAULT_SECRETS_USER_ROLE_ID),
            opts=child,
        )
        # ... and the bundle's slots, each on its own: one assignment per fixed slot for the vault's life, so none
        # is ever created again (Azure's 409 RoleAssignmentExists) nor piles up (docs/bootstrap.md).
        part_grants = [
            authorization.RoleAssignment(
                f"{name}-nodes-{slot}",
                scope=part_id,
                principal_id=args.node_principal_id,
                principal_type="ServicePrincipal",
                role_definition_id=role_definition_id(args.subscription_id, KEY_VAULT_SECRETS_USER_ROLE_ID),
                opts=child,
            )
            for slot, part_id in zip(args.vault_slots, vault.bundle_part_ids, strict=True)
        ]
        self.node_tags = {TAG_VAULT: vault.vault_name, TAG_NFS_ACCOUNT: share.account_name}
        # What every Slurm machine reaches at first boot: the vault and the share through their private endpoints.
        machine_needs = [*vault.boot_dependencies, *share.boot_dependencies]
        # The compute nodes also need their munge-key role assignment: give this to IbIslandArgs.boot_dependencies.
        self.node_boot_dependencies: list[pulumi.Resource] = [*machine_needs, munge_grant, *part_grants]
        controller_ip, login_ips = slurm_addresses(spec)
        metrics = args.metrics

        def host(role: str, computer_name: str, vm_size: str, ip: str) -> SlurmHostArgs:
            boot = args.controller_boot if role == "controller" else args.login_boot
            return SlurmHostArgs(
                resource_group_name=rg, location=spec.location, role=role, computer_name=computer_name,
                vm_size=vm_size, private_ip=ip, subnet_id=args.compute_subnet_id,
                subscription_id=args.subscription_id, admin_username=spec.admin_username,
                ssh_public_key=spec.ssh_public_key, custom_data=boot.custom_data,
                user_data=boot.user_data, zone=spec.zone, tags=spec.tags,
                secret_ids=[vault.munge_secret_id], boot_tags=dict(self.node_tags), boot_dependencies=machine_needs,
            )

        controller = SlurmHost(
            f"{name}-ctl",
            replace(
                host("controller", controller_host(spec), spec.slurm.controller_vm_size, controller_ip),
                secret_ids=[vault.munge_secret_id, vault.db_secret_id],
                boot_tags={**self.node_tags, TAG_DB_HOST: database.host, **(metrics.tags if metrics else {})},
                state_disk_gb=spec.slurm.controller_state_disk_gb,
                boot_dependencies=[
                    *machine_needs, *database.boot_dependencies, *(metrics.boot_dependencies if metrics else ()),
                ],
                metrics_rule_id=metrics.rule_id if metrics else None,
            ),
            opts=child,
        )
        # Elastic islands: this identity, the controller's own, gets the scaling role at their scale sets.
        self.controller_principal_id = controller.principal_id
        logins = [
            SlurmHost(f"{name}-login{i}", host("login", f"{spec.name_prefix}-login{i}", spec.slurm.login_vm_size, ip),
                      opts=child)
            for i, ip in enumerate(login_ips)
        ]
        first = logins[0]
        connect = (
            "az network bastion ssh --name \"$(pulumi stack output bastionName)\" --resource-group "
            "\"$(pulumi stack output resourceGroupName)\" "
            f"--target-ip-address {first.private_ip} --auth-type ssh-key --username {spec.admin_username} "
            "--ssh-key ~/.ssh/id_ed25519"
            if spec.bastion
            else f"ssh {spec.admin_username}@{first.private_ip}  (from inside the VNet, a peered network or a VPN)"
        )
        self.outputs = {
            "controller": {"host": controller_host(spec), "privateIp": controller.private_ip},
            "loginAddresses": [login.private_ip for login in logins],
            "connect": connect,
            "partitions": [island.name for island in spec.islands],
            "slurmVersion": spec.slurm.version,
            "vaultName": vault.vault_name,
            "accountingHost": database.host,
            "nfsAccount": share.account_name,
        }
        self.register_outputs(self.outputs)
