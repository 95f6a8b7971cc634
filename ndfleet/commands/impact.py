"""`ndfleet impact list|show`: the Guest Health Reporting impacts filed for a stack's nodes, and Azure's insights.

    ndfleet impact list --stack prod [--format table|json]
    ndfleet impact show NAME --stack prod [--format table|json]

`list` reads the subscription's workload impacts (GET .../providers/Microsoft.Impact/workloadImpacts, paged) and
keeps those whose impacted resource is a VM of one of the stack's scale sets (`<namePrefix>-<island>-vmss...`),
then each one's insights (GET .../workloadImpacts/{name}/insights): what Azure did with the report, e.g.
AcknowledgedUnhealthy, UpdatingNodeHealthState, NodeRemovedFromService (Microsoft Learn, "View impact reports
and insights"). `show` prints one impact with all its insights. Reading needs the Impact Reader role (or
Impact Reporter) on the subscription.

Requests go through ndfleet.azure's `ArmReader` (azure-core's pipeline: Resource Manager bearer token, retries
honouring Retry-After, paging), with the same stack loading, cloud, subscription and credential resolution as
`ndfleet preflight`. Exit 0 listed, 2 could not read.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ndfleet.commands.stackargs import add_stack_arguments

if TYPE_CHECKING:
    from ndfleet.azure.arm import RetrySettings

from ndfleet.cliconvention import EXIT_CANNOT_RUN as EXIT_CANNOT_READ
from ndfleet.cliconvention import EXIT_OK, fail


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("impact", help="impacts (Guest Health Reporting) filed for a stack's nodes")
    sub = p.add_subparsers(dest="impact_command", metavar="ACTION", required=True)
    for name, helptext in (("list", "every impact filed for the stack's nodes"), ("show", "one impact")):
        q = sub.add_parser(name, help=helptext)
        if name == "show":
            q.add_argument("name", help="the impact's name (a GUID, from `ndfleet impact list`)")
        add_stack_arguments(q)
        q.add_argument("--format", choices=("table", "json"), default="table")
        q.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    return run_cli(args)


def run_cli(
    args: argparse.Namespace, *, env: Mapping[str, str] | None = None, credential: Any = None, transport: Any = None,
    retry: RetrySettings | None = None,
) -> int:  # fmt: skip
    """The command; tests call it with a fake credential and a recorded transport."""
    from ndfleet.azure.arm import RetrySettings

    env = os.environ if env is None else env
    owned = None
    reader: Reader | None = None
    from ndfleet.azure.auth import SharedTokenCredential, build_credential, first_token
    from ndfleet.azure.clouds import resolve_cloud, resolve_subscription
    from ndfleet.azure.errors import CannotCheck
    from ndfleet.preflight.impact_reports import Reader, list_impacts, render_list, render_show, show_impact
    from ndfleet.stackload import StackRefused, load_stack_spec

    try:
        try:
            spec, provider = load_stack_spec(args.stack, args.stack_file, args.stack_name)
        except StackRefused as exc:
            raise CannotCheck(f"could not check: {exc}") from None
        cloud = resolve_cloud(env, provider)
        subscription_id = resolve_subscription(spec, env, provider)
        if credential is None:
            credential = owned = build_credential(cloud, env)
        shared = SharedTokenCredential(credential)
        # One line for no credentials or no network, and azure-identity's credential chain not printed at all
        # (it was printed twice: its own warning, then the error's text).
        first_token(shared, cloud)
        reader = Reader(cloud, shared, retry or RetrySettings(), transport)
        if args.impact_command == "show":
            impact = show_impact(reader, subscription_id, args.name)
            print(json.dumps(impact.as_json(), indent=2) if args.format == "json" else render_show(impact))
        else:
            impacts = list_impacts(reader, spec, subscription_id)
            if args.format == "json":
                print(json.dumps({"stack": spec.stack, "impacts": [i.as_json() for i in impacts]}, indent=2))
            else:
                print(render_list(impacts, spec.stack))
    except CannotCheck as exc:
        return fail(args, str(exc), EXIT_CANNOT_READ)
    finally:
        if reader is not None:
            reader.close()
        if owned is not None:
            owned.close()
    return EXIT_OK
