"""Storage: a blob account for datasets and checkpoints, and optionally Azure Managed Lustre.

Secure by default: no public blob access, no shared keys (Entra ID only), TLS 1.2, public network access
disabled and a private endpoint in the given subnet, versioning and soft delete, and what holds data is
both `protect`ed in Pulumi and locked CanNotDelete in Azure.

Writes to one storage account are serialised: Azure answers a second concurrent write to the account with
`StorageAccountOperationInProgress`, and a private endpoint that failed half-way cannot be deleted once the
CanNotDelete lock is on (`ScopeLocked`). So everything that writes to the account runs in one explicit order
(`depends_on`): blob service properties -> containers (one after another) -> private endpoint -> its DNS zone
group -> the role assignment -> the lock, last.
Sources: the error as reported against a private endpoint created beside other account writes
(Azure/bicep-registry-modules#6001, hashicorp/terraform-provider-azurerm#28112: "An operation is currently
performing on this storage account that requires exclusive access"); a CanNotDelete lock blocks deleting the
resource and its children (Microsoft Learn, "Lock your Azure resources to protect your infrastructure").

Usable from any Pulumi Python program: `StorageArgs` takes plain values (an account name, a subnet id, a VNet
id, a principal to grant data access) and no ndfleet stack spec.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native.authorization as authorization
import pulumi_azure_native.storage as storage
import pulumi_azure_native.storagecache as storagecache

from ndfleet.components.identity import role_definition_id
from ndfleet.components.slurm_private_link import PrivateLinkArgs, private_link
from ndfleet.stackconfig.clouds import PUBLIC_CLOUD, StorageCloud
from ndfleet.stackconfig.profiles import STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID

LOCK_NAME = "ndfleet-data-cannot-delete"


def storage_account_name(prefix: str, subscription_id: str, stack: str) -> str:
    """3-24 lowercase letters and digits, globally unique: derived from the subscription so it is stable."""
    stem = re.sub(r"[^a-z0-9]", "", prefix.lower())[:12]
    digest = hashlib.sha256(f"{subscription_id}/{stack}/{prefix}".encode()).hexdigest()[:10]
    return f"nd{stem}{digest}"


def _cannot_delete_lock(
    name: str, scope: pulumi.Input[str], holds: str, opts: pulumi.ResourceOptions
) -> authorization.ManagementLockByScope:
    """Azure refuses to delete what this locks, whoever asks: Pulumi's `protect` only guards Pulumi."""
    return authorization.ManagementLockByScope(
        name,
        scope=scope,
        lock_name=LOCK_NAME,
        level="CanNotDelete",
        notes=f"Holds {holds}; remove this lock deliberately before deleting.",
        opts=opts,
    )


@dataclass(frozen=True)
class LustreArgs:
    """Azure Managed Lustre in its own subnet."""

    sku: str  # e.g. AMLFS-Durable-Premium-250
    capacity_tib: int
    subnet_id: pulumi.Input[str]
    zone: str | None = None


@dataclass(frozen=True)
class StorageArgs:
    resource_group_name: pulumi.Input[str]
    location: pulumi.Input[str]
    account_name: pulumi.Input[str]  # 3-24 lowercase letters and digits, globally unique (storage_account_name)
    private_endpoint_subnet_id: pulumi.Input[str]
    vnet_id: pulumi.Input[str]  # linked to the blob private DNS zone so the nodes resolve the private endpoint
    account_sku: str = "Standard_ZRS"
    soft_delete_days: int = 14
    containers: Sequence[str] = ("datasets", "checkpoints")
    # Granted Storage Blob Data Contributor on this account only (the nodes' managed identity).
    blob_data_principal_id: pulumi.Input[str] | None = None
    # For the role definition id; default: the subscription Pulumi deploys to.
    subscription_id: pulumi.Input[str] | None = None
    cloud: StorageCloud = PUBLIC_CLOUD  # the private DNS zone name differs per Azure cloud (ndfleet.stackconfig.clouds)
    lustre: LustreArgs | None = None
    tags: Mapping[str, str] = field(default_factory=dict)


class Storage(pulumi.ComponentResource):
    account_id: pulumi.Output[str]
    account_name: pulumi.Output[str]
    blob_endpoint: pulumi.Output[str]
    lustre_mgs_address: pulumi.Output[str] | None
    # What a node needs at boot to mount the blob containers: give them to IbIslandArgs.boot_dependencies.
    boot_dependencies: list[pulumi.Resource]

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:Storage", name, None, opts)
        rg = args.resource_group_name
        tags = dict(args.tags)

        def after(*resources: pulumi.Resource, protect: bool = False) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, protect=protect, depends_on=list(resources))

        account = storage.StorageAccount(
            f"{name}-account",
            account_name=args.account_name,
            resource_group_name=rg,
            location=args.location,
            kind="StorageV2",
            sku=storage.SkuArgs(name=args.account_sku),
            access_tier=storage.AccessTier.HOT,
            allow_blob_public_access=False,
            allow_shared_key_access=False,
            default_to_o_auth_authentication=True,
            minimum_tls_version="TLS1_2",
            enable_https_traffic_only=True,
            allow_cross_tenant_replication=False,
            public_network_access="Disabled",
            network_rule_set=storage.NetworkRuleSetArgs(
                default_action=storage.DefaultAction.DENY, bypass="AzureServices"
            ),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        # 1. blob service properties
        last: pulumi.Resource = storage.BlobServiceProperties(
            f"{name}-blob-service",
            account_name=account.name,
            resource_group_name=rg,
            blob_services_name="default",
            is_versioning_enabled=True,
            delete_retention_policy=storage.DeleteRetentionPolicyArgs(enabled=True, days=args.soft_delete_days),
            container_delete_retention_policy=storage.DeleteRetentionPolicyArgs(
                enabled=True, days=args.soft_delete_days
            ),
            opts=after(account),
        )
        # 2. containers, one after another
        for container in args.containers:
            last = storage.BlobContainer(
                f"{name}-{container}",
                account_name=account.name,
                resource_group_name=rg,
                container_name=container,
                public_access=storage.PublicAccess.NONE,
                opts=after(last, protect=True),
            )

        # 3. private endpoint: the account is reachable from inside the VNet only.
        # The zone's name is the cloud's (Microsoft Learn, "Azure Private Endpoint private DNS zone values"); the
        # helper registers the endpoint, the zone, its VNet link and (4.) the DNS zone group that writes the
        # endpoint's A record into the zone, under the names this component always gave them (same URNs).
        blob_link = private_link(
            f"{name}-blob",
            PrivateLinkArgs(
                resource_group_name=rg,
                location=args.location,
                subnet_id=args.private_endpoint_subnet_id,
                vnet_id=args.vnet_id,
                target_id=account.id,
                group_id="blob",
                zone_name=args.cloud.blob_private_dns_zone,
                tags=tags,
            ),
            parent=self,
            after=[last],
        )
        last = blob_link.dns_group
        self.boot_dependencies = blob_link.boot_dependencies

        # 5. least privilege: data-plane access to this one account, nothing at group or subscription scope.
        if args.blob_data_principal_id is not None:
            subscription = (
                args.subscription_id
                if args.subscription_id is not None
                else authorization.get_client_config_output().subscription_id
            )
            grant = authorization.RoleAssignment(
                f"{name}-blob-data",
                scope=account.id,
                principal_id=args.blob_data_principal_id,
                principal_type="ServicePrincipal",
                role_definition_id=role_definition_id(subscription, STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID),
                opts=after(last),
            )
            self.boot_dependencies.append(grant)
            last = grant

        # 6. the lock, last: nothing above can be left half-made under it.
        _cannot_delete_lock(f"{name}-account-lock", account.id, "training data and checkpoints", after(last))

        self.lustre_mgs_address = None
        if args.lustre is not None:
            fs = storagecache.AmlFilesystem(
                f"{name}-lustre",
                resource_group_name=rg,
                location=args.location,
                sku=storagecache.SkuNameArgs(name=args.lustre.sku),
                storage_capacity_ti_b=float(args.lustre.capacity_tib),
                filesystem_subnet=args.lustre.subnet_id,
                maintenance_window=storagecache.AmlFilesystemMaintenanceWindowArgs(
                    day_of_week=storagecache.MaintenanceDayOfWeekType.SUNDAY, time_of_day_utc="02:00"
                ),
                zones=[args.lustre.zone] if args.lustre.zone else None,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self, protect=True),
            )
            _cannot_delete_lock(f"{name}-lustre-lock", fs.id, "training data", after(fs))
            self.lustre_mgs_address = fs.client_info.apply(lambda info: info.mgs_address if info else "")

        self.account_id = account.id
        self.account_name = account.name
        self.blob_endpoint = account.primary_endpoints.apply(lambda e: e.blob if e else "")
        self.register_outputs(
            {"accountId": self.account_id, "accountName": self.account_name, "blobEndpoint": self.blob_endpoint}
        )
