"""A stack's summary: what `ndfleet plan` prints at its head and the Pulumi program exports as `summary`.

Here rather than on ClusterSpec: the vCPU quota comes from ndfleet/stackconfig/vms.py, which reads the spec, so a
method of the spec would make the two modules import each other.
"""

from __future__ import annotations

from typing import Any

from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.vms import quota_need


def vcpu_quota(spec: ClusterSpec) -> dict[str, int]:
    """vCPUs needed per Azure quota family, Slurm machines included; Spot nodes count in the regional Spot quota
    instead (vms.quota_need, which also gives the regional totals)."""
    return quota_need(spec).families


def spec_summary(spec: ClusterSpec) -> dict[str, Any]:
    return {
        "stack": spec.stack,
        "vmSize": spec.profile.name,
        "location": spec.location,
        "zone": spec.zone,
        "islands": [
            {"name": i.name, "nodes": i.nodes, "gpus": i.nodes * spec.profile.gpus_per_vm,
             **({"spares": i.spares} if i.spares else {})}
            for i in spec.islands
        ],
        "islandCount": len(spec.islands),
        "nodes": spec.total_nodes,
        "gpus": spec.total_gpus,
        "vcpuQuota": vcpu_quota(spec),
        "warnings": list(spec.warnings),
        # A smoke stack only (docs/smoke.md): its base and stated run length.
        **({"smoke": spec.smoke.model_dump(by_alias=True)} if spec.smoke is not None else {}),
    }
