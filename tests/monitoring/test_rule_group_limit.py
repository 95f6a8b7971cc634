"""Azure takes at most 20 rules per Prometheus rule group (MAX_RULES_PER_GROUP); IslandCapacityLow is one rule per
island, so a stack with more than 20 islands needs its fleet rules split over several groups (issue 17)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from ndfleet.monitoring.alerts import MAX_RULES_PER_GROUP, alerts, rule_file
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config, of_type, plan_of

RULE_GROUP = "azure-native:alertsmanagement:PrometheusRuleGroup"


def many_islands_config(islands: int) -> dict[str, Any]:
    config = base_config(
        islands=[{"name": f"i{n:02d}", "nodes": 1} for n in range(islands)],
        monitoring={"enabled": True, "emails": ["oncall@example.com"]},
    )
    del config["nodes"]
    return config


@pytest.mark.parametrize("islands", [1, 20, 21, 45])
def test_no_rule_group_in_the_rule_file_is_over_the_limit(islands: int) -> None:
    groups = rule_file(load_spec(many_islands_config(islands), "test"))["groups"]
    assert max(len(g["rules"]) for g in groups) <= MAX_RULES_PER_GROUP


def test_every_island_keeps_exactly_one_capacity_rule_when_split() -> None:
    spec = load_spec(many_islands_config(45), "test")
    groups = rule_file(spec)["groups"]
    islands = Counter(r["labels"]["island"] for g in groups for r in g["rules"] if r["alert"] == "IslandCapacityLow")
    assert islands == Counter(i.name for i in spec.islands)
    assert [g["name"] for g in groups if g["name"].startswith("ndfleet-fleet")] == [
        "ndfleet-fleet", "ndfleet-fleet-2", "ndfleet-fleet-3"
    ]


def test_rule_groups_stay_whole_up_to_the_limit() -> None:
    names = [g["name"] for g in rule_file(load_spec(many_islands_config(20), "test"))["groups"]]
    assert names == ["ndfleet-gpu", "ndfleet-fabric", "ndfleet-node", "ndfleet-fleet"]


def test_deployed_rule_groups_of_a_21_island_stack_are_within_the_limit() -> None:
    config = many_islands_config(21)
    groups = of_type(plan_of(config), RULE_GROUP)
    assert max(len(g.inputs["rules"]) for g in groups) <= MAX_RULES_PER_GROUP
    deployed = sorted(r["alert"] for g in groups for r in g.inputs["rules"])
    assert deployed == sorted(a.name for a in alerts(load_spec(config, "test")))
