"""`ndfleet-node burnin`: cross-node fabric burn-in of an island that pins every bad host in few rounds.

    ndfleet-node burnin --hostfile FILE --report PATH [--level quick|full] [--config /etc/ndfleet/node.json]

Exit 0: every host healthy and the island-wide test at its floor; 1: some host unhealthy or unresolved, or the
island-wide test below its floor; 2: could not run (bad hostfile, settings, mpirun missing, or not one test could
start: then the report's status is "error"); 3: the report could not be written (it went to stdout instead).
How the rounds are chosen is in `planner.py`; running the tests in `runner.py`; the report in `report.py`.
See docs/burnin.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ndfleet_node.burnin.hosts import HostfileError, read_hostfile
from ndfleet_node.burnin.notify import NODE_PROGRAM, report_impacts
from ndfleet_node.burnin.planner import Planner, TestSpec
from ndfleet_node.burnin.report import build_report, report_json, summary_lines, write_report
from ndfleet_node.burnin.runner import ProcessRun, RunTest, mpirun_executor, run_bounded, run_round
from ndfleet_node.burnin.settings import LEVELS, BurninSettings, SettingsError, load_settings
from ndfleet_node.hpcx import HpcxError, find_init

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_CANNOT_RUN = 2
# The burn-in ran but its report could not be written (a full disk): the report went to stdout instead. Distinct
# from 0-2 so automation never mistakes a lost report for a verdict.
EXIT_REPORT_NOT_WRITTEN = 3


def deliver_report(path: Path, report: dict[str, Any], log: Callable[[str], None]) -> bool:
    """Write the report; when that fails (a full disk: ENOSPC) print it whole on stdout instead, so the run's
    result is never lost, and return False (the caller exits EXIT_REPORT_NOT_WRITTEN)."""
    try:
        write_report(path, report)
        return True
    except OSError as exc:
        log(f"burnin: cannot write the report to {path}: {exc.strerror or exc}; the report follows on stdout")
        print(report_json(report), end="", flush=True)
        return False


def run_burnin(
    hosts: Sequence[str],
    settings: BurninSettings,
    level: str,
    run_test: RunTest,
    *,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """All rounds until the planner is done; returns the report."""
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0 = time.monotonic()
    planner = Planner(hosts, settings.pair_floor_gbps, settings.island_floor_gbps, settings.max_rounds)
    while tests := planner.next_round():
        log(f"round {planner.round} ({tests[0].phase}): {len(tests)} test(s)")
        results = run_round(tests, run_test, settings.max_parallel)
        for r in results:
            if r.outcome != "pass":
                log(f"  {r.test.id}: {r.outcome} {r.message}")
        planner.record(results)
    error = None
    if planner.results and all(r.outcome == "error" for r in planner.results):
        # Not one test started anywhere: the tools or the launch are broken, not the hosts.
        error = f"no test could run ({len(planner.results)} tried); first: {planner.results[0].message}"
    return build_report(planner, level, started, time.monotonic() - t0, error=error)


def add_common_args(p: argparse.ArgumentParser) -> None:
    """The options `burnin` and `burnin-slurm` share."""
    p.add_argument("--report", type=Path, required=True, help="the JSON report")
    p.add_argument("--level", choices=LEVELS, default="quick")
    p.add_argument("--config", type=Path, help="node JSON (default: $NDFLEET_NODE_CONFIG, else /etc/ndfleet/node.json)")
    p.add_argument("--test-timeout", type=int, metavar="S", help="every test's timeout (default: derived)")
    p.add_argument("--report-impact", action="store_true", help="ask each unhealthy host to file its impact report")
    p.add_argument("--node-program", default=NODE_PROGRAM, help="ndfleet-node's path on the hosts")


def bad_test_timeout(seconds: int | None) -> str:
    return f"--test-timeout = {seconds}: must be positive seconds" if seconds is not None and seconds <= 0 else ""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "burnin",
        help="cross-node NCCL burn-in of an island over mpirun: pin every bad host",
        description="Exit 0: all healthy; 1: some host unhealthy; 2: could not run; 3: report not written.",
    )
    p.add_argument("--hostfile", type=Path, required=True, help="one host per line")
    p.add_argument("--max-parallel", type=int, default=None, metavar="N", help="at most N tests at once")
    add_common_args(p)
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        hosts = read_hostfile(args.hostfile)
        settings = load_settings(args.config)
    except (HostfileError, SettingsError) as exc:
        log(f"burnin: {exc}")
        return EXIT_CANNOT_RUN
    if problem := bad_test_timeout(args.test_timeout):
        log(f"burnin: {problem}")
        return EXIT_CANNOT_RUN
    if args.test_timeout is not None:
        settings = replace(settings, timeout_override_s=args.test_timeout)
    if args.max_parallel is not None:
        settings = replace(settings, max_parallel=max(0, args.max_parallel))
    try:
        if settings.hpcx_init:
            find_init(settings.hpcx_init)  # mpirun is HPC-X's, found once each test has loaded it
        elif shutil.which(settings.mpirun) is None:
            raise HpcxError(f"cannot start {settings.mpirun!r} (not found or not executable on PATH)")
    except HpcxError as exc:
        log(f"burnin: {exc}")
        return EXIT_CANNOT_RUN
    with tempfile.TemporaryDirectory(prefix="ndfleet_burnin_") as workdir:
        executor = mpirun_executor(settings, args.level, Path(workdir))
        report = run_burnin(hosts, settings, args.level, executor, log=log)
        written = deliver_report(args.report, report, log)
        for line in summary_lines(report):
            print(line)
        if args.report_impact:

            def run(cmd: Sequence[str], timeout: float) -> ProcessRun:
                return run_bounded(cmd, timeout, settings.kill_grace_s, Path(workdir))

            report_impacts(report, run, args.node_program, log)
    if not written:
        return EXIT_REPORT_NOT_WRITTEN
    if report["status"] == "error":
        log(f"burnin: {report['error']}")
        return EXIT_CANNOT_RUN
    return EXIT_HEALTHY if report["status"] == "healthy" else EXIT_UNHEALTHY


__all__ = ["HostfileError", "TestSpec", "deliver_report", "read_hostfile", "register", "run_burnin"]
