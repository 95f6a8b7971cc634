"""Today's list price of a VM size from the Azure Retail Prices API: public, no credentials, bounded.

The API (Microsoft Learn, "Azure Retail Prices overview"): `GET https://prices.azure.com/api/retail/prices` with an
OData `$filter`; the answer is `{"BillingCurrency", "CustomerEntityId", "CustomerEntityType", "Items": [...],
"NextPageLink": url or null, "Count": n}`, at most 1,000 items a page ("API response pagination"; earlier
revisions of the page said 100), every item a meter with `currencyCode`,
`retailPrice`, `unitPrice`, `armRegionName`, `armSkuName`, `meterName`, `productName`, `skuName`, `serviceName`,
`priceType`, `type`, `unitOfMeasure`, `effectiveStartDate`, `isPrimaryMeterRegion`. Filter values are
case-sensitive from API version 2023-01-01-preview on. One VM size in one region has several `Consumption` meters:
Linux pay-as-you-go, Spot (`skuName` ends "Spot"), Low Priority, and Windows (`productName` ends "Windows");
ndfleet takes the Linux pay-as-you-go one.

Every request goes through ndfleet.azure's bounded transport: one answer (headers and body, a drip cut off) within
the request timeout and what is left of the refresh's deadline, a page within max_body_bytes (a page is at most
1,000 meters of about 700 bytes, 700 KB; 4 MiB is six times that); pages and 429 retries are bounded; a NextPageLink
must stay on the endpoint's own scheme, host and port, and a link to a page read before is a cycle. Azure writes the
default port out in it (Learn's example: `https://prices.azure.com:443/api/retail/prices?$filter=...&$skip=1000`),
so where a link goes is compared with the defaults filled in (ndfleet.azure.http.endpoint_of), never as text.
A retailPrice must be a plausible hourly
price (0 to MAX_USD_PER_HOUR). Failures raise RetailPriceError with one line to print.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ndfleet.azure.text import plausible, terminal_safe

if TYPE_CHECKING:
    from ndfleet.azure.http import BoundedTransport

DEFAULT_ENDPOINT = "https://prices.azure.com/api/retail/prices"
# Test-only: where `ndfleet cost --refresh` sends its requests instead (a local recording server).
ENDPOINT_ENV = "NDFLEET_RETAIL_PRICES_URL"
API_NAME = "the Azure Retail Prices API"
# The dearest VM meter in ndfleet's table is about US$110/h (ND H200 v5); a list price above this is not a price.
MAX_USD_PER_HOUR = 1000.0


@dataclass(frozen=True)
class Limits:
    request_timeout_s: float = 20.0
    deadline_s: float = 90.0  # all sizes, pages and retries together
    max_pages: int = 10  # per size: a filtered VM query is one page (a few meters) in practice
    max_body_bytes: int = 4 * 1024 * 1024
    max_retries: int = 3  # on 429
    max_retry_after_s: float = 30.0


class RetailPriceError(Exception):
    """A refresh that failed: the message is the one line the command prints. `unreachable`: no answer came at all
    (azure.core's ServiceRequestError through ndfleet.azure's bounded transport: no network, DNS, refused, timed
    out connecting), so every other size would fail the same way and is not asked."""

    def __init__(self, message: str, *, unreachable: bool = False):
        self.unreachable = unreachable
        super().__init__(message)


@dataclass(frozen=True)
class Meter:
    vm_size: str
    region: str
    usd_per_hour: float
    meter_name: str
    product_name: str
    effective_start: str


def price_filter(vm_size: str, region: str) -> str:
    return (
        f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' and armSkuName eq '{vm_size}' "
        "and priceType eq 'Consumption'"
    )


def query_url(endpoint: str, vm_size: str, region: str) -> str:
    return f"{endpoint}?{urllib.parse.urlencode({'$filter': price_filter(vm_size, region)})}"


def is_linux_pay_as_you_go(item: dict[str, Any], vm_size: str, region: str) -> bool:
    names = f"{item.get('skuName', '')} {item.get('meterName', '')}"
    return (
        item.get("armSkuName") == vm_size
        and str(item.get("armRegionName", "")).lower() == region.lower()
        and item.get("serviceName") == "Virtual Machines"
        and item.get("type") == "Consumption"
        and item.get("currencyCode") == "USD"
        and item.get("unitOfMeasure", "1 Hour") == "1 Hour"
        and "Spot" not in names
        and "Low Priority" not in names
        and not str(item.get("productName", "")).endswith("Windows")
    )


class _Clock:
    def __init__(self, limits: Limits, now: Callable[[], float]):
        self.limits = limits
        self.now = now
        self.end = now() + limits.deadline_s

    def remaining(self) -> float:
        return self.end - self.now()

    def timeout(self) -> float:
        left = self.remaining()
        if left <= 0:
            raise RetailPriceError(f"{API_NAME} did not finish within {self.limits.deadline_s:g} s")
        return min(self.limits.request_timeout_s, left)


def _get_json(
    url: str, clock: _Clock, sleep: Callable[[float], None], what: str, transport: BoundedTransport | None = None
) -> dict[str, Any]:
    from azure.core.exceptions import ServiceRequestError, ServiceResponseError
    from azure.core.rest import HttpRequest

    from ndfleet.azure.answers import AnswerShape, json_object
    from ndfleet.azure.http import AnswerRefused, BoundedTransport, Bounds
    from ndfleet.azure.text import one_line

    transport = transport or BoundedTransport()
    for attempt in range(clock.limits.max_retries + 1):
        request = HttpRequest("GET", url, headers={"Accept": "application/json", "User-Agent": "ndfleet"})
        bounds = Bounds(clock.timeout(), clock.limits.max_body_bytes)
        try:
            response = transport.send(request, ndfleet_bounds=bounds)
        except AnswerRefused as error:
            raise RetailPriceError(f"{API_NAME}: {one_line(error)} ({what})") from None
        except ServiceRequestError as error:
            host = urllib.parse.urlsplit(url).netloc
            raise RetailPriceError(f"cannot reach {API_NAME} at {host}: {one_line(error)}", unreachable=True) from None
        except ServiceResponseError as error:
            raise RetailPriceError(f"{API_NAME}: {one_line(error)} ({what})") from None
        if response.status_code == 200:
            break
        if response.status_code != 429 or attempt == clock.limits.max_retries:
            reason = one_line(response.reason or "", 80)
            raise RetailPriceError(f"{API_NAME} answered HTTP {response.status_code} {reason} ({what})")
        sleep(_retry_after(response.headers.get("Retry-After"), clock))
    else:  # pragma: no cover - the loop always breaks or raises
        raise AssertionError
    try:
        doc = json_object(response.body(), API_NAME)
    except AnswerShape as error:
        raise RetailPriceError(f"{error} ({what})") from None
    if not isinstance(doc.get("Items"), list):
        raise RetailPriceError(f"{API_NAME} answered JSON without an 'Items' list ({what})")
    return doc


def _retry_after(header: str | None, clock: _Clock) -> float:
    """Seconds to wait after a 429: the Retry-After header's, bounded; refused if it runs past the deadline."""
    try:
        wait = float(header) if header is not None else 1.0
    except ValueError:
        wait = 1.0
    if not plausible(wait, 0.0, clock.limits.deadline_s):
        wait = clock.limits.max_retry_after_s
    wait = min(wait, clock.limits.max_retry_after_s)
    if wait >= clock.remaining():
        raise RetailPriceError(f"{API_NAME} asked to wait {wait:g} s (HTTP 429), past the refresh's deadline")
    return wait


def _page_key(url: str) -> tuple[str, str, int, str] | str:
    """Where a request goes (scheme, host, port with its default, path and query): the same page however its URL
    spells the port. A URL ndfleet.azure.http would refuse is its own key (the request then fails on it)."""
    from ndfleet.azure.http import AnswerRefused, endpoint_of

    try:
        where = endpoint_of(url)
    except AnswerRefused:
        return url
    return (where.scheme, where.host, where.port, where.target)


def _next_page(link: Any, endpoint: str) -> str | None:
    """The next page's URL, or None on the last page. Followed only to the endpoint's own scheme, host and port,
    compared with the default port filled in: Azure's links spell `:443` out where the endpoint does not."""
    from ndfleet.azure.http import AnswerRefused, endpoint_of
    from ndfleet.azure.text import one_line

    if link in (None, ""):
        return None
    if not isinstance(link, str):
        raise RetailPriceError(f"{API_NAME} answered a NextPageLink that is not a URL: {terminal_safe(repr(link), 80)}")
    try:
        ours, theirs = endpoint_of(endpoint), endpoint_of(link)
    except AnswerRefused as error:
        raise RetailPriceError(f"{API_NAME} answered a NextPageLink that is not followed: {one_line(error)}") from None
    if (theirs.scheme, theirs.host, theirs.port) != (ours.scheme, ours.host, ours.port):
        raise RetailPriceError(
            f"{API_NAME} answered a NextPageLink to another host ({theirs.scheme}://{theirs.host}:{theirs.port}): "
            "not followed"
        )
    return link


def _price(item: dict[str, Any], what: str) -> float:
    value = item.get("retailPrice")
    if not plausible(value, 0.0, MAX_USD_PER_HOUR):
        shown = terminal_safe(repr(value), 40)
        raise RetailPriceError(
            f"{API_NAME} answered a retailPrice that is not a plausible hourly price (0 to US${MAX_USD_PER_HOUR:,.0f}):"
            f" {shown} ({what})"
        )
    assert isinstance(value, (int, float))  # plausible() said so
    return float(value)


def fetch_meter(
    vm_size: str,
    region: str,
    endpoint: str = DEFAULT_ENDPOINT,
    limits: Limits = Limits(),
    *,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
    clock: _Clock | None = None,
    transport: BoundedTransport | None = None,
) -> Meter:
    """The Linux pay-as-you-go meter of `vm_size` in `region`, following NextPageLink up to `limits.max_pages`.
    `transport`: ndfleet.azure's bounded one (tests: one that trusts a stand-in's certificate)."""
    clock = clock or _Clock(limits, now)
    url: str | None = query_url(endpoint, vm_size, region)
    found: list[Meter] = []
    pages = 0
    seen: set[tuple[str, str, int, str] | str] = set()
    while url is not None:
        key = _page_key(url)
        if key in seen:
            raise RetailPriceError(f"{API_NAME}'s NextPageLink points back at a page already read for {vm_size}")
        seen.add(key)
        if pages == clock.limits.max_pages:
            raise RetailPriceError(f"{API_NAME} still had pages after {clock.limits.max_pages} for {vm_size}")
        doc = _get_json(url, clock, sleep, f"{vm_size} in {region}", transport)
        pages += 1
        for item in doc["Items"]:
            if isinstance(item, dict) and is_linux_pay_as_you_go(item, vm_size, region):
                found.append(
                    Meter(
                        vm_size, region, _price(item, f"{vm_size} in {region}"),
                        terminal_safe(item.get("meterName", ""), 100), terminal_safe(item.get("productName", ""), 100),
                        terminal_safe(item.get("effectiveStartDate", ""), 40),
                    )
                )  # fmt: skip
        url = _next_page(doc.get("NextPageLink"), endpoint)
    if not found:
        raise RetailPriceError(
            f"no Linux pay-as-you-go meter for {vm_size} in {region} in {API_NAME} (is the size offered there?)"
        )
    # A price change adds a meter with a later effectiveStartDate (ISO 8601, so text order is time order).
    return max(found, key=lambda m: m.effective_start)


def fetch_meters(
    sizes: list[str],
    region: str,
    endpoint: str = DEFAULT_ENDPOINT,
    limits: Limits = Limits(),
    *,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
    transport: BoundedTransport | None = None,
) -> tuple[dict[str, Meter], list[str]]:
    """Every size's meter under one deadline; the errors of all sizes, one line each (never only the first).
    Raises RetailPriceError (`unreachable`) when the API cannot be reached at all."""
    clock = _Clock(limits, now)
    meters: dict[str, Meter] = {}
    errors: list[str] = []
    for size in dict.fromkeys(sizes):
        try:
            meters[size] = fetch_meter(
                size, region, endpoint, limits, sleep=sleep, now=now, clock=clock, transport=transport
            )
        except RetailPriceError as error:
            if error.unreachable:
                raise  # one line: the network, not each size, is the problem
            errors.append(str(error))
    return meters, errors
