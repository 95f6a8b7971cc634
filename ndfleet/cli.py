"""The `ndfleet` command: what Pulumi does not do (offline plan, plan diffs, bootstraps, policies, preflight).

Each subcommand lives in its own module under ndfleet/commands/, which exposes `register(subparsers)`;
the registered handler returns the process exit code. Exit codes, the error prefix and JSON errors follow one
convention (ndfleet/cliconvention.py, docs/cli.md): errors the user can fix are one clear message, never a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from ndfleet.cliconvention import EXIT_INTERRUPTED, EXIT_USAGE, Parser, UsageError, fail, leaf_parsers

# Module per subcommand, in the order `ndfleet --help` lists them. Each imports only the standard library at
# module level (Pulumi, the Azure SDK, pydantic and Jinja2 load inside its handler): building the parser for
# `ndfleet --help` stays fast (tests/test_cli_startup.py holds it to that).
COMMAND_MODULES = (
    "ndfleet.commands.plan",
    "ndfleet.commands.diff",
    "ndfleet.commands.policy",
    "ndfleet.commands.render",
    "ndfleet.commands.preflight",
    "ndfleet.commands.monitoring",
    "ndfleet.commands.impact",
    "ndfleet.commands.cost",
    "ndfleet.commands.status",
    "ndfleet.commands.goodput",
)


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's `version`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ndfleet")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="ndfleet",
        description="Offline plans, plan diffs, node bootstraps, policies and Azure preflight for ND H100 v5 / "
        "ND H200 v5 training clusters. Deploy with `pulumi up`.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    for leaf in leaf_parsers(parser):  # each command knows its name as typed, for its error prefix
        leaf.set_defaults(prog=leaf.prog)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except UsageError as error:  # options that parse but do not go together, found by a handler: 64, as any error
        return fail(args, str(error), EXIT_USAGE)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    return code


def run() -> None:
    """Console-script entry point: run, flush, and leave without tearing the interpreter down.

    Unloading pulumi-azure-native's thousands of classes at exit takes half a second of a plan's three;
    nothing is left to clean up by then (output flushed, no files open, no child processes).
    """
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # e.g. `ndfleet plan ... | head`
        pass
    os._exit(code)


if __name__ == "__main__":
    run()
