"""`ndfleet preflight`: ask Azure, before anything is created, whether the stack can be deployed.

The checks live in ndfleet/preflight/ (docs/preflight.md); this module only adds the command to the parser.
"""

from __future__ import annotations

import argparse
from typing import Any

from ndfleet.commands.stackargs import add_stack_arguments


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "preflight",
        help="check quota, VM size, zone availability and permissions in Azure before anything is created",
        description="Ask Azure Resource Manager whether the stack can be deployed: location, VM size in the region "
        "and zone, subscription restrictions, family and regional vCPU quota, Managed Lustre SKU, the caller's "
        "permissions on the deployment scope, and the Trusted Launch default feature. "
        "Exit 0: all passed; 1: a check failed; 2: could not check. Details: docs/preflight.md.",
    )
    add_stack_arguments(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument(
        "--for",
        dest="mode",
        choices=("up", "preview"),
        default="up",
        help="the Pulumi operation to check permissions for: up (default; writes, role assignments and locks) "
        "or preview (reads only; what up would lack is a warning)",
    )
    p.add_argument(
        "--verbose", action="store_true",
        help="when Azure cannot be asked, also print what the library said (e.g. each credential tried)",
    )  # fmt: skip
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    # The Azure SDK loads here, for this command only: `ndfleet --help` stays fast.
    from ndfleet.preflight.command import run_cli

    return run_cli(args)
