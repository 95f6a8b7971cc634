"""ndfleet's price table against the recording it was taken from.

The expected figures are read from tests/data/prices/retail-prices-2026-06-18.json, a trimmed copy of Azure's Retail
Prices API answers as committed in Azure/karpenter-provider-azure pkg/providers/pricing/zz_generated.pricing.go at
commit 2b431da153a6a92b705c18046512c60b1631b682 (generated 2026-06-18T03:43:41Z; the fixture's `about` says what was
kept and left out). ndfleet reads ndfleet/cost/prices.json, never that fixture: a figure changed, lost or invented in
the table (another region's, a guess) fails here."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from ndfleet.cli import build_parser
from ndfleet.commands.cost import cost_command
from ndfleet.cost.estimate import estimate_cost, price_warnings, render_cost
from ndfleet.cost.prices import NO_METER, PRICE_TABLE, table_price
from ndfleet.prepare import prepare_config
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.profiles import MACHINE_SIZES, PROFILES
from tests.conftest import base_config, plan_of

FIXTURE = Path(__file__).resolve().parent.parent / "data" / "prices" / "retail-prices-2026-06-18.json"
H100, H200, D8 = "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5", "Standard_D8s_v5"
KARPENTER = "Azure/karpenter-provider-azure pkg/providers/pricing/zz_generated.pricing.go @ " \
            "2b431da153a6a92b705c18046512c60b1631b682"  # fmt: skip
DEPLOYED = set(PROFILES) | set(MACHINE_SIZES)  # the GPU sizes and the Slurm sizes ndfleet knows


@cache
def recording() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(FIXTURE.read_text())
    return doc


def recorded(size: str) -> dict[str, float]:
    figures: dict[str, float] = recording()["usdPerHour"].get(size, {})
    return figures


def nd_cases() -> list[tuple[str, str]]:
    return [(size, region) for size in (H100, H200) for region in sorted(recorded(size))]


def test_the_recording_is_the_one_cited() -> None:
    doc = recording()
    assert doc["source"] == f"{KARPENTER}, generated 2026-06-18T03:43:41Z" and doc["recorded"] == "2026-06-18"
    assert (len(recorded(H100)), len(recorded(H200))) == (23, 28)
    assert len({r for figures in doc["usdPerHour"].values() for r in figures}) == 36


def test_every_recorded_figure_of_a_size_ndfleet_deploys_is_in_the_table_and_nothing_else() -> None:
    expected = {(size, region): usd for size, figures in recording()["usdPerHour"].items() if size in DEPLOYED
                for region, usd in figures.items()}  # fmt: skip
    table = {(p.vm_size, p.region): p.usd_per_hour for p in PRICE_TABLE}
    assert table == expected
    assert {s for s, _ in expected} == {H100, H200, D8, "Standard_D4s_v5", "Standard_D16s_v5", "Standard_D32s_v5",
                                        "Standard_E8s_v5", "Standard_E16s_v5"}  # fmt: skip


def test_every_figure_carries_the_recordings_date_and_source() -> None:
    for p in PRICE_TABLE:
        assert p.observed == "2026-06-18", p
        assert KARPENTER in p.source and "generated 2026-06-18T03:43:41Z" in p.source, p


def test_the_independent_recordings_agree_with_the_table() -> None:
    for check in recording()["crossChecks"]:
        found = table_price(check["vmSize"], check["region"])
        assert found is not None and found.usd_per_hour == check["usdPerHour"], check


@pytest.mark.parametrize(("size", "region"), nd_cases())
def test_a_stack_in_every_recorded_region_is_priced_at_the_recorded_figure(size: str, region: str) -> None:
    spec = load_spec(base_config(location=region, vmSize=size, nodes=16, scheduler="slurm"), "priced")
    estimate = estimate_cost(spec)
    gpu, controller, login = estimate.items
    assert (gpu.group.vm_size, gpu.usd_per_vm_hour) == (size, recorded(size)[region])
    assert controller.usd_per_vm_hour == login.usd_per_vm_hour == recorded(D8)[region]
    assert estimate.missing == []
    assert estimate.usd_per_hour == pytest.approx(16 * recorded(size)[region] + 2 * recorded(D8)[region])
    text = "\n".join(render_cost(estimate))
    assert f"US${recorded(size)[region]:,.2f}/h each" in text and f"list price in {region}, USD" in text


@pytest.mark.parametrize("size", [H100, H200])
def test_a_region_of_the_recording_without_the_size_names_the_regions_that_have_it(size: str) -> None:
    everywhere = {r for figures in recording()["usdPerHour"].values() for r in figures}
    for region in sorted(everywhere - set(recorded(size))):
        [line] = estimate_cost(load_spec(base_config(location=region, vmSize=size), "unpriced")).missing
        named = line.split(" regions: ", 1)[1].split("): ", 1)[0].split(", ")
        assert named == sorted(recorded(size)), (region, line)
        assert line.startswith(f"no list price recorded for {size} in {region} (ndfleet's table has it in "
                               f"{len(recorded(size))} regions: ")  # fmt: skip


def test_the_sizes_without_a_meter_are_the_recordings() -> None:
    expected = {(n["vmSize"], n["region"]) for n in recording()["noMeter"]}
    assert {(n.vm_size, n.region) for n in NO_METER} == expected == {
        (H100, "italynorth"), (H100, "norwayeast"), (H200, "eastus")}  # fmt: skip
    for size, region in expected:
        assert region not in recorded(size) and table_price(size, region) is None


@pytest.mark.parametrize(("size", "region"), [(H100, "italynorth"), (H100, "norwayeast"), (H200, "eastus")])
def test_plan_and_the_program_warn_about_a_size_without_a_meter_before_deploying(size: str, region: str) -> None:
    config = base_config(location=region, vmSize=size)
    plan = plan_of(config)
    [warning] = [w for w in plan.spec.warnings if w.startswith(f"{size} in {region}, as of ")]
    assert "no meter" in warning and "`ndfleet preflight` asks Azure" in warning
    assert warning.endswith(f"regions with a recorded price: {', '.join(sorted(recorded(size)))}")
    # What the Pulumi program logs (pulumi.log.warn) before it creates anything:
    assert warning in prepare_config(config, "test", {}).spec.warnings


def test_no_such_warning_where_the_size_is_priced() -> None:
    assert price_warnings(load_spec(base_config(location="eastus"), "t")) == []
    assert price_warnings(load_spec(base_config(location="eastus2", vmSize=H200), "t")) == []


def test_ndfleet_cost_prices_the_h200_example_with_its_date_and_source(capsys: pytest.CaptureFixture[str]) -> None:
    code = cost_command(build_parser().parse_args(["cost", "--stack", "h200"]), env={})
    out = capsys.readouterr().out
    assert code == 0
    assert f"16 x {H200}  US${recorded(H200)['eastus2']:,.2f}/h each" in out and "  2026-06-18" in out
    assert "  prices: ndfleet's recorded price table (ndfleet/cost/prices.json), observed 2026-06-18\n" in out
    assert f"  source: Azure Retail Prices API (Consumption, USD, Linux), as recorded in {KARPENTER}" in out
    assert f"total (16 VMs): US${16 * recorded(H200)['eastus2']:,.2f} per hour" in out
