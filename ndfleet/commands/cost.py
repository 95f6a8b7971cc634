"""`ndfleet cost`: what a stack's VMs cost per hour and per month, at the table's list prices or today's.

`--refresh` reads each size's Linux pay-as-you-go price in the stack's region from the Azure Retail Prices API
(public, no credentials; ndfleet/cost/retail.py). The module imports only the standard library at its top: the CLI
loads every command module to build its parser.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Mapping
from typing import Any


def register(subparsers: Any) -> None:
    from ndfleet.commands.stackargs import add_stack_arguments

    p = subparsers.add_parser(
        "cost",
        help="what the stack's VMs cost per hour and month (list prices; --refresh: today's, from Azure)",
        description="Price every VM the stack creates (GPU nodes, Slurm controller and login nodes) at the Linux "
        "pay-as-you-go list price of its region. Without --refresh: ndfleet's price table (dated, sourced); "
        "with --refresh: today's price from the public Azure Retail Prices API (no credentials).",
    )
    add_stack_arguments(p)
    p.add_argument("--refresh", action="store_true", help="read today's prices from the Azure Retail Prices API")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")
    p.set_defaults(handler=cost_command)


def cost_command(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    from ndfleet.cliconvention import EXIT_CANNOT_RUN, EXIT_OK, fail
    from ndfleet.commands.stackargs import load_stack_from_args
    from ndfleet.cost.estimate import estimate_cost, render_cost
    from ndfleet.cost.prices import RETAIL_API_SOURCE, ListPrice, table_price
    from ndfleet.cost.retail import DEFAULT_ENDPOINT, ENDPOINT_ENV, fetch_meters
    from ndfleet.stackconfig.config import load_spec
    from ndfleet.stackconfig.problems import SpecError
    from ndfleet.stackconfig.stackfile import StackFileError
    from ndfleet.stackconfig.vms import stack_vms

    try:
        stack = load_stack_from_args(args)
        spec = load_spec(stack.ndfleet_config, stack.name)
    except (StackFileError, SpecError) as error:
        return fail(args, str(error))
    price_of = table_price
    if args.refresh:
        environ = os.environ if env is None else env
        endpoint = environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT
        meters, errors = fetch_meters([g.vm_size for g in stack_vms(spec)], spec.location, endpoint)
        if errors:
            from ndfleet.azure.text import terminal_safe

            return fail(args, "\n".join(terminal_safe(line, 500) for line in errors))
        today = datetime.date.today().isoformat()
        fetched = {
            size: ListPrice(size, spec.location, m.usd_per_hour, today, f"{RETAIL_API_SOURCE}, meter '{m.meter_name}'")
            for size, m in meters.items()
        }

        def price_of(vm_size: str, region: str) -> ListPrice | None:
            return fetched.get(vm_size)

    estimate = estimate_cost(spec, price_of)
    if args.format == "json":
        doc = {"stack": spec.stack, "refreshed": bool(args.refresh), **estimate.as_json()}
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n")
    else:
        title = "Cost (VMs only, today's" if args.refresh else "Cost (VMs only"
        sys.stdout.write(f"ndfleet cost: stack {spec.stack}\n\n" + "\n".join(render_cost(estimate, title)) + "\n")
    return EXIT_OK if not estimate.missing else EXIT_CANNOT_RUN  # a VM without a price: the total is unknown
