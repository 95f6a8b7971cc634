"""`ndfleet goodput --stack NAME | --stack-file F [--since WHEN] [--until WHEN] [--format table|json]`: where a
deployed stack's paid node-hours went over a period, per island and for the cluster (docs/goodput.md). Exit 0 the
report was read, 2 it could not be (docs/cli.md), 64 a usage error.

Azure libraries are imported inside the handler, so `ndfleet --help` stays fast."""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

DEFAULT_PERIOD_S = 7 * 24 * 3600
# A duration before now: 90m, 36h, 7d (Prometheus's own duration units, the ones a period is given in).
_AGO = re.compile(r"(\d{1,6})([mhd])")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400}
WHEN_HELP = "an ISO 8601 time (2026-12-01T00:00Z; no zone means UTC) or a duration before now (90m, 36h, 7d)"


def parse_when(text: str, now: float) -> float:
    """Unix seconds for --since/--until; ValueError with what is valid."""
    ago = _AGO.fullmatch(text.strip())
    if ago:
        return now - int(ago.group(1)) * _UNIT_S[ago.group(2)]
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not {WHEN_HELP}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def register(subparsers: Any) -> None:
    from ndfleet.commands.stackargs import add_stack_arguments

    p = subparsers.add_parser(
        "goodput",
        help="report where a stack's node-hours went: in service (running, idle), drained, in repair, in burn-in",
        description="Read the Slurm node states the controller publishes to the stack's monitoring workspace "
        "(Reader role, and Monitoring Data Reader on the workspace) and report, per island and for the cluster: "
        "node-hours by state, interruptions per 1,000 node-days by cause, drain-to-back-in-service times (median, "
        "95th percentile) and the badput in US$ at the list price. Exit 0: read; 2: could not read; 64: usage. "
        "Details: docs/goodput.md.",
    )
    add_stack_arguments(p)
    p.add_argument("--since", metavar="WHEN", default="7d", help=f"start of the period (default 7d): {WHEN_HELP}")
    p.add_argument("--until", metavar="WHEN", default=None, help="end of the period (default now)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    return run_cli(args)


def run_cli(
    args: argparse.Namespace,
    *,
    env: Mapping[str, str] | None = None,
    credential: Any = None,
    transport: Any = None,
    retry: Any = None,
    now: Callable[[], float] = time.time,
) -> int:
    """The command; tests call it with a fake credential, a recorded transport and a fixed clock."""
    from ndfleet.cliconvention import EXIT_CANNOT_RUN, EXIT_OK, EXIT_USAGE, fail
    from ndfleet.stackload import StackRefused, load_stack_spec

    at = now()
    problems = []
    since = until = 0.0
    for name, text, default in (("--since", args.since, None), ("--until", args.until, at)):
        try:
            value = default if text is None else parse_when(text, at)
        except ValueError as exc:
            problems.append(f"{name} = {exc}")
            continue
        if name == "--since":
            since = float(value or 0.0)
        else:
            until = float(value or 0.0)
    if not problems and until <= since:
        problems.append(f"--since ({_utc(since)}) must come before --until ({_utc(until)})")
    if problems:
        return fail(args, "; ".join(problems), EXIT_USAGE)
    try:
        spec, provider = load_stack_spec(args.stack, args.stack_file, args.stack_name)
    except StackRefused as exc:
        return fail(args, f"could not read: {exc}", EXIT_CANNOT_RUN)

    from ndfleet.goodput.read import read_goodput
    from ndfleet.goodput.render import render_json, render_table

    read = read_goodput(spec, since, until, env=env, provider_config=provider, credential=credential,
                        transport=transport, retry=retry)  # fmt: skip
    if read.report is None:
        return fail(args, read.error or "could not read", EXIT_CANNOT_RUN)
    print(render_json(read.report) if args.format == "json" else render_table(read.report), flush=True)
    return EXIT_OK


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


