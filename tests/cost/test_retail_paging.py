"""`ndfleet cost --refresh` follows the Retail Prices API's pages as Azure writes them, and nothing else.

Microsoft Learn, "Azure Retail Prices REST API overview"
(https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices), "API response
pagination": at most 1,000 records an answer, and the answer ends with the link to the next page, written with the
port: `"NextPageLink": https://prices.azure.com:443/api/retail/prices?$filter=...&$skip=1000`. The client asks
`https://prices.azure.com/api/retail/prices` (no port), so a guard that compares the host-and-port text refuses
every answer of more than one page. The stand-in (tests/cost/retail_server.py) answers over HTTPS as
prices.azure.com: the client connects to it through ndfleet.azure's bounded transport (connect_to, a test CA)."""

from __future__ import annotations

import json
import ssl
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from ndfleet.azure.http import BoundedTransport
from ndfleet.cost.retail import (
    DEFAULT_ENDPOINT,
    Limits,
    RetailPriceError,
    _next_page,
    fetch_meter,
    price_filter,
    query_url,
)  # fmt: skip
from tests.cost.retail_server import RETAIL, Reply, RetailServer, retail_server
from tests.twin import pki

H100 = "Standard_ND96isr_H100_v5"
HOST = "prices.azure.com"
# What Learn's example NextPageLink is: the endpoint with the default port written out.
LINKED_ENDPOINT = "https://prices.azure.com:443/api/retail/prices"
PAGE_ITEMS = 1000  # the most one answer holds
LIMITS = Limits(request_timeout_s=20, deadline_s=60, max_pages=5, max_retries=0)


@dataclass
class Tls:
    server: ssl.SSLContext
    client: ssl.SSLContext


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    ca, cert, key = pki.make_ca_and_server(tmp_path_factory.mktemp("pki"), [HOST], ["127.0.0.1"])
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    return Tls(server, ssl.create_default_context(cafile=str(ca)))


def recorded_meters() -> list[dict[str, Any]]:
    """The recorded eastus answer's meters: Linux pay-as-you-go (98.32), Spot and Windows."""
    items: list[dict[str, Any]] = json.loads((RETAIL / "nd-h100-v5-eastus.json").read_text())["Items"]
    return items


def link(skip: int, base: str = LINKED_ENDPOINT) -> str:
    """A NextPageLink as Learn writes it: the query percent-encoded with %20, then `&$skip=N`."""
    return f"{base}?$filter={urllib.parse.quote(price_filter(H100, 'eastus'))}&$skip={skip}"


def page(items: list[dict[str, Any]], next_link: str | None) -> bytes:
    return json.dumps({"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
                       "Items": items, "NextPageLink": next_link, "Count": len(items)}).encode()  # fmt: skip


def full_first_page(next_link: str | None) -> bytes:
    """1,000 meters that are not the Linux pay-as-you-go one (Spot and Windows, each with its own meterId)."""
    others = [m for m in recorded_meters() if m["retailPrice"] != 98.32]
    items = [dict(others[n % len(others)], meterId=f"00000000-0000-0000-0001-{n:012d}") for n in range(PAGE_ITEMS)]
    return page(items, next_link)


def linux_page() -> bytes:
    return page([m for m in recorded_meters() if m["retailPrice"] == 98.32], None)


@contextmanager
def azure(tls: Tls, routes: dict[int, list[Reply]]) -> Iterator[tuple[RetailServer, BoundedTransport]]:
    with retail_server({H100: routes}, tls=tls.server) as server:
        port = urllib.parse.urlsplit(server.url).port
        assert port is not None
        yield server, BoundedTransport(tls=tls.client, connect_to={HOST: ("127.0.0.1", port)})


def fetch(transport: BoundedTransport) -> float:
    return fetch_meter(H100, "eastus", DEFAULT_ENDPOINT, LIMITS, sleep=lambda s: None, transport=transport).usd_per_hour


def test_a_two_page_answer_in_azures_documented_form_is_followed(tls: Tls) -> None:
    routes = {0: [Reply(body=full_first_page(link(1000)))], 1000: [Reply(body=linux_page())]}
    with azure(tls, routes) as (server, transport):
        assert fetch(transport) == 98.32
    assert len(server.requests) == 2
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(server.requests[1]).query)["$skip"] == ["1000"]


def test_a_link_back_to_a_page_read_before_is_a_cycle_however_its_port_is_spelt(tls: Tls) -> None:
    first = urllib.parse.urlsplit(query_url(DEFAULT_ENDPOINT, H100, "eastus"))
    back = f"{LINKED_ENDPOINT}?{first.query}"  # the first request's own query, the port written out
    cycle = pytest.raises(RetailPriceError, match="points back at a page already read")
    with azure(tls, {0: [Reply(body=page(recorded_meters()[1:], back))]}) as (server, transport), cycle:
        fetch(transport)
    assert len(server.requests) == 1


def test_a_link_to_another_host_is_not_followed_even_on_port_443(tls: Tls) -> None:
    elsewhere = link(1000, "https://elsewhere.example:443/api/retail/prices")
    refused = pytest.raises(RetailPriceError, match=r"another host \(https://elsewhere.example:443\)")
    with azure(tls, {0: [Reply(body=full_first_page(elsewhere))]}) as (server, transport), refused:
        fetch(transport)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "next_link",
    [LINKED_ENDPOINT + "?$skip=1000", "https://prices.azure.com/api/retail/prices?$skip=1000",
     "HTTPS://Prices.Azure.COM:443/api/retail/prices?$skip=1000"],
)  # fmt: skip
def test_the_endpoints_own_scheme_host_and_port_are_followed_however_written(next_link: str) -> None:
    assert _next_page(next_link, DEFAULT_ENDPOINT) == next_link


@pytest.mark.parametrize(
    "next_link",
    ["http://prices.azure.com/api/retail/prices?$skip=1000", "http://prices.azure.com:443/api/retail/prices",
     "https://prices.azure.com:8443/api/retail/prices", "https://prices.azure.com.evil.example/api/retail/prices",
     "https://evil.example/prices.azure.com/api/retail/prices", "https://prices.azure.com@evil.example/x",
     "https://prices.azure.com:notaport/x", "/api/retail/prices?$skip=1000"],
)  # fmt: skip
def test_any_other_scheme_host_or_port_is_refused(next_link: str) -> None:
    with pytest.raises(RetailPriceError, match="NextPageLink"):
        _next_page(next_link, DEFAULT_ENDPOINT)
