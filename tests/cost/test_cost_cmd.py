"""`ndfleet cost` end to end: the table's prices, and --refresh against a local Retail Prices stand-in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ndfleet.cli import build_parser
from ndfleet.commands.cost import cost_command
from ndfleet.cost.retail import ENDPOINT_ENV
from tests.conftest import base_config
from tests.cost.retail_server import Reply, retail_server

H100 = "Standard_ND96isr_H100_v5"
D8 = "Standard_D8s_v5"


def stack(tmp_path: Path, **config: Any) -> Path:
    path = tmp_path / "Pulumi.c.yaml"
    path.write_text(json.dumps({"config": {f"ndfleet:{k}": v for k, v in base_config(**config).items()}}))
    return path


def run(capsys: pytest.CaptureFixture[str], path: Path, *flags: str, env: dict[str, str] | None = None) -> Any:
    args = build_parser().parse_args(["cost", "--stack-file", str(path), "--format", "json", *flags])
    code = cost_command(args, env=env or {})
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out else None), err


def test_table_prices_without_refresh(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc, _ = run(capsys, stack(tmp_path, nodes=64, location="eastus2", vmSize="Standard_ND96isr_H200_v5"))
    assert (code, doc["usdPerHour"], doc["refreshed"]) == (0, 5427.2, False)  # 64 x 84.80


def test_refresh_prices_every_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    routes = {
        H100: {0: [Reply(file="nd-h100-v5-eastus.json")]},
        D8: {0: [Reply(file="d8s-v5-eastus-page1.json")], 100: [Reply(file="d8s-v5-eastus-page2.json")]},
    }
    with retail_server(routes) as server:
        code, doc, _ = run(capsys, stack(tmp_path, scheduler="slurm"), "--refresh", env={ENDPOINT_ENV: server.url})
    assert code == 0
    assert [(i["vmSize"], i["usdPerVmHour"]) for i in doc["items"]] == [(H100, 98.32), (D8, 0.384), (D8, 0.384)]
    assert doc["items"][0]["priceSource"].startswith("Azure Retail Prices API")


def test_refresh_failure_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with retail_server({}) as server:
        code, doc, err = run(capsys, stack(tmp_path), "--refresh", env={ENDPOINT_ENV: server.url})
    message = (
        f"no Linux pay-as-you-go meter for {H100} in eastus in the Azure Retail Prices API (is the size offered there?)"
    )
    # --format json (run's default): the error is the JSON document on stdout (docs/cli.md), stderr stays clean.
    assert (code, doc, err) == (2, {"command": "ndfleet cost", "error": message, "exitCode": 2}, "")


def test_nothing_priced_is_null_in_cost_and_plan_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 44: with nothing priced both documents said "usdPerHour": 0.0 beside "complete": false.
    from ndfleet.cli import main

    def no_price(vm_size: str, region: str) -> None:
        return None

    monkeypatch.setattr("ndfleet.cost.prices.table_price", no_price)  # what `cost` reads
    monkeypatch.setattr("ndfleet.cost.estimate.table_price", no_price)  # what `plan` reads
    path = stack(tmp_path, scheduler="slurm")
    code, doc, _ = run(capsys, path)
    assert main(["plan", "--stack-file", str(path), "--format", "json"]) == 0
    plan_cost = json.loads(capsys.readouterr().out)["cost"]
    assert code == 2  # a partial answer (docs/cli.md), its whole document
    for cost in (doc, plan_cost):
        assert (cost["usdPerHour"], cost["usdPerMonth"], cost["complete"]) == (None, None, False)
        assert [i["usdPerHour"] for i in cost["items"]] == [None, None, None]
        assert cost["unpricedItems"] == [i["role"] for i in cost["items"]]
