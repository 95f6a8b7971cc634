"""Impact reporting access: lets the node identity file Guest Health Reporting impacts, only when the stack opts in.

A node that finds a hardware fault files `Microsoft.Impact/workloadImpacts` with its managed identity
(`ndfleet-node impact report`). Azure's Guest Health Reporting overview names the built-in role for that: Impact
Reporter (actions `Microsoft.Impact/WorkloadImpacts/*`, nothing else). Workload impacts are subscription-level
resources (`/subscriptions/{id}/providers/Microsoft.Impact/workloadImpacts/{name}`), so the subscription is the
narrowest scope that covers the request; a resource-group scope would not. The role can create, read and delete
impact reports only, and Azure acts on a report only for a subscription onboarded to Guest Health Reporting.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.authorization as authorization

from ndfleet.components.identity import role_definition_id
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.profiles import IMPACT_REPORTER_ROLE_ID


@dataclass(frozen=True)
class ImpactReportingArgs:
    spec: ClusterSpec
    principal_id: pulumi.Input[str]  # the node identity's
    subscription_id: pulumi.Input[str]


class ImpactReporting(pulumi.ComponentResource):
    def __init__(self, name: str, args: ImpactReportingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:ImpactReporting", name, None, opts)
        self.enabled = args.spec.health.impact_reporting
        # A node that fails validation at first boot reports at once: the scale sets wait for the assignment.
        self.boot_dependencies: list[pulumi.Resource] = []
        if self.enabled:
            subscription = pulumi.Output.from_input(args.subscription_id)
            grant = authorization.RoleAssignment(
                f"{name}-reporter",
                scope=subscription.apply(lambda sub: f"/subscriptions/{sub}"),
                principal_id=args.principal_id,
                principal_type="ServicePrincipal",
                role_definition_id=role_definition_id(subscription, IMPACT_REPORTER_ROLE_ID),
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.boot_dependencies.append(grant)
        self.register_outputs({"enabled": self.enabled})
