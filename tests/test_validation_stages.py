"""Every problem at once across the validation stages (issue 44, item 7): the settings, the checks across them and the
prepare step's checks of the stack as a whole (boot data, probe grace period, elastic timing) report together, in one
format; where a later stage cannot run, one line says so and names what it waits for."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from ndfleet.plans.build import run_plan
from ndfleet.prepare import PrepareError, prepare_config
from ndfleet.stackconfig.problems import SpecError
from tests.conftest import base_config, stack_from

TIMING = "ndfleet:islands[1].elastic.idleMinutes = 5: shorter than a new node of 'burst'"
SKIPPED = "further checks of the stack as a whole"


def elastic_stack(idle: Any = 5, **overrides: Any) -> dict[str, Any]:
    islands = [{"name": "gpu", "nodes": 2}, {"name": "burst", "elastic": {"maxNodes": 8, "idleMinutes": idle}}]
    return base_config(nodes=None, islands=islands, scheduler="slurm", bastion=True, **overrides)


def refusal(config: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as info:
        prepare_config(config, "stages", {})
    return info.value


def test_a_key_typo_and_an_elastic_timing_error_are_reported_together() -> None:
    error = refusal(elastic_stack(bastoin=True))
    text = str(error)
    assert text.startswith("invalid ndfleet stack configuration (2 problem(s)):")
    assert "  - ndfleet:bastoin is not a known setting; did you mean 'ndfleet:bastion'?" in text
    assert f"  - {TIMING}" in text
    assert SKIPPED not in text


def test_the_plan_reports_both_stages_in_one_refusal() -> None:
    # The plan runs the program, whose prepare step refuses the stack (pulumi.RunError: no traceback under
    # `pulumi up`; exit 2 from `ndfleet plan`, tests/test_plan_prepared_once.py).
    with pytest.raises(pulumi.RunError) as info:
        run_plan(stack_from(elastic_stack(bastoin=True), "stages"))
    text = str(info.value)
    assert "(2 problem(s))" in text and "ndfleet:bastoin is not a known setting" in text and TIMING in text


def test_a_typo_inside_a_block_drops_only_that_key() -> None:
    """`health.validationLvl`: the rest of `health` and every other setting are still checked, as written."""
    text = str(refusal(elastic_stack(health={"validationLevel": "full", "validationLvl": "quick"})))
    assert "ndfleet:health.validationLvl is not a known setting; did you mean 'ndfleet:health.validationLevel'?" in text
    assert TIMING in text and "2 problem(s)" in text


def test_the_prepare_stage_alone_speaks_the_same_format() -> None:
    error = refusal(elastic_stack())
    assert isinstance(error, PrepareError)
    header = "invalid ndfleet stack configuration (1 problem(s)):"
    assert str(error).splitlines() == [header, f"  - {error.problems[0]}"]
    assert TIMING in error.problems[0]


def test_an_invalid_value_skips_the_stack_wide_checks_and_says_so_in_one_line() -> None:
    """`idleMinutes: "5"` has no value to time an elastic island with: the later checks wait, and say for what."""
    lines = str(refusal(elastic_stack(idle="5", bastoin=True))).splitlines()
    assert lines[0] == "invalid ndfleet stack configuration (2 problem(s)):"
    assert lines[-1] == (
        "  further checks of the stack as a whole (boot data size, probe grace period, elastic timing) were skipped "
        "until these are fixed (they read ndfleet:islands)"
    )
    assert sum(SKIPPED in line for line in lines) == 1


def test_a_problem_across_settings_skips_them_too() -> None:
    text = str(refusal(elastic_stack(spotMaxPrice=1.5)))
    assert "applies only to Spot VMs" in text and TIMING not in text
    assert text.splitlines()[-1] == (
        "  further checks of the stack as a whole (boot data size, probe grace period, elastic timing) were skipped "
        "until these are fixed"
    )


def test_the_plan_says_why_nodes_are_split_across_scale_sets() -> None:
    """128 nodes at the default maxNodesPerIsland: two scale sets, and one line that says so and why."""
    from ndfleet.commands.plan import render_table

    plan = run_plan(stack_from(base_config(nodes=128), "split"))
    lines = [line for line in render_table(plan).splitlines() if "split into" in line]
    assert lines == [
        "  ndfleet:nodes = 128 split into 2 islands (ib00 100 + ib01 28): an island is one scale set of one placement "
        "group, as InfiniBand needs, of at most maxNodesPerIsland = 100 VMs (100 by default: Microsoft Learn, "
        "\"Virtual Machine Scale Sets and placement groups\"); jobs do not cross islands; list ndfleet:islands to "
        "choose the split"
    ]
    one = run_plan(stack_from(base_config(nodes=100), "one"))
    assert "split into" not in render_table(one)
