"""Reading plan files for `ndfleet diff` and `ndfleet policy`: one file, or a folder of `<stack>.json` plans, each
read within bounds and checked against the plan schema (ndfleet.plans.plandoc) once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ndfleet.plans import plandoc
from ndfleet.stackconfig.names import stack_name_problem


class InputError(Exception):
    """A plan file or folder that cannot be read: exit 2 with this message."""


def load_plan(path: Path) -> dict[str, Any]:
    """A plan file, read within bounds and checked against the plan schema (ndfleet.plans.plandoc) once."""
    try:
        return plandoc.read_plan(path)
    except plandoc.PlanFormatError as e:
        raise InputError(str(e)) from None


def load_plan_dir(folder: Path) -> dict[str, dict[str, Any]]:
    """Plans by stack name (the file name without .json). A missing folder counts as empty (no stacks yet)."""
    if not folder.exists():
        return {}
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder of <stack>.json plans")
    plans = {}
    for path in sorted(folder.glob("*.json")):
        problem = stack_name_problem(path.stem)
        if problem is not None:  # the name goes into the diff (and a pull-request comment) as it is
            raise InputError(f"{path}: the stack's name is taken from the file name <stack>.json and {problem}")
        plans[path.stem] = load_plan(path)
    return plans
