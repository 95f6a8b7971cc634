"""The cost estimate: every VM the stack creates x its list price, and the plan's quota lines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ndfleet.cost.estimate import LUSTRE_NOT_PRICED, CostEstimate, estimate_cost, render_cost
from ndfleet.cost.money import usd
from ndfleet.cost.prices import PRICE_TABLE, ListPrice, table_price
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.vms import quota_lines
from tests.conftest import base_config

H100 = "Standard_ND96isr_H100_v5"


def spec_of(**overrides: Any) -> ClusterSpec:
    return load_spec(base_config(**overrides), "test")


def price(size: str, region: str = "eastus") -> float:
    found = table_price(size, region)
    assert found is not None
    return found.usd_per_hour


def roles(estimate: CostEstimate) -> list[tuple[str, str, int]]:
    return [(i.group.role, i.group.vm_size, i.group.count) for i in estimate.items]


def test_every_table_price_has_a_date_and_a_source() -> None:
    assert all(p.observed and p.source and p.usd_per_hour > 0 for p in PRICE_TABLE)


def test_gpu_nodes_are_nodes_times_the_list_price() -> None:
    estimate = estimate_cost(spec_of(nodes=64))
    assert estimate.usd_per_hour == pytest.approx(64 * price(H100))


def test_slurm_controller_and_login_nodes_are_priced() -> None:
    estimate = estimate_cost(spec_of(scheduler="slurm", slurm={"loginCount": 2}))
    assert roles(estimate) == [
        ("GPU nodes, island ib00", H100, 2),
        ("Slurm controller", "Standard_D8s_v5", 1),
        ("Slurm login", "Standard_D8s_v5", 2),
    ]
    assert estimate.usd_per_hour == pytest.approx(2 * price(H100) + 3 * price("Standard_D8s_v5"))


def test_month_is_730_hours() -> None:
    estimate = estimate_cost(spec_of())
    assert estimate.usd_per_month == pytest.approx(estimate.usd_per_hour * 730)


def test_a_region_without_a_figure_says_so_in_one_line_naming_the_regions_with_one() -> None:
    estimate = estimate_cost(spec_of(location="eastus", vmSize="Standard_ND96isr_H200_v5"))
    [line] = estimate.missing
    assert line.startswith(
        "no list price recorded for Standard_ND96isr_H200_v5 in eastus (ndfleet's table has it in 28 regions: "
        "australiaeast, australiasoutheast, brazilsouth, centralus, eastus2, "
    )
    assert line.endswith(
        "westus, westus2, westus3): `ndfleet cost --refresh` (with network) reads it from Azure's Retail Prices API, "
        "`--write FILE` records it"
    )
    assert "\n" not in line and " eastus," not in line
    assert estimate.usd_per_hour is None
    assert estimate.as_json()["complete"] is False


def test_a_size_in_no_region_of_the_table_says_so() -> None:
    estimate = estimate_cost(spec_of(scheduler="slurm", slurm={"loginVmSize": "Standard_F8s_v2"}))
    assert estimate.missing == [
        "no list price recorded for Standard_F8s_v2 in eastus (ndfleet's table has it in no region): `ndfleet cost "
        "--refresh` (with network) reads it from Azure's Retail Prices API, `--write FILE` records it"
    ]


def test_a_region_without_a_figure_says_so_and_uses_no_other_region() -> None:
    estimate = estimate_cost(spec_of(location="eastus2", vmSize="Standard_ND96isr_H200_v5"), no_price)
    [line] = estimate.missing
    assert line.startswith("no list price recorded for Standard_ND96isr_H200_v5 in eastus2 (")
    assert estimate.usd_per_hour is None
    assert estimate.as_json()["complete"] is False


def no_price(vm_size: str, region: str) -> ListPrice | None:
    return None


def only(size: str) -> Callable[[str, str], ListPrice | None]:
    """A price table with one size at US$1.005/h (half a cent past a cent: rounding the hour moves the month)."""

    def lookup(vm_size: str, region: str) -> ListPrice | None:
        return ListPrice(size, region, 1.005, "2026-12-07", "test", "") if vm_size == size else None

    return lookup


def test_nothing_priced_is_null_everywhere_never_zero() -> None:
    # Issue 44: a script summing usdPerHour read US$0/h for a cluster of thousands an hour. Unknown is null.
    spec = spec_of(scheduler="slurm", slurm={"loginCount": 2}, nodes=None,
                   islands=[{"name": "ib00", "nodes": 4, "spares": 1}])  # fmt: skip
    doc = estimate_cost(spec, no_price).as_json()
    assert [doc[k] for k in ("usdPerHour", "usdPerMonth", "sparesUsdPerHour", "sparesUsdPerMonth")] == [None] * 4
    assert [(i["usdPerVmHour"], i["usdPerHour"]) for i in doc["items"]] == [(None, None)] * 3
    assert doc["items"][0]["sparesUsdPerHour"] is None
    assert doc["complete"] is False
    assert doc["unpricedItems"] == ["GPU nodes, island ib00", "Slurm controller", "Slurm login"]
    assert "total: unknown" in "\n".join(render_cost(estimate_cost(spec, no_price)))


def test_a_partial_total_names_the_lines_it_leaves_out() -> None:
    spec = spec_of(scheduler="slurm", slurm={"loginCount": 2})
    doc = estimate_cost(spec, only("Standard_D8s_v5")).as_json()
    assert doc["usdPerHour"] == round(3 * 1.005, 2) and doc["complete"] is False
    assert doc["unpricedItems"] == ["GPU nodes, island ib00"]
    assert estimate_cost(spec, only("Standard_D8s_v5")).missing[0].startswith(f"no list price recorded for {H100}")
    assert estimate_cost(spec_of()).as_json()["unpricedItems"] == []


def test_the_month_is_of_the_unrounded_hour() -> None:
    estimate = estimate_cost(spec_of(nodes=1), only(H100))
    doc = estimate.as_json()
    assert doc["usdPerHour"] == 1.0  # 1.005 shown to the cent (binary 1.005 is just under it)
    assert doc["usdPerMonth"] == round(1.005 * 730, 2) == 733.65  # not 1.00 x 730 = 730.00
    assert f"{usd(733.65)} per 730-hour month" in "\n".join(render_cost(estimate))


def test_managed_lustre_is_an_unknown_line_not_left_out() -> None:
    spec = spec_of(zone="2", storage={"lustre": {"sku": "AMLFS-Durable-Premium-250", "capacityTiB": 128}})
    (line,) = estimate_cost(spec).as_json()["services"]
    assert line == {"service": "Azure Managed Lustre", "detail": "AMLFS-Durable-Premium-250, 128 TiB",
                    "usdPerHour": None, "usdPerMonth": None, "reason": LUSTRE_NOT_PRICED}  # fmt: skip
    text = "\n".join(render_cost(estimate_cost(spec)))
    assert f"Azure Managed Lustre (AMLFS-Durable-Premium-250, 128 TiB): unknown, {LUSTRE_NOT_PRICED}" in text
    assert estimate_cost(spec_of()).as_json()["services"] == []


def test_spot_without_a_cap_is_the_on_demand_ceiling() -> None:
    item = estimate_cost(spec_of(priority="Spot")).items[0]
    assert (item.basis, item.usd_per_vm_hour) == ("Spot ceiling: on-demand list price", price(H100))


def test_spot_with_a_lower_cap_uses_the_cap() -> None:
    item = estimate_cost(spec_of(priority="Spot", spotMaxPrice=40.0)).items[0]
    assert (item.basis, item.usd_per_vm_hour) == ("Spot ceiling: spotMaxPrice", 40.0)


def test_the_cost_block_names_the_missing_price_and_the_spot_ceiling() -> None:
    text = "\n".join(render_cost(estimate_cost(spec_of(location="francecentral", priority="Spot"))))
    assert f"no list price recorded for {H100} in francecentral (ndfleet's table has it in 23 regions: " in text
    assert "Spot: the GPU nodes' figure is the most Azure may charge" in text


def test_quota_lines_count_the_slurm_machines() -> None:
    lines = quota_lines(spec_of(scheduler="slurm"))
    assert "  vCPU quota needed: standardDSv5Family 16" in lines
    assert "  vCPU quota needed: regional total (cores) 208" in lines


def test_quota_lines_put_spot_gpu_nodes_on_the_spot_quota() -> None:
    lines = quota_lines(spec_of(priority="Spot", scheduler="slurm"))
    assert "  vCPU quota needed: regional Spot (lowPriorityCores) 192" in lines
    assert "  vCPU quota needed: regional total (cores) 16" in lines


def test_quota_lines_name_a_size_ndfleet_cannot_count() -> None:
    lines = quota_lines(spec_of(scheduler="slurm", slurm={"loginVmSize": "Standard_F8s_v2"}))
    assert any(line.startswith("  vCPU quota needed: Standard_F8s_v2 is not in ndfleet's size table") for line in lines)


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.0, "US$0.00"), (0.0004, "US$0.000"), (0.125, "US$0.125"), (1.0, "US$1.00"), (98.32, "US$98.32"),
     (1234567.891, "US$1,234,567.89")],  # fmt: skip
)
def test_usd_shows_cents_and_tenths_of_a_cent_only_below_a_dollar(value: float, shown: str) -> None:
    assert usd(value) == shown
