"""How preflight talks to Resource Manager: the retry settings every client shares, the keyword arguments of the
SDK management clients, a plain GET through the same azure-core pipeline for the APIs without a fitting SDK
client, and one clear line for every kind of error."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ndfleet.azure.auth import first_lines
from ndfleet.azure.clouds import CloudSettings


@dataclass(frozen=True)
class RetrySettings:
    """The SDK retry policy's knobs: it honours Retry-After on 429/503 and backs off exponentially otherwise."""

    total: int = 4
    backoff_factor: float = 0.8
    backoff_max: float = 30.0
    timeout_s: int = 120  # all attempts of one request together
    connection_timeout_s: int = 10
    read_timeout_s: int = 60


def client_kwargs(
    cloud: CloudSettings, retry: RetrySettings, transport: Any, user_agent: str = "ndfleet-preflight"
) -> dict[str, Any]:
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
        "user_agent": user_agent,
    }
    if transport is not None:
        kwargs["transport"] = transport
    return kwargs


def describe_error(
    exc: Exception, what: str, cloud: CloudSettings, retry: RetrySettings, command: str = "preflight"
) -> str:
    """One clear line for an SDK error: which kind (permission, throttling, network...) and what to do.
    `command`: the ndfleet command to run again after throttling."""
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
                f"(the SDK waited as Retry-After asked); wait a minute and run {command} again"
            )
        if status >= 500:
            return (
                f"Resource Manager failed reading {what} after {attempts} attempts: HTTP {status} {said} "
                "Try again later (https://status.azure.com)."
            )
        return f"reading {what} failed: HTTP {status} {said}"
    if isinstance(exc, ClientAuthenticationError):
        return f"authentication failed reading {what}: {first_lines(str(exc), 3).strip()}"
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return (
            f"network: could not reach {cloud.resource_manager} reading {what} after {attempts} attempts "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'})"
        )
    return f"reading {what} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"




class ArmReader:
    """GET requests through azure-core's pipeline with the policies the SDK clients use (request id, user agent,
    Resource Manager bearer-token challenge, the same retry policy), for the two reads no installed SDK client
    offers at every scope we need: the caller's permissions (Microsoft.Authorization/permissions, also at
    subscription scope) and a preview feature's registration (Microsoft.Features). Errors are the SDK's own
    HttpResponseError with Resource Manager's error format, so `describe_error` reads them the same way."""

    def __init__(self, credential: Any, cloud: CloudSettings, retry: RetrySettings, transport: Any = None):
        from azure.core.pipeline import policies
        from azure.mgmt.core import ARMPipelineClient
        from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy

        kwargs = client_kwargs(cloud, retry, transport)
        self._client: Any = ARMPipelineClient(
            base_url=cloud.resource_manager,
            policies=[
                policies.RequestIdPolicy(),
                policies.HeadersPolicy(),
                policies.UserAgentPolicy(user_agent=kwargs["user_agent"]),
                policies.ContentDecodePolicy(),
                kwargs["retry_policy"],
                ARMChallengeAuthenticationPolicy(credential, *kwargs["credential_scopes"]),
                policies.HttpLoggingPolicy(),
            ],
            transport=transport,
            connection_timeout=retry.connection_timeout_s,
            read_timeout=retry.read_timeout_s,
        )

    def get(self, path: str, api_version: str) -> dict[str, Any]:
        """One JSON document from `path` (starting with /subscriptions/...)."""
        from azure.core.rest import HttpRequest

        return self._send(HttpRequest("GET", self._client.format_url(path), params={"api-version": api_version}))

    def list(self, path: str, api_version: str, max_pages: int = 50) -> Iterator[dict[str, Any]]:
        """Every item of a paged list (`value`, following `nextLink` on Resource Manager's own host)."""
        from azure.core.rest import HttpRequest

        request = HttpRequest("GET", self._client.format_url(path), params={"api-version": api_version})
        for _ in range(max_pages):
            doc = self._send(request)
            yield from (item for item in doc.get("value") or [] if isinstance(item, dict))
            next_link = doc.get("nextLink")
            if not next_link:
                return
            request = HttpRequest("GET", next_link)

    def _send(self, request: Any) -> dict[str, Any]:
        from azure.core.exceptions import (
            ClientAuthenticationError,
            DecodeError,
            HttpResponseError,
            ResourceNotFoundError,
            map_error,
        )
        from azure.mgmt.core.exceptions import ARMErrorFormat

        response = self._client.send_request(request)
        if response.status_code != 200:
            # The error types the generated SDK clients raise for these codes.
            error_map = {401: ClientAuthenticationError, 404: ResourceNotFoundError}
            map_error(status_code=response.status_code, response=response, error_map=error_map)
            raise HttpResponseError(response=response, error_format=ARMErrorFormat)
        try:
            doc = response.json()
        except ValueError as exc:
            raise DecodeError(f"Resource Manager answered something that is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise DecodeError("Resource Manager answered JSON that is not an object")
        return doc

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ArmReader:
        return self

    def __exit__(self, *args: Any) -> None:
        self.close()
