"""`ndfleet-node metrics`: the validation report as a node_exporter textfile, linted by `promtool check metrics`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node import metrics

from tests.monitoring.conftest import run_promtool

REPO = Path(__file__).resolve().parents[2]

HEALTHY: dict[str, Any] = {
    "status": "healthy",
    "level": "quick",
    "checks": [
        {"id": "gpu.count", "status": "pass", "value": 8, "expected": 8, "message": ""},
        {"id": "ib.rate", "status": "pass", "value": 400, "expected": 400, "message": ""},
        {"id": "perf.nccl_allreduce", "status": "skip", "value": None, "expected": None, "message": "quick level"},
    ],
}
UNHEALTHY: dict[str, Any] = {
    "status": "unhealthy",
    "level": "quick",
    "checks": [
        {"id": "gpu.count", "status": "pass", "value": 8, "expected": 8, "message": ""},
        {"id": "ib.ports", "status": "fail", "value": "mlx5_ib3 DOWN", "expected": "ACTIVE", "message": "port down"},
    ],
}


def run_node(tmp_path: Path, report: dict[str, Any] | str | None, drained: bool = False) -> tuple[int, str, Path]:
    report_path = tmp_path / "report.json"
    if report is not None:
        report_path.write_text(report if isinstance(report, str) else json.dumps(report))
    drain = tmp_path / "drained"
    if drained:
        drain.write_text("maintenance\n")
    out = tmp_path / "textfile" / "ndfleet_validation.prom"
    env = {**os.environ, "PYTHONPATH": str(REPO / "node")}
    proc = subprocess.run(
        [sys.executable, "-m", "ndfleet_node", "metrics", "--report", str(report_path), "--drain-file", str(drain),
         "--out", str(out)],
        capture_output=True, text=True, timeout=120, env=env,
    )
    return proc.returncode, proc.stdout + proc.stderr, out


def samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"}


@pytest.mark.parametrize(
    ("report", "drained", "expected"),
    [
        (HEALTHY, False, {"ndfleet_node_validated": 1, "ndfleet_node_healthy": 1, "ndfleet_node_drained": 0}),
        (UNHEALTHY, False, {"ndfleet_node_validated": 1, "ndfleet_node_healthy": 0, "ndfleet_node_drained": 0}),
        (None, False, {"ndfleet_node_validated": 0, "ndfleet_node_healthy": 0, "ndfleet_node_drained": 0}),
        ("{not json", True, {"ndfleet_node_validated": 0, "ndfleet_node_healthy": 0, "ndfleet_node_drained": 1}),
        ({**HEALTHY, "status": "error"}, False, {"ndfleet_node_validated": 1, "ndfleet_node_healthy": 0}),
    ],
    ids=["healthy", "unhealthy", "initializing", "garbage-drained", "error"],
)
def test_node_state_metrics(tmp_path: Path, report: Any, drained: bool, expected: dict[str, float]) -> None:
    rc, out, path = run_node(tmp_path, report, drained)
    assert rc == 0, out
    got = samples(path.read_text())
    assert {k: got[k] for k in expected} == expected


def test_last_result_per_check_is_labelled(tmp_path: Path) -> None:
    rc, out, path = run_node(tmp_path, UNHEALTHY)
    got = samples(path.read_text())
    assert got['ndfleet_validation_check_status{check="ib.ports",status="fail"}'] == 1
    assert got['ndfleet_validation_check_status{check="gpu.count",status="pass"}'] == 1
    assert "ndfleet_validation_last_run_timestamp_seconds" in got


def test_malformed_checks_are_left_out_not_fatal() -> None:
    text = metrics.render(
        {"status": "healthy", "checks": [{"id": 'x"}\nevil', "status": "pass"}, {"id": "ok.check", "status": "weird"},
                                         "nope", {"id": "gpu.ecc", "status": "fail"}]},
        1.0, drained=False,
    )
    assert [line for line in text.splitlines() if line.startswith("ndfleet_validation_check_status")] == [
        'ndfleet_validation_check_status{check="gpu.ecc",status="fail"} 1'
    ]


@pytest.mark.parametrize("report", [HEALTHY, UNHEALTHY, None], ids=["healthy", "unhealthy", "none"])
def test_promtool_lints_the_textfile(promtool: str, tmp_path: Path, report: Any) -> None:
    rc, out, path = run_node(tmp_path, report)
    assert rc == 0, out
    rc, out = run_promtool(promtool, "check", "metrics", stdin=path.read_text())
    assert rc == 0, out


def test_promtool_lint_can_fail(promtool: str) -> None:
    rc, out = run_promtool(promtool, "check", "metrics", stdin="# TYPE x gauge\nx{a=\"1\" 1\n")
    assert rc != 0, out


def test_written_atomically_without_leftovers(tmp_path: Path) -> None:
    rc, out, path = run_node(tmp_path, HEALTHY)
    assert rc == 0
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_unwritable_output_exits_2_without_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = metrics.run(
        type("A", (), {"report": str(tmp_path / "none.json"), "drain_file": str(tmp_path / "d"),
                       "out": str(blocker / "sub" / "x.prom")})()
    )
    assert code == 2


def test_subcommand_is_registered() -> None:
    from ndfleet_node.__main__ import COMMAND_MODULES

    assert "metrics" in COMMAND_MODULES
