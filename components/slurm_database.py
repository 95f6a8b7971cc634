"""Slurm accounting: Azure Database for MySQL Flexible Server for slurmdbd, reachable only privately.

Public network access is disabled; slurmdbd on the controller reaches the server through a private endpoint and
its private DNS zone, over TLS (the server requires secure transport by default). The server holds the job
history: it is `protect`ed and locked CanNotDelete, with automated backups.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import pulumi
import pulumi_azure_native.dbformysql as dbformysql

from ndfleet.components.slurm_private_link import PrivateLinkArgs, cannot_delete_lock, private_link
from ndfleet.spec.config import ClusterSpec

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
    spec: ClusterSpec
    resource_group_name: pulumi.Input[str]
    vnet_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    subscription_id: pulumi.Input[str]
    admin_password: pulumi.Input[str]


class SlurmDatabase(pulumi.ComponentResource):
    host: pulumi.Output[str]

    def __init__(self, name: str, args: SlurmDatabaseArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:slurm:SlurmDatabase", name, None, opts)
        spec = args.spec
        assert spec.slurm is not None
        server = dbformysql.Server(
            f"{name}-mysql",
            server_name=pulumi.Output.from_input(args.subscription_id).apply(
                lambda sub: server_name(spec.name_prefix, sub, spec.stack)
            ),
            resource_group_name=args.resource_group_name,
            location=spec.location,
            version=MYSQL_VERSION,
            administrator_login=ADMIN_LOGIN,
            administrator_login_password=args.admin_password,
            sku=dbformysql.MySQLServerSkuArgs(name=spec.slurm.database_sku, tier=sku_tier(spec.slurm.database_sku)),
            storage=dbformysql.StorageArgs(storage_size_gb=spec.slurm.database_storage_gb, auto_grow="Enabled"),
            backup=dbformysql.BackupArgs(backup_retention_days=BACKUP_RETENTION_DAYS, geo_redundant_backup="Disabled"),
            network=dbformysql.NetworkArgs(public_network_access="Disabled"),
            availability_zone=spec.zone,
            tags=spec.tags,
            opts=pulumi.ResourceOptions(
                parent=self, protect=True, additional_secret_outputs=["administratorLoginPassword"]
            ),
        )
        dbformysql.Database(
            f"{name}-acct-db",
            resource_group_name=args.resource_group_name,
            server_name=server.name,
            database_name=ACCOUNTING_DATABASE,
            charset="utf8mb4",
            collation="utf8mb4_unicode_ci",
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        cannot_delete_lock(f"{name}-mysql-lock", server.id, "the Slurm job accounting history", self)
        private_link(
            f"{name}-mysql",
            PrivateLinkArgs(
                resource_group_name=args.resource_group_name,
                location=spec.location,
                subnet_id=args.subnet_id,
                vnet_id=args.vnet_id,
                target_id=server.id,
                group_id="mysqlServer",
                zone_name=MYSQL_PRIVATE_DNS_ZONE,
                tags=spec.tags,
            ),
            self,
        )
        self.server_name = server.name
        self.host = server.name.apply(lambda n: f"{n}.mysql.database.azure.com")
        self.register_outputs({"serverName": self.server_name, "host": self.host})
