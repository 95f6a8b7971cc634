"""The Slurm Key Vault's name (issue 17): purge protection keeps a deleted vault's name for 90 days, so the name
ends in a random suffix kept in the stack's state (a redeploy after `pulumi destroy` gets a new one) instead of
being derived from the subscription and stack alone."""

from __future__ import annotations

import re

import pytest

from ndfleet.components.slurm_vault import VAULT_SUFFIX_LENGTH, vault_name
from ndfleet.plans.build import Plan
from tests.conftest import base_config, one, plan_of

VAULT = "azure-native:keyvault:Vault"
RANDOM_STRING = "random:index/randomString:RandomString"
# Key Vault names: 3-24 characters, letters, digits and hyphens, starting with a letter (Microsoft Learn, "Naming
# rules and restrictions for Azure resources", Microsoft.KeyVault/vaults).
VAULT_NAME_RULE = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{1,22}[a-zA-Z0-9]$")


@pytest.fixture(scope="module")
def slurm_plan() -> Plan:
    return plan_of(base_config(scheduler="slurm", namePrefix="a-very-long-name-pfx"))


def test_vault_name_ends_in_the_random_suffix_from_state(slurm_plan: Plan) -> None:
    suffix = one(slurm_plan, RANDOM_STRING, "-kv-suffix")
    vault = one(slurm_plan, VAULT)
    assert suffix.name in vault.depends_on
    assert re.fullmatch(rf"kvaverylongn[a-z0-9]{{{VAULT_SUFFIX_LENGTH}}}", vault.inputs["vaultName"])


def test_suffix_is_not_secret_and_has_no_special_characters(slurm_plan: Plan) -> None:
    suffix = one(slurm_plan, RANDOM_STRING, "-kv-suffix")
    assert suffix.inputs["length"] == VAULT_SUFFIX_LENGTH
    assert suffix.inputs["special"] is False and suffix.inputs["upper"] is False


@pytest.mark.parametrize("prefix", ["ab", "nd", "a-very-long-name-pfx", "nd-fleet-01"])
def test_vault_name_follows_azure_naming_rules(prefix: str) -> None:
    name = vault_name(prefix, "z" * VAULT_SUFFIX_LENGTH)
    assert VAULT_NAME_RULE.match(name) and len(name) <= 24


def test_vault_name_is_not_fixed_by_subscription_and_stack() -> None:
    assert vault_name("nd", "a" * VAULT_SUFFIX_LENGTH) != vault_name("nd", "b" * VAULT_SUFFIX_LENGTH)
