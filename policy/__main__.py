"""ndfleet's CrossGuard policy pack: every rule of ndfleet/plans/policy_rules.py as a ResourceValidationPolicy.

Run it with `pulumi preview --policy-pack policy` from the repository root. The rules are plain functions over
(resource type, camelCase inputs): the same ones `ndfleet policy PLAN.json` and `ndfleet plan --policies` run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

# The pack runs from its own folder and virtualenv; the rules live in the repository's `ndfleet` package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import (  # noqa: E402
    EnforcementLevel,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from ndfleet.plans.policy_rules import MANDATORY, RULES, Rule  # noqa: E402

PACK_NAME = "ndfleet"


def make_validator(rule: Rule) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        if args.resource_type not in rule.resource_types:
            return
        for message in rule.check(args.resource_type, args.props):
            report_violation(f"{args.name}: {message}. Fix: {rule.fix}. Source: {rule.source}", None)

    return validate


def make_policy(rule: Rule) -> ResourceValidationPolicy:
    level = EnforcementLevel.MANDATORY if rule.enforcement == MANDATORY else EnforcementLevel.ADVISORY
    return ResourceValidationPolicy(
        name=rule.id,
        description=rule.description,
        validate=make_validator(rule),
        enforcement_level=level,
        remediation_steps=rule.fix,
    )


POLICIES = [make_policy(rule) for rule in RULES]

if __name__ == "__main__":
    PolicyPack(name=PACK_NAME, policies=POLICIES, enforcement_level=EnforcementLevel.ADVISORY)
