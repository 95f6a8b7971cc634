"""Shared home and software/scratch area for the Slurm cluster: Azure Files NFS 4.1 on a premium FileStorage account.

Why Azure Files NFS and not Azure NetApp Files (docs/slurm.md): NFS file shares need a premium FileStorage account
and are reachable only from restricted networks (here: a private endpoint, public network access disabled), need no
delegated subnet or capacity pool, and start at 100 GiB; home directories and shared software are small,
metadata-heavy and not the training data path (that is blob storage or Managed Lustre). NFS authenticates by
network, not by key or identity, and Azure Files NFS has no encryption in transit: the account therefore refuses
HTTPS-only (secure transfer) and is reachable only inside the VNet; shared-key access is off (nothing uses keys).
The account holds users' data: `protect`ed and locked CanNotDelete.

Writes to the account run one after another, as the blob account's do (components/storage.py: Azure answers a
concurrent write with `StorageAccountOperationInProgress`): account -> home share -> shared share -> private
endpoint -> its DNS zone group -> the lock, last.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native.storage as storage

from ndfleet.components.slurm_private_link import PrivateLinkArgs, cannot_delete_lock, private_link

FILE_PRIVATE_DNS_ZONE = "privatelink.file.core.windows.net"
HOME_SHARE = "home"
SHARED_SHARE = "shared"


def share_account_name(prefix: str, subscription_id: str, stack: str) -> str:
    stem = re.sub(r"[^a-z0-9]", "", prefix.lower())[:11]
    digest = hashlib.sha256(f"{subscription_id}/{stack}/{prefix}/nfs".encode()).hexdigest()[:10]
    return f"nf{stem}{digest}"


@dataclass(frozen=True)
class SlurmShareArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    account_name: pulumi.Input[str]  # 3-24 lowercase letters and digits, globally unique (share_account_name)
    private_endpoint_subnet_id: pulumi.Input[str]
    vnet_id: pulumi.Input[str]
    home_gib: int = 1024
    shared_gib: int = 1024
    zone: str | None = None  # zonal: LRS in that zone's region; regional: ZRS
    tags: Mapping[str, str] = field(default_factory=dict)


class SlurmShare(pulumi.ComponentResource):
    account_name: pulumi.Output[str]
    boot_dependencies: list[pulumi.Resource]

    def __init__(self, name: str, args: SlurmShareArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:slurm:SlurmShare", name, None, opts)
        tags = dict(args.tags)
        keep = pulumi.ResourceOptions(parent=self, protect=True)
        account = storage.StorageAccount(
            f"{name}-account",
            account_name=args.account_name,
            resource_group_name=args.resource_group_name,
            location=args.location,
            kind="FileStorage",
            sku=storage.SkuArgs(name="Premium_ZRS" if args.zone is None else "Premium_LRS"),
            # NFS shares cannot be mounted with secure transfer required (NFS has no TLS in Azure Files).
            enable_https_traffic_only=False,
            allow_blob_public_access=False,
            allow_shared_key_access=False,
            minimum_tls_version="TLS1_2",
            allow_cross_tenant_replication=False,
            public_network_access="Disabled",
            network_rule_set=storage.NetworkRuleSetArgs(default_action=storage.DefaultAction.DENY, bypass="None"),
            tags=tags,
            opts=keep,
        )
        last: pulumi.Resource = account
        for share, quota in ((HOME_SHARE, args.home_gib), (SHARED_SHARE, args.shared_gib)):
            last = storage.FileShare(
                f"{name}-{share}",
                account_name=account.name,
                resource_group_name=args.resource_group_name,
                share_name=share,
                enabled_protocols="NFS",
                # The login node's root creates users' home directories (a new share's root belongs to root, so
                # root squash would leave it unusable); only machines inside the VNet reach the share at all.
                root_squash=storage.RootSquashType.NO_ROOT_SQUASH,
                share_quota=quota,
                opts=pulumi.ResourceOptions(parent=self, protect=True, depends_on=[last]),
            )
        link = private_link(
            f"{name}-file",
            PrivateLinkArgs(
                resource_group_name=args.resource_group_name,
                location=args.location,
                subnet_id=args.private_endpoint_subnet_id,
                vnet_id=args.vnet_id,
                target_id=account.id,
                group_id="file",
                zone_name=FILE_PRIVATE_DNS_ZONE,
                tags=tags,
            ),
            self,
            after=[last],
        )
        cannot_delete_lock(
            f"{name}-account-lock", account.id, "users' home directories and shared software", self,
            after=link.boot_dependencies,
        )
        # What a machine needs before it mounts the shares at first boot.
        self.boot_dependencies = link.boot_dependencies
        self.account_name = account.name
        self.account_id = account.id
        self.register_outputs({"accountName": self.account_name})
