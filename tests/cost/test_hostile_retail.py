"""`ndfleet cost --refresh` against a hostile Retail Prices API (loopback stand-ins: tests/cost/retail_server.py, and
tests/impact/arm_server.py for answers dripped a byte at a time): a price too large to be one, a body dripped after
its headers, a NextPageLink cycle, meter names that carry control sequences. Each is one named line (exit 1) or
clean output, never US$inf, a crash of the JSON output, or a read without end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ndfleet.cost.retail import Limits, RetailPriceError, fetch_meters, query_url
from tests.cost.retail_server import RETAIL, Reply, retail_server
from tests.cost.test_cost_cmd import D8, H100, run, stack
from tests.impact import arm_server
from tests.status.standin import assert_clean

ND = "nd-h100-v5-eastus.json"


def h100_answer(**item: object) -> bytes:
    """The recorded ND H100 v5 answer (Microsoft Learn, "Azure Retail Prices REST API": Items, NextPageLink), with
    the Linux pay-as-you-go meter's fields replaced."""
    doc = json.loads((RETAIL / ND).read_text())
    for meter in doc["Items"]:
        if meter["retailPrice"] == 98.32:
            meter.update(item)
    return json.dumps(doc).encode()


def priced(h100: bytes) -> dict[str, dict[int, list[Reply]]]:
    return {H100: {0: [Reply(body=h100)]}, D8: {0: [Reply(file="d8s-v5-eastus-page1.json")],
                                              100: [Reply(file="d8s-v5-eastus-page2.json")]}}  # fmt: skip


@pytest.mark.parametrize("price", [1e308, 1e6, -1.0])
@pytest.mark.parametrize("fmt", ["json", "table"])
def test_a_price_no_vm_costs_is_a_named_failure_in_both_formats(
    price: float, fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with retail_server(priced(h100_answer(retailPrice=price))) as server:
        args = ["--refresh", "--format", fmt]
        from ndfleet.cli import build_parser
        from ndfleet.commands.cost import cost_command

        parsed = build_parser().parse_args(["cost", "--stack-file", str(stack(tmp_path)), *args])
        code = cost_command(parsed, env={"NDFLEET_RETAIL_PRICES_URL": server.url})
    out, err = capsys.readouterr()
    assert code == 2
    # docs/cli.md: under --format json the error is a JSON object on stdout, else a prefixed line on stderr.
    said = json.loads(out)["error"] if fmt == "json" else err
    assert (out if fmt == "table" else err) == ""
    assert "is not a plausible hourly price (0 to US$1,000)" in said
    assert "inf" not in said.replace("info", "")


def test_meter_names_are_printed_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostile = h100_answer(meterName="ND96isr H100 v5\x1b[2J\nstatus: forged\u2028line\x9b1m")
    with retail_server(priced(hostile)) as server:
        code, doc, err = run(capsys, stack(tmp_path), "--refresh", env={"NDFLEET_RETAIL_PRICES_URL": server.url})
    assert code == 0
    source = doc["items"][0]["priceSource"]
    assert source.isprintable() and "status: forged line" in source


@pytest.mark.parametrize("drip", ["body", "head"])
def test_an_answer_dripped_before_or_after_its_headers_is_cut_at_the_deadline(drip: str) -> None:
    limits = Limits(request_timeout_s=1.0, deadline_s=30, max_pages=5, max_body_bytes=64 * 1024, max_retries=0)
    routes = {("GET", "/api/retail/prices"): [arm_server.Reply(200, raw=(RETAIL / ND).read_bytes(), drip=drip,
                                                               drip_s=0.2)]}  # fmt: skip
    with arm_server.serve(routes) as server:
        meters, errors = fetch_meters([H100], "eastus", f"{server.base}/api/retail/prices", limits)
    assert meters == {}
    assert errors == [
        f"the Azure Retail Prices API: 127.0.0.1 did not finish its answer within 1 s ({H100} in eastus)"
    ]
    assert server.drips_outlasted == 0


def test_a_next_page_link_cycle_is_refused() -> None:
    with retail_server({}) as server:
        first = query_url(server.url, H100, "eastus")

        def page(link: str) -> list[Reply]:
            return [Reply(body=json.dumps({"Items": [], "NextPageLink": link, "Count": 0}).encode())]

        server.routes[H100] = {0: page(first + "&$skip=100"), 100: page(first)}  # two pages pointing at each other
        meters, errors = fetch_meters([H100], "eastus", server.url, Limits(max_pages=50))
    assert len(errors) == 1 and "points back at a page already read" in errors[0], errors
    assert len(server.requests) == 2


@pytest.mark.parametrize("body", [b'{"Items": "x"}', b"\xff\xfe", b"[" * 100_000])
def test_an_answer_of_the_wrong_shape_is_named(body: bytes) -> None:
    with retail_server({H100: {0: [Reply(body=body)]}}) as server, pytest.raises(RetailPriceError) as raised:
        from ndfleet.cost.retail import fetch_meter

        fetch_meter(H100, "eastus", server.url)
    assert_clean(str(raised.value))
    assert any(s in str(raised.value) for s in ("'Items' list", "not UTF-8", "nested too deeply"))
