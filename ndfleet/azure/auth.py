"""Credentials: azure-identity's DefaultAzureCredential, without the managed-identity probe unless it is wanted,
one token shared by every client, and one clear message when there is none."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

from ndfleet.azure.clouds import ENV_MANAGED_IDENTITY, MANAGED_IDENTITY_SIGNALS, CloudSettings
from ndfleet.azure.errors import CannotCheck
from ndfleet.azure.text import one_line


def managed_identity_wanted(env: Mapping[str, str]) -> bool:
    flag = (env.get(ENV_MANAGED_IDENTITY) or "").strip().lower()
    if flag in ("1", "true", "yes", "on"):
        return True
    if flag in ("0", "false", "no", "off"):
        return False
    return any(env.get(name) for name in MANAGED_IDENTITY_SIGNALS)


def build_credential(cloud: CloudSettings, env: Mapping[str, str]) -> Any:
    """DefaultAzureCredential for `cloud`, without the managed-identity probe unless it is wanted (module doc)."""
    from azure.identity import DefaultAzureCredential

    kwargs: dict[str, Any] = {"authority": cloud.authority_host}
    if not env.get("AZURE_TOKEN_CREDENTIALS") and not managed_identity_wanted(env):
        kwargs["exclude_managed_identity_credential"] = True
    return DefaultAzureCredential(**kwargs)


class SharedTokenCredential:
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


def first_lines(text: str, limit: int = 12) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("To mitigate this issue", "Visit https://"))]
    # DefaultAzureCredential lists one attempted credential per line after a header: show them as a list.
    lines = [("- " + line if re.match(r"^\w+Credential: ", line) else line) for line in lines]
    if len(lines) > limit:
        lines = lines[:limit] + ["..."]
    return "\n".join("    " + line for line in lines)


def _no_credentials_message(cloud: CloudSettings) -> str:
    """One line with the fix; what azure-identity said goes to CannotCheck.details (--verbose)."""
    cloud_first = "" if cloud.name == "AzureCloud" else f" (after `az cloud set --name {cloud.name}`)"
    return (
        f"could not check: no usable Azure credentials for {cloud.name} ({cloud.resource_manager}): sign in with "
        f"`az login`{cloud_first}, or set AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET (service "
        f"principal) or workload identity, or on an Azure VM with a managed identity set {ENV_MANAGED_IDENTITY}=true;"
        " --verbose shows what each credential said"
    )


# What a failed sign-in says when the network, not the credentials, is the cause (urllib3, requests, socket and
# MSAL wordings): DNS, a refused or unreachable connection, a timeout.
NETWORK_SIGNS = (
    "Failed to resolve", "Name or service not known", "Temporary failure in name resolution", "nodename nor servname",
    "getaddrinfo failed", "Connection refused", "Network is unreachable", "No route to host", "Connection timed out",
    "NewConnectionError", "NameResolutionError", "ConnectTimeout", "Max retries exceeded", "ServiceRequestError",
)


def network_cause(exc: BaseException) -> str | None:
    """The line of a sign-in failure that names a network cause, or None when the cause is not the network.
    Looks through the error's text and its chained causes (azure-identity wraps the transport's error)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        for line in str(getattr(current, "message", None) or current).splitlines():
            if any(sign in line for sign in NETWORK_SIGNS):
                return one_line(line.strip().lstrip("-").strip(), 240)
        todo += [current.__cause__, current.__context__]
    return None


def _network_message(cloud: CloudSettings, cause: str) -> str:
    return (
        f"could not check: network: could not reach Microsoft Entra ID to sign in ({cause}); the credentials were "
        f"not judged. Check the network, DNS and any proxy (HTTPS_PROXY) to {cloud.authority_host}, then run again"
    )


def first_token(credential: SharedTokenCredential, cloud: CloudSettings) -> None:
    """Get a token before any request, so "no credentials" (or "no network") is one clear message and not one
    per check; azure-identity's own warning, which lists every credential tried, is held back (--verbose)."""
    from azure.core.exceptions import AzureError, ClientAuthenticationError

    # DefaultAzureCredential also logs its failure as a warning; the message below says it once, better.
    identity_log = logging.getLogger("azure.identity")
    level = identity_log.level
    identity_log.setLevel(logging.ERROR)
    try:
        credential.get_token(cloud.credential_scope)
    except ClientAuthenticationError as exc:
        said = "azure-identity said:\n" + first_lines(exc.message or str(exc), limit=40)
        cause = network_cause(exc)
        if cause:
            raise CannotCheck(_network_message(cloud, cause), said, transient=True) from None
        raise CannotCheck(_no_credentials_message(cloud), said) from None
    except AzureError as exc:  # the transport's own error, before any credential could answer
        cause = network_cause(exc) or one_line(str(exc), 240)
        raise CannotCheck(_network_message(cloud, cause), str(exc), transient=True) from None
    except ValueError as exc:  # e.g. an authority host azure-identity refuses
        raise CannotCheck(f"could not check: the credential settings are invalid: {exc}") from None
    finally:
        identity_log.setLevel(level)


