"""`ndfleet status` output: one summary line per island, then the nodes that need a person with what to do; or the
JSON document described by `schema.json` (docs/operations.md restates it)."""

from __future__ import annotations

import json
from typing import Any

from ndfleet.azure.text import terminal_lines
from ndfleet.status.classify import IslandStatus, NodeStatus, StackStatus

SCHEMA_VERSION = 1


def node_json(node: NodeStatus) -> dict[str, Any]:
    i = node.instance
    return {
        "island": node.island,
        "scaleSet": node.scale_set,
        "resourceGroup": node.resource_group,
        "instanceId": i.instance_id,
        "name": i.name,
        "provisioningState": i.provisioning_state,
        "powerState": i.power_state,
        "vmHealth": i.vm_health,
        "latestModel": i.latest_model,
        "protected": i.protected,
        "validation": {
            "state": node.validation.state,
            "failedChecks": list(node.validation.failed_checks),
            "detail": node.validation.detail,
        },
        "slurm": None if node.slurm is None else {"state": node.slurm.state, "reason": node.slurm.reason},
        "health": node.health,
        "repair": node.repair,
        "needsPerson": bool(node.actions),
        "actions": list(node.actions),
    }


def island_json(island: IslandStatus, slurm: bool, validation: bool) -> dict[str, Any]:
    return {
        "name": island.name,
        "wanted": island.wanted,
        "running": island.running,
        "validated": island.validated if validation else None,
        "inSlurm": island.in_slurm if slurm else None,
        **({"spares": island.spares if slurm else None, "sparesWanted": island.spares_wanted}
           if island.spares_wanted else {}),
        "unhealthy": island.unhealthy,
        "repairing": island.repairing,
        "missing": island.missing,
        "costPerHour": island.cost_per_hour,
        "scaleSets": [
            {
                "name": s.name,
                "resourceGroup": s.resource_group,
                "capacity": s.capacity,
                "repairs": {
                    "enabled": s.repairs_enabled,
                    "gracePeriod": s.repair_grace_period,
                    "action": s.repair_action,
                    "serviceState": s.repair_service_state,
                },
            }
            for s in island.scale_sets
        ],
        "actions": list(island.actions),
    }


def to_json(status: StackStatus) -> dict[str, Any]:
    slurm_read = status.slurm and any(n.slurm is not None for i in status.islands for n in i.nodes)
    return {
        "schemaVersion": SCHEMA_VERSION,
        "stack": status.stack,
        "subscriptionId": status.subscription_id,
        "location": status.location,
        "vmSize": status.vm_size,
        "slurm": status.slurm,
        "monitoring": status.monitoring,
        "exitCode": status.exit_code,
        "error": status.error,
        "notes": list(status.notes),
        "islands": [island_json(i, slurm_read, status.validation_read) for i in status.islands],
        "nodes": [node_json(n) for i in status.islands for n in i.nodes],
    }


def render_json(status: StackStatus) -> str:
    return json.dumps(to_json(status), indent=2)


def _money(value: float | None) -> str:
    return "unknown" if value is None else f"US${value:,.2f}"


def _node_summary(node: NodeStatus) -> str:
    i = node.instance
    parts = [node.health, f"power {i.power_state}", f"provisioning {i.provisioning_state}"]
    parts.append(f"Azure health {i.vm_health}")
    if node.repair != "none":
        parts.append(f"repair {node.repair}")
    validation = f"validation {node.validation.state}"
    if node.validation.failed_checks:
        validation += f" ({', '.join(node.validation.failed_checks)})"
    elif node.validation.state == "unknown" and node.validation.detail:
        validation += f" ({node.validation.detail})"
    parts.append(validation)
    if node.slurm is not None:
        parts.append(f"Slurm {node.slurm.state}" + (f" ({node.slurm.reason})" if node.slurm.reason else ""))
    return ", ".join(parts)


def render_table(status: StackStatus) -> str:
    if status.error is not None:
        return terminal_lines([status.error])
    slurm_read = status.slurm and any(n.slurm is not None for i in status.islands for n in i.nodes)
    lines = [f"stack {status.stack}: {status.vm_size} in {status.location}"]
    header = ("ISLAND", "WANTED", "RUNNING", "VALIDATED", "IN SLURM", "UNHEALTHY", "REPAIRING", "COST/HOUR")
    rows = [header]
    for island in status.islands:
        validated = str(island.validated) if status.validation_read else ("?" if status.monitoring else "-")
        rows.append((
            island.name,
            str(island.wanted),
            str(island.running),
            validated,
            str(island.in_slurm) if slurm_read else "-",
            str(island.unhealthy),
            str(island.repairing),
            _money(island.cost_per_hour),
        ))
    widths = [max(len(r[c]) for r in rows) for c in range(len(header))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for island in status.islands:
        if island.spares_wanted:
            held = str(island.spares) if slurm_read else "?"
            lines.append(f"  {island.name}: {held} of {island.spares_wanted} warm spares held (not in IN SLURM)")
    people = [(i, n) for i in status.islands for n in i.nodes if n.actions]
    island_actions = [(i, a) for i in status.islands for a in i.actions]
    if people or island_actions:
        lines += ["", "needs a person:"]
        for island, action in island_actions:
            lines.append(f"  island {island.name}: {action}")
        for _, node in people:
            i = node.instance
            lines.append(f"  {i.name} (island {node.island}, {node.scale_set} instance {i.instance_id}): "
                         f"{_node_summary(node)}")
            lines += [f"    - {action}" for action in node.actions]
    in_hand = [n for i in status.islands for n in i.nodes if not n.actions and n.health in ("starting", "unhealthy")]
    if in_hand:
        lines += ["", "in Azure's hands (no action needed now):"]
        lines += [f"  {n.instance.name} (island {n.island}): {_node_summary(n)}" for n in in_hand]
    unknown = [n for i in status.islands for n in i.nodes if not n.actions and n.health == "unknown"]
    # A query that failed for every node is one note, not one line per node.
    own = [n for n in unknown if not any(n.validation.detail and n.validation.detail in note for note in status.notes)]
    if own:
        lines += ["", "could not tell:"]
        lines += [f"  {n.instance.name} (island {n.island}): {_node_summary(n)}" for n in own]
    if status.notes:
        lines += ["", "notes:"] + [f"  - {note}" for note in status.notes]
    wanted = sum(i.wanted for i in status.islands)
    code = status.exit_code
    if code == 0:
        verdict = f"all {wanted} wanted nodes healthy"
    elif code == 1:
        bad = sum(i.wanted - sum(1 for n in i.nodes if n.health == "healthy") for i in status.islands)
        verdict = f"{max(bad, 1)} of {wanted} wanted nodes not healthy"
    else:
        count = sum(1 for i in status.islands for n in i.nodes if n.health == "unknown")
        verdict = f"could not tell whether {count} of {wanted} wanted nodes are healthy"
    lines += ["", f"status: {verdict} (exit {code})"]
    # Labels and server text (check ids, Slurm reasons, instance names, notes) cannot break a line or print a
    # control sequence: a label must not forge a line such as the verdict above.
    return terminal_lines(lines)
