"""`islands[].spares`: validated, rendered for the controller, priced and shown by `plan` (docs/operations.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ndfleet_node.spares import IslandSpares, load_config

from ndfleet.commands.plan import render_table
from ndfleet.cost.estimate import estimate_cost, plan_cost_lines
from ndfleet.cost.prices import ListPrice
from ndfleet.slurm.conf import HOST_LEDGER, REQUEUE_SLACK_S, requeue_failed_within_s, spares_config
from ndfleet.slurm.machines import SPARES_CONFIG, machine_bootstrap, machine_user_data
from ndfleet.slurm.userdata import decompose
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.problems import SpecError
from ndfleet.stackconfig.summary import spec_summary
from tests.conftest import base_config, plan_of

ISLANDS = [{"name": "ib00", "nodes": 10, "spares": 2}, {"name": "ib01", "nodes": 4}]


def slurm_config(islands: list[dict[str, Any]]) -> dict[str, Any]:
    return base_config(scheduler="slurm", nodes=None, islands=islands)


def problems(config: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(config, "test")
    return str(info.value)


def test_spares_are_part_of_the_island_and_leave_one_node_serving() -> None:
    spec = load_spec(slurm_config(ISLANDS), "test")
    assert [(i.nodes, i.spares, i.in_service) for i in spec.islands] == [(10, 2, 8), (4, 0, 4)]
    assert spec.total_nodes == 14  # spares are VMs of the island: the scale set is not larger


def test_bad_spares_are_named_all_at_once() -> None:
    said = problems(slurm_config([{"name": "ib00", "nodes": 2, "spares": 2},
                                  {"name": "ib01", "elastic": {"maxNodes": 4}, "spares": 1}]))
    assert "ndfleet:islands[0].spares = 2: spares are part of the island's nodes = 2" in said
    assert "set spares between 0 and 1" in said
    assert "ndfleet:islands[1].spares = 1: an elastic island gets new nodes on demand" in said
    said = problems(base_config(nodes=None, islands=[{"name": "ib00", "nodes": 4, "spares": 1}]))
    assert "spares are held in a Slurm reservation" in said and "ndfleet:scheduler" in said
    assert "spares" in problems(slurm_config([{"name": "ib00", "nodes": 4, "spares": -1}]))


def test_the_controller_gets_each_islands_spares_in_its_user_data() -> None:
    spec = load_spec(slurm_config(ISLANDS), "test")
    doc = json.loads(spares_config(spec))
    assert doc == {"ledger": HOST_LEDGER, "islands": [{"island": "ib00", "partition": "ib00", "nodes": 10,
                                                        "spares": 2}],
                   "requeue_failed_within_s": requeue_failed_within_s(spec)}
    files = decompose(machine_user_data(spec, "controller"))[1]["files"]
    assert json.loads(files[SPARES_CONFIG]) == doc
    custom = machine_bootstrap(spec, "controller").files
    assert f"ndfleet_node.spares --config {SPARES_CONFIG}" in custom["ndfleet-spares.service"]
    assert "systemctl enable --now ndfleet-spares.timer" in custom["ndfleet-slurm-setup"]
    assert f"--host-ledger {HOST_LEDGER}" in custom["ndfleet-burnin"]


def test_the_node_program_reads_what_the_tool_renders(tmp_path: Any) -> None:
    path = tmp_path / "spares.json"
    spec = load_spec(slurm_config(ISLANDS), "test")
    path.write_text(spares_config(spec))
    islands, ledger, within_s = load_config(path)
    assert islands == [IslandSpares("ib00", "ib00", 10, 2)] and ledger == HOST_LEDGER
    assert within_s == requeue_failed_within_s(spec) > 300 + REQUEUE_SLACK_S  # the Epilog's path, the longer


def test_spares_are_priced_and_shown_by_plan() -> None:
    spec = load_spec(slurm_config(ISLANDS), "test")
    estimate = estimate_cost(spec, lambda size, region: ListPrice(size, region, 100.0, "2026-12-01", "test table"))
    assert estimate.spares == 2 and estimate.spares_usd_per_hour == pytest.approx(200.0)
    doc = estimate.as_json()
    assert (doc["spares"], doc["sparesUsdPerHour"], doc["sparesUsdPerMonth"]) == (2, 200.0, 146000.0)
    assert doc["items"][0]["spares"] == 2 and "spares" not in doc["items"][1]
    lines = "\n".join(plan_cost_lines(spec))
    assert "of which 2 warm spare(s), held out of scheduling: US$" in lines
    assert spec_summary(spec)["islands"][0]["spares"] == 2 and "spares" not in spec_summary(spec)["islands"][1]
    table = render_table(plan_of(slurm_config(ISLANDS)))
    assert "ib00: 10 nodes, 80 GPUs (8 in service, 2 warm spares)" in table


def test_the_plan_json_with_spares_reads_back() -> None:
    from ndfleet.plans.plandoc import validate_plan

    doc = validate_plan(json.loads(plan_of(slurm_config(ISLANDS)).to_json()))
    assert doc["summary"]["islands"][0]["spares"] == 2
    assert doc["cost"]["spares"] == 2
