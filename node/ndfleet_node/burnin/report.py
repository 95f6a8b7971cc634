"""The burn-in report: per host status, reason and figures; per round the tests, pairs and busbw; totals.

Written atomically (temporary file + rename) so a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ndfleet_node.burnin.planner import Planner, TestResult

SCHEMA_VERSION = 1


def _test(r: TestResult) -> dict[str, Any]:
    return {
        "id": r.test.id,
        "hosts": list(r.test.hosts) if r.test.phase != "island" else len(r.test.hosts),
        "outcome": r.outcome,
        "busbw_gbps": r.busbw_gbps,
        "floor_gbps": r.test.floor_gbps,
        "wrong": r.wrong,
        "duration_s": round(r.duration_s, 2),
        "message": r.message,
    }


def build_report(
    planner: Planner, level: str, started: str, duration_s: float, *, vm_size: str = "", error: str | None = None
) -> dict[str, Any]:
    verdicts = planner.verdicts()
    rounds: dict[int, dict[str, Any]] = {}
    everything = list(planner.results) + ([planner.island_result] if planner.island_result else [])
    for r in sorted(everything, key=lambda r: r.test.round):
        entry = rounds.setdefault(r.test.round, {"round": r.test.round, "phase": r.test.phase, "tests": []})
        entry["tests"].append(_test(r))
    island: dict[str, Any] | None = None
    if planner.island_result is not None:
        ir = planner.island_result
        island = {
            "hosts": len(ir.test.hosts),
            "outcome": ir.outcome,
            "busbw_gbps": ir.busbw_gbps,
            "floor_gbps": ir.test.floor_gbps,
            "message": ir.message,
        }
    unhealthy = sorted(h for h, v in verdicts.items() if v.status == "unhealthy")
    suspect = sorted(h for h, v in verdicts.items() if v.status in ("suspect", "untested"))
    if error is not None:
        status = "error"
    elif unhealthy or suspect or (island is not None and island["outcome"] != "pass"):
        status = "unhealthy"
    else:
        status = "healthy"
    return {
        "schema": SCHEMA_VERSION,
        "status": status,
        "error": error,
        "level": level,
        "vm_size": vm_size,
        "started": started,
        "duration_s": round(duration_s, 2),
        "rounds_used": len(rounds),
        "floors_gbps": {"pair": planner.pair_floor, "island": planner.island_floor},
        "unhealthy": unhealthy,
        "suspect": suspect,
        "hosts": [
            {
                "host": v.host,
                "status": v.status,
                "reason": v.reason,
                "busbw_gbps": v.busbw_gbps,
                "partners_failed": v.partners_failed,
                "partners_passed": v.partners_passed,
            }
            for v in verdicts.values()
        ],
        "rounds": [rounds[k] for k in sorted(rounds)],
        "island": island,
    }


def write_report(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def summary_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"burn-in {report['status']}: {len(report['hosts'])} hosts, {report['rounds_used']} rounds, "
        f"{report['duration_s']:.1f} s"
    ]
    for rnd in report["rounds"]:
        passed = sum(t["outcome"] == "pass" for t in rnd["tests"])
        lines.append(f"  round {rnd['round']} ({rnd['phase']}): {passed}/{len(rnd['tests'])} tests passed")
    for h in report["hosts"]:
        if h["status"] != "healthy":
            lines.append(f"  {h['host']}: {h['status']} {h['reason']} (failed with {', '.join(h['partners_failed'])})")
    if report["island"] is not None:
        i = report["island"]
        lines.append(f"  island ({i['hosts']} hosts): {i['outcome']} {i['message']}")
    return lines
