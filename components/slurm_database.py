"""Slurm accounting: Azure Database for MySQL Flexible Server for slurmdbd, reachable only privately.

Public network access is disabled; slurmdbd on the controller reaches the server through a private endpoint and
its private DNS zone, over TLS (the server requires secure transport by default). The server holds the job
history: it is `protect`ed and locked CanNotDelete, with automated backups.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native.dbformysql as dbformysql

from ndfleet.components.slurm_private_link import PrivateLinkArgs, cannot_delete_lock, private_link

MYSQL_PRIVATE_DNS_ZONE = "privatelink.mysql.database.azure.com"
MYSQL_VERSION = "8.0.21"
ADMIN_LOGIN = "slurmdbd"
ACCOUNTING_DATABASE = "slurm_acct_db"
BACKUP_RETENTION_DAYS = 14
# Compute size prefix -> service tier (Azure Database for MySQL Flexible Server compute and storage options).
_TIERS = {"B": "Burstable", "D": "GeneralPurpose", "E": "MemoryOptimized"}


def server_name(prefix: str, subscription_id: str, stack: str) -> str:
    """3-63 lowercase letters, digits and '-', globally unique (it is a DNS name)."""
    stem = re.sub(r"[^a-z0-9-]", "", prefix.lower())[:20]
    digest = hashlib.sha256(f"{subscription_id}/{stack}/{prefix}/mysql".encode()).hexdigest()[:8]
    return f"{stem}-slurmdb-{digest}"


def sku_tier(sku: str) -> str:
    return _TIERS[sku.removeprefix("Standard_")[:1]]


@dataclass(frozen=True)
class SlurmDatabaseArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    server_name: pulumi.Input[str]  # globally unique, a DNS name (server_name)
    admin_password: pulumi.Input[str]  # a Pulumi secret
    private_endpoint_subnet_id: pulumi.Input[str]
    vnet_id: pulumi.Input[str]
    sku: str = "Standard_B2ms"  # Standard_B* / D* / E*: the tier follows from the prefix
    storage_gb: int = 32
    zone: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)


class SlurmDatabase(pulumi.ComponentResource):
    host: pulumi.Output[str]
    boot_dependencies: list[pulumi.Resource]

    def __init__(self, name: str, args: SlurmDatabaseArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:slurm:SlurmDatabase", name, None, opts)
        tags = dict(args.tags)
        server = dbformysql.Server(
            f"{name}-mysql",
            server_name=args.server_name,
            resource_group_name=args.resource_group_name,
            location=args.location,
            version=MYSQL_VERSION,
            administrator_login=ADMIN_LOGIN,
            administrator_login_password=args.admin_password,
            sku=dbformysql.MySQLServerSkuArgs(name=args.sku, tier=sku_tier(args.sku)),
            storage=dbformysql.StorageArgs(storage_size_gb=args.storage_gb, auto_grow="Enabled"),
            backup=dbformysql.BackupArgs(backup_retention_days=BACKUP_RETENTION_DAYS, geo_redundant_backup="Disabled"),
            network=dbformysql.NetworkArgs(public_network_access="Disabled"),
            availability_zone=args.zone,
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self, protect=True, additional_secret_outputs=["administratorLoginPassword"]
            ),
        )
        database = dbformysql.Database(
            f"{name}-acct-db",
            resource_group_name=args.resource_group_name,
            server_name=server.name,
            database_name=ACCOUNTING_DATABASE,
            charset="utf8mb4",
            collation="utf8mb4_unicode_ci",
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        link = private_link(
            f"{name}-mysql",
            PrivateLinkArgs(
                resource_group_name=args.resource_group_name,
                location=args.location,
                subnet_id=args.private_endpoint_subnet_id,
                vnet_id=args.vnet_id,
                target_id=server.id,
                group_id="mysqlServer",
                zone_name=MYSQL_PRIVATE_DNS_ZONE,
                tags=tags,
            ),
            self,
            after=[database],
        )
        cannot_delete_lock(
            f"{name}-mysql-lock", server.id, "the Slurm job accounting history", self, after=link.boot_dependencies
        )
        # What the controller needs before slurmdbd reaches the server by name at first boot.
        self.boot_dependencies = link.boot_dependencies
        self.server_name = server.name
        self.host = server.name.apply(lambda n: f"{n}.mysql.database.azure.com")
        self.register_outputs({"serverName": self.server_name, "host": self.host})
