"""`ndfleet-node validate --level quick|epilog|full --report PATH` (also installed as `validate-node`).

Exit 0 healthy, 1 unhealthy, 2 could not run (bad arguments, report path unusable, node JSON unreadable).
Read-only checks run concurrently; the bandwidth checks one after another. Tools come from PATH, /sys and
/proc are read under $NDFLEET_SYSROOT (empty on a node). One line per check goes to stdout (the journal).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ndfleet_node import config as node_config
from ndfleet_node.checks import LEVELS, Check, Context, Result, load_all, sysroot
from ndfleet_node.parsers import ParseError
from ndfleet_node.report import entry, to_json, write_atomic
from ndfleet_node.runner import Runner

WORKERS = 8


def setup_step_checks() -> dict[str, str]:
    """Set-up step -> the check whose failure it explains (the check's message names the step and why)."""
    return {step: c.id for c in load_all().values() for step in c.setup_steps}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("validate", help="validate this node (validate-node)", description=__doc__)
    add_arguments(p)
    p.set_defaults(handler=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--level", default="", help="quick, epilog or full")
    p.add_argument("--report", default="", metavar="PATH", help="where to write the JSON report")
    p.add_argument("--config", default=None, metavar="PATH", help=f"node JSON (default {node_config.DEFAULT_PATH})")


def cannot_run(message: str) -> int:
    print(f"validate-node: {message}", file=sys.stderr)
    print("usage: validate-node --level quick|epilog|full --report PATH", file=sys.stderr)
    return 2


def run_one(c: Check, ctx: Context) -> Result:
    """A check's result; whatever it raises becomes its failure (the run never stops on one check)."""
    try:
        return c.fn(ctx)
    except ParseError as e:
        return Result("fail", "", "", str(e))
    except Exception as e:  # noqa: BLE001 (a bug in one check must not cost the others their verdict)
        return Result("fail", "", "", f"internal error in {c.id}: {type(e).__name__}: {e}")


def run_checks(
    ids: list[str], ctx: Context, on_result: Callable[[str, Result], None] | None = None
) -> list[tuple[str, Result]]:
    """Every check of `ids`: the concurrent ones in a pool, then the others one by one. `on_result` is called in
    the order of `ids` as soon as each result and all before it are known (the journal shows progress)."""
    registry = load_all()
    results: dict[str, Result] = {}
    emitted = 0

    def emit() -> None:
        nonlocal emitted
        while emitted < len(ids) and ids[emitted] in results:
            if on_result:
                on_result(ids[emitted], results[ids[emitted]])
            emitted += 1

    for i in ids:
        if i not in registry:
            results[i] = Result("fail", "", "", f"unknown check {i}: this program does not have it")
    known = [registry[i] for i in ids if i in registry]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {c.id: pool.submit(run_one, c, ctx) for c in known if c.concurrent}
        for cid, fut in futures.items():
            results[cid] = fut.result()
    emit()
    for c in known:
        if not c.concurrent:
            results[c.id] = run_one(c, ctx)
            emit()
    emit()
    return [(i, results[i]) for i in ids]


def setup_results(cfg: node_config.NodeConfig, root: str) -> list[dict[str, str]]:
    """The steps of this boot's set-up (<state_dir>/setup.json), [] when there is none or it is unreadable."""
    path = root + os.path.join(str(cfg.paths.get("state_dir", "/run/ndfleet")), "setup.json")
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(1024 * 1024).decode("utf-8", "replace"))
        steps = data.get("steps", []) if isinstance(data, dict) else []
        return [{k: str(v) for k, v in s.items()} for s in steps if isinstance(s, dict)]
    except (OSError, ValueError):
        return []


def explain(check_id: str, r: Result, steps: list[dict[str, str]]) -> Result:
    """The result, with the failed set-up step behind a failed check appended to its message."""
    why = [
        f"set-up step {s['step']} failed: {s.get('message', '')}"
        for s in steps
        if s.get("status") == "failed" and setup_step_checks().get(s.get("step", "")) == check_id
    ]
    if r.status != "fail" or not why:
        return r
    return Result(r.status, r.value, r.expected, f"{r.message}; {'; '.join(why)}")


def run(args: argparse.Namespace) -> int:
    if args.level not in LEVELS:
        return cannot_run(f"--level must be one of {', '.join(LEVELS)}, got '{args.level}'")
    if not args.report:
        return cannot_run("--report PATH is required")
    report_path = args.report
    if os.path.isdir(report_path):
        return cannot_run(f"--report {report_path} is a directory, expected a file path")
    folder = os.path.dirname(os.path.abspath(report_path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        return cannot_run(f"cannot create {folder}: {e.strerror}")
    if not os.access(folder, os.W_OK):
        return cannot_run(f"cannot write to {folder}")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic()
    try:
        cfg = node_config.load(args.config)
        ids = cfg.levels()[args.level]
    except (node_config.ConfigError, KeyError) as e:
        why = str(e) if isinstance(e, node_config.ConfigError) else f"the node JSON has no level {args.level}"
        report = {"status": "error", "level": args.level, "started": started, "error": why, "checks": []}
        with contextlib.suppress(OSError):
            write_atomic(report_path, to_json(report))
        return cannot_run(why)
    print(f"validate-node: {cfg.vm_size}, level {args.level}, {len(ids)} checks", flush=True)
    ctx = Context(cfg, Runner(), sysroot())
    steps = setup_results(cfg, ctx.sysroot)
    checks: list[dict[str, str]] = []

    def record(cid: str, r: Result) -> None:
        c = entry(cid, explain(cid, r, steps))
        checks.append(c)
        print(f"{c['status'].upper():<4} {c['id']}: {c['message']}", flush=True)

    run_checks(ids, ctx, record)
    failed = [c["id"] for c in checks if c["status"] == "fail"]
    status = "unhealthy" if failed else "healthy"
    duration = round(time.monotonic() - t0, 2)
    report = {
        "status": status,
        "vm_size": cfg.vm_size,
        "level": args.level,
        "started": started,
        "duration_s": float(duration),
        "stack": cfg.stack,
        "island": cfg.island,
        "host": socket.gethostname(),
        "checks": checks,
    }
    if steps:
        report["setup"] = steps
    try:
        write_atomic(report_path, to_json(report))
    except OSError as e:
        return cannot_run(f"cannot write the report to {report_path}: {e.strerror or e}")
    summary = f" ({' '.join(failed)})" if failed else ""
    # A check that did not run (skip: a tool the image lacks, DCGM level 0) is named, never counted as passed.
    skipped = [c["id"] for c in checks if c["status"] == "skip"]
    summary += f", {len(skipped)} skipped ({' '.join(skipped)})" if skipped else ""
    print(f"validate-node: {status}: {len(checks)} checks, {len(failed)} failed{summary}, {duration} s; "
          f"report {report_path}", flush=True)  # fmt: skip
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """`validate-node ...` as users and systemd call it."""
    p = argparse.ArgumentParser(prog="validate-node", description=__doc__)
    add_arguments(p)
    return run(p.parse_args(argv))
