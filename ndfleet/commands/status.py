"""`ndfleet status --stack NAME | --stack-file F [--format table|json] [--watch [SECONDS]]`: what a deployed stack's
nodes are doing (docs/operations.md). Exit 0 every wanted node healthy, 1 some are not, 2 it could not read or tell
(docs/cli.md); --watch stops on an error that reading again cannot cure.

Azure libraries are imported inside the handler, so `ndfleet --help` stays fast."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

WATCH_DEFAULT_S = 30.0
WATCH_MIN_S = 5.0
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def _watch_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--watch = {text!r}: a number of seconds, at least {WATCH_MIN_S:g}") from None
    if not value >= WATCH_MIN_S or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"--watch = {text!r}: a number of seconds, at least {WATCH_MIN_S:g}")
    return value


def register(subparsers: Any) -> None:
    from ndfleet.commands.stackargs import add_stack_arguments

    p = subparsers.add_parser(
        "status",
        help="show each island's nodes as Azure, the validation metrics and Slurm see them, and what needs a person",
        description="Read the deployed stack from Azure (Reader role; Monitoring Data Reader on the workspace for "
        "the validation column): per island nodes wanted / running / validated / in Slurm / unhealthy / "
        "repairing and cost per hour, then the nodes that need a person with what to do. Exit 0: every wanted "
        "node healthy; 1: some are not; 2: could not read Azure, or could not tell (a column unknown). "
        "Details: docs/operations.md.",
    )
    add_stack_arguments(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument(
        "--watch",
        nargs="?",
        type=_watch_seconds,
        const=WATCH_DEFAULT_S,
        default=None,
        metavar="SECONDS",
        help=f"read again every SECONDS (default {WATCH_DEFAULT_S:g}, at least {WATCH_MIN_S:g}) until Ctrl-C; "
        "exits with the last read's code; stops at once (exit 2) on an error reading again cannot cure (no "
        "credentials, HTTP 401/403/404, a bad setting); keeps reading through network trouble, 429 and 5xx",
    )
    p.add_argument("--verbose", action="store_true",
                   help="when Azure cannot be read, also print what the library said (e.g. each credential tried)")
    # For tests: stop after this many reads.
    p.add_argument("--watch-count", type=int, default=None, help=argparse.SUPPRESS)
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
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """The command; tests call it with a fake credential, a recorded transport and a fake sleep."""
    from ndfleet.stackload import StackRefused, load_stack_spec
    from ndfleet.status.classify import StackStatus
    from ndfleet.status.read import read_status
    from ndfleet.status.render import render_json, render_table

    try:
        spec, provider = load_stack_spec(args.stack, args.stack_file, args.stack_name)
    except StackRefused as exc:
        failed = StackStatus(str(args.stack or args.stack_file), None, "", "", False, False)
        failed.error = f"could not read: {exc}"
        _emit(failed, args.format, render_table, render_json, watching=False, verbose=args.verbose)
        return failed.exit_code

    code = 2
    reads = 0
    try:
        while True:
            status = read_status(
                spec, env=env, provider_config=provider, credential=credential, transport=transport, retry=retry
            )
            code = status.exit_code
            reads += 1
            _emit(status, args.format, render_table, render_json, watching=args.watch is not None, verbose=args.verbose)
            if args.watch is None or (args.watch_count is not None and reads >= args.watch_count):
                return code
            if status.error is not None and not status.error_transient:
                # 401, 403, 404, no credentials, a bad setting: every later read answers the same (docs/cli.md).
                from ndfleet.cliconvention import error_line, prog_of

                print(error_line(prog_of(args),
                                 "stopped watching: reading again would meet the same error"),
                      file=sys.stderr, flush=True)
                return code
            sleep(args.watch)
    except KeyboardInterrupt:
        return code


def _emit(status: Any, fmt: str, render_table: Any, render_json: Any, *, watching: bool, verbose: bool) -> None:
    from ndfleet.azure.text import terminal_lines
    from ndfleet.cliconvention import error_line

    if verbose and status.error_details:
        print(terminal_lines(status.error_details.split("\n")), file=sys.stderr, flush=True)
    if fmt == "json":
        # One document per read; with --watch one per line (JSON Lines), so a reader can follow it.
        text = render_json(status)
        print(" ".join(text.split()) if watching else text, flush=True)
        return
    if watching and sys.stdout.isatty():
        print(CLEAR_SCREEN, end="")
    if status.error is not None:
        print(terminal_lines([error_line("ndfleet status", status.error)]), file=sys.stderr, flush=True)
    else:
        print(render_table(status), flush=True)
    if watching:
        print(time.strftime("read at %Y-%m-%d %H:%M:%S %Z"), flush=True)
