"""Elastic islands: what the Slurm controller may do to the islands' scale sets, and nothing else.

One custom role with exactly the scale-set actions the elastic programs call (ndfleet_node/elastic/arm.py), assigned
to the controller's own user-assigned identity at each elastic island's scale set: never at the resource group, never
to the nodes' identity. Virtual Machine Contributor would also do, but grants far more (disks, NICs, every VM of the
scope, extensions): docs/elastic.md compares the two, with Microsoft Learn's built-in role list as the source.

Raising a scale set's capacity creates VMs that join its subnet and carry its user-assigned identity, and Resource
Manager checks those linked resources too: without `subnets/join/action` at the subnet and
`userAssignedIdentities/assign/action` at the identity the write fails with `LinkedAuthorizationFailed` (Microsoft
Learn, "Troubleshoot Azure RBAC": linked access checks; seen in practice by autoscalers: Azure/aks-engine#2367,
Azure/aad-pod-identity#550). The role carries both actions and is also assigned at the compute subnet and the
nodes' identity, and only there. Custom role names are unique in the whole Entra tenant (Microsoft Learn, "Azure
custom roles": "the role name must be unique in the tenant"), so the name carries the subscription and resource
group: the same stack in two subscriptions of one tenant does not collide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_azure_native.authorization as authorization

# Microsoft Learn, "Azure permissions for Compute" (resource provider operations): read the scale set (capacity),
# write it (PATCH sku.capacity), delete chosen instances (POST .../delete), list and read its instances.
SCALE_SET_ACTIONS = (
    "Microsoft.Compute/virtualMachineScaleSets/read",
    "Microsoft.Compute/virtualMachineScaleSets/write",
    "Microsoft.Compute/virtualMachineScaleSets/delete/action",
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
)
# The linked resources a scale-out touches ("Azure permissions for Networking" and "for Identity"): new VMs join the
# compute subnet and are given the nodes' user-assigned identity.
SUBNET_JOIN_ACTION = "Microsoft.Network/virtualNetworks/subnets/join/action"
IDENTITY_ASSIGN_ACTION = "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action"
ELASTIC_ACTIONS = (*SCALE_SET_ACTIONS, SUBNET_JOIN_ACTION, IDENTITY_ASSIGN_ACTION)


@dataclass(frozen=True)
class ElasticScalingArgs:
    resource_group_id: pulumi.Input[str]
    controller_principal_id: pulumi.Input[str]
    # island name -> its scale set's resource id
    scale_set_ids: Mapping[str, pulumi.Input[str]]
    # the linked resources of a scale-out: the compute subnet the VMs join, the identity they are given
    subnet_id: pulumi.Input[str]
    node_identity_id: pulumi.Input[str]
    # unique in the tenant: carries the subscription and resource group (see above)
    role_name: pulumi.Input[str]


class ElasticScaling(pulumi.ComponentResource):
    def __init__(self, name: str, args: ElasticScalingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:slurm:ElasticScaling", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = authorization.RoleDefinition(
            f"{name}-role",
            scope=args.resource_group_id,
            role_name=args.role_name,
            description="ndfleet: the Slurm controller scales its elastic islands' scale sets and deletes their VMs",
            permissions=[authorization.PermissionArgs(actions=list(ELASTIC_ACTIONS))],
            assignable_scopes=[args.resource_group_id],
            opts=child,
        )
        # At each elastic scale set ("<name>-<island>") and at the two linked resources ("<name>--subnet",
        # "<name>--identity": an island name starts with a letter, so these never collide with one).
        scopes = {island: scale_set_id for island, scale_set_id in args.scale_set_ids.items()}
        scopes |= {"-subnet": args.subnet_id, "-identity": args.node_identity_id}
        self.assignments = [
            authorization.RoleAssignment(
                f"{name}-{suffix}",
                scope=scope,
                principal_id=args.controller_principal_id,
                principal_type="ServicePrincipal",
                role_definition_id=role.id,
                opts=child,
            )
            for suffix, scope in scopes.items()
        ]
        self.register_outputs({"roleDefinitionId": role.id})
