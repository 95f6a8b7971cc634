"""The plan drops pulumi-azure-native's aliases (a plan has no state for them to match): the same resources, the
same inputs and outputs as with them, for a stack with every kind of resource ndfleet creates (prod)."""

from __future__ import annotations

import gc

from ndfleet.plans.build import execute_program
from ndfleet.stackconfig.stackfile import load_stack


def _plan(aliases: bool) -> tuple[list[dict[str, object]], dict[str, object]]:
    gc.disable()  # as run_plan does
    try:
        run = execute_program(load_stack("prod"), aliases=aliases)
    finally:
        gc.enable()
    resources = sorted((r.as_json() for r in run.resources), key=lambda r: (str(r["type"]), str(r["name"])))
    return resources, run.outputs


def test_dropping_aliases_changes_no_resource_input_or_output() -> None:
    with_aliases, without = _plan(True), _plan(False)
    assert len(with_aliases[0]) > 50
    assert without == with_aliases
