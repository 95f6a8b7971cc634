"""The node JSON sections for burn-in and impact reporting, from the VM-size profile and the stack spec.

The node program (`ndfleet_node.burnin.settings`, `ndfleet_node.impact`) reads exactly these keys from
/etc/ndfleet/node.json; the renderer of that file adds them as `burnin` and `impact`.
"""

from __future__ import annotations

from typing import Any

from ndfleet.spec.config import ClusterSpec
from ndfleet.spec.profiles import VmSizeProfile

# Microsoft.Impact/workloadImpacts: the Guest Health Reporting page gives this version for HPC reports.
IMPACT_API_VERSION = "2023-02-01-preview"
# The impact report's time limit on a node (a transient unit the failed validation starts): two IMDS calls (20 s
# each) and, per reported check, up to 4 PUTs (20 s each) with 3 Retry-After waits of at most 120 s: 440 s for one
# check; 900 s covers two.
IMPACT_UNIT_TIMEOUT_S = 900


def burnin_node_section(profile: VmSizeProfile) -> dict[str, Any]:
    """The `burnin` object of the node JSON."""
    b = profile.burnin
    common = dict(b.common_env)
    if profile.nccl_topo_file:
        common["NCCL_TOPO_FILE"] = profile.nccl_topo_file
    return {
        "vm_size": profile.name,
        "gpus_per_node": profile.gpus_per_vm,
        "pair_busbw_floor_gbps": b.pair_busbw_gbps,
        "island_busbw_floor_gbps": b.island_busbw_gbps,
        "message_bytes": b.message_bytes,
        "warmup_iters": b.warmup_iters,
        "iters": {"quick": b.iters_quick, "full": b.iters_full},
        "launch_allowance_s": b.launch_allowance_s,
        "launch_allowance_per_node_s": b.launch_allowance_per_node_s,
        "max_rounds": b.max_rounds,
        "nccl_env": common,
        "pair_env": dict(b.pair_env),
        "island_env": dict(b.island_env),
        "mpirun": "mpirun",
        "all_reduce_perf": "/opt/nccl-tests/build/all_reduce_perf",
    }


def impact_node_section(spec: ClusterSpec) -> dict[str, Any]:
    """The `impact` object of the node JSON: opt-in flag and the API version; the node learns the rest (its
    subscription, resource id, identity) from the instance metadata service at the time it reports."""
    return {
        "enabled": spec.health.impact_reporting,
        "api_version": IMPACT_API_VERSION,
        "stack": spec.stack,
    }
