"""`ndfleet policy PLAN.json`: the policy pack's rules over an offline plan, without Pulumi or Azure.

Prints every violation (resource, rule, problem, how to fix it, source). Exit 1 when a mandatory rule is
violated, 0 otherwise (advisory violations are printed as warnings); exit 2 when the plan cannot be read; 64 when
no plan is given (docs/cli.md).
`ndfleet policy --list` prints the rules.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ndfleet.cliconvention import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, fail


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "policy",
        help="check an offline plan (ndfleet plan --format json) against the policy pack's rules",
        description="Evaluate the rules of the CrossGuard policy pack (policy/) over an offline plan. Exit 1 when "
        "a mandatory rule is violated.",
    )
    p.add_argument("plan", nargs="?", help="plan JSON from `ndfleet plan --format json`")
    p.add_argument("--list", action="store_true", help="list the rules and exit")
    p.set_defaults(handler=_run)


def list_rules() -> str:
    from ndfleet.plans import policy_rules

    lines = []
    for r in policy_rules.RULES:
        lines.append(f"{r.id} ({r.enforcement}): {r.description}")
        lines.append(f"    source: {r.source}")
    return "\n".join(lines) + "\n"


def _run(args: argparse.Namespace) -> int:
    # Imported here, for the chosen command only: `ndfleet --help` stays fast.
    from ndfleet.plans import policy_rules
    from ndfleet.plans.planfiles import InputError, load_plan

    if args.list:
        sys.stdout.write(list_rules())
        return EXIT_OK
    if args.plan is None:
        return fail(args, "give a plan file (ndfleet plan --stack NAME --format json > plan.json)", EXIT_USAGE)
    try:
        plan = load_plan(Path(args.plan))
    except InputError as e:
        return fail(args, str(e))
    violations = policy_rules.evaluate_plan(plan)
    sys.stdout.write(policy_rules.format_violations(violations))
    return EXIT_FINDINGS if policy_rules.has_mandatory(violations) else EXIT_OK
