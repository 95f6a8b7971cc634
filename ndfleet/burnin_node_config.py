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


def burnin_node_section(profile: VmSizeProfile) -> dict[str, Any]:
    """The `burnin` object of the node JSON."""
    b = profile.burnin
    common = dict(b.common_env)
    if profile.nccl_topo_file:
        common["NCCL_TOPO_FILE"] = profile.nccl_topo_file
    return {
        "vmSize": profile.name,
        "gpusPerNode": profile.gpus_per_vm,
        "pairBusbwFloorGBps": b.pair_busbw_gbps,
        "islandBusbwFloorGBps": b.island_busbw_gbps,
        "messageBytes": b.message_bytes,
        "warmupIters": b.warmup_iters,
        "iters": {"quick": b.iters_quick, "full": b.iters_full},
        "pairTimeoutS": {"quick": b.pair_timeout_s_quick, "full": b.pair_timeout_s_full},
        "islandTimeoutS": {"quick": b.island_timeout_s_quick, "full": b.island_timeout_s_full},
        "maxRounds": b.max_rounds,
        "ncclEnv": common,
        "pairEnv": dict(b.pair_env),
        "islandEnv": dict(b.island_env),
        "mpirun": "mpirun",
        "allReducePerf": "/opt/nccl-tests/build/all_reduce_perf",
    }


def impact_node_section(spec: ClusterSpec) -> dict[str, Any]:
    """The `impact` object of the node JSON: opt-in flag and the API version; the node learns the rest (its
    subscription, resource id, identity) from the instance metadata service at the time it reports."""
    return {
        "enabled": spec.health.impact_reporting,
        "apiVersion": IMPACT_API_VERSION,
        "stack": spec.stack,
    }
