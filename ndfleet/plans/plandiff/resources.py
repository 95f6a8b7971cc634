"""What a plan diff is made of: the resource types it knows, and the result (changes, consequences, capacity)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ndfleet_node.names import TAG_ISLAND

from ndfleet.plans.resource_types import (
    AML_FILESYSTEM_TYPE,
    BLOB_CONTAINER_TYPE,
    DISK_TYPE,
    FILE_SHARE_TYPE,
    KEY_VAULT_TYPE,
    LOCK_AT_RESOURCE_GROUP_TYPE,
    LOCK_AT_RESOURCE_TYPE,
    LOCK_BY_SCOPE_TYPE,
    MONITOR_WORKSPACE_TYPE,
    MYSQL_DATABASE_TYPE,
    MYSQL_SERVER_TYPE,
    PRIVATE_ENDPOINT_TYPE,
    ROLE_ASSIGNMENT_TYPE,
    STORAGE_ACCOUNT_TYPE,
)

# Values longer than this (as compact JSON) are shown as a size and a hash, not verbatim.
LONG_VALUE_CHARS = 200
HASH_PREFIX_CHARS = 12
# A GitHub comment holds at most 65,536 characters; past this the details are left out of the markdown.
MARKDOWN_MAX_CHARS = 60_000
# The hidden first line of the pull-request comment; the workflow finds (and updates) its comment by it.
MARKDOWN_MARKER = "<!-- ndfleet-plan-diff -->"

# Resources whose deletion or replacement loses data.
# The Azure Monitor workspace holds the fleet's metrics history (18 months): deleting it loses that history.
DATA_HOLDING_TYPES = (
    STORAGE_ACCOUNT_TYPE,
    BLOB_CONTAINER_TYPE,
    AML_FILESYSTEM_TYPE,
    MYSQL_SERVER_TYPE,
    MYSQL_DATABASE_TYPE,
    KEY_VAULT_TYPE,
    FILE_SHARE_TYPE,
    DISK_TYPE,
    MONITOR_WORKSPACE_TYPE,
)
# Management locks (CanNotDelete on what holds data): removing one is worth a warning.
LOCK_TYPES = (
    LOCK_BY_SCOPE_TYPE,
    LOCK_AT_RESOURCE_GROUP_TYPE,
    LOCK_AT_RESOURCE_TYPE,
)
# Resources that cannot be deleted (so not replaced either) while a CanNotDelete or ReadOnly lock covers them: the
# lock is inherited by everything below its scope, containers and role assignments at the account included, and
# deleting a private endpoint deletes its connection on the locked account (docs/sources.md, "Locks").
LOCK_BLOCKED_TYPES = (
    PRIVATE_ENDPOINT_TYPE,
    ROLE_ASSIGNMENT_TYPE,
    BLOB_CONTAINER_TYPE,
    STORAGE_ACCOUNT_TYPE,
    AML_FILESYSTEM_TYPE,
)
ISLAND_TAG = TAG_ISLAND
CUSTOM_DATA_PATH = "virtualMachineProfile.osProfile.customData"
IMAGE_REFERENCE_PATH = "virtualMachineProfile.storageProfile.imageReference"

SEVERITIES = ("danger", "warning", "info")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


class _Missing:
    """The value of a property that one side does not have."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "(absent)"


MISSING: Any = _Missing()


# ----------------------------------------------------------------------------------------------------------
# The result


@dataclass(frozen=True)
class PropertyChange:
    path: str
    old: Any  # MISSING when the base has no such property
    new: Any  # MISSING when the head has no such property


@dataclass(frozen=True)
class ResourceChange:
    type: str
    name: str
    op: str  # "create" | "delete" | "update" | "retain" (no longer declared, kept in Azure: retain_on_delete)
    properties: tuple[PropertyChange, ...] = ()
    old_protect: bool = False
    new_protect: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.type, self.name)


@dataclass(frozen=True)
class Consequence:
    rule: str  # a ConsequenceRule id, or one of the built-in ids (island-*, data-*, protect-removed)
    severity: str  # "danger" | "warning" | "info"
    resource_type: str
    resource_name: str
    message: str
    path: str | None = None


@dataclass(frozen=True)
class IslandCapacity:
    island: str
    resource: str
    old_nodes: int
    new_nodes: int
    old_gpus: int
    new_gpus: int

    @property
    def changed(self) -> bool:
        return self.old_nodes != self.new_nodes or self.old_gpus != self.new_gpus


@dataclass(frozen=True)
class PlanCost:
    """A plan's `cost` (ndfleet/cost/estimate.py wrote it): the priced VMs per hour and per month, and whether all
    had a price. None: no VM had one (a plan before issue 44 said 0.0 with `complete` false: read as None too)."""

    usd_per_hour: float | None
    complete: bool
    # The plan's own `usdPerMonth`, a month of the unrounded hour (ndfleet/cost/month.per_month): never recomputed
    # from the rounded hourly figure, which is how diff once said US$144,109.30 where plan said 144,107.84.
    usd_per_month: float | None = None


@dataclass(frozen=True)
class CostChange:
    old: PlanCost | None  # None: that plan carries no cost (a program plan without an ndfleet cluster, an old plan)
    new: PlanCost | None

    @property
    def known(self) -> bool:
        return self.old is not None and self.new is not None

    @property
    def changed(self) -> bool:
        return self.old != self.new


@dataclass(frozen=True)
class StackDiff:
    stack: str
    changes: tuple[ResourceChange, ...]
    consequences: tuple[Consequence, ...]
    capacity: tuple[IslandCapacity, ...]
    outputs: tuple[PropertyChange, ...] = ()
    in_base: bool = True
    in_head: bool = True
    # Updated resources that a replace rule fires on (compare.replaced_keys): counted and shown as replacements.
    replaced: frozenset[tuple[str, str]] = frozenset()
    cost: CostChange = CostChange(None, None)

    def op_of(self, change: ResourceChange) -> str:
        """create | update | replace | delete: an update that a replace rule fires on is a replacement."""
        return "replace" if change.op == "update" and change.key in self.replaced else change.op

    def count(self, op: str) -> int:
        return sum(1 for c in self.changes if self.op_of(c) == op)

    @property
    def empty(self) -> bool:
        return not self.changes and not self.outputs


