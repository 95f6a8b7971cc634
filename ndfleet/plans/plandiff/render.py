"""Rendering a plan diff: the pull-request comment (markdown, bounded in size) and the terminal text."""

from __future__ import annotations

from collections.abc import Sequence

from ndfleet.plans.plandiff.compare import bootstrap_diff, format_value, short_type
from ndfleet.plans.plandiff.resources import (
    MARKDOWN_MARKER,
    MARKDOWN_MAX_CHARS,
    SEVERITY_RANK,
    ResourceChange,
    StackDiff,
)

# ----------------------------------------------------------------------------------------------------------
# Rendering


_OP_SIGN = {"create": "+", "delete": "-", "update": "~"}
_SEVERITY_MD = {"danger": ":stop_sign: danger", "warning": ":warning: warning", "info": ":information_source: info"}


def _counts(d: StackDiff) -> str:
    if not d.in_base:
        return f"new stack, {d.count('create')} to create"
    if not d.in_head:
        return f"stack removed, {d.count('delete')} to delete"
    if d.empty:
        return "no changes"
    parts = [f"{d.count('create')} to create", f"{d.count('update')} to update", f"{d.count('delete')} to delete"]
    if d.outputs:
        parts.append(f"{len(d.outputs)} output changes")
    return ", ".join(parts)


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
        lines.append(f"**{_OP_SIGN[ch.op]} {_md_cell(ch.name)}** ({_md_code(ch.type)})")
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
                f"| {_OP_SIGN[ch.op]} {ch.op} | {_md_code(short_type(ch.type))} | {_md_code(ch.name)} | "
                f"{_md_cell(_changed_paths(ch))} |"
            )
        lines.append("")
        if details:
            lines += _md_details(d)
    return "\n".join(lines).rstrip() + "\n"


def render_text(diffs: Sequence[StackDiff]) -> str:
    """The same content for a terminal."""
    lines = [summary_line(diffs), ""]
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
            lines.append(f"  {_OP_SIGN[ch.op]} {ch.type} {ch.name}")
            for p in ch.properties:
                lines.append(f"      {p.path}: {format_value(p.old, p.path)} -> {format_value(p.new, p.path)}")
                if p.path.endswith("customData"):
                    lines += [f"        {line}" for line in bootstrap_diff(p.old, p.new)]
        for p in d.outputs:
            lines.append(f"  output {p.path}: {format_value(p.old)} -> {format_value(p.new)}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
