"""How the tool talks to Resource Manager: the retry settings every client shares, the keyword arguments of the
SDK management clients (the bounded transport and policies of ndfleet.azure.http), a plain GET through the same
pipeline for the APIs without a fitting SDK client with its paging bounded, and one clear line for every error."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ndfleet.azure.auth import first_lines
from ndfleet.azure.clouds import CloudSettings
from ndfleet.azure.text import one_line

# One Resource Manager answer: the largest list ndfleet reads is a scale set's VMs with instance views, about 4 KiB
# a VM (issue 31 measured 40 VMs at about 160 KiB), and a scale set holds at most 1,000 VMs ("Virtual Machine Scale
# Sets limits"), so even one page holding all of them is about 4 MiB; 32 MiB is eight times that and refuses a
# 400 MB answer. 60 s for one answer, headers and body together.
ARM_MAX_ANSWER_BYTES = 32 * 1024 * 1024
ARM_ANSWER_DEADLINE_S = 60.0
# Pages of one list: a subscription of 20,000 scale sets at ARM's page size is 20 pages; a list still going after
# MAX_PAGES is refused (and a nextLink seen before is a cycle, refused at once).
MAX_PAGES = 50


@dataclass(frozen=True)
class RetrySettings:
    """The SDK retry policy's knobs: it honours Retry-After on 429/503 and backs off exponentially otherwise."""

    total: int = 4
    backoff_factor: float = 0.8
    backoff_max: float = 30.0
    timeout_s: int = 120  # all attempts of one request together (docs/operations.md: 120 s per request at most)
    connection_timeout_s: int = 10
    read_timeout_s: int = 60


def retry_policy(retry: RetrySettings) -> Any:
    """azure-core's retry with Retry-After capped (ndfleet.azure.http.CappedRetryPolicy)."""
    from ndfleet.azure.http import CappedRetryPolicy

    return CappedRetryPolicy(
        retry_total=retry.total,
        retry_status=retry.total,
        retry_connect=retry.total,
        retry_read=retry.total,
        retry_backoff_factor=retry.backoff_factor,
        retry_backoff_max=retry.backoff_max,
        timeout=retry.timeout_s,
    )


def arm_bounds(cloud: CloudSettings) -> Any:
    from ndfleet.azure.http import Bounds, endpoint_of

    return Bounds(ARM_ANSWER_DEADLINE_S, ARM_MAX_ANSWER_BYTES, endpoint_of(cloud.resource_manager).host)


def client_kwargs(
    cloud: CloudSettings, retry: RetrySettings, transport: Any, user_agent: str = "ndfleet-preflight"
) -> dict[str, Any]:
    """The SDK management clients' keyword arguments: the bounded transport, capped retries, and Resource
    Manager's bounds on every request (the custom-hook slot is the one per-retry slot the SDK clients offer)."""
    from ndfleet.azure.http import BoundedTransport, BoundsPolicy

    return {
        "base_url": cloud.resource_manager,
        "credential_scopes": [cloud.credential_scope],
        "retry_policy": retry_policy(retry),
        "custom_hook_policy": BoundsPolicy(arm_bounds(cloud)),
        "connection_timeout": retry.connection_timeout_s,
        "read_timeout": retry.read_timeout_s,
        "user_agent": user_agent,
        "transport": transport if transport is not None else BoundedTransport(),
    }


def bounded_pages(pager: Any, what: str, max_pages: int = MAX_PAGES) -> Iterator[Any]:
    """The items of an SDK pager, page by page: at most `max_pages` pages, a repeated nextLink refused."""
    from azure.core.exceptions import DecodeError

    pages = pager.by_page()
    seen: set[str] = set()
    for count, page in enumerate(pages, start=1):
        yield from page
        token = getattr(pages, "continuation_token", None)
        if not token:
            return
        if not isinstance(token, str) or token in seen:
            raise DecodeError(f"{what}: the list's nextLink points back at a page already read (a cycle): refused")
        if count >= max_pages:
            raise DecodeError(f"{what}: the list still had pages after {max_pages}: refused")
        seen.add(token)


def is_transient(exc: Exception) -> bool:
    """Whether asking again later may succeed: the network (no answer), throttling (429) or a server error (5xx).
    Anything else (401, 403, 404, a refused answer) answers the same until a person changes something."""
    from azure.core.exceptions import HttpResponseError, ServiceRequestError, ServiceResponseError

    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(exc, (ServiceRequestError, ServiceResponseError))


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

    from ndfleet.azure.http import MAX_RETRY_AFTER_S, AnswerRefused

    attempts = retry.total + 1
    if isinstance(exc, AnswerRefused):
        return f"refused the answer reading {what}: {one_line(str(exc))}"
    if isinstance(exc, RecursionError):
        return f"refused the answer reading {what}: JSON nested too deeply"
    if isinstance(exc, HttpResponseError) and exc.status_code is not None:
        status = exc.status_code
        error = getattr(exc, "error", None)
        code = getattr(error, "code", None) or ""
        message = (getattr(error, "message", None) or exc.reason or "").strip().splitlines()
        said = f"{code}: {message[0]}" if code and message else (code or (message[0] if message else ""))
        said = one_line(said, 300)
        if status == 401 or isinstance(exc, ClientAuthenticationError):
            return f"credentials rejected reading {what} (HTTP {status} {said}); sign in again (`az login`)"
        if status == 403:
            return f"no permission to read {what} (HTTP 403 {said}); the Reader role on the subscription is enough"
        if status == 404 and code in ("SubscriptionNotFound", "InvalidSubscriptionId"):
            return f"subscription not found in {cloud.name} ({said}); check the subscription id and the cloud"
        if status == 409 and code == "MissingSubscriptionRegistration":
            return f"resource provider not registered for the subscription reading {what} ({said})"
        refused = getattr(exc.response, "ndfleet_refused_wait", None)
        if status == 429 and refused is not None:
            asked = "an unusable time" if refused == float("inf") else f"{refused:.0f} s"
            return (
                f"throttled: Resource Manager answered 429 for {what} and asked to wait {asked}, more than the "
                f"{MAX_RETRY_AFTER_S:.0f} s a request may wait; run {command} again later"
            )
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
            f"({type(exc).__name__}: {one_line(str(exc)) or 'no detail'})"
        )
    return f"reading {what} failed: {type(exc).__name__}: {one_line(str(exc))}"




def bearer_client(base_url: str, credential: Any, scope: str, bounds: Any, retry: RetrySettings, transport: Any,
                  user_agent: str) -> Any:  # fmt: skip
    """A pipeline client for a non-ARM Azure API with a bearer token (a workspace's query endpoint): the same
    bounded transport, capped retries and bounds as Resource Manager's, the token only for `bounds.token_host`."""
    from azure.core import PipelineClient
    from azure.core.pipeline import policies

    from ndfleet.azure.http import BoundedTransport, BoundsPolicy

    return PipelineClient(
        base_url=base_url,
        policies=[
            policies.RequestIdPolicy(),
            policies.HeadersPolicy(),
            policies.UserAgentPolicy(user_agent=user_agent),
            retry_policy(retry),
            policies.BearerTokenCredentialPolicy(credential, scope),
            BoundsPolicy(bounds),
            policies.HttpLoggingPolicy(),
        ],
        transport=transport if transport is not None else BoundedTransport(),
    )


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
        self.host = arm_bounds(cloud).token_host
        self._client: Any = ARMPipelineClient(
            base_url=cloud.resource_manager,
            policies=[
                policies.RequestIdPolicy(),
                policies.HeadersPolicy(),
                policies.UserAgentPolicy(user_agent=kwargs["user_agent"]),
                policies.ContentDecodePolicy(),
                kwargs["retry_policy"],
                ARMChallengeAuthenticationPolicy(credential, *kwargs["credential_scopes"]),
                kwargs["custom_hook_policy"],
                policies.HttpLoggingPolicy(),
            ],
            transport=kwargs["transport"],
            connection_timeout=retry.connection_timeout_s,
            read_timeout=retry.read_timeout_s,
        )

    def get(self, path: str, api_version: str) -> dict[str, Any]:
        """One JSON document from `path` (starting with /subscriptions/...)."""
        from azure.core.rest import HttpRequest

        return self._send(HttpRequest("GET", self._client.format_url(path), params={"api-version": api_version}))

    def list(self, path: str, api_version: str, max_pages: int = MAX_PAGES) -> Iterator[dict[str, Any]]:
        """Every item of a paged list (ndfleet.azure.answers.ArmPage): `nextLink` followed on Resource Manager's
        own host only, at most `max_pages` pages, a link seen before refused as a cycle."""
        from azure.core.exceptions import DecodeError
        from azure.core.rest import HttpRequest

        from ndfleet.azure.answers import arm_page
        from ndfleet.azure.http import same_host

        request = HttpRequest("GET", self._client.format_url(path), params={"api-version": api_version})
        seen: set[str] = set()
        for count in range(1, max_pages + 1):
            page = arm_page(self._send(request), path)
            yield from page.value
            if page.next_link is None:
                return
            if not same_host(page.next_link, self.host or ""):
                raise DecodeError(f"{path}: the list's nextLink leads to another host: not followed")
            if page.next_link in seen:
                raise DecodeError(f"{path}: the list's nextLink points back at a page already read (a cycle)")
            if count == max_pages:
                break
            seen.add(page.next_link)
            request = HttpRequest("GET", page.next_link)
        raise DecodeError(f"{path}: the list still had pages after {max_pages}: refused")

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
        from ndfleet.azure.answers import AnswerShape, json_object

        try:
            return json_object(response.body(), "Resource Manager")
        except AnswerShape as exc:
            raise DecodeError(str(exc)) from None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ArmReader:
        return self

    def __exit__(self, *args: Any) -> None:
        self.close()
