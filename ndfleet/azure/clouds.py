"""Which Azure cloud and subscription preflight asks: from the environment, the stack and Pulumi's provider
settings, in that order (docs/preflight.md, "Subscription and cloud")."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ndfleet.azure.errors import CannotCheck
from ndfleet.stackconfig.clouds import canonical_cloud_name
from ndfleet.stackconfig.clusterspec import ClusterSpec


@dataclass(frozen=True)
class CloudSettings:
    """Where Resource Manager and Microsoft Entra ID live for one Azure cloud."""

    name: str
    resource_manager: str  # base URL, no trailing slash
    credential_scope: str  # OAuth scope of Resource Manager
    authority_host: str  # Microsoft Entra ID host azure-identity signs in against
    portal: str  # for the "request more quota" hint


# The Resource Manager endpoints and scopes are the ones azure-mgmt-core's `get_arm_endpoints` uses.
CLOUDS: dict[str, CloudSettings] = {
    "AzureCloud": CloudSettings(
        name="AzureCloud",
        resource_manager="https://management.azure.com",
        credential_scope="https://management.azure.com/.default",
        authority_host="login.microsoftonline.com",
        portal="https://portal.azure.com",
    ),
    "AzureUSGovernment": CloudSettings(
        name="AzureUSGovernment",
        resource_manager="https://management.usgovcloudapi.net",
        credential_scope="https://management.core.usgovcloudapi.net/.default",
        authority_host="login.microsoftonline.us",
        portal="https://portal.azure.us",
    ),
    "AzureChinaCloud": CloudSettings(
        name="AzureChinaCloud",
        resource_manager="https://management.chinacloudapi.cn",
        credential_scope="https://management.chinacloudapi.cn/.default",
        authority_host="login.chinacloudapi.cn",
        portal="https://portal.azure.cn",
    ),
}


# Environment variables read (besides the ones azure-identity reads itself).
ENV_CLOUD = "AZURE_CLOUD"
ENV_PULUMI_CLOUD = "ARM_ENVIRONMENT"
ENV_ARM_ENDPOINT = "AZURE_RESOURCE_MANAGER_ENDPOINT"
ENV_ARM_SCOPE = "AZURE_RESOURCE_MANAGER_SCOPE"
ENV_AUTHORITY = "AZURE_AUTHORITY_HOST"
ENV_SUBSCRIPTION = "AZURE_SUBSCRIPTION_ID"
ENV_PULUMI_SUBSCRIPTION = "ARM_SUBSCRIPTION_ID"
ENV_MANAGED_IDENTITY = "NDFLEET_MANAGED_IDENTITY"
MANAGED_IDENTITY_SIGNALS = ("AZURE_CLIENT_ID", "IDENTITY_ENDPOINT", "MSI_ENDPOINT")

_GUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")



def _cloud_by_name(value: str, setting: str) -> CloudSettings:
    key = canonical_cloud_name(value)
    if key is None:
        raise CannotCheck(f"{setting} = {value!r} is not a known Azure cloud; valid: {', '.join(CLOUDS)}")
    return CLOUDS[key]


def resolve_cloud(env: Mapping[str, str], provider_config: Mapping[str, str] | None = None) -> CloudSettings:
    """The cloud to check against: AZURE_CLOUD, else ARM_ENVIRONMENT, else the stack's `azure-native:environment`
    (what `pulumi up` deploys to), else Azure public. AZURE_RESOURCE_MANAGER_ENDPOINT points Resource Manager
    anywhere else (Azure Stack Hub, a private cloud) with AZURE_RESOURCE_MANAGER_SCOPE as its token scope;
    AZURE_AUTHORITY_HOST overrides the sign-in host, as it does for azure-identity."""
    provider_config = provider_config or {}
    base = CLOUDS["AzureCloud"]
    for setting, value in (
        (ENV_CLOUD, env.get(ENV_CLOUD)),
        (ENV_PULUMI_CLOUD, env.get(ENV_PULUMI_CLOUD)),
        ("azure-native:environment", provider_config.get("environment")),
    ):
        if value:
            base = _cloud_by_name(value, setting)
            break
    endpoint = (env.get(ENV_ARM_ENDPOINT) or "").strip().rstrip("/")
    authority = (env.get(ENV_AUTHORITY) or "").strip()
    if authority.startswith("https://"):
        authority = authority[len("https://") :]
    authority = authority.rstrip("/") or base.authority_host
    if not endpoint:
        return CloudSettings(base.name, base.resource_manager, base.credential_scope, authority, base.portal)
    if not endpoint.startswith("https://"):
        raise CannotCheck(f"{ENV_ARM_ENDPOINT} = {endpoint!r}: must be an https:// URL (bearer tokens need TLS)")
    scope = (env.get(ENV_ARM_SCOPE) or "").strip() or endpoint + "/.default"
    return CloudSettings(f"custom ({base.name} sign-in)", endpoint, scope, authority, base.portal)


def resolve_subscription(
    spec: ClusterSpec, env: Mapping[str, str], provider_config: Mapping[str, str] | None = None
) -> str:
    """`ndfleet:subscriptionId`, else `azure-native:subscriptionId`, else AZURE_SUBSCRIPTION_ID, ARM_SUBSCRIPTION_ID."""
    provider_config = provider_config or {}
    for setting, value in (
        ("ndfleet:subscriptionId", spec.subscription_id),
        ("azure-native:subscriptionId", provider_config.get("subscriptionId")),
        (ENV_SUBSCRIPTION, env.get(ENV_SUBSCRIPTION)),
        (ENV_PULUMI_SUBSCRIPTION, env.get(ENV_PULUMI_SUBSCRIPTION)),
    ):
        if value:
            value = value.strip()
            if not _GUID.match(value):
                raise CannotCheck(f"{setting} = {value!r} is not a subscription id (a GUID)")
            return value
    raise CannotCheck(
        "could not check: no Azure subscription given. Set ndfleet:subscriptionId in the stack "
        f"(pulumi config set ndfleet:subscriptionId <id>) or the {ENV_SUBSCRIPTION} environment variable, "
        f"e.g. export {ENV_SUBSCRIPTION}=$(az account show --query id -o tsv)"
    )

