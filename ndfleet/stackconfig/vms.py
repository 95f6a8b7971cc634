"""Every VM a stack creates (the GPU nodes of each island, the Slurm controller and login nodes) and the vCPU quota
they need: one figure per quota family, the regional total, and the regional Spot total.

The cost estimate (ndfleet/cost/) prices these VMs; `ndfleet plan` prints the quota; `ndfleet preflight` checks it.
Azure counts a Spot VM against the regional Spot quota (`lowPriorityCores`) only, and every other VM against its
family's quota and the regional total (`cores`) (Microsoft Learn: "Check vCPU quotas", "Spot Virtual Machines").
The Slurm machines are never Spot, whatever `priority` the GPU nodes have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ndfleet.stackconfig.profiles import MACHINE_SIZES

if TYPE_CHECKING:
    from ndfleet.stackconfig.clusterspec import ClusterSpec

REGIONAL_QUOTA = "cores"
SPOT_QUOTA = "lowPriorityCores"


@dataclass(frozen=True)
class VmGroup:
    """VMs of one size and one job: an island's GPU nodes, the Slurm controller, the login nodes."""

    role: str
    vm_size: str
    count: int
    spot: bool = False
    gpu: bool = False  # an island's GPU nodes (the VM-size profile's size)
    spares: int = 0  # of `count`, the island's warm spares: running (and billed), held out of scheduling


@dataclass(frozen=True)
class SizeFacts:
    vcpus: int
    quota_family: str


@dataclass
class QuotaNeed:
    """vCPUs per dedicated quota family, the regional total, the Spot total, and the sizes whose vCPUs are unknown."""

    families: dict[str, int] = field(default_factory=dict)
    regional: int = 0
    spot: int = 0
    unknown_sizes: list[str] = field(default_factory=list)


def stack_vms(spec: ClusterSpec) -> list[VmGroup]:
    """The VMs `pulumi up` creates for this stack, GPU nodes first (components/ib_island.py, components/slurm.py)."""
    spot = spec.priority == "Spot"
    groups = [
        VmGroup(f"GPU nodes, island {island.name}", spec.profile.name, island.nodes, spot, gpu=True,
                spares=island.spares)
        for island in spec.islands
    ]
    if spec.slurm is not None:
        groups.append(VmGroup("Slurm controller", spec.slurm.controller_vm_size, 1))
        groups.append(VmGroup("Slurm login", spec.slurm.login_vm_size, spec.slurm.login_count))
    return groups


def table_size_facts(spec: ClusterSpec) -> Callable[[str], SizeFacts | None]:
    """vCPUs and quota family from ndfleet's own tables: the GPU profile and MACHINE_SIZES."""

    def lookup(vm_size: str) -> SizeFacts | None:
        if vm_size == spec.profile.name:
            return SizeFacts(spec.profile.vcpus, spec.profile.quota_family)
        known = MACHINE_SIZES.get(vm_size)
        return SizeFacts(known.vcpus, known.quota_family) if known else None

    return lookup


def quota_need(spec: ClusterSpec, size_facts: Callable[[str], SizeFacts | None] | None = None) -> QuotaNeed:
    """What the stack's VMs need of each quota; `size_facts` says a size's vCPUs and family (default: the tables)."""
    lookup = size_facts or table_size_facts(spec)
    need = QuotaNeed()
    for group in stack_vms(spec):
        facts = lookup(group.vm_size)
        if facts is None:
            if group.vm_size not in need.unknown_sizes:
                need.unknown_sizes.append(group.vm_size)
            continue
        vcpus = facts.vcpus * group.count
        if group.spot:
            need.spot += vcpus
            continue
        need.families[facts.quota_family] = need.families.get(facts.quota_family, 0) + vcpus
        need.regional += vcpus
    return need


def quota_lines(spec: ClusterSpec) -> list[str]:
    """The plan's quota lines: every family, the regional total, the Spot total, and what ndfleet cannot count."""
    need = quota_need(spec)
    lines = [f"  vCPU quota needed: {family} {vcpus:,}" for family, vcpus in need.families.items()]
    if need.families:
        lines.append(f"  vCPU quota needed: regional total ({REGIONAL_QUOTA}) {need.regional:,}")
    if need.spot:
        lines.append(f"  vCPU quota needed: regional Spot ({SPOT_QUOTA}) {need.spot:,}")
    for size in need.unknown_sizes:
        lines.append(
            f"  vCPU quota needed: {size} is not in ndfleet's size table, so its vCPUs are not counted above; "
            "`ndfleet preflight` reads them from Azure"
        )
    return lines
