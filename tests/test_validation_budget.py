"""The validation budget the tool sizes the health grace period and the validate unit by is the one the node computes
from the node JSON it receives: the tool sums the same timeouts and hardware without building the node JSON."""

from __future__ import annotations

import json
import math

import pytest
from ndfleet_node.checks import LEVELS, budget_s
from ndfleet_node.config import parse

from ndfleet.nodefiles.bootstrap import validation_budget_s
from ndfleet.prepare import prepare
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.conftest import EXAMPLE_STACKS


@pytest.mark.parametrize("level", [level for level in LEVELS if level != "epilog"])  # a stack chooses these
@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_the_tools_budget_is_the_nodes_own_from_its_node_json(stack: str, level: str) -> None:
    raw = load_stack(name=stack).ndfleet_config
    health = {**raw.get("health", {}), "validationLevel": level}
    spec = load_spec({**raw, "health": health}, stack)
    node_json = prepare(spec).islands[0].bootstrap.node_files()["/etc/ndfleet/node.json"]
    config = parse(node_json.decode())
    assert config.validation["level"] == level
    node_budget = math.ceil(budget_s(config, level))
    assert node_budget > 0
    assert validation_budget_s(spec) == spec.profile.thresholds.setup_timeout_s + node_budget
    # ... and it moves with a timeout the node JSON carries: twice the tool timeout, more budget (not a constant).
    data = json.loads(node_json)
    data["timeouts"]["tool"] *= 2
    assert budget_s(parse(json.dumps(data)), level) > budget_s(config, level)
