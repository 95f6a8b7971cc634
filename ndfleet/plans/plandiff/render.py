"""Rendering a plan diff: the pull-request comment (markdown, bounded in size) and the terminal text."""

from __future__ import annotations

from collections.abc import Sequence

from ndfleet.cost.money import usd
from ndfleet.cost.month import MONTH_NAME, per_month
from ndfleet.plans.plandiff.bundle import bundle_diff, is_user_data
from ndfleet.plans.plandiff.compare import bootstrap_diff, format_value, short_type
from ndfleet.plans.plandiff.resources import (
    MARKDOWN_MARKER,
    MARKDOWN_MAX_CHARS,
    SEVERITY_RANK,
    PlanCost,
    ResourceChange,
    StackDiff,
)

# ----------------------------------------------------------------------------------------------------------
# Rendering


# "+-" for a replacement, as `pulumi preview` marks one.
_OP_SIGN = {"create": "+", "delete": "-", "update": "~", "replace": "+-", "retain": "="}
_SEVERITY_MD = {"danger": ":stop_sign: danger", "warning": ":warning: warning", "info": ":information_source: info"}


def _counts(d: StackDiff) -> str:
    if not d.in_base:
        return f"new stack, {d.count('create')} to create"
    if not d.in_head:
        return f"stack removed, {d.count('delete')} to delete"
    if d.empty:
        return "no changes"
    parts = [f"{d.count(op)} to {op}" for op in ("create", "update", "replace", "delete")]
    if d.count("retain"):  # no longer declared, kept in Azure (retain_on_delete): the bundle's earlier parts
        parts.append(f"{d.count('retain')} to keep in Azure unmanaged")
    if d.outputs:
        parts.append(f"{len(d.outputs)} output changes")
    return ", ".join(parts)


def _signed(value: float) -> str:
    return ("+" if value >= 0 else "-") + usd(abs(value))


def cost_line(d: StackDiff) -> str:
    """What the change does to the VMs' cost (the plans' `cost`, ndfleet/cost/estimate.py): per hour and per month
    of the 730-hour month (the plans' own `usdPerMonth`), or a plain statement of why it is not compared."""
    old, new = d.cost.old, d.cost.new
    if old is None or new is None:
        sides = [side for side, c in (("base", old), ("head", new)) if c is None]
        return (f"cost: not compared: the {' and '.join(sides)} plan{'s carry' if len(sides) == 2 else ' carries'} "
                "no cost (a program plan without an ndfleet cluster, or a plan from an older ndfleet)")
    if not (old.complete and new.complete) or old.usd_per_hour is None or new.usd_per_hour is None:
        # A total that leaves out VMs without a price is no figure to subtract: no change is given.
        def side(c: PlanCost) -> str:
            if c.usd_per_hour is None:
                return "unknown"
            return usd(c.usd_per_hour) + ("" if c.complete else " (priced VMs only)")

        return (f"cost (VMs, list price): {side(old)} -> {side(new)} per hour; incomplete: a VM size has no list "
                "price in the region, so no change is given (`ndfleet cost`)")
    delta = new.usd_per_hour - old.usd_per_hour
    # The months are the plans' own (a month of the unrounded hour), so they match `plan` and `cost` to the cent.
    old_month = old.usd_per_month if old.usd_per_month is not None else per_month(old.usd_per_hour)
    new_month = new.usd_per_month if new.usd_per_month is not None else per_month(new.usd_per_hour)
    return (f"cost (VMs, list price): {usd(old.usd_per_hour)} -> {usd(new.usd_per_hour)} per hour "
            f"({_signed(delta)}), {usd(old_month)} -> {usd(new_month)} per {MONTH_NAME} "
            f"({_signed(new_month - old_month)})")


def summary_line(diffs: Sequence[StackDiff]) -> str:
    danger = sum(1 for d in diffs for c in d.consequences if c.severity == "danger")
    warning = sum(1 for d in diffs for c in d.consequences if c.severity == "warning")
    stacks = "; ".join(f"{d.stack}: {_counts(d)}" for d in diffs) or "no stacks"
    flags = f"{danger} dangerous, {warning} warnings" if danger or warning else "nothing dangerous"
    return f"{len(diffs)} stack{'s' if len(diffs) != 1 else ''} ({stacks}); {flags}"


def _md_cell(text: str) -> str:
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("`", "'")
    return text


def _md_code(text: str) -> str:
    return f"`{_md_cell(text)}`" if text else ""


def _changed_paths(ch: ResourceChange, limit: int = 6) -> str:
    paths = [p.path for p in ch.properties]
    shown = ", ".join(paths[:limit])
    return shown + (f", ... ({len(paths) - limit} more)" if len(paths) > limit else "")


def _md_details(d: StackDiff) -> list[str]:
    lines = [f"<details><summary>Details: {d.stack} ({len(d.changes)} resources)</summary>", ""]
    for ch in d.changes:
        lines.append(f"**{_OP_SIGN[d.op_of(ch)]} {_md_cell(ch.name)}** ({_md_code(ch.type)})")
        lines.append("")
        if ch.op == "update":
            lines += ["| property | base | head |", "|---|---|---|"]
            for p in ch.properties:
                lines.append(
                    f"| {_md_code(p.path)} | {_md_code(format_value(p.old, p.path))} | "
                    f"{_md_code(format_value(p.new, p.path))} |"
                )
            lines.append("")
            for p in ch.properties:
                if p.path.endswith("customData"):
                    bdiff = bootstrap_diff(p.old, p.new)
                    if bdiff:
                        fence = "~~~~" if any("```" in line for line in bdiff) else "```"
                        lines += ["Bootstrap changes (decoded customData):", "", fence + "diff", *bdiff, fence, ""]
                if is_user_data(p.path):
                    udiff = bundle_diff(p.old, p.new)
                    if udiff:
                        fence = "~~~~" if any("```" in line for line in udiff) else "```"
                        title = "Node bundle changes (decoded userData or Key Vault parts):"
                        lines += [title, "", fence + "diff", *udiff, fence, ""]
    if d.outputs:
        lines += ["**Stack outputs**", "", "| output | base | head |", "|---|---|---|"]
        for p in d.outputs:
            lines.append(f"| {_md_code(p.path)} | {_md_code(format_value(p.old))} | {_md_code(format_value(p.new))} |")
        lines.append("")
    lines += ["</details>", ""]
    return lines


def render_markdown(diffs: Sequence[StackDiff], *, max_chars: int = MARKDOWN_MAX_CHARS, title: str = "") -> str:
    """A pull-request comment: marker, summary line, consequences, capacity, a table per stack, folded details.
    When the whole text would pass `max_chars`, the folded details are left out (and it says so)."""
    full = _markdown(diffs, details=True, title=title)
    if len(full) <= max_chars:
        return full
    short = _markdown(diffs, details=False, title=title)
    note = "\n_Details left out: the full diff is longer than a comment allows; run `ndfleet diff` locally or " \
           "see the workflow's artifact._\n"
    return short + note


def _markdown(diffs: Sequence[StackDiff], *, details: bool, title: str) -> str:
    lines = [MARKDOWN_MARKER, f"## {title or 'ndfleet plan diff'}", "", f"**{_md_cell(summary_line(diffs))}**", ""]
    lines += [f"- {_md_cell(d.stack)}: {_md_cell(cost_line(d))}" for d in diffs if not d.empty or d.cost.changed]
    if lines[-1] != "":
        lines.append("")
    cons = [(d.stack, c) for d in diffs for c in d.consequences]
    cons.sort(key=lambda sc: SEVERITY_RANK[sc[1].severity])
    if cons:
        lines += ["### Consequences", "", "| | stack | resource | what happens | rule |", "|---|---|---|---|---|"]
        for stack, c in cons:
            lines.append(
                f"| {_SEVERITY_MD[c.severity]} | {_md_cell(stack)} | {_md_code(c.resource_name)} "
                f"({_md_cell(short_type(c.resource_type))}) | {_md_cell(c.message)} | {_md_code(c.rule)} |"
            )
        lines.append("")
    caps = [(d.stack, c) for d in diffs for c in d.capacity if c.changed]
    if caps:
        lines += ["### Capacity", "", "| stack | island | nodes | GPUs |", "|---|---|---|---|"]
        for stack, cap in caps:
            lines.append(
                f"| {_md_cell(stack)} | {_md_cell(cap.island)} | {cap.old_nodes} -> {cap.new_nodes} "
                f"({cap.new_nodes - cap.old_nodes:+d}) | {cap.old_gpus} -> {cap.new_gpus} "
                f"({cap.new_gpus - cap.old_gpus:+d}) |"
            )
        lines.append("")
    for d in diffs:
        lines += [f"### Stack `{_md_cell(d.stack)}`: {_counts(d)}", ""]
        if not d.changes:
            continue
        lines += ["| | type | name | changed properties |", "|---|---|---|---|"]
        for ch in d.changes:
            lines.append(
                f"| {_OP_SIGN[d.op_of(ch)]} {d.op_of(ch)} | {_md_code(short_type(ch.type))} | {_md_code(ch.name)} | "
                f"{_md_cell(_changed_paths(ch))} |"
            )
        lines.append("")
        if details:
            lines += _md_details(d)
    return "\n".join(lines).rstrip() + "\n"


def render_text(diffs: Sequence[StackDiff]) -> str:
    """The same content for a terminal."""
    costs = [f"  [{d.stack}] {cost_line(d)}" for d in diffs if not d.empty or d.cost.changed]
    lines = [summary_line(diffs), *costs, ""]
    cons = [(d.stack, c) for d in diffs for c in d.consequences]
    cons.sort(key=lambda sc: SEVERITY_RANK[sc[1].severity])
    if cons:
        lines.append("Consequences:")
        for stack, c in cons:
            lines.append(f"  {c.severity.upper():7} [{stack}] {c.resource_name} ({short_type(c.resource_type)}): "
                         f"{c.message}  [{c.rule}]")
        lines.append("")
    caps = [(d.stack, c) for d in diffs for c in d.capacity if c.changed]
    if caps:
        lines.append("Capacity:")
        for stack, cap in caps:
            lines.append(f"  [{stack}] {cap.island}: nodes {cap.old_nodes} -> {cap.new_nodes} "
                         f"({cap.new_nodes - cap.old_nodes:+d}), GPUs {cap.old_gpus} -> {cap.new_gpus} "
                         f"({cap.new_gpus - cap.old_gpus:+d})")
        lines.append("")
    for d in diffs:
        lines.append(f"== stack {d.stack}: {_counts(d)}")
        for ch in d.changes:
            lines.append(f"  {_OP_SIGN[d.op_of(ch)]} {ch.type} {ch.name}")
            for p in ch.properties:
                lines.append(f"      {p.path}: {format_value(p.old, p.path)} -> {format_value(p.new, p.path)}")
                if p.path.endswith("customData"):
                    lines += [f"        {line}" for line in bootstrap_diff(p.old, p.new)]
                if is_user_data(p.path):
                    lines += [f"        {line}" for line in bundle_diff(p.old, p.new)]
        for p in d.outputs:
            lines.append(f"  output {p.path}: {format_value(p.old)} -> {format_value(p.new)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
