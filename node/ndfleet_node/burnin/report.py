"""The burn-in report: per host status, reason and figures; per round the tests, pairs and busbw; totals.

Written atomically (temporary file + rename) so a reader never sees half of one, and always as strict JSON: a
figure that is not finite is written as null (the test's outcome already says why: `unreadable`), and the
encoder refuses NaN / Infinity (`allow_nan=False`) should one ever slip through.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from ndfleet_node.burnin.planner import Planner, TestResult

SCHEMA_VERSION = 1


def _figure(value: float | None) -> float | None:
    """A figure as the report carries it: finite, else null (bare NaN / Infinity is not JSON)."""
    return value if value is not None and math.isfinite(value) else None


def _test(r: TestResult) -> dict[str, Any]:
    return {
        "id": r.test.id,
        "hosts": list(r.test.hosts) if r.test.phase != "island" else len(r.test.hosts),
        "outcome": r.outcome,
        "busbw_gbps": _figure(r.busbw_gbps),
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
            "busbw_gbps": _figure(ir.busbw_gbps),
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
                "busbw_gbps": [b for b in map(_figure, v.busbw_gbps) if b is not None],
                "partners_failed": v.partners_failed,
                "partners_passed": v.partners_passed,
            }
            for v in verdicts.values()
        ],
        "rounds": [rounds[k] for k in sorted(rounds)],
        "island": island,
    }


def report_json(report: dict[str, Any]) -> str:
    """The report as strict JSON text (ValueError, never bare NaN / Infinity)."""
    return json.dumps(report, indent=2, allow_nan=False) + "\n"


def _write_all(fd: int, data: bytes) -> None:
    """Every byte to `fd` (os.write may write less than asked); OSError (ENOSPC, EIO, ...) goes to the caller."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write the report atomically; on OSError (a full disk: ENOSPC) nothing half-written is left behind and the
    error goes to the caller, which still has the report to print (`ndfleet_node.burnin.deliver_report`)."""
    data = report_json(report).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
