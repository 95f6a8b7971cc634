"""Does the caller hold the rights `pulumi preview` / `pulumi up` need on the deployment scope?

Resource Manager answers `GET {scope}/providers/Microsoft.Authorization/permissions` with the caller's effective
permissions there: one entry per role assignment that applies (inherited ones included), each an `actions` list
minus a `notActions` list, with `*` wildcards (Microsoft Learn: "Permissions - List For Resource Group", and
"Azure role definitions" > Actions / NotActions; docs/sources.md, "Deployment permissions"). An action is allowed
when some entry's actions match it and that entry's notActions do not. Deny assignments are not in that answer;
they are rare and would show as a 403 during `pulumi up`.

What a deployment needs, and which built-in role gives it:

- preview: read access to what the program reads back (Reader);
- up: write on the network, compute, storage, managed-identity (and Managed Lustre) resources it creates
  (Contributor), plus `Microsoft.Authorization/roleAssignments/write` for the nodes' Storage Blob Data Contributor
  assignment and `Microsoft.Authorization/locks/write` for the CanNotDelete locks on the data stores. Contributor's
  notActions exclude `Microsoft.Authorization/*/Write`, so Contributor alone fails half-way through `pulumi up`,
  after the network and storage exist. Of the built-in roles only Owner and User Access Administrator may write
  locks (Microsoft Learn, Management Locks REST API); Role Based Access Control Administrator may write role
  assignments but not locks.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ndfleet.preflight.facts import RolePermission, Unavailable
from ndfleet.preflight.outcome import Check, unavailable_check
from ndfleet.stackconfig.clusterspec import ClusterSpec

PERMISSIONS_API = "2022-04-01"

Mode = Literal["preview", "up"]

READER = "Reader"
CONTRIBUTOR = "Contributor"
ROLE_WRITER = "User Access Administrator or Role Based Access Control Administrator"
LOCK_WRITER = "User Access Administrator"


@dataclass(frozen=True)
class NeededAction:
    action: str
    why: str
    role: str  # the narrowest built-in role that grants it (Owner grants every one)
    for_up_only: bool = True


def needed_actions(spec: ClusterSpec) -> list[NeededAction]:
    """The actions the stack's `pulumi preview` (reads) and `pulumi up` (writes) need at the deployment scope."""
    reads = [
        NeededAction("Microsoft.Resources/subscriptions/resourceGroups/read", "read the resource group", READER, False),
        NeededAction("Microsoft.Network/virtualNetworks/read", "read the network", READER, False),
        NeededAction("Microsoft.Compute/virtualMachineScaleSets/read", "read the islands", READER, False),
        NeededAction("Microsoft.Storage/storageAccounts/read", "read the storage account", READER, False),
        NeededAction("Microsoft.Authorization/roleAssignments/read", "read the role assignment", READER, False),
        NeededAction("Microsoft.Authorization/locks/read", "read the locks", READER, False),
    ]
    writes = [
        NeededAction("Microsoft.Network/virtualNetworks/write", "create the VNet and subnets", CONTRIBUTOR),
        NeededAction("Microsoft.Network/networkSecurityGroups/write", "create the NSG", CONTRIBUTOR),
        NeededAction("Microsoft.Network/natGateways/write", "create the NAT gateway", CONTRIBUTOR),
        NeededAction("Microsoft.Network/publicIPAddresses/write", "create the NAT gateway's public IP", CONTRIBUTOR),
        NeededAction("Microsoft.Network/privateEndpoints/write", "create the storage private endpoint", CONTRIBUTOR),
        NeededAction("Microsoft.Network/privateDnsZones/write", "create the private DNS zone", CONTRIBUTOR),
        NeededAction("Microsoft.Compute/virtualMachineScaleSets/write", "create the islands", CONTRIBUTOR),
        NeededAction("Microsoft.Storage/storageAccounts/write", "create the storage account", CONTRIBUTOR),
        NeededAction(
            "Microsoft.Storage/storageAccounts/blobServices/containers/write", "create the containers", CONTRIBUTOR
        ),
        NeededAction("Microsoft.ManagedIdentity/userAssignedIdentities/write", "create the node identity", CONTRIBUTOR),
        NeededAction(
            "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action",
            "attach the identity to the scale sets",
            CONTRIBUTOR,
        ),
        NeededAction(
            "Microsoft.Authorization/roleAssignments/write",
            "give the node identity Storage Blob Data Contributor on the account",
            ROLE_WRITER,
        ),
        NeededAction("Microsoft.Authorization/locks/write", "put CanNotDelete locks on the data stores", LOCK_WRITER),
    ]
    if spec.resource_group_name is None:
        create_group = "Microsoft.Resources/subscriptions/resourceGroups/write"
        writes.insert(0, NeededAction(create_group, "create the resource group", CONTRIBUTOR))
    if spec.proximity_placement_group:
        writes.append(
            NeededAction("Microsoft.Compute/proximityPlacementGroups/write", "create the placement groups", CONTRIBUTOR)
        )
    if spec.bastion:
        writes.append(NeededAction("Microsoft.Network/bastionHosts/write", "create Azure Bastion", CONTRIBUTOR))
    if spec.storage.lustre is not None:
        writes.append(
            NeededAction("Microsoft.StorageCache/amlFilesystems/write", "create Managed Lustre", CONTRIBUTOR)
        )
    return reads + writes


def deployment_scope(spec: ClusterSpec, subscription_id: str) -> str:
    """The existing resource group when the stack names one (`ndfleet:resourceGroupName`), else the subscription:
    the program then creates the resource group, which needs rights at subscription scope."""
    if spec.resource_group_name:
        return f"/subscriptions/{subscription_id}/resourceGroups/{spec.resource_group_name}"
    return f"/subscriptions/{subscription_id}"


@functools.lru_cache(maxsize=512)
def _pattern(wildcard: str) -> re.Pattern[str]:
    return re.compile("^" + ".*".join(re.escape(part) for part in wildcard.split("*")) + "$", re.IGNORECASE)


def action_matches(wildcard: str, action: str) -> bool:
    """`Microsoft.Authorization/*/Write` matches `Microsoft.Authorization/locks/write`; `*` matches everything."""
    return bool(_pattern(wildcard.strip()).match(action))


def is_allowed(permissions: Sequence[RolePermission], action: str) -> bool:
    return any(
        any(action_matches(a, action) for a in p.actions) and not any(action_matches(n, action) for n in p.not_actions)
        for p in permissions
    )


@dataclass(frozen=True)
class PermissionVerdict:
    missing: list[NeededAction]
    missing_for_preview: list[NeededAction]

    @property
    def missing_roles(self) -> list[str]:
        """The built-in roles to add, narrowest first: Reader, Contributor, and for role assignments and locks
        User Access Administrator (Role Based Access Control Administrator when only role assignments lack)."""
        needs = {n.role for n in self.missing}
        roles = []
        if CONTRIBUTOR in needs or (READER in needs and len(needs) > 1):
            roles.append(CONTRIBUTOR)  # Contributor reads too
        elif READER in needs:
            roles.append(READER)
        if LOCK_WRITER in needs:
            roles.append(LOCK_WRITER)
        elif ROLE_WRITER in needs:
            roles.append(ROLE_WRITER)
        return roles


def evaluate(spec: ClusterSpec, permissions: Sequence[RolePermission]) -> PermissionVerdict:
    missing = [n for n in needed_actions(spec) if not is_allowed(permissions, n.action)]
    return PermissionVerdict(missing, [n for n in missing if not n.for_up_only])


def roles_advice(roles: Sequence[str], scope: str) -> str:
    """What to assign, in words and as `az role assignment create` commands."""
    commands = "; ".join(
        f'az role assignment create --assignee <your object id> --role "{role.split(" or ")[0]}" --scope {scope}'
        for role in roles
    )
    owner = "" if roles == [READER] else " (or Owner, which covers everything)"
    note = (
        "; Role Based Access Control Administrator would allow the role assignment but not the locks"
        if LOCK_WRITER in roles
        else ""
    )
    return (
        f"assign {' + '.join(roles)} on {scope}{owner}: {commands}{note}. "
        "New role assignments can take a few minutes to take effect."
    )


def check_permissions(
    spec: ClusterSpec,
    permissions: list[RolePermission] | Unavailable | None,
    scope: str,
    mode: Mode,
) -> Check:
    """Fails when the caller lacks what `pulumi {mode}` needs; in preview mode, what only `up` needs warns."""
    check_id = "permissions"
    title = f"permissions for pulumi {mode} on {scope}"
    if permissions is None:
        return Check(check_id, title, "skip", "permissions were not read")
    if isinstance(permissions, Unavailable):
        return unavailable_check(check_id, title, permissions)
    verdict = evaluate(spec, permissions)
    figures: dict[str, object] = {
        "scope": scope,
        "mode": mode,
        "missingActions": [n.action for n in verdict.missing],
        "missingRoles": verdict.missing_roles,
    }
    if not verdict.missing:
        detail = "the caller may read and write everything the stack creates, role assignments and locks included"
        return Check(check_id, title, "pass", detail, figures=figures)
    if verdict.missing_for_preview:
        shown = verdict.missing_for_preview if mode == "preview" else verdict.missing
        roles = [READER] if mode == "preview" else verdict.missing_roles
        detail = f"missing {', '.join(roles)}: {_listed(shown)}"
        return Check(check_id, title, "fail", detail, roles_advice(roles, scope), figures)
    listed = _listed(verdict.missing)
    missing_roles = ", ".join(verdict.missing_roles)
    fix = roles_advice(verdict.missing_roles, scope)
    half_way = (
        " Without them `pulumi up` creates the network, storage and islands and then stops half-way at the role "
        "assignment or the lock (see docs/deploying.md, First deployment, for recovering from that)."
        if not any(n.role == CONTRIBUTOR for n in verdict.missing)
        else ""
    )
    detail = f"missing {missing_roles} for pulumi up: {listed}.{half_way}"
    if mode == "preview":
        return Check(check_id, title, "warn", "enough for preview; " + detail, fix, figures)
    return Check(check_id, title, "fail", detail, fix, figures)


def _listed(missing: Sequence[NeededAction], limit: int = 8) -> str:
    text = "; ".join(f"{n.action} ({n.why})" for n in missing[:limit])
    return text + (f"; and {len(missing) - limit} more" if len(missing) > limit else "")
