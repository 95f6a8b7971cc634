"""The goodput report as a table for a terminal and as JSON (docs/goodput.md)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from ndfleet.azure.text import terminal_lines
from ndfleet.cost.money import usd
from ndfleet.goodput.compute import CATEGORIES, NOT_YET_MEASURED, Figures, Report, as_json, percentile
from ndfleet.goodput.jobs import JobReport


def render_json(report: Report) -> str:
    return json.dumps(as_json(report), indent=2)


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}m"


# The table names the jobs with the lowest ETTR, at most this many (the JSON has every job).
LOWEST_ETTR_SHOWN = 10


def job_lines(jobs: JobReport) -> list[str]:
    """The requeued or node-failed jobs: how many, their ETTR, the restart times by cause (docs/goodput.md)."""
    overall = jobs.ettr_overall
    known = sorted((j for j in jobs.jobs if j.ettr is not None), key=lambda j: (j.ettr or 0.0, int(j.job)))
    lines = [
        f"jobs requeued or ended by a node failure: {len(jobs.jobs)} ({sum(len(j.runs) for j in jobs.jobs)} runs "
        f"seen); ETTR of the {len(known)} whose it is known: {'-' if overall is None else f'{overall:.1%}'}"
        + (f"; {jobs.waiting} waiting to restart (ETTR not known yet)" if jobs.waiting else ""),
    ]
    restarts = ", ".join(f"{cause} {len(t)} (median {_duration(percentile(t, 50))}, p95 {_duration(percentile(t, 95))})"
                         for cause, t in jobs.restart_s.items())  # fmt: skip
    lines.append(f"job restarts (run end to next run's start): {restarts or 'none'}")
    if known:
        shown = ", ".join(f"{j.job} {j.ettr or 0.0:.1%}" for j in known[:LOWEST_ETTR_SHOWN])
        lines.append(f"lowest ETTR: {shown}")
    return lines


def render_table(report: Report) -> str:
    rows: list[tuple[str, Figures]] = [*report.islands.items(), ("cluster", report.cluster)]
    head = ["", "node-h", *CATEGORIES, "in service", "badput"]
    table = [head]
    for name, f in rows:
        share = "-" if f.service_share is None else f"{f.service_share:.1%}"
        cost = report.badput_usd(f)
        table.append([name, f"{f.node_hours:,.1f}", *(f"{f.hours[c]:,.1f}" for c in CATEGORIES), share,
                      "no price" if cost is None else usd(cost)])  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = [
        f"Goodput of stack {report.stack}: {_utc(report.since)} to {_utc(report.until)} (step {report.step_s:g} s)",
        "",
        *("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True)))
          for r in table),
        "",
    ]
    for name, f in rows:
        times = f.back_in_service_s
        per = f.per_thousand_node_days()
        causes = ", ".join(f"{c} {n} ({per[c]:,.1f}/1,000 node-days)" for c, n in sorted(f.interruptions.items()))
        lines.append(f"{name}: interruptions: {causes or 'none'}; drain to back in service: median "
                     f"{_duration(percentile(times, 50))}, p95 {_duration(percentile(times, 95))} over {len(times)}"
                     + (f", {f.still_out} still out" if f.still_out else "")
                     + (f", {f.left_slurm} left Slurm while out (replaced or removed)" if f.left_slurm else ""))
    if report.jobs is not None:
        lines += ["", *job_lines(report.jobs)]
    if report.unplaced_nodes:
        lines.append(f"not counted (host name names no island): {', '.join(report.unplaced_nodes[:10])}")
    lines += ["", "not yet measured: " + "; ".join(NOT_YET_MEASURED)]
    return terminal_lines(lines)
