"""The plan document's `summary` carries what the table's summary prints (issue 44): the regional vCPU totals, the
compute subnet's room and the monitoring estimate, each the same figure from the same function as the text."""

from __future__ import annotations

from ndfleet.commands.plan import render_table
from ndfleet.cost.money import usd
from ndfleet.plans.build import run_plan
from ndfleet.stackconfig.stackfile import load_stack
from tests.conftest import base_config, plan_of


def test_the_json_summary_has_the_texts_regional_total_subnet_room_and_monitoring() -> None:
    plan = run_plan(load_stack(name="prod"))
    summary, text = plan.as_json()["summary"], render_table(plan)
    assert f"vCPU quota needed: regional total (cores) {summary['regionalVcpuQuota']['cores']:,}" in text
    assert summary["regionalVcpuQuota"]["cores"] == sum(summary["vcpuQuota"].values())  # no Spot: every family
    subnet = summary["computeSubnet"]
    assert (f"compute subnet {subnet['cidr']} (the VNet's upper half, for any node count): "
            f"room for {subnet['nodeCapacity']:,} nodes") in text
    monitoring = summary["monitoring"]
    assert (f"monitoring: about {monitoring['activeSeries']:,} active series ({monitoring['seriesPerNode']:,} per "
            f"node), {monitoring['samplesPerMinute']:,} samples/min") in text  # fmt: skip
    assert f"about {monitoring['nodesPerWorkspace']:,} nodes at this scrape interval" in text
    assert f"monitoring ingestion: about {usd(monitoring['ingestionUsdPerMonth'])} per 730-hour month" in text
    assert monitoring["ingestionPriceRegion"] == "eastus" and "East US (eastus) meter" in text


def test_spot_and_monitoring_off_are_said_too() -> None:
    spot = plan_of(base_config(priority="Spot")).as_json()["summary"]
    assert spot["regionalVcpuQuota"]["lowPriorityCores"] == 2 * 96  # two Spot GPU nodes: the regional Spot quota
    assert "monitoring" not in spot  # monitoring off: no estimate, rather than zeros
