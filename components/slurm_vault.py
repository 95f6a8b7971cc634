"""The Slurm cluster's secrets: munge key and accounting-database password, generated at deploy time.

The values come from pulumi_random (Pulumi secrets in the state, shown as [secret] in previews and never in the
offline plan), are stored in a Key Vault with RBAC authorization, purge protection, no public network access and a
private endpoint, and are read at boot by each machine's managed identity (Key Vault Secrets User on the one secret
it needs, nothing wider). customData never holds them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native.keyvault as keyvault
import pulumi_random as random

from ndfleet.components.slurm_private_link import PrivateLinkArgs, cannot_delete_lock, private_link

VAULT_PRIVATE_DNS_ZONE = "privatelink.vaultcore.azure.net"
MUNGE_KEY_SECRET = "munge-key"
DB_PASSWORD_SECRET = "slurmdbd-password"
# munge wants at least 32 bytes of key (munge(7)); 128 random letters and digits carry ~760 bits.
MUNGE_KEY_LENGTH = 128
DB_PASSWORD_LENGTH = 40
SOFT_DELETE_DAYS = 90


def vault_name(prefix: str, subscription_id: str, stack: str) -> str:
    """3-24 characters, letters, digits and '-', globally unique: derived from the subscription so it is stable."""
    stem = re.sub(r"[^a-z0-9]", "", prefix.lower())[:10]
    digest = hashlib.sha256(f"{subscription_id}/{stack}/{prefix}/vault".encode()).hexdigest()[:10]
    return f"kv{stem}{digest}"


@dataclass(frozen=True)
class SlurmVaultArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    vault_name: pulumi.Input[str]  # globally unique (vault_name)
    tenant_id: pulumi.Input[str]
    private_endpoint_subnet_id: pulumi.Input[str]
    vnet_id: pulumi.Input[str]  # linked to the vault's private DNS zone
    tags: Mapping[str, str] = field(default_factory=dict)


class SlurmVault(pulumi.ComponentResource):
    vault_name: pulumi.Output[str]
    munge_secret_id: pulumi.Output[str]
    db_secret_id: pulumi.Output[str]
    db_password: pulumi.Output[str]
    boot_dependencies: list[pulumi.Resource]

    def __init__(self, name: str, args: SlurmVaultArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:slurm:SlurmVault", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        vault = keyvault.Vault(
            f"{name}-kv",
            vault_name=args.vault_name,
            resource_group_name=args.resource_group_name,
            location=args.location,
            properties=keyvault.VaultPropertiesArgs(
                tenant_id=args.tenant_id,
                sku=keyvault.SkuArgs(family="A", name=keyvault.SkuName.STANDARD),
                enable_rbac_authorization=True,
                enable_soft_delete=True,
                soft_delete_retention_in_days=SOFT_DELETE_DAYS,
                enable_purge_protection=True,
                public_network_access="Disabled",
                # Deny every network; the machines come through the private endpoint. Trusted Azure services keep
                # access so that Resource Manager can write the secrets below during deployment.
                network_acls=keyvault.NetworkRuleSetArgs(default_action="Deny", bypass="AzureServices"),
                enabled_for_deployment=False,
                enabled_for_template_deployment=False,
                enabled_for_disk_encryption=False,
            ),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=True),
        )
        link = private_link(
            f"{name}-kv",
            PrivateLinkArgs(
                resource_group_name=args.resource_group_name,
                location=args.location,
                subnet_id=args.private_endpoint_subnet_id,
                vnet_id=args.vnet_id,
                target_id=vault.id,
                group_id="vault",
                zone_name=VAULT_PRIVATE_DNS_ZONE,
                tags=tags,
            ),
            self,
            after=[vault],
        )
        munge = random.RandomPassword(f"{name}-munge-key", length=MUNGE_KEY_LENGTH, special=False, opts=child)
        db_password = random.RandomPassword(
            f"{name}-db-password",
            length=DB_PASSWORD_LENGTH,
            special=True,
            # No quote, backslash, '#' or '$': the password goes into slurmdbd.conf and a MySQL connection string.
            override_special="-_.~+=",
            min_upper=2,
            min_lower=2,
            min_numeric=2,
            min_special=2,
            opts=child,
        )
        munge_secret = keyvault.Secret(
            f"{name}-munge-secret",
            resource_group_name=args.resource_group_name,
            vault_name=vault.name,
            secret_name=MUNGE_KEY_SECRET,
            properties=keyvault.SecretPropertiesArgs(
                value=pulumi.Output.secret(munge.result), content_type="munge key (text)"
            ),
            opts=child,
        )
        db_secret = keyvault.Secret(
            f"{name}-db-secret",
            resource_group_name=args.resource_group_name,
            vault_name=vault.name,
            secret_name=DB_PASSWORD_SECRET,
            properties=keyvault.SecretPropertiesArgs(
                value=pulumi.Output.secret(db_password.result), content_type="slurmdbd MySQL password"
            ),
            opts=child,
        )
        cannot_delete_lock(
            f"{name}-kv-lock", vault.id, "the Slurm munge key and database password", self,
            after=[*link.boot_dependencies, munge_secret, db_secret],
        )
        # What a machine needs before it reads its secret through the private endpoint at first boot.
        self.boot_dependencies = link.boot_dependencies
        self.vault_name = vault.name
        self.vault_id = vault.id
        self.munge_secret_id = munge_secret.id
        self.db_secret_id = db_secret.id
        self.db_password = pulumi.Output.secret(db_password.result)
        self.register_outputs({"vaultName": self.vault_name, "vaultId": self.vault_id})
