"""The outcome of a preflight run and its two forms: the table for people and the JSON document (schema 1)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ndfleet.azure.clouds import CloudSettings
from ndfleet.preflight.outcome import Check
from ndfleet.stackconfig.clusterspec import ClusterSpec

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CANNOT_CHECK = 2

JSON_SCHEMA_VERSION = 1

@dataclass
class Report:
    stack: str
    subscription_id: str | None
    cloud: CloudSettings | None
    spec: ClusterSpec | None
    checks: list[Check]
    error: str | None = None  # set when preflight could not check at all
    error_details: str = ""  # what the library behind `error` said: printed with --verbose
    elapsed_s: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return EXIT_CANNOT_CHECK
        if any(c.status == "fail" for c in self.checks):
            return EXIT_FAILED
        if any(c.status == "error" for c in self.checks):
            return EXIT_CANNOT_CHECK
        return EXIT_OK

    @property
    def result(self) -> str:
        return {EXIT_OK: "pass", EXIT_FAILED: "fail", EXIT_CANNOT_CHECK: "error"}[self.exit_code]

_MARK = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "SKIP", "error": "ERROR"}

def render_table(report: Report) -> str:
    if report.error is not None:
        return report.error
    assert report.spec is not None and report.cloud is not None
    spec = report.spec
    head = (
        f"preflight for stack {report.stack}: {spec.total_nodes} x {spec.profile.name} in {spec.location}"
        f"{' zone ' + spec.zone if spec.zone else ''}, subscription {report.subscription_id}, {report.cloud.name}"
    )
    # A reason that stopped several checks is printed once, below the table.
    reasons = list(dict.fromkeys(c.detail for c in report.checks if c.status == "error"))
    rows = [
        (_MARK[c.status], c.id, f"could not check [{reasons.index(c.detail) + 1}]" if c.status == "error" else c.detail)
        for c in report.checks
    ]
    w0 = max(len("STATUS"), *(len(r[0]) for r in rows))
    w1 = max(len("CHECK"), *(len(r[1]) for r in rows))
    lines = [head, "", f"{'STATUS':<{w0}}  {'CHECK':<{w1}}  DETAIL"]
    lines += [f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows]
    if reasons:
        lines += ["", "Could not check:"]
        lines += [f"  [{i}] {r.removeprefix('could not check: ')}" for i, r in enumerate(reasons, 1)]
    fixes = [c for c in report.checks if c.status in ("fail", "warn") and c.fix]
    if fixes:
        lines += ["", "What to do:"]
        lines += [f"  {c.id}: {c.fix}" for c in fixes]
    counts = {s: sum(1 for c in report.checks if c.status == s) for s in _MARK}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    verdict = {
        EXIT_OK: "preflight passed",
        EXIT_FAILED: "preflight FAILED: the deployment would not succeed as configured",
        EXIT_CANNOT_CHECK: "preflight could not check everything",
    }[report.exit_code]
    lines += ["", f"{verdict} ({tally})"]
    return "\n".join(lines)

def render_json(report: Report) -> str:
    spec = report.spec
    doc = {
        "schemaVersion": JSON_SCHEMA_VERSION,
        "stack": report.stack,
        "result": report.result,
        "exitCode": report.exit_code,
        "error": report.error,
        "subscriptionId": report.subscription_id,
        "cloud": report.cloud.name if report.cloud else None,
        "resourceManager": report.cloud.resource_manager if report.cloud else None,
        "location": spec.location if spec else None,
        "zone": spec.zone if spec else None,
        "vmSize": spec.profile.name if spec else None,
        "nodes": spec.total_nodes if spec else None,
        "checks": [
            {"id": c.id, "title": c.title, "status": c.status, "detail": c.detail, "fix": c.fix, "figures": c.figures}
            for c in report.checks
        ],
        "elapsedSeconds": report.elapsed_s,
    }
    return json.dumps(doc, indent=2)

