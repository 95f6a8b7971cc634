"""`ndfleet-node metrics`: the validation report as Prometheus metrics, for node_exporter's textfile collector.

Reads the validator's report (`/run/ndfleet/report.json`) and the drain marker, and writes the Prometheus text
exposition format atomically (a temporary file renamed into place, as node_exporter's textfile collector
requires, so it never reads half a file). The Prometheus agent adds the stack, island, node and physical host
labels to every series, so the file carries only what the node alone knows:

  ndfleet_node_validated 0|1                       a report exists (0 while the node is still Initializing)
  ndfleet_node_healthy 0|1                         the report says "healthy"
  ndfleet_node_drained 0|1                         the drain marker exists (written by a scheduler or operator)
  ndfleet_validation_check_status{check,status} 1  the last result of each check: pass | fail | skip
  ndfleet_validation_last_run_timestamp_seconds    when that report was written
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from ndfleet_node.names import DRAIN_MARKER

METRIC_NAMES: tuple[str, ...] = (
    "ndfleet_node_validated",
    "ndfleet_node_healthy",
    "ndfleet_node_drained",
    "ndfleet_validation_check_status",
    "ndfleet_validation_last_run_timestamp_seconds",
)
CHECK_STATUSES = ("pass", "fail", "skip")

DEFAULT_REPORT = "/run/ndfleet/report.json"
DEFAULT_OUT = "/var/lib/ndfleet/textfile/ndfleet_validation.prom"

_CHECK_ID = re.compile(r"^[a-z0-9_.-]{1,64}$")


def escape_label(value: str) -> str:
    """A label value in the text format: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _read_report(path: Path) -> tuple[dict[str, Any] | None, float | None]:
    """The report and its modification time; (None, None) when there is none yet or it is not a report."""
    try:
        text = path.read_text()
        mtime = path.stat().st_mtime
    except OSError:
        return None, None
    try:
        report = json.loads(text)
    except ValueError:
        return None, None
    return (report, mtime) if isinstance(report, dict) else (None, None)


def render(report: dict[str, Any] | None, report_mtime: float | None, drained: bool) -> str:
    """The exposition text for one report (None: not validated yet)."""
    lines = [
        "# HELP ndfleet_node_validated 1 when the node's validation has produced a report.",
        "# TYPE ndfleet_node_validated gauge",
        f"ndfleet_node_validated {1 if report is not None else 0}",
        "# HELP ndfleet_node_healthy 1 when the last validation report says healthy.",
        "# TYPE ndfleet_node_healthy gauge",
        f"ndfleet_node_healthy {1 if report is not None and report.get('status') == 'healthy' else 0}",
        "# HELP ndfleet_node_drained 1 when the node is drained (the drain marker file exists).",
        "# TYPE ndfleet_node_drained gauge",
        f"ndfleet_node_drained {1 if drained else 0}",
    ]
    checks = report.get("checks") if report is not None else None
    lines += [
        "# HELP ndfleet_validation_check_status The last result of each validation check (status label).",
        "# TYPE ndfleet_validation_check_status gauge",
    ]
    seen: set[str] = set()
    for check in checks if isinstance(checks, list) else []:
        if not isinstance(check, dict):
            continue
        check_id, status = str(check.get("id", "")), str(check.get("status", ""))
        if not _CHECK_ID.match(check_id) or status not in CHECK_STATUSES or check_id in seen:
            continue  # a malformed entry must not break the whole file
        seen.add(check_id)
        lines.append(f'ndfleet_validation_check_status{{check="{escape_label(check_id)}",status="{status}"}} 1')
    if report_mtime is not None:
        lines += [
            "# HELP ndfleet_validation_last_run_timestamp_seconds When the last validation report was written.",
            "# TYPE ndfleet_validation_last_run_timestamp_seconds gauge",
            f"ndfleet_validation_last_run_timestamp_seconds {report_mtime:.3f}",
        ]
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ndfleet-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    report, mtime = _read_report(Path(args.report))
    text = render(report, mtime, drained=Path(args.drain_file).exists())
    try:
        write_atomically(Path(args.out), text)
    except OSError as error:
        print(f"ndfleet-node metrics: cannot write {args.out}: {error.strerror}")
        return 2
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "metrics", help="write the validation report as metrics for node_exporter's textfile collector"
    )
    parser.add_argument("--report", default=DEFAULT_REPORT, help=f"validation report (default {DEFAULT_REPORT})")
    parser.add_argument(
        "--drain-file", default=DRAIN_MARKER, help=f"drain marker, present = drained ({DRAIN_MARKER})"
    )
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"textfile to write (default {DEFAULT_OUT})")
    parser.set_defaults(handler=run)
