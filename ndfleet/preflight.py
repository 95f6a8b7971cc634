"""`ndfleet preflight`: ask Azure, before anything is created, whether the stack can be deployed.

A GPU cluster deployment most often fails twenty minutes into `pulumi up`: the VM family's vCPU quota is too
small, the size is not offered in the region or zone, or it is offered but restricted for the subscription.
This module reads the facts from Resource Manager with the Azure SDK's management clients (their pipeline, retry
and error handling; no hand-written REST) and checks them in seconds:

    location        the region exists for the subscription and is a physical region
    vm-size-region  the VM size is offered in the region (Microsoft.Compute/skus)
    vm-size-zone    ... and in the stack's availability zone, when one is set
    vm-restrictions it is not restricted for the subscription (NotAvailableForSubscription, QuotaId), region or zone
    quota-family    the VM family's vCPU limit minus usage covers nodes x vCPUs (Microsoft.Compute/locations/usages)
    quota-regional  and so does the regional total (`cores`; `lowPriorityCores` for Spot)
    lustre-sku      the Managed Lustre SKU is offered in the region (Microsoft.StorageCache/skus), if the stack has it

Each check is one pure function of the facts, so tests can call them directly; `run_preflight` gathers the facts.
Exit codes: 0 every check passed (warnings allowed), 1 a check failed, 2 it could not check (no credentials, no
permission, network, throttling or server errors after the SDK's retries, no subscription, invalid stack).

Credentials: azure-identity's `DefaultAzureCredential` (environment, workload identity, Azure CLI, Azure
Developer CLI, PowerShell...). Managed identity is left out of the chain unless something says it is wanted
(`AZURE_CLIENT_ID`, `IDENTITY_ENDPOINT`, `MSI_ENDPOINT`, `NDFLEET_MANAGED_IDENTITY=true`, or an explicit
`AZURE_TOKEN_CREDENTIALS` choice, which is then honoured as azure-identity documents it): on a laptop the chain
then sends nothing to the instance metadata service (169.254.169.254) and answers "no credentials" in well
under a second instead of waiting on a metadata-service timeout.
"""

from __future__ import annotations

import argparse
import base64
import difflib
import json
import logging
import os
import re
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Literal

from ndfleet.prepare import PrepareError, prepare_config
from ndfleet.spec.config import ClusterSpec, SpecError, load_spec  # noqa: F401 (load_spec: kept for callers)
from ndfleet.spec.stackfile import StackFileError, add_stack_arguments, load_stack

Status = Literal["pass", "warn", "fail", "skip", "error"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CANNOT_CHECK = 2

JSON_SCHEMA_VERSION = 1

# ----------------------------------------------------------------------------------------------------------
# Clouds


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

# Names accepted for a cloud: the Azure CLI's (`az cloud list`), azure-core's AzureClouds, and Pulumi's
# `azure-native:environment` / ARM_ENVIRONMENT values.
_CLOUD_ALIASES = {
    "azurecloud": "AzureCloud",
    "azurepubliccloud": "AzureCloud",
    "azure_public_cloud": "AzureCloud",
    "public": "AzureCloud",
    "azureusgovernment": "AzureUSGovernment",
    "azureusgovernmentcloud": "AzureUSGovernment",
    "azure_us_government": "AzureUSGovernment",
    "usgovernment": "AzureUSGovernment",
    "usgovernmentcloud": "AzureUSGovernment",
    "azurechinacloud": "AzureChinaCloud",
    "azure_china_cloud": "AzureChinaCloud",
    "china": "AzureChinaCloud",
    "chinacloud": "AzureChinaCloud",
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
_MANAGED_IDENTITY_SIGNALS = ("AZURE_CLIENT_ID", "IDENTITY_ENDPOINT", "MSI_ENDPOINT")

_GUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")


class CannotCheck(Exception):
    """Preflight could not ask Azure at all (exit 2). str() is the message for the user."""


class PreflightFailed(Exception):
    """Raised by `enforce_preflight`: a check failed (exit_code 1) or Azure could not be asked (2)."""

    def __init__(self, message: str, exit_code: int):
        self.exit_code = exit_code
        super().__init__(message)


def _cloud_by_name(value: str, setting: str) -> CloudSettings:
    key = _CLOUD_ALIASES.get(value.strip().lower().replace("-", "").replace(" ", ""))
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


# ----------------------------------------------------------------------------------------------------------
# Credentials


def managed_identity_wanted(env: Mapping[str, str]) -> bool:
    flag = (env.get(ENV_MANAGED_IDENTITY) or "").strip().lower()
    if flag in ("1", "true", "yes", "on"):
        return True
    if flag in ("0", "false", "no", "off"):
        return False
    return any(env.get(name) for name in _MANAGED_IDENTITY_SIGNALS)


def build_credential(cloud: CloudSettings, env: Mapping[str, str]) -> Any:
    """DefaultAzureCredential for `cloud`, without the managed-identity probe unless it is wanted (module doc)."""
    from azure.identity import DefaultAzureCredential

    kwargs: dict[str, Any] = {"authority": cloud.authority_host}
    if not env.get("AZURE_TOKEN_CREDENTIALS") and not managed_identity_wanted(env):
        kwargs["exclude_managed_identity_credential"] = True
    return DefaultAzureCredential(**kwargs)


class _SharedTokenCredential:
    """Asks the wrapped credential once per scope set, so three SDK clients do not each run `az` for a token."""

    def __init__(self, inner: Any):
        self._inner = inner
        self._lock = threading.Lock()
        self._tokens: dict[tuple[Any, ...], Any] = {}

    def get_token(self, *scopes: str, claims: str | None = None, tenant_id: str | None = None, **kwargs: Any) -> Any:
        key = (scopes, claims, tenant_id)
        with self._lock:
            token = self._tokens.get(key)
            if token is None or token.expires_on - 300 < time.time():
                token = self._inner.get_token(*scopes, claims=claims, tenant_id=tenant_id, **kwargs)
                self._tokens[key] = token
            return token

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


def _first_lines(text: str, limit: int = 12) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("To mitigate this issue", "Visit https://"))]
    # DefaultAzureCredential lists one attempted credential per line after a header: show them as a list.
    lines = [("- " + line if re.match(r"^\w+Credential: ", line) else line) for line in lines]
    if len(lines) > limit:
        lines = lines[:limit] + ["..."]
    return "\n".join("    " + line for line in lines)


def _no_credentials_message(cloud: CloudSettings, detail: str) -> str:
    return (
        f"could not check: no usable Azure credentials for {cloud.name} ({cloud.resource_manager}).\n"
        "  Sign in with `az login` (for a sovereign cloud first `az cloud set --name AzureUSGovernment` or "
        "AzureChinaCloud),\n"
        "  or set AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET (service principal) or workload identity;\n"
        f"  on an Azure VM with a managed identity set {ENV_MANAGED_IDENTITY}=true.\n"
        "  azure-identity said:\n" + _first_lines(detail)
    )


# ----------------------------------------------------------------------------------------------------------
# Facts read from Resource Manager, as plain data (the check functions never see SDK models)


@dataclass(frozen=True)
class Region:
    name: str
    display_name: str
    region_type: str  # "Physical" or "Logical" ("" when Resource Manager does not say)


@dataclass(frozen=True)
class SkuRestriction:
    type: str  # "Location" or "Zone"
    reason: str  # NotAvailableForSubscription, QuotaId, ...
    locations: tuple[str, ...]
    zones: tuple[str, ...]


@dataclass(frozen=True)
class Sku:
    name: str
    resource_type: str
    family: str | None
    locations: tuple[str, ...]
    zones: dict[str, tuple[str, ...]]  # location -> zones it is offered in
    restrictions: tuple[SkuRestriction, ...]
    capabilities: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Usage:
    name: str
    localized_name: str
    current: int
    limit: int

    @property
    def available(self) -> int:
        return self.limit - self.current


@dataclass(frozen=True)
class Unavailable:
    """A fact that could not be read: the checks that need it report `error` with this reason."""

    reason: str


@dataclass(frozen=True)
class Facts:
    locations: list[Region] | Unavailable
    compute_skus: list[Sku] | Unavailable  # virtualMachines SKUs of the stack's location
    usages: list[Usage] | Unavailable
    lustre_skus: list[Sku] | Unavailable | None  # None: the stack has no Managed Lustre


def norm_location(name: str) -> str:
    return name.replace(" ", "").lower()


def _text(value: Any) -> str:
    """SDK enums (ResourceSkuRestrictionsType.LOCATION) as the wire string ("Location")."""
    if value is None:
        return ""
    return str(value.value) if isinstance(value, Enum) else str(value)


def _values(restriction: Any) -> list[str]:
    """The restriction's `values` (locations): `values_property` in typespec-generated models, where `values`
    is the Mapping method; `values` in older autorest models."""
    found = getattr(restriction, "values_property", None)
    if found is None:
        found = getattr(restriction, "values", None)
    return list(found) if isinstance(found, (list, tuple)) else []


def _sku_from_model(model: Any) -> Sku:
    zones: dict[str, tuple[str, ...]] = {}
    for info in model.location_info or []:
        if info.location:
            zones[norm_location(info.location)] = tuple(sorted(info.zones or []))
    restrictions = []
    for r in model.restrictions or []:
        info = getattr(r, "restriction_info", None)
        restrictions.append(
            SkuRestriction(
                type=_text(r.type),
                reason=_text(r.reason_code) or "unknown reason",
                locations=tuple(norm_location(x) for x in ((info.locations if info else None) or _values(r))),
                zones=tuple(sorted((info.zones if info else None) or [])),
            )
        )
    return Sku(
        name=model.name or "",
        resource_type=model.resource_type or "",
        family=getattr(model, "family", None),
        locations=tuple(norm_location(x) for x in model.locations or []),
        zones=zones,
        restrictions=tuple(restrictions),
        capabilities={c.name: c.value for c in (model.capabilities or []) if c.name},
    )


# ----------------------------------------------------------------------------------------------------------
# Reading the facts with the SDK clients


@dataclass(frozen=True)
class RetrySettings:
    """The SDK retry policy's knobs: it honours Retry-After on 429/503 and backs off exponentially otherwise."""

    total: int = 4
    backoff_factor: float = 0.8
    backoff_max: float = 30.0
    timeout_s: int = 120  # all attempts of one request together
    connection_timeout_s: int = 10
    read_timeout_s: int = 60


def _client_kwargs(cloud: CloudSettings, retry: RetrySettings, transport: Any) -> dict[str, Any]:
    from azure.core.pipeline.policies import RetryPolicy

    kwargs: dict[str, Any] = {
        "base_url": cloud.resource_manager,
        "credential_scopes": [cloud.credential_scope],
        "retry_policy": RetryPolicy(
            retry_total=retry.total,
            retry_status=retry.total,
            retry_connect=retry.total,
            retry_read=retry.total,
            retry_backoff_factor=retry.backoff_factor,
            retry_backoff_max=retry.backoff_max,
            timeout=retry.timeout_s,
        ),
        "connection_timeout": retry.connection_timeout_s,
        "read_timeout": retry.read_timeout_s,
        "user_agent": "ndfleet-preflight",
    }
    if transport is not None:
        kwargs["transport"] = transport
    return kwargs


def _describe_error(exc: Exception, what: str, cloud: CloudSettings, retry: RetrySettings) -> str:
    """One clear line for an SDK error: which kind (permission, throttling, network...) and what to do."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    attempts = retry.total + 1
    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        status = exc.status_code
        error = getattr(exc, "error", None)
        code = getattr(error, "code", None) or ""
        message = (getattr(error, "message", None) or exc.reason or "").strip().splitlines()
        said = f"{code}: {message[0]}" if code and message else (code or (message[0] if message else ""))
        said = said if len(said) <= 300 else said[:297] + "..."
        if status == 401 or isinstance(exc, ClientAuthenticationError):
            return f"credentials rejected reading {what} (HTTP {status} {said}); sign in again (`az login`)"
        if status == 403:
            return f"no permission to read {what} (HTTP 403 {said}); the Reader role on the subscription is enough"
        if status == 404 and code in ("SubscriptionNotFound", "InvalidSubscriptionId"):
            return f"subscription not found in {cloud.name} ({said}); check the subscription id and the cloud"
        if status == 409 and code == "MissingSubscriptionRegistration":
            return f"resource provider not registered for the subscription reading {what} ({said})"
        if status == 429:
            return (
                f"throttled: Resource Manager still answered 429 for {what} after {attempts} attempts "
                f"(the SDK waited as Retry-After asked); wait a minute and run preflight again"
            )
        if status >= 500:
            return (
                f"Resource Manager failed reading {what} after {attempts} attempts: HTTP {status} {said} "
                "Try again later (https://status.azure.com)."
            )
        return f"reading {what} failed: HTTP {status} {said}"
    if isinstance(exc, ClientAuthenticationError):
        return f"authentication failed reading {what}: {_first_lines(str(exc), 3).strip()}"
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return (
            f"network: could not reach {cloud.resource_manager} reading {what} after {attempts} attempts "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'})"
        )
    return f"reading {what} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def gather_facts(
    spec: ClusterSpec,
    subscription_id: str,
    credential: Any,
    cloud: CloudSettings,
    *,
    retry: RetrySettings | None = None,
    transport: Any = None,
) -> Facts:
    """Read locations, resource SKUs, usages and (when needed) Managed Lustre SKUs, in parallel."""
    from azure.core.exceptions import AzureError
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.resource.subscriptions import SubscriptionClient

    retry = retry or RetrySettings()

    def kwargs() -> dict[str, Any]:
        # A fresh policy set per client: a pipeline links its policies (`policy.next`), so one RetryPolicy
        # shared by several clients would send their requests down the last client's pipeline.
        return _client_kwargs(cloud, retry, transport)

    location = spec.location

    def locations() -> list[Region]:
        with SubscriptionClient(credential, **kwargs()) as client:
            out = []
            for loc in client.subscriptions.list_locations(subscription_id):
                meta = getattr(loc, "metadata", None)
                out.append(
                    Region(
                        name=loc.name or "",
                        display_name=loc.display_name or "",
                        region_type=_text(getattr(meta, "region_type", None)),
                    )
                )
            return out

    def compute_skus() -> list[Sku]:
        with ComputeManagementClient(credential, subscription_id, **kwargs()) as client:
            return [
                _sku_from_model(s)
                for s in client.resource_skus.list(filter=f"location eq '{location}'")
                if (s.resource_type or "").lower() == "virtualmachines"
            ]

    def usages() -> list[Usage]:
        with ComputeManagementClient(credential, subscription_id, **kwargs()) as client:
            return [
                Usage(
                    name=u.name.value or "",
                    localized_name=u.name.localized_value or "",
                    current=int(u.current_value),
                    limit=int(u.limit),
                )
                for u in client.usage.list(location)
            ]

    def lustre_skus() -> list[Sku]:
        from azure.mgmt.storagecache import StorageCacheManagementClient

        with StorageCacheManagementClient(credential, subscription_id, **kwargs()) as client:
            return [_sku_from_model(s) for s in client.skus.list()]

    jobs: dict[str, tuple[Callable[[], Any], str]] = {
        "locations": (locations, "the subscription's locations"),
        "compute_skus": (compute_skus, f"Microsoft.Compute resource SKUs in {location}"),
        "usages": (usages, f"Microsoft.Compute usages (quota) in {location}"),
    }
    if spec.storage.lustre is not None:
        jobs["lustre_skus"] = (lustre_skus, "Microsoft.StorageCache SKUs")

    def run(job: tuple[Callable[[], Any], str]) -> Any:
        fn, what = job
        try:
            return fn()
        except AzureError as exc:
            return Unavailable(_describe_error(exc, what, cloud, retry))

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = dict(zip(jobs, pool.map(run, jobs.values()), strict=True))
    return Facts(
        locations=results["locations"],
        compute_skus=results["compute_skus"],
        usages=results["usages"],
        lustre_skus=results.get("lustre_skus"),
    )


# ----------------------------------------------------------------------------------------------------------
# The checks: one pure function each, facts in, Check out


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    status: Status
    detail: str
    fix: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


def _error(check_id: str, title: str, unavailable: Unavailable) -> Check:
    return Check(check_id, title, "error", f"could not check: {unavailable.reason}")


def _find_vm_sku(skus: Sequence[Sku], vm_size: str) -> Sku | None:
    return next((s for s in skus if s.name.lower() == vm_size.lower()), None)


def check_location(spec: ClusterSpec, regions: list[Region] | Unavailable) -> Check:
    title = "location exists"
    if isinstance(regions, Unavailable):
        return _error("location", title, regions)
    by_name = {norm_location(r.name): r for r in regions}
    region = by_name.get(norm_location(spec.location))
    if region is None:
        close = difflib.get_close_matches(spec.location, list(by_name), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return Check(
            "location",
            title,
            "fail",
            f"{spec.location!r} is not a location of this subscription{hint}",
            fix="set ndfleet:location to a region from `az account list-locations -o table`",
            figures={"location": spec.location, "suggestions": close},
        )
    if region.region_type.lower() == "logical":
        return Check(
            "location",
            title,
            "fail",
            f"{spec.location!r} ({region.display_name}) is a logical region; VMs need a physical one",
            fix="set ndfleet:location to a physical region such as eastus",
            figures={"location": spec.location, "regionType": region.region_type},
        )
    return Check("location", title, "pass", f"{region.name} ({region.display_name})", figures={"location": region.name})


def check_size_in_region(spec: ClusterSpec, skus: list[Sku] | Unavailable) -> Check:
    title = f"{spec.profile.name} offered in {spec.location}"
    if isinstance(skus, Unavailable):
        return _error("vm-size-region", title, skus)
    sku = _find_vm_sku(skus, spec.profile.name)
    if sku is None or norm_location(spec.location) not in sku.locations:
        return Check(
            "vm-size-region",
            title,
            "fail",
            f"{spec.profile.name} is not offered in {spec.location}",
            fix=(
                "pick a region that offers it: az vm list-skus --size "
                f"{spec.profile.name} --all --output table; or change ndfleet:vmSize"
            ),
            figures={"vmSize": spec.profile.name, "location": spec.location, "offered": False},
        )
    zones = sku.zones.get(norm_location(spec.location), ())
    zone_text = f"zones {', '.join(zones)}" if zones else "no availability zones"
    return Check(
        "vm-size-region",
        title,
        "pass",
        f"offered ({zone_text})",
        figures={"vmSize": sku.name, "location": spec.location, "offered": True, "zones": list(zones)},
    )


def check_size_in_zone(spec: ClusterSpec, skus: list[Sku] | Unavailable) -> Check:
    title = f"{spec.profile.name} offered in zone {spec.zone}" if spec.zone else "availability zone"
    if spec.zone is None:
        return Check("vm-size-zone", title, "skip", "no ndfleet:zone set: regional deployment")
    if isinstance(skus, Unavailable):
        return _error("vm-size-zone", title, skus)
    sku = _find_vm_sku(skus, spec.profile.name)
    zones = sku.zones.get(norm_location(spec.location), ()) if sku else ()
    if sku is None or norm_location(spec.location) not in sku.locations:
        return Check("vm-size-zone", title, "fail", f"not offered in {spec.location} at all (see vm-size-region)")
    if spec.zone not in zones:
        offered = f"it is offered in zones {', '.join(zones)}" if zones else "it is offered without zones there"
        return Check(
            "vm-size-zone",
            title,
            "fail",
            f"{spec.profile.name} is not offered in zone {spec.zone} of {spec.location}; {offered}",
            fix=(f"set ndfleet:zone to one of {', '.join(zones)}" if zones else "remove ndfleet:zone"),
            figures={"zone": spec.zone, "zones": list(zones)},
        )
    return Check("vm-size-zone", title, "pass", f"offered in zone {spec.zone}", figures={"zone": spec.zone})


def check_size_restrictions(spec: ClusterSpec, skus: list[Sku] | Unavailable) -> Check:
    title = f"{spec.profile.name} not restricted for the subscription"
    if isinstance(skus, Unavailable):
        return _error("vm-restrictions", title, skus)
    sku = _find_vm_sku(skus, spec.profile.name)
    if sku is None:
        return Check("vm-restrictions", title, "skip", f"no SKU entry for {spec.location} (see vm-size-region)")
    loc = norm_location(spec.location)
    blocking: list[str] = []
    partial: list[str] = []
    restricted_zones: list[str] = []
    for r in sku.restrictions:
        if r.locations and loc not in r.locations:
            continue
        if r.type.lower() == "location":
            blocking.append(f"restricted in {spec.location}: {r.reason}")
        elif r.type.lower() == "zone":
            restricted_zones += r.zones
            if spec.zone is not None and spec.zone in r.zones:
                blocking.append(f"restricted in zone {spec.zone} of {spec.location}: {r.reason}")
            elif spec.zone is None:
                partial.append(f"zones {', '.join(r.zones)} restricted: {r.reason}")
    figures = {
        "restrictions": [asdict(r) for r in sku.restrictions],
        "restrictedZones": sorted(set(restricted_zones)),
    }
    fix = (
        "ask Microsoft to enable the size for this subscription: Azure portal > Help + support > "
        "Create a support request > Service and subscription limits (quotas) > Compute-VM (cores-vCPUs) "
        "subscription limit increases; NotAvailableForSubscription means the size must be enabled before "
        "any quota applies. Or pick another region/zone."
    )
    if blocking:
        return Check("vm-restrictions", title, "fail", "; ".join(blocking), fix=fix, figures=figures)
    if partial:
        return Check(
            "vm-restrictions",
            title,
            "warn",
            "regional deployment, but " + "; ".join(partial) + ": Azure may place nodes only in the others",
            figures=figures,
        )
    return Check("vm-restrictions", title, "pass", "no restrictions", figures=figures)


def _quota_fix(cloud: CloudSettings, subscription_id: str, location: str, name: str, new_limit: int, kind: str) -> str:
    scope = f"/subscriptions/{subscription_id}/providers/Microsoft.Compute/locations/{location}"
    return (
        f"request more: Azure portal > Quotas > Compute ({cloud.portal}/#view/Microsoft_Azure_Capacity/"
        f"QuotaMenuBlade/~/myQuotas), or `az quota update --resource-name {name} --scope {scope} "
        f"--limit-object value={new_limit} --resource-type {kind}` (Azure CLI quota extension)"
    )


def _quota_check(
    check_id: str,
    title: str,
    usage: Usage,
    needed: int,
    fix: Callable[[int], str],
) -> Check:
    figures = {
        "quotaName": usage.name,
        "limit": usage.limit,
        "used": usage.current,
        "available": usage.available,
        "needed": needed,
        "missing": max(0, needed - usage.available),
    }
    figures_text = f"limit {usage.limit}, in use {usage.current}, available {usage.available}, needed {needed}"
    if usage.available >= needed:
        return Check(check_id, title, "pass", f"{usage.name}: {figures_text}", figures=figures)
    missing = needed - usage.available
    return Check(
        check_id,
        title,
        "fail",
        f"{usage.name}: {missing} vCPUs missing ({figures_text})",
        fix=fix(usage.current + needed),
        figures=figures,
    )


def check_family_quota(
    spec: ClusterSpec,
    usages: list[Usage] | Unavailable,
    skus: list[Sku] | Unavailable,
    cloud: CloudSettings,
    subscription_id: str,
) -> Check:
    family = spec.profile.quota_family
    needed = spec.vcpu_quota[family]
    title = "VM family vCPU quota"
    if spec.priority == "Spot":
        return Check(
            "quota-family", title, "skip", "Spot VMs count against the regional Spot quota (lowPriorityCores) instead"
        )
    if isinstance(usages, Unavailable):
        return _error("quota-family", title, usages)
    by_name = {u.name.lower(): u for u in usages}
    usage = by_name.get(family.lower())
    note = ""
    if usage is None and not isinstance(skus, Unavailable):
        # The family name is data: Azure's SKU entry says which quota family the size counts against.
        sku = _find_vm_sku(skus, spec.profile.name)
        if sku is not None and sku.family and sku.family.lower() in by_name:
            usage = by_name[sku.family.lower()]
            note = f" (the profile says {family}; Azure's SKU says {sku.family})"
    if usage is None:
        families = sorted(u.name for u in usages if u.name.lower().endswith("family"))
        nd = [f for f in families if f.lower().startswith("standardnd")]
        shown = nd or families
        return Check(
            "quota-family",
            title,
            "fail",
            f"no usage entry named {family} in {spec.location}; the subscription's "
            f"{'ND ' if nd else ''}families there: {', '.join(shown[:20]) or 'none'}",
            fix=(
                "if the size is new to the subscription, ask for it in the Azure portal's Quotas page; "
                "if Azure names the family differently, correct quota_family in ndfleet/spec/profiles.py"
            ),
            figures={"quotaName": family, "families": shown},
        )
    found = usage
    check = _quota_check(
        "quota-family",
        title,
        found,
        needed,
        lambda new: _quota_fix(cloud, subscription_id, spec.location, found.name, new, "dedicated"),
    )
    if note:
        return Check(check.id, check.title, check.status, check.detail + note, check.fix, check.figures)
    return check


def check_regional_quota(
    spec: ClusterSpec, usages: list[Usage] | Unavailable, cloud: CloudSettings, subscription_id: str
) -> Check:
    needed = spec.total_nodes * spec.profile.vcpus
    spot = spec.priority == "Spot"
    name, kind = ("lowPriorityCores", "lowPriority") if spot else ("cores", "dedicated")
    title = "regional Spot vCPU quota" if spot else "regional total vCPU quota"
    if isinstance(usages, Unavailable):
        return _error("quota-regional", title, usages)
    usage = next((u for u in usages if u.name.lower() == name.lower()), None)
    if usage is None:
        return Check(
            "quota-regional",
            title,
            "fail",
            f"no usage entry named {name} in {spec.location}",
            figures={"quotaName": name},
        )
    found = usage
    return _quota_check(
        "quota-regional",
        title,
        found,
        needed,
        lambda new: _quota_fix(cloud, subscription_id, spec.location, found.name, new, kind),
    )


def check_lustre_sku(spec: ClusterSpec, skus: list[Sku] | Unavailable | None) -> Check:
    lustre = spec.storage.lustre
    if lustre is None:
        return Check("lustre-sku", "Managed Lustre SKU", "skip", "no ndfleet:storage.lustre in the stack")
    name = lustre.sku.name
    title = f"Managed Lustre {name} offered in {spec.location}"
    if skus is None:
        skus = Unavailable("Microsoft.StorageCache SKUs were not read")
    if isinstance(skus, Unavailable):
        return _error("lustre-sku", title, skus)
    loc = norm_location(spec.location)
    sku = next(
        (s for s in skus if s.name.lower() == name.lower() and s.resource_type.lower() == "amlfilesystems"), None
    )
    offered = sorted({s.name for s in skus if s.resource_type.lower() == "amlfilesystems" and loc in s.locations})
    if sku is None or loc not in sku.locations:
        other = f"; offered there: {', '.join(offered)}" if offered else "; no Managed Lustre SKU is offered there"
        return Check(
            "lustre-sku",
            title,
            "fail",
            f"{name} is not offered in {spec.location}{other}",
            fix="change ndfleet:storage.lustre.sku, deploy in another region, or remove storage.lustre",
            figures={"sku": name, "offered": offered},
        )
    blocking = [r for r in sku.restrictions if r.type.lower() == "location" and (not r.locations or loc in r.locations)]
    if blocking:
        return Check(
            "lustre-sku",
            title,
            "fail",
            f"{name} is restricted in {spec.location}: {', '.join(r.reason for r in blocking)}",
            fix="open a support request to enable Azure Managed Lustre for the subscription",
            figures={"sku": name, "restrictions": [asdict(r) for r in blocking]},
        )
    zones = sku.zones.get(loc, ())
    if spec.zone is not None and zones and spec.zone not in zones:
        return Check(
            "lustre-sku",
            title,
            "warn",
            f"offered in {spec.location}, but in zones {', '.join(zones)} only, not zone {spec.zone}",
            figures={"sku": name, "zones": list(zones)},
        )
    return Check("lustre-sku", title, "pass", "offered", figures={"sku": name, "zones": list(zones)})


def run_checks(spec: ClusterSpec, facts: Facts, cloud: CloudSettings, subscription_id: str) -> list[Check]:
    return [
        check_location(spec, facts.locations),
        check_size_in_region(spec, facts.compute_skus),
        check_size_in_zone(spec, facts.compute_skus),
        check_size_restrictions(spec, facts.compute_skus),
        check_family_quota(spec, facts.usages, facts.compute_skus, cloud, subscription_id),
        check_regional_quota(spec, facts.usages, cloud, subscription_id),
        check_lustre_sku(spec, facts.lustre_skus),
    ]


# ----------------------------------------------------------------------------------------------------------
# Running it


@dataclass
class Report:
    stack: str
    subscription_id: str | None
    cloud: CloudSettings | None
    spec: ClusterSpec | None
    checks: list[Check]
    error: str | None = None  # set when preflight could not check at all
    elapsed_s: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return EXIT_CANNOT_CHECK
        if any(c.status == "fail" for c in self.checks):
            return EXIT_FAILED
        if any(c.status == "error" for c in self.checks):
            return EXIT_CANNOT_CHECK
        return EXIT_OK

    @property
    def result(self) -> str:
        return {EXIT_OK: "pass", EXIT_FAILED: "fail", EXIT_CANNOT_CHECK: "error"}[self.exit_code]


def run_preflight(
    spec: ClusterSpec,
    *,
    env: Mapping[str, str] | None = None,
    provider_config: Mapping[str, str] | None = None,
    credential: Any = None,
    transport: Any = None,
    retry: RetrySettings | None = None,
) -> Report:
    """Run every check against Azure. Never raises for Azure trouble: a Report with `error` says what went wrong."""
    env = os.environ if env is None else env
    started = time.monotonic()
    report = Report(stack=spec.stack, subscription_id=None, cloud=None, spec=spec, checks=[])
    owned = None
    try:
        report.cloud = cloud = resolve_cloud(env, provider_config)
        report.subscription_id = subscription_id = resolve_subscription(spec, env, provider_config)
        if credential is None:
            credential = owned = build_credential(cloud, env)
        shared = _SharedTokenCredential(credential)
        _first_token(shared, cloud)
        facts = gather_facts(spec, subscription_id, shared, cloud, retry=retry, transport=transport)
        report.checks = run_checks(spec, facts, cloud, subscription_id)
    except CannotCheck as exc:
        report.error = str(exc)
    finally:
        if owned is not None:
            owned.close()
        report.elapsed_s = round(time.monotonic() - started, 3)
    return report


def _first_token(credential: _SharedTokenCredential, cloud: CloudSettings) -> None:
    """Get a token before any request, so "no credentials" is one clear message and not one per check."""
    from azure.core.exceptions import ClientAuthenticationError

    # DefaultAzureCredential also logs its failure as a warning; the message below says it once, better.
    identity_log = logging.getLogger("azure.identity")
    level = identity_log.level
    identity_log.setLevel(logging.ERROR)
    try:
        credential.get_token(cloud.credential_scope)
    except ClientAuthenticationError as exc:
        raise CannotCheck(_no_credentials_message(cloud, exc.message or str(exc))) from None
    except ValueError as exc:  # e.g. an authority host azure-identity refuses
        raise CannotCheck(f"could not check: the credential settings are invalid: {exc}") from None
    finally:
        identity_log.setLevel(level)


# ----------------------------------------------------------------------------------------------------------
# Output

_MARK = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "SKIP", "error": "ERROR"}


def render_table(report: Report) -> str:
    if report.error is not None:
        return report.error
    assert report.spec is not None and report.cloud is not None
    spec = report.spec
    head = (
        f"preflight for stack {report.stack}: {spec.total_nodes} x {spec.profile.name} in {spec.location}"
        f"{' zone ' + spec.zone if spec.zone else ''}, subscription {report.subscription_id}, {report.cloud.name}"
    )
    # A reason that stopped several checks is printed once, below the table.
    reasons = list(dict.fromkeys(c.detail for c in report.checks if c.status == "error"))
    rows = [
        (_MARK[c.status], c.id, f"could not check [{reasons.index(c.detail) + 1}]" if c.status == "error" else c.detail)
        for c in report.checks
    ]
    w0 = max(len("STATUS"), *(len(r[0]) for r in rows))
    w1 = max(len("CHECK"), *(len(r[1]) for r in rows))
    lines = [head, "", f"{'STATUS':<{w0}}  {'CHECK':<{w1}}  DETAIL"]
    lines += [f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows]
    if reasons:
        lines += ["", "Could not check:"]
        lines += [f"  [{i}] {r.removeprefix('could not check: ')}" for i, r in enumerate(reasons, 1)]
    fixes = [c for c in report.checks if c.status in ("fail", "warn") and c.fix]
    if fixes:
        lines += ["", "What to do:"]
        lines += [f"  {c.id}: {c.fix}" for c in fixes]
    counts = {s: sum(1 for c in report.checks if c.status == s) for s in _MARK}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    verdict = {
        EXIT_OK: "preflight passed",
        EXIT_FAILED: "preflight FAILED: the deployment would not succeed as configured",
        EXIT_CANNOT_CHECK: "preflight could not check everything",
    }[report.exit_code]
    lines += ["", f"{verdict} ({tally})"]
    return "\n".join(lines)


def render_json(report: Report) -> str:
    spec = report.spec
    doc = {
        "schemaVersion": JSON_SCHEMA_VERSION,
        "stack": report.stack,
        "result": report.result,
        "exitCode": report.exit_code,
        "error": report.error,
        "subscriptionId": report.subscription_id,
        "cloud": report.cloud.name if report.cloud else None,
        "resourceManager": report.cloud.resource_manager if report.cloud else None,
        "location": spec.location if spec else None,
        "zone": spec.zone if spec else None,
        "vmSize": spec.profile.name if spec else None,
        "nodes": spec.total_nodes if spec else None,
        "checks": [
            {"id": c.id, "title": c.title, "status": c.status, "detail": c.detail, "fix": c.fix, "figures": c.figures}
            for c in report.checks
        ],
        "elapsedSeconds": report.elapsed_s,
    }
    return json.dumps(doc, indent=2)


def enforce_preflight(
    spec: ClusterSpec,
    *,
    env: Mapping[str, str] | None = None,
    credential: Any = None,
    transport: Any = None,
    retry: RetrySettings | None = None,
) -> None:
    """For `pulumi preview` / `pulumi up` with `ndfleet:preflight: true`: run the checks, raise PreflightFailed
    (str() = the same text `ndfleet preflight` prints) when one fails or Azure cannot be asked. Never call it
    under the mock runtime. The keyword arguments exist for tests."""
    report = run_preflight(
        spec,
        env=env,
        provider_config=_pulumi_provider_config(),
        credential=credential,
        transport=transport,
        retry=retry,
    )
    if report.exit_code != EXIT_OK:
        raise PreflightFailed(render_table(report), report.exit_code)


def _pulumi_provider_config() -> dict[str, str]:
    """`azure-native:environment` / `subscriptionId` of the running Pulumi program, so the checks hit the same
    cloud and subscription the provider deploys to."""
    try:
        import pulumi

        cfg = pulumi.Config("azure-native")
        return {k: v for k in ("environment", "subscriptionId") if (v := cfg.get(k))}
    except Exception:  # noqa: BLE001 - outside a Pulumi program there is simply no provider config
        return {}


# ----------------------------------------------------------------------------------------------------------
# CLI


def _placeholder_ssh_key() -> str:
    """A well-formed ed25519 key line that stands in for an encrypted (secure) sshPublicKey: preflight never uses it."""
    kind = b"ssh-ed25519"
    blob = struct.pack(">I", len(kind)) + kind + struct.pack(">I", 32) + bytes(32)
    return "ssh-ed25519 " + base64.b64encode(blob).decode() + " ndfleet-preflight-placeholder"


def _load(args: argparse.Namespace) -> tuple[ClusterSpec, dict[str, str]]:
    try:
        stack = load_stack(name=args.stack, path=args.stack_file)
    except StackFileError as exc:
        raise CannotCheck(f"could not check: {exc}") from None
    raw = stack.ndfleet_config
    if "ndfleet:sshPublicKey" in stack.secret_keys:
        raw["sshPublicKey"] = _placeholder_ssh_key()
    try:
        # The same prepare step as plan, render and `pulumi up`: a stack they refuse is not checked either.
        spec = prepare_config(raw, stack.name, stack.engine_config).spec
    except (SpecError, PrepareError) as exc:
        raise CannotCheck(f"could not check: {exc}") from None
    prefix = "azure-native:"
    provider = {k[len(prefix) :]: v for k, v in stack.engine_config.items() if k.startswith(prefix)}
    return spec, provider


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "preflight",
        help="check quota, VM size and zone availability in Azure before anything is created",
        description="Ask Azure Resource Manager whether the stack can be deployed: location, VM size in the region "
        "and zone, subscription restrictions, family and regional vCPU quota, Managed Lustre SKU. "
        "Exit 0: all passed; 1: a check failed; 2: could not check.",
    )
    add_stack_arguments(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    return run_cli(args)


def run_cli(
    args: argparse.Namespace,
    *,
    env: Mapping[str, str] | None = None,
    credential: Any = None,
    transport: Any = None,
    retry: RetrySettings | None = None,
) -> int:
    """The command; tests call it with a fake credential and a recorded transport."""
    try:
        spec, provider = _load(args)
    except CannotCheck as exc:
        report = Report(
            stack=args.stack or str(args.stack_file), subscription_id=None, cloud=None, spec=None, checks=[]
        )
        report.error = str(exc)
        _emit(report, args.format)
        return report.exit_code
    report = run_preflight(
        spec, env=env, provider_config=provider, credential=credential, transport=transport, retry=retry
    )
    _emit(report, args.format)
    return report.exit_code


def _emit(report: Report, fmt: str) -> None:
    if fmt == "json":
        print(render_json(report))
    elif report.error is not None:
        print(report.error, file=sys.stderr)
    else:
        print(render_table(report))
