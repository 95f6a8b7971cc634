"""The Slurm cluster's secrets: munge key and accounting-database password, generated at deploy time.

The values come from pulumi_random (Pulumi secrets in the state, shown as [secret] in previews and never in the
offline plan), are stored in a Key Vault with RBAC authorization, purge protection, no public network access and a
private endpoint, and are read at boot by each machine's managed identity (Key Vault Secrets User on the one secret
it needs, nothing wider). customData never holds them.
"""

from __future__ import annotations

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


# The vault's name ends in a random suffix kept in the stack's state (pulumi_random): stable for the stack's life,
# new after `pulumi destroy`. A deleted vault keeps its name for the soft-delete retention (90 days; purge
# protection forbids purging it sooner), so a fixed name would block redeploying the same stack for 90 days
# (Microsoft Learn, "Azure Key Vault soft-delete overview": a soft-deleted vault's name cannot be reused).
VAULT_SUFFIX_LENGTH = 12


def vault_name(prefix: str, suffix: str) -> str:
    """3-24 characters, starting with a letter, letters and digits only: 'kv', up to 10 of the prefix's letters
    and digits, and the stack's random suffix (globally unique names: the suffix carries ~62 bits)."""
    stem = re.sub(r"[^a-z0-9]", "", prefix.lower())[:10]
    return f"kv{stem}{suffix}"


@dataclass(frozen=True)
class SlurmVaultArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    name_prefix: str  # the vault's name: this, then a random suffix kept in state (vault_name)
    tenant_id: pulumi.Input[str]
    private_endpoint_subnet_id: pulumi.Input[str]
    vnet_id: pulumi.Input[str]  # linked to the vault's private DNS zone
    tags: Mapping[str, str] = field(default_factory=dict)
    # Every bundle slot -> its value (ndfleet.prepare.PreparedCluster.vault_slots): the compute nodes' bundle in base64
    # parts, which the nodes' boot step reads instead of userData (docs/bootstrap.md, "When the bundle outgrows
    # userData"), and a placeholder in the slots no bundle uses. One secret per slot, in this order.
    bundle_slots: Mapping[str, str] = field(default_factory=dict)


class SlurmVault(pulumi.ComponentResource):
    vault_name: pulumi.Output[str]
    munge_secret_id: pulumi.Output[str]
    bundle_part_ids: list[pulumi.Output[str]]
    db_secret_id: pulumi.Output[str]
    db_password: pulumi.Output[str]
    boot_dependencies: list[pulumi.Resource]

    def __init__(self, name: str, args: SlurmVaultArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:slurm:SlurmVault", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        suffix = random.RandomString(
            f"{name}-kv-suffix", length=VAULT_SUFFIX_LENGTH, upper=False, special=False, opts=child
        )
        vault = keyvault.Vault(
            f"{name}-kv",
            vault_name=suffix.result.apply(lambda s: vault_name(args.name_prefix, s)),
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
        # The fixed slots (nodebundle.SLOT_NAMES), every one for the vault's whole life: a new bundle is a new
        # version of a slot (an ARM PUT of an existing secret updates it in place), so no deployment creates a secret
        # that exists nor deletes one (a deleted secret's name stays taken for the soft-delete retention). Unused
        # slots hold nodebundle.SLOT_PLACEHOLDER. Kept if ever dropped (retain_on_delete): they go with the vault.
        bundle_parts = [
            keyvault.Secret(
                f"{name}-{slot}",
                resource_group_name=args.resource_group_name,
                vault_name=vault.name,
                secret_name=slot,
                properties=keyvault.SecretPropertiesArgs(
                    value=value, content_type="ndfleet node bundle slot, base64 (customData names its parts)"
                ),
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )
            for slot, value in args.bundle_slots.items()
        ]
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
        self.bundle_part_ids = [part.id for part in bundle_parts]
        self.db_password = pulumi.Output.secret(db_password.result)
        self.register_outputs({"vaultName": self.vault_name, "vaultId": self.vault_id})
