"""The recorded price table (ndfleet/cost/prices.json), `cost --refresh --write`, the offline fallback, the one
`prices:` line and the one month length."""

from __future__ import annotations

import datetime
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from ndfleet.cli import build_parser
from ndfleet.commands.cost import cost_command
from ndfleet.cost.estimate import estimate_cost, plan_cost_lines, render_cost
from ndfleet.cost.prices import NO_METER, PRICE_TABLE, ListPrice, PriceTableError, load_no_meter, load_table, source_url
from ndfleet.cost.retail import ENDPOINT_ENV
from ndfleet.monitoring.budget import budget as series_budget
from ndfleet.monitoring.budget import cost_markdown
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config
from tests.cost.retail_server import Reply, retail_server

H100 = "Standard_ND96isr_H100_v5"
H200 = "Standard_ND96isr_H200_v5"


def stack(tmp_path: Path, **config: Any) -> Path:
    path = tmp_path / "Pulumi.c.yaml"
    path.write_text(json.dumps({"config": {f"ndfleet:{k}": v for k, v in base_config(**config).items()}}))
    return path


def run(capsys: pytest.CaptureFixture[str], path: Path, *flags: str, env: dict[str, str] | None = None) -> Any:
    args = build_parser().parse_args(["cost", "--stack-file", str(path), *flags])
    code = cost_command(args, env=env or {})
    out, err = capsys.readouterr()
    return code, out, err


def closed_port_url() -> str:
    """An endpoint on 127.0.0.1 nothing listens on: the connection is refused, as with no network."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/api/retail/prices"


def test_every_recorded_row_names_its_date_and_the_query_that_answers_it() -> None:
    assert PRICE_TABLE
    for row in PRICE_TABLE:
        assert len(row.observed) in (7, 10) and row.observed[:4].isdigit(), row
        assert row.source_url == source_url(row.vm_size, row.region), row
        assert f"armSkuName eq '{row.vm_size}'" in row.source_url and f"'{row.region}'" in row.source_url


def test_a_broken_table_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"prices": [{"vmSize": H100, "region": "eastus", "usdPerHour": "98"}]}))
    with pytest.raises(PriceTableError, match=r"prices\[0\]: a row must have exactly the keys"):
        load_table(path)


def test_one_prices_line_for_a_table_with_two_dates() -> None:
    spec = load_spec(base_config(scheduler="slurm"), "t")
    dates = {H100: "2026-09", "Standard_D8s_v5": "2026-06"}
    lines = render_cost(estimate_cost(spec, lambda size, region: ListPrice(size, region, 1.0, dates[size], "s")))
    prices = [line for line in lines if line.lstrip().startswith("prices:")]
    assert prices == [
        "  prices: ndfleet's recorded price table (ndfleet/cost/prices.json), observed 2026-06 to 2026-09"
    ]
    assert [line for line in lines if line.lstrip().startswith("source:")] == ["  source: s"]


def test_a_region_without_a_price_says_so_names_the_refresh_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, stack(tmp_path, location="eastus", vmSize=H200))
    assert code == 2
    assert f"no list price recorded for {H200} in eastus (ndfleet's table has it in 28 regions: " in out
    assert "`ndfleet cost --refresh` (with network) reads it" in out
    assert "US$84.80" not in out and "US$110.24" not in out  # never another region's figure (eastus2's, westus's)


def test_refresh_without_network_is_one_line_and_the_last_known_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = closed_port_url()
    code, out, err = run(capsys, stack(tmp_path, scheduler="slurm"), "--refresh", env={ENDPOINT_ENV: url})
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1, err  # one line, not one per VM size
    host = url.split("/")[2]
    assert lines[0].startswith(f"ndfleet cost: error: cannot reach the Azure Retail Prices API at {host}: ")
    assert lines[0].endswith("the prices below are the last known ones, ndfleet's recorded price table "
                             "(ndfleet/cost/prices.json)")  # fmt: skip
    assert "US$98.32/h each" in out and "total (4 VMs): US$197.41 per hour" in out
    assert [line for line in out.splitlines() if "prices:" in line] == [
        "  prices: ndfleet's recorded price table (ndfleet/cost/prices.json), observed 2026-06-18"
    ]


def test_refresh_without_network_in_json_is_the_whole_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {ENDPOINT_ENV: closed_port_url()}
    code, out, err = run(capsys, stack(tmp_path), "--refresh", "--format", "json", env=env)
    doc = json.loads(out)
    assert (code, err, doc["refreshed"], doc["usdPerHour"]) == (2, "", False, 196.64)
    assert doc["refreshError"].startswith("cannot reach the Azure Retail Prices API")
    assert doc["pricesFrom"].startswith("ndfleet's recorded price table")


def test_refresh_write_records_rows_in_the_table_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "prices.json"
    routes = {H100: {0: [Reply(file="nd-h100-v5-eastus.json")]}}
    with retail_server(routes) as server:
        env = {ENDPOINT_ENV: server.url}
        code, out, _ = run(capsys, stack(tmp_path), "--refresh", "--write", str(out_file), env=env)
    assert code == 0
    today = datetime.date.today().isoformat()
    assert f"  prices: Azure Retail Prices API (prices.azure.com), Linux pay-as-you-go, read {today}" in out
    rows = {(r.vm_size, r.region): r for r in load_table(out_file)}
    fresh = rows[(H100, "eastus")]
    assert (fresh.usd_per_hour, fresh.observed, fresh.source_url) == (98.32, today, source_url(H100, "eastus"))
    assert "effective 2024-05-01T00:00:00Z" in fresh.source
    # The recorded table's other rows are kept, unchanged, and so are its sizes without a meter.
    assert rows[(H200, "eastus2")] == next(r for r in PRICE_TABLE if (r.vm_size, r.region) == (H200, "eastus2"))
    assert len(rows) == len(PRICE_TABLE)
    assert load_no_meter(out_file) == NO_METER and NO_METER


def test_write_without_refresh_is_a_usage_error(tmp_path: Path) -> None:
    from ndfleet.cliconvention import UsageError

    args = build_parser().parse_args(["cost", "--stack-file", str(stack(tmp_path)), "--write", "x.json"])
    with pytest.raises(UsageError, match="--write"):
        cost_command(args, env={})


def test_monitoring_prices_the_same_730_hour_month() -> None:
    spec = load_spec(base_config(monitoring={"enabled": True, "emails": ["ops@example.com"]}), "t")
    b = series_budget(spec)
    assert b.samples_per_month == pytest.approx(b.events_per_minute * 60 * 730)
    assert "per 730-hour month" in cost_markdown(spec)
    assert any("monitoring ingestion: about" in line and "per 730-hour month" in line for line in plan_cost_lines(spec))


def test_refresh_write_follows_the_pages_and_records_every_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "prices.json"
    d8 = "Standard_D8s_v5"
    routes = {
        H100: {0: [Reply(file="nd-h100-v5-eastus.json")]},
        d8: {0: [Reply(file="d8s-v5-eastus-page1.json")], 100: [Reply(file="d8s-v5-eastus-page2.json")]},
    }
    with retail_server(routes) as server:
        env = {ENDPOINT_ENV: server.url}
        code, _, _ = run(capsys, stack(tmp_path, scheduler="slurm"), "--refresh", "--write", str(out_file), env=env)
    assert code == 0 and sum("$skip=100" in r for r in server.requests) == 1  # D8s_v5's Linux meter is on page 2
    today = datetime.date.today().isoformat()
    rows = {(r.vm_size, r.region): r for r in load_table(out_file)}
    assert [(rows[(s, "eastus")].usd_per_hour, rows[(s, "eastus")].observed) for s in (H100, d8)] == [
        (98.32, today), (0.384, today)]  # fmt: skip
