"""Storage: a blob account for datasets and checkpoints, and optionally Azure Managed Lustre.

Secure by default: no public blob access, no shared keys (Entra ID only), TLS 1.2, public network access
disabled and a private endpoint in the storage subnet, versioning and soft delete, and what holds data is
both `protect`ed in Pulumi and locked CanNotDelete in Azure.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import pulumi
import pulumi_azure_native.authorization as authorization
import pulumi_azure_native.network as network
import pulumi_azure_native.privatedns as privatedns
import pulumi_azure_native.storage as storage
import pulumi_azure_native.storagecache as storagecache

from ndfleet.spec.config import ClusterSpec

BLOB_PRIVATE_DNS_ZONE = "privatelink.blob.core.windows.net"


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
        lock_name="ndfleet-data-cannot-delete",
        level="CanNotDelete",
        notes=f"Holds {holds}; remove this lock deliberately before deleting.",
        opts=opts,
    )


@dataclass(frozen=True)
class StorageArgs:
    spec: ClusterSpec
    resource_group_name: pulumi.Input[str]
    vnet_id: pulumi.Input[str]
    storage_subnet_id: pulumi.Input[str]
    lustre_subnet_id: pulumi.Input[str] | None
    subscription_id: pulumi.Input[str]


class Storage(pulumi.ComponentResource):
    account_id: pulumi.Output[str]
    account_name: pulumi.Output[str]
    blob_endpoint: pulumi.Output[str]
    lustre_mgs_address: pulumi.Output[str] | None

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:Storage", name, None, opts)
        spec = args.spec
        rg = args.resource_group_name
        child = pulumi.ResourceOptions(parent=self)
        keep = pulumi.ResourceOptions(parent=self, protect=True)
        tags = spec.tags

        account = storage.StorageAccount(
            f"{name}-account",
            account_name=pulumi.Output.from_input(args.subscription_id).apply(
                lambda sub: storage_account_name(spec.name_prefix, sub, spec.stack)
            ),
            resource_group_name=rg,
            location=spec.location,
            kind="StorageV2",
            sku=storage.SkuArgs(name=spec.storage.account_sku),
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
            opts=keep,
        )
        storage.BlobServiceProperties(
            f"{name}-blob-service",
            account_name=account.name,
            resource_group_name=rg,
            blob_services_name="default",
            is_versioning_enabled=True,
            delete_retention_policy=storage.DeleteRetentionPolicyArgs(enabled=True, days=spec.storage.soft_delete_days),
            container_delete_retention_policy=storage.DeleteRetentionPolicyArgs(
                enabled=True, days=spec.storage.soft_delete_days
            ),
            opts=child,
        )
        for container in spec.storage.containers:
            storage.BlobContainer(
                f"{name}-{container}",
                account_name=account.name,
                resource_group_name=rg,
                container_name=container,
                public_access=storage.PublicAccess.NONE,
                opts=keep,
            )
        _cannot_delete_lock(f"{name}-account-lock", account.id, "training data and checkpoints", child)

        # Private endpoint: the account is reachable from inside the VNet only.
        endpoint = network.PrivateEndpoint(
            f"{name}-blob-pe",
            resource_group_name=rg,
            location=spec.location,
            subnet=network.SubnetArgs(id=args.storage_subnet_id),
            private_link_service_connections=[
                network.PrivateLinkServiceConnectionArgs(
                    name="blob", private_link_service_id=account.id, group_ids=["blob"]
                )
            ],
            tags=tags,
            opts=child,
        )
        zone = privatedns.PrivateZone(
            f"{name}-blob-dns",
            resource_group_name=rg,
            private_zone_name=BLOB_PRIVATE_DNS_ZONE,
            location="Global",
            tags=tags,
            opts=child,
        )
        privatedns.VirtualNetworkLink(
            f"{name}-blob-dns-link",
            resource_group_name=rg,
            private_zone_name=zone.name,
            location="Global",
            registration_enabled=False,
            virtual_network=privatedns.SubResourceArgs(id=args.vnet_id),
            tags=tags,
            opts=child,
        )
        network.PrivateDnsZoneGroup(
            f"{name}-blob-dns-group",
            resource_group_name=rg,
            private_endpoint_name=endpoint.name,
            private_dns_zone_group_name="default",
            private_dns_zone_configs=[network.PrivateDnsZoneConfigArgs(name="blob", private_dns_zone_id=zone.id)],
            opts=child,
        )

        self.lustre_mgs_address = None
        lustre = spec.storage.lustre
        if lustre is not None:
            if args.lustre_subnet_id is None:
                raise ValueError("the spec has Managed Lustre but the network has no Lustre subnet")
            fs = storagecache.AmlFilesystem(
                f"{name}-lustre",
                resource_group_name=rg,
                location=spec.location,
                sku=storagecache.SkuNameArgs(name=lustre.sku.name),
                storage_capacity_ti_b=float(lustre.capacity_tib),
                filesystem_subnet=args.lustre_subnet_id,
                maintenance_window=storagecache.AmlFilesystemMaintenanceWindowArgs(
                    day_of_week=storagecache.MaintenanceDayOfWeekType.SUNDAY, time_of_day_utc="02:00"
                ),
                zones=[spec.zone] if spec.zone else None,
                tags=tags,
                opts=keep,
            )
            _cannot_delete_lock(f"{name}-lustre-lock", fs.id, "training data", child)
            self.lustre_mgs_address = fs.client_info.apply(lambda info: info.mgs_address if info else "")

        self.account_id = account.id
        self.account_name = account.name
        self.blob_endpoint = account.primary_endpoints.apply(lambda e: e.blob if e else "")
        self.register_outputs(
            {"accountId": self.account_id, "accountName": self.account_name, "blobEndpoint": self.blob_endpoint}
        )
