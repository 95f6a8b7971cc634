"""The roll (ndfleet_node/roll, docs/upgrades.md): what the Slurm controller may do to the islands' scale sets to bring
their VMs to the latest model, and nothing else.

One custom role, assigned to the controller's own user-assigned identity at each compute scale set (every island's,
fixed or elastic), never at the resource group, never to the nodes' identity. Its actions (Microsoft Learn, "Azure
permissions for Compute"):
- `Microsoft.Compute/virtualMachineScaleSets/read`: the model's tags (the boot version, the Slurm release);
- `Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read`: the instances and their `latestModelApplied`;
- `Microsoft.Compute/virtualMachineScaleSets/manualUpgrade/action`: "Manually updates instances to latest model of
  the virtual machine scale set" (REST "Virtual Machine Scale Sets - Update Instances");
- `Microsoft.Compute/virtualMachineScaleSets/reimage/action`: "Reimages the instances of the virtual machine scale
  set" (REST "Virtual Machine Scale Sets - Reimage").
No write: the roll never changes a model (the operator's `pulumi up` does). Custom role names are unique in the
Entra tenant, so the name carries the subscription and resource group (as elastic_scaling.py's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_azure_native.authorization as authorization

ROLL_ACTIONS = (
    "Microsoft.Compute/virtualMachineScaleSets/read",
    "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    "Microsoft.Compute/virtualMachineScaleSets/manualUpgrade/action",
    "Microsoft.Compute/virtualMachineScaleSets/reimage/action",
)


@dataclass(frozen=True)
class RollAccessArgs:
    resource_group_id: pulumi.Input[str]
    controller_principal_id: pulumi.Input[str]
    scale_set_ids: Mapping[str, pulumi.Input[str]]  # island name -> its scale set's resource id
    role_name: pulumi.Input[str]


class RollAccess(pulumi.ComponentResource):
    def __init__(self, name: str, args: RollAccessArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:slurm:RollAccess", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = authorization.RoleDefinition(
            f"{name}-role",
            scope=args.resource_group_id,
            role_name=args.role_name,
            description="ndfleet: the Slurm controller brings its islands' VMs to their scale set's latest model",
            permissions=[authorization.PermissionArgs(actions=list(ROLL_ACTIONS))],
            assignable_scopes=[args.resource_group_id],
            opts=child,
        )
        self.assignments = [
            authorization.RoleAssignment(
                f"{name}-{island}",
                scope=scale_set_id,
                principal_id=args.controller_principal_id,
                principal_type="ServicePrincipal",
                role_definition_id=role.id,
                opts=child,
            )
            for island, scale_set_id in args.scale_set_ids.items()
        ]
        self.register_outputs({"roleDefinitionId": role.id})
