"""Node identity: one user-assigned managed identity per cluster, allowed blob data access on its account only."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.authorization as authorization
import pulumi_azure_native.managedidentity as managedidentity

from ndfleet.spec.config import ClusterSpec
from ndfleet.spec.profiles import STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID


@dataclass(frozen=True)
class NodeIdentityArgs:
    spec: ClusterSpec
    resource_group_name: pulumi.Input[str]
    storage_account_id: pulumi.Input[str]
    subscription_id: pulumi.Input[str]


class NodeIdentity(pulumi.ComponentResource):
    id: pulumi.Output[str]
    client_id: pulumi.Output[str]
    principal_id: pulumi.Output[str]

    def __init__(self, name: str, args: NodeIdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:NodeIdentity", name, None, opts)
        identity = managedidentity.UserAssignedIdentity(
            f"{name}-id",
            resource_group_name=args.resource_group_name,
            location=args.spec.location,
            tags=args.spec.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Least privilege: data-plane access to this one storage account, nothing at group or subscription scope.
        authorization.RoleAssignment(
            f"{name}-blob-data",
            scope=args.storage_account_id,
            principal_id=identity.principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=pulumi.Output.from_input(args.subscription_id).apply(
                lambda sub: (
                    f"/subscriptions/{sub}/providers/Microsoft.Authorization/roleDefinitions/"
                    f"{STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID}"
                )
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.id = identity.id
        self.client_id = identity.client_id
        self.principal_id = identity.principal_id
        self.register_outputs({"id": self.id, "clientId": self.client_id, "principalId": self.principal_id})
