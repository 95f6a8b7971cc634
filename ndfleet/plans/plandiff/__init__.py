"""Compare two offline plans (`ndfleet plan --format json`) and say what the change does to the cluster.

Pure functions only: no Pulumi, no Azure, no files. `ndfleet diff` (ndfleet/commands/diff.py) reads the plans and
prints what `render_markdown` / `render_text` return.

What a diff holds, per stack:
- resources added, removed and changed, keyed by (type, name); for a change, every property path with its old
  and new value (long values, such as `customData`, as a size and a sha256 prefix, plus the changed lines of the
  decoded bootstrap);
- the consequences of the change, from `CONSEQUENCE_RULES` (a table per resource type, each rule with its source;
  docs/plan-diff.md prints the same table): replacements, changes that reach existing nodes only after a reimage,
  InfiniBand loss, changes Azure refuses while the resource is in use, and the deletion or replacement of a resource
  that holds data;
- capacity per island: nodes and GPUs before and after.

Modules: resources.py (the resource types and the result), rules.py (the consequences table), compare.py
(matching and comparing resources, consequences, capacity, locks), render.py (markdown and text). The names
below are the package's interface; `from ndfleet.plans import plandiff` and use `plandiff.diff_plans` etc.
"""

from __future__ import annotations

from ndfleet.plans.plandiff.compare import (
    bootstrap_diff,
    decode_bootstrap,
    diff_plans,
    diff_stacks,
    diff_values,
    format_value,
)
from ndfleet.plans.plandiff.render import render_markdown, render_text
from ndfleet.plans.plandiff.resources import (
    DATA_HOLDING_TYPES,
    IMAGE_REFERENCE_PATH,
    LONG_VALUE_CHARS,
    MARKDOWN_MARKER,
    MARKDOWN_MAX_CHARS,
    MISSING,
    SEVERITIES,
    Consequence,
    PropertyChange,
    StackDiff,
)
from ndfleet.plans.plandiff.rules import BUILTIN_CONSEQUENCES, CONSEQUENCE_RULES, rules_table_markdown

# The plan document's schema and reader live in ndfleet.plans.plandoc; these names stay importable from here.
from ndfleet.plans.plandoc import PLAN_SCHEMA_VERSION, PlanFormatError, validate_plan
from ndfleet.plans.resource_types import (
    AML_FILESYSTEM_TYPE,
    BLOB_CONTAINER_TYPE,
    PRIVATE_ENDPOINT_TYPE,
    ROLE_ASSIGNMENT_TYPE,
    STORAGE_ACCOUNT_TYPE,
    VMSS_TYPE,
)

__all__ = [
    "AML_FILESYSTEM_TYPE",
    "BLOB_CONTAINER_TYPE",
    "BUILTIN_CONSEQUENCES",
    "CONSEQUENCE_RULES",
    "Consequence",
    "DATA_HOLDING_TYPES",
    "IMAGE_REFERENCE_PATH",
    "LONG_VALUE_CHARS",
    "MARKDOWN_MARKER",
    "MARKDOWN_MAX_CHARS",
    "MISSING",
    "PLAN_SCHEMA_VERSION",
    "PRIVATE_ENDPOINT_TYPE",
    "PlanFormatError",
    "PropertyChange",
    "ROLE_ASSIGNMENT_TYPE",
    "SEVERITIES",
    "STORAGE_ACCOUNT_TYPE",
    "StackDiff",
    "VMSS_TYPE",
    "bootstrap_diff",
    "decode_bootstrap",
    "diff_plans",
    "diff_stacks",
    "diff_values",
    "format_value",
    "render_markdown",
    "render_text",
    "rules_table_markdown",
    "validate_plan",
]
