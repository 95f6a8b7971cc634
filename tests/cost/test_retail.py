"""`ndfleet cost --refresh`'s client against a local stand-in for the Azure Retail Prices API."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlsplit

import pytest

from ndfleet.cost.retail import Limits, Meter, RetailPriceError, fetch_meter, fetch_meters
from tests.cost.retail_server import Reply, RetailServer, retail_server
from tests.impact.arm_server import loopback_up

D8 = "Standard_D8s_v5"
H100 = "Standard_ND96isr_H100_v5"
# Generous for a loaded 2-core machine; the hang test uses its own short request timeout.
LIMITS = Limits(request_timeout_s=20, deadline_s=60, max_pages=5, max_body_bytes=64 * 1024, max_retries=2)
TWO_PAGES = {0: [Reply(file="d8s-v5-eastus-page1.json")], 100: [Reply(file="d8s-v5-eastus-page2.json")]}


@contextmanager
def served(**routes: dict[int, list[Reply]]) -> Iterator[RetailServer]:
    names = {"d8": D8, "h100": H100}
    with retail_server({names[k]: v for k, v in routes.items()}) as server:
        yield server


def fetch(server: RetailServer, size: str = D8, limits: Limits = LIMITS, sleeps: list[float] | None = None) -> Meter:
    record = sleeps if sleeps is not None else []
    return fetch_meter(size, "eastus", server.url, limits, sleep=record.append)


def failure(server: RetailServer, size: str = D8, limits: Limits = LIMITS) -> str:
    with pytest.raises(RetailPriceError) as raised:
        fetch(server, size, limits)
    return str(raised.value)


def test_the_linux_pay_as_you_go_meter_is_found_on_the_second_page() -> None:
    with served(d8=TWO_PAGES) as server:
        meter = fetch(server)
    assert (meter.usd_per_hour, meter.meter_name, meter.product_name) == (
        0.384,
        "D8s v5",
        "Virtual Machines Dsv5 Series",
    )
    assert len(server.requests) == 2


def test_spot_low_priority_and_windows_meters_are_skipped() -> None:
    with served(h100={0: [Reply(file="nd-h100-v5-eastus.json")]}) as server:
        assert fetch(server, H100).usd_per_hour == 98.32


def test_the_query_filters_on_region_size_and_consumption() -> None:
    with served(d8=TWO_PAGES) as server:
        fetch(server)
    query = parse_qs(urlsplit(server.requests[0]).query)
    assert query["$filter"] == [
        "serviceName eq 'Virtual Machines' and armRegionName eq 'eastus' and armSkuName eq 'Standard_D8s_v5' "
        "and priceType eq 'Consumption'"
    ]


def test_a_size_without_a_meter_is_named() -> None:
    with served() as server:
        message = failure(server)
    assert message.startswith(f"no Linux pay-as-you-go meter for {D8} in eastus")


def test_a_page_of_only_spot_and_windows_meters_is_no_meter() -> None:
    with served(d8={0: [Reply(file="d8s-v5-eastus-page1.json")], 100: [Reply(file="no-meter.json")]}) as server:
        assert failure(server).startswith("no Linux pay-as-you-go meter")


def test_429_waits_retry_after_then_succeeds() -> None:
    throttled = Reply(status=429, body=b"{}", headers=(("Retry-After", "3"),))
    sleeps: list[float] = []
    with served(d8={0: [throttled, Reply(file="d8s-v5-eastus-page1.json")], 100: TWO_PAGES[100]}) as server:
        meter = fetch(server, sleeps=sleeps)
    assert (meter.usd_per_hour, sleeps) == (0.384, [3.0])


def test_429_past_the_retries_fails_with_the_status() -> None:
    throttled = Reply(status=429, body=b"{}", headers=(("Retry-After", "1"),))
    with served(d8={0: [throttled]}) as server:
        message = failure(server)
    assert "HTTP 429" in message and len(server.requests) == LIMITS.max_retries + 1


def test_retry_after_is_bounded() -> None:
    throttled = Reply(status=429, body=b"{}", headers=(("Retry-After", "86400"),))
    sleeps: list[float] = []
    with served(d8={0: [throttled, Reply(file="nd-h100-v5-eastus.json")]}) as server, pytest.raises(RetailPriceError):
        fetch(server, sleeps=sleeps)
    assert sleeps == [LIMITS.max_retry_after_s]


def test_an_http_error_is_one_line_with_the_status() -> None:
    with served(d8={0: [Reply(status=500, body=b"{}")]}) as server:
        assert failure(server).startswith("the Azure Retail Prices API answered HTTP 500")


def test_malformed_json_is_a_named_failure() -> None:
    with served(d8={0: [Reply(body=b'{"Items": [')]}) as server:
        assert "not JSON" in failure(server)


def test_a_nan_price_is_a_named_failure() -> None:
    body = (
        b'{"Items": [{"armSkuName": "Standard_D8s_v5", "armRegionName": "eastus", "serviceName": "Virtual Machines",'
        b' "type": "Consumption", "currencyCode": "USD", "retailPrice": NaN, "productName": "x", "skuName": "D8s v5"}]}'
    )
    with served(d8={0: [Reply(body=body)]}) as server:
        assert "not JSON" in failure(server)


def test_a_huge_body_is_refused() -> None:
    with served(d8={0: [Reply(body=b" " * (LIMITS.max_body_bytes + 1))]}) as server:
        assert f"more than {LIMITS.max_body_bytes:,} bytes" in failure(server)


def test_a_server_that_hangs_times_out() -> None:
    short = Limits(request_timeout_s=1, deadline_s=30, max_pages=5, max_body_bytes=64 * 1024, max_retries=0)
    with served(d8={0: [Reply(hang=True)]}) as server:
        assert "did not finish its answer within 1 s" in failure(server, limits=short)


def test_pages_are_bounded() -> None:
    one_page = Limits(request_timeout_s=20, deadline_s=60, max_pages=1, max_body_bytes=64 * 1024)
    with served(d8=TWO_PAGES) as server:
        assert "still had pages after 1" in failure(server, limits=one_page)


def test_a_next_page_link_to_another_host_is_not_followed() -> None:
    page = b'{"Items": [], "NextPageLink": "https://elsewhere.example/api/retail/prices?$skip=100", "Count": 0}'
    with served(d8={0: [Reply(body=page)]}) as server:
        assert "another host" in failure(server)
    assert len(server.requests) == 1


def test_every_size_failure_is_reported_not_only_the_first() -> None:
    with served(h100={0: [Reply(file="nd-h100-v5-eastus.json")]}) as server:
        meters, errors = fetch_meters([H100, D8, "Standard_D16s_v5"], "eastus", server.url, LIMITS)
    assert list(meters) == [H100]
    assert [e.split(" in eastus")[0] for e in errors] == [
        f"no Linux pay-as-you-go meter for {D8}",
        "no Linux pay-as-you-go meter for Standard_D16s_v5",
    ]


def test_network_down_is_one_line() -> None:
    # Port 9 on loopback (discard) is closed in the test's network namespace: the connection is refused.
    loopback_up()
    with pytest.raises(RetailPriceError) as raised:
        fetch_meter(D8, "eastus", "http://127.0.0.1:9/api/retail/prices", LIMITS, sleep=lambda s: None)
    assert str(raised.value).startswith("cannot reach the Azure Retail Prices API at 127.0.0.1:9")
