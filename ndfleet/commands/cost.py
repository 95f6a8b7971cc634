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
    p.add_argument(
        "--write",
        metavar="FILE",
        help="with --refresh: record today's prices in FILE, in ndfleet's price table format "
        "(the file's other rows kept; ndfleet's recorded table's when it does not exist)",
    )
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")
    p.set_defaults(handler=cost_command)


def cost_command(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    from ndfleet.cliconvention import EXIT_CANNOT_RUN, EXIT_OK, UsageError, error_line, fail, prog_of
    from ndfleet.commands.stackargs import load_stack_from_args
    from ndfleet.cost.estimate import estimate_cost, render_cost
    from ndfleet.cost.prices import RETAIL_API_SOURCE, TABLE_NAME, ListPrice, source_url, table_price
    from ndfleet.cost.retail import DEFAULT_ENDPOINT, ENDPOINT_ENV, RetailPriceError, fetch_meters
    from ndfleet.stackconfig.config import load_spec
    from ndfleet.stackconfig.problems import SpecError
    from ndfleet.stackconfig.stackfile import StackFileError
    from ndfleet.stackconfig.vms import stack_vms

    if args.write is not None and not args.refresh:
        raise UsageError("--write records refreshed prices: give it with --refresh")
    try:
        stack = load_stack_from_args(args)
        spec = load_spec(stack.ndfleet_config, stack.name)
    except (StackFileError, SpecError) as error:
        return fail(args, str(error))
    price_of = table_price
    prices_from: str | None = None
    refresh_error = ""
    if args.refresh:
        environ = os.environ if env is None else env
        endpoint = environ.get(ENDPOINT_ENV) or DEFAULT_ENDPOINT
        try:
            meters, errors = fetch_meters([g.vm_size for g in stack_vms(spec)], spec.location, endpoint)
        except RetailPriceError as error:  # Azure not reached at all: the last known table, said so, exit 2
            meters, errors = {}, []
            refresh_error = f"{error}; the prices below are the last known ones, {TABLE_NAME}"
        if errors:
            from ndfleet.azure.text import terminal_safe

            return fail(args, "\n".join(terminal_safe(line, 500) for line in errors))
        if not refresh_error:
            today = datetime.date.today().isoformat()
            fetched = {
                size: ListPrice(
                    size, spec.location, m.usd_per_hour, today,
                    f"{RETAIL_API_SOURCE}, meter '{m.meter_name}' effective {m.effective_start or 'unknown'}",
                    source_url(size, spec.location),
                )
                for size, m in meters.items()
            }  # fmt: skip
            prices_from = f"{RETAIL_API_SOURCE}, read {today}"

            def price_of(vm_size: str, region: str) -> ListPrice | None:
                return fetched.get(vm_size)

            if args.write is not None:
                problem = write_table(args.write, list(fetched.values()))
                if problem:
                    return fail(args, problem)

    estimate = estimate_cost(spec, price_of, prices_from)
    if args.format == "json":
        doc = {"stack": spec.stack, "refreshed": bool(args.refresh) and not refresh_error, **estimate.as_json()}
        if refresh_error:
            doc["refreshError"] = refresh_error
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n")
    else:
        if refresh_error:
            from ndfleet.azure.text import terminal_safe

            print(error_line(prog_of(args), terminal_safe(refresh_error, 500)), file=sys.stderr, flush=True)
        title = "Cost (VMs only, today's" if args.refresh and not refresh_error else "Cost (VMs only"
        sys.stdout.write(f"ndfleet cost: stack {spec.stack}\n\n" + "\n".join(render_cost(estimate, title)) + "\n")
    # A VM without a price: the total is unknown. A refresh that did not reach Azure: not today's answer.
    return EXIT_OK if not estimate.missing and not refresh_error else EXIT_CANNOT_RUN


def write_table(path: str, fresh: list[Any]) -> str:
    """Record refreshed prices in the price table format at `path`: its rows (ndfleet's recorded table when it does
    not exist yet) with the fresh figures in place. The problem in one line, or "" when written."""
    from pathlib import Path

    from ndfleet.cost.prices import (
        NO_METER,
        PRICE_TABLE,
        PriceTableError,
        load_no_meter,
        load_table,
        merged,
        table_json,
    )

    target = Path(path)
    try:
        old = load_table(target) if target.exists() else PRICE_TABLE
        absent = load_no_meter(target) if target.exists() else NO_METER
    except PriceTableError as error:
        return f"--write: {error}"
    try:
        target.write_text(table_json(merged(old, fresh), absent))
    except OSError as error:
        return f"--write: cannot write {path}: {error.strerror}"
    return ""
