"""Node identity: one user-assigned managed identity per cluster.

What it may do is granted where the data lives: `Storage` gives it Storage Blob Data Contributor on its one
account (StorageArgs.blob_data_principal_id), so the grant is ordered with the account's other writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native.managedidentity as managedidentity


def role_definition_id(subscription_id: pulumi.Input[str], role_id: str) -> pulumi.Output[str]:
    """A built-in role's definition id in the subscription (role ids are the same in every Azure cloud)."""
    return pulumi.Output.from_input(subscription_id).apply(
        lambda sub: f"/subscriptions/{sub}/providers/Microsoft.Authorization/roleDefinitions/{role_id}"
    )


@dataclass(frozen=True)
class NodeIdentityArgs:
    resource_group_name: pulumi.Input[str]
    location: pulumi.Input[str]
    tags: Mapping[str, str] = field(default_factory=dict)


class NodeIdentity(pulumi.ComponentResource):
    id: pulumi.Output[str]
    client_id: pulumi.Output[str]
    principal_id: pulumi.Output[str]

    def __init__(self, name: str, args: NodeIdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:NodeIdentity", name, None, opts)
        identity = managedidentity.UserAssignedIdentity(
            f"{name}-id",
            resource_group_name=args.resource_group_name,
            location=args.location,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.id = identity.id
        self.client_id = identity.client_id
        self.principal_id = identity.principal_id
        self.register_outputs({"id": self.id, "clientId": self.client_id, "principalId": self.principal_id})
