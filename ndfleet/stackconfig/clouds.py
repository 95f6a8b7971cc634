"""The storage DNS names that differ between Azure clouds: the one table ndfleet reads them from.

The cloud is the one the Azure provider deploys to: the stack's `azure-native:environment` (Pulumi's names
`public`, `usgovernment`, `china`), else the `ARM_ENVIRONMENT` environment variable the provider also reads,
else Azure public. Resource Manager endpoints for preflight live in `ndfleet.preflight.CLOUDS`.

Sources (Microsoft Learn):
- Blob endpoint suffixes: "Compare Azure Government and global Azure" (blob.core.usgovcloudapi.net),
  https://learn.microsoft.com/azure/azure-government/compare-azure-government-global-azure, and the Azure China
  developer guide (blob.core.chinacloudapi.cn), https://learn.microsoft.com/azure/china/resources-developer-guide
- Private DNS zone of a blob private endpoint per cloud: "Azure Private Endpoint private DNS zone values"
  (Storage account, sub-resource blob: privatelink.blob.core.windows.net / .usgovcloudapi.net /
  .chinacloudapi.cn), https://learn.microsoft.com/azure/private-link/private-endpoint-dns

Features that hold Azure public names are refused on the other clouds (`public_cloud_only_problems`), before
anything is created: monitoring (the node agent's Azure AD cloud, privatelink.monitor.azure.com), Slurm (Key Vault
`vault.azure.net` and its token audience, Azure Files `file.core.windows.net`, MySQL `mysql.database.azure.com` and
their privatelink zones in the components, templates and the node's set-up script) and impact reporting (the node
files reports at `management.azure.com`). Their names differ per cloud (Microsoft Learn, "Compare Azure Government
and global Azure"; the Azure China developer guide; "Azure Private Endpoint private DNS zone values"), and the
paths that would use them are not built for more than one; refusing names the setting, the cloud and what is valid.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ndfleet.stackconfig.clusterspec import ClusterSpec

ENVIRONMENT_SETTING = "azure-native:environment"
ENV_ARM_ENVIRONMENT = "ARM_ENVIRONMENT"


@dataclass(frozen=True)
class StorageCloud:
    name: str  # the Azure CLI's cloud name
    blob_endpoint_suffix: str  # https://<account>.<suffix>/
    blob_private_dns_zone: str  # the private DNS zone a blob private endpoint registers in


STORAGE_CLOUDS: dict[str, StorageCloud] = {
    "AzureCloud": StorageCloud("AzureCloud", "blob.core.windows.net", "privatelink.blob.core.windows.net"),
    "AzureUSGovernment": StorageCloud(
        "AzureUSGovernment", "blob.core.usgovcloudapi.net", "privatelink.blob.core.usgovcloudapi.net"
    ),
    "AzureChinaCloud": StorageCloud(
        "AzureChinaCloud", "blob.core.chinacloudapi.cn", "privatelink.blob.core.chinacloudapi.cn"
    ),
}
PUBLIC_CLOUD = STORAGE_CLOUDS["AzureCloud"]

# Pulumi's `azure-native:environment` values first, then the Azure CLI's and azure-core's names.
_ALIASES = {
    "public": "AzureCloud",
    "azurecloud": "AzureCloud",
    "azurepubliccloud": "AzureCloud",
    "usgovernment": "AzureUSGovernment",
    "azureusgovernment": "AzureUSGovernment",
    "azureusgovernmentcloud": "AzureUSGovernment",
    "usgovernmentcloud": "AzureUSGovernment",
    "china": "AzureChinaCloud",
    "azurechinacloud": "AzureChinaCloud",
    "chinacloud": "AzureChinaCloud",
}


def canonical_cloud_name(value: str) -> str | None:
    """The Azure CLI's name of the cloud `value` names in any of the accepted spellings, else None. Preflight's
    Resource Manager endpoints (`ndfleet.preflight.CLOUDS`) are keyed by the same names."""
    return _ALIASES.get(value.strip().lower().replace("-", "").replace("_", "").replace(" ", ""))


class UnknownCloud(ValueError):
    """The configured cloud is not one ndfleet knows the storage names of."""


def storage_cloud(value: str | None, setting: str = ENVIRONMENT_SETTING) -> StorageCloud:
    """The cloud named `value` (None or empty: Azure public); UnknownCloud names the setting and the valid values."""
    if not value:
        return PUBLIC_CLOUD
    key = canonical_cloud_name(value)
    if key is None:
        raise UnknownCloud(
            f"{setting} = {value!r}: not a known Azure cloud; valid: public, usgovernment, china "
            "(Azure Stack and private clouds are not supported)"
        )
    return STORAGE_CLOUDS[key]


def cloud_from_config(engine_config: Mapping[str, str], env: Mapping[str, str] | None = None) -> StorageCloud:
    """The cloud a stack deploys to, from its engine config, as the azure-native provider picks it."""
    env = os.environ if env is None else env
    if engine_config.get(ENVIRONMENT_SETTING):
        return storage_cloud(engine_config[ENVIRONMENT_SETTING])
    return storage_cloud(env.get(ENV_ARM_ENVIRONMENT), ENV_ARM_ENVIRONMENT)


def public_cloud_only_problems(spec: ClusterSpec, cloud: StorageCloud, namespace: str = "ndfleet") -> list[str]:
    """One problem per feature the stack turns on that works in Azure public only, when `cloud` is another."""
    if cloud == PUBLIC_CLOUD:
        return []
    problems = []
    if spec.monitoring.enabled:
        # The node agent's Azure AD cloud and the Azure Monitor private DNS zone are those of Azure public.
        problems.append(
            f"{namespace}:monitoring.enabled = true: monitoring supports Azure public cloud only, and this stack "
            f"deploys to {cloud.name}; set monitoring.enabled: false"
        )
    if spec.scheduler == "slurm":
        problems.append(
            f"{namespace}:scheduler = 'slurm': Slurm supports Azure public cloud only (its Key Vault, Azure Files "
            f"and MySQL host names, their private DNS zones and the Key Vault token audience are Azure public's), "
            f"and this stack deploys to {cloud.name}; set {namespace}:scheduler: none"
        )
    if spec.health.impact_reporting:
        problems.append(
            f"{namespace}:health.impactReporting = true: impact reporting supports Azure public cloud only (the "
            f"node files reports at management.azure.com), and this stack deploys to {cloud.name}; set "
            "health.impactReporting: false"
        )
    return problems
