"""`ndfleet plan`: show what `pulumi up` would create, offline (ndfleet.plans.build runs the program under mocks).

The table form is here; the JSON form is the plan document (docs/plan-json.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ndfleet.cliconvention import EXIT_OK, fail
from ndfleet.commands.stackargs import add_stack_arguments, load_stack_from_args

if TYPE_CHECKING:
    from ndfleet.plans.build import Plan, PlannedResource


# ----------------------------------------------------------------------------------------------------------
# Table output


def _key_facts(r: PlannedResource) -> str:
    i = r.inputs
    if r.type == "azure-native:compute:VirtualMachineScaleSet":
        sku = i.get("sku", {})
        return (
            f"{sku.get('capacity')} x {sku.get('name')}, singlePlacementGroup={i.get('singlePlacementGroup')}, "
            f"FD={i.get('platformFaultDomainCount')}, zones={i.get('zones') or '-'}"
        )
    if r.type == "azure-native:network:VirtualNetwork":
        return ", ".join(i.get("addressSpace", {}).get("addressPrefixes", []))
    if r.type == "azure-native:network:Subnet":
        return str(i.get("addressPrefix"))
    if r.type == "azure-native:storage:StorageAccount":
        return f"{i.get('accountName')} ({i.get('sku', {}).get('name')}, public access {i.get('publicNetworkAccess')})"
    if r.type == "azure-native:storagecache:AmlFilesystem":
        return f"{i.get('sku', {}).get('name')}, {i.get('storageCapacityTiB')} TiB"
    if r.type == "azure-native:authorization:ManagementLockByScope":
        return str(i.get("level"))
    return ""


def render_table(plan: Plan) -> str:
    from ndfleet.cost.estimate import plan_cost_lines
    from ndfleet.monitoring.budget import plan_lines as monitoring_plan_lines
    from ndfleet.stackconfig.vms import quota_lines

    spec = plan.spec
    lines = [
        f"ndfleet plan: stack {plan.stack} ({spec.profile.name}, {spec.location}"
        f"{', zone ' + spec.zone if spec.zone else ''})",
        "",
    ]
    children: dict[str | None, list[PlannedResource]] = {}
    for r in plan.resources:
        children.setdefault(r.parent, []).append(r)
    rows: list[tuple[str, str, str]] = []

    def walk(parent: str | None, depth: int) -> None:
        for r in sorted(children.get(parent, []), key=lambda r: (r.type, r.name)):
            facts = ("[protected] " if r.protect else "") + _key_facts(r)
            rows.append(("  " * depth + r.name, r.type, facts))
            walk(r.name, depth + 1)

    walk(None, 0)
    widths = [max(len(row[c]) for row in [*rows, ("NAME", "TYPE", "")]) for c in range(2)]
    lines.append(f"  + {'NAME'.ljust(widths[0])}  {'TYPE'.ljust(widths[1])}  DETAILS")
    for name, typ, facts in rows:
        lines.append(f"  + {name.ljust(widths[0])}  {typ.ljust(widths[1])}  {facts}".rstrip())
    custom = sum(1 for r in plan.resources if not r.type.startswith("ndfleet:"))
    lines += ["", f"{custom} Azure resources to create ({len(plan.resources) - custom} components)."]
    lines += ["", "Summary:"]
    lines.append(f"  islands: {len(spec.islands)}   nodes: {spec.total_nodes}   GPUs: {spec.total_gpus}")
    for island in spec.islands:
        spares = (f" ({island.in_service} in service, {island.spares} warm spare{'s' if island.spares > 1 else ''})"
                  if island.spares else "")
        lines.append(f"    {island.name}: {island.nodes} nodes, {island.nodes * spec.profile.gpus_per_vm} GPUs{spares}")
    if spec.island_split is not None:
        lines.append(f"  {spec.island_split}")
    if spec.smoke is not None:
        from ndfleet.nodefiles.bootstrap import validation_budget_s
        from ndfleet.stackconfig.smoke import smoke_lines

        lines += smoke_lines(spec, validation_budget_s(spec))
    if spec.network is not None:
        capacity = spec.network.compute_node_capacity
        lines.append(
            f"  compute subnet {spec.network.compute.cidr} (the VNet's upper half, for any node count): room for "
            f"{capacity:,} nodes; growing to that moves no subnet and no fixed address"
        )
    lines += quota_lines(spec)
    lines += monitoring_plan_lines(spec)
    for warning in spec.warnings:
        lines.append(f"  warning: {warning}")
    lines += plan_cost_lines(spec)
    return "\n".join(lines) + "\n"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "plan",
        help="show what `pulumi up` would create, offline (Pulumi mock runtime, no credentials)",
        description="Run the real Pulumi program under Pulumi's mock runtime and print the resources it creates.",
    )
    add_stack_arguments(p)
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format (default: table)")
    p.add_argument(
        "--policies", action="store_true", help="also evaluate the policy pack over the plan; exit 1 on a violation"
    )
    p.add_argument(
        "--program", metavar="DIR",
        help="run the Pulumi Python program in DIR (its __main__.py and Pulumi.yaml: an example, your own) instead "
        "of ndfleet's; --stack NAME then reads DIR/Pulumi.NAME.yaml",
    )  # fmt: skip
    p.set_defaults(handler=plan_command)


def plan_command(args: argparse.Namespace) -> int:
    if args.program is not None:
        from ndfleet.plans.any_program import plan_program_command

        return plan_program_command(args)
    # Pulumi and the program load here, for the chosen command only: `ndfleet --help` stays fast.
    import pulumi

    from ndfleet.plans.build import run_plan
    from ndfleet.stackconfig.problems import SpecError
    from ndfleet.stackconfig.stackfile import StackFileError

    try:
        stack = load_stack_from_args(args)
        plan = run_plan(stack)
    except (StackFileError, SpecError, pulumi.RunError) as error:
        return fail(args, str(error))
    if stack.warnings:  # the stack file's own (a secret in clear text), beside the settings'
        plan.spec = plan.spec.model_copy(update={"warnings": (*plan.spec.warnings, *stack.warnings)})
    if args.format == "json":
        sys.stdout.write(plan.to_json())
        for warning in plan.spec.warnings:  # the table carries them; beside JSON they go to stderr
            print(f"warning: {warning}", file=sys.stderr)
    else:
        sys.stdout.write(render_table(plan))
    if args.policies:
        from ndfleet.plans.policy_rules import report_policies

        return report_policies(plan.as_json(), sys.stderr if args.format == "json" else sys.stdout)
    return EXIT_OK
