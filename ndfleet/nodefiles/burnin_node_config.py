"""The node JSON sections for burn-in and impact reporting, from the VM-size profile and the stack spec.

The node program (`ndfleet_node.burnin.settings`, `ndfleet_node.impact`) reads exactly these keys from
/etc/ndfleet/node.json; the renderer of that file adds them as `burnin` and `impact`.
"""

from __future__ import annotations

from typing import Any

from ndfleet import images
from ndfleet.images import COMPUTE_IMAGE
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.profiles import VmSizeProfile, nccl_test_env

# Microsoft.Impact/workloadImpacts: the Guest Health Reporting page gives this version for HPC reports.
IMPACT_API_VERSION = "2023-02-01-preview"
# The impact report's time limit on a node (a transient unit the failed validation starts): two IMDS calls (20 s
# each) and, per reported check, up to 4 PUTs (20 s each) with 3 Retry-After waits of at most 120 s: 440 s for one
# check; 900 s covers two.
IMPACT_UNIT_TIMEOUT_S = 900


def burnin_node_section(profile: VmSizeProfile) -> dict[str, Any]:
    """The `burnin` object of the node JSON."""
    b = profile.burnin
    # The same in every contracted version of the compute image (images.agreed fails naming them otherwise): the node
    # JSON is one for every version, and the node program finds HPC-X's versioned folder by this glob.
    hpcx_init = images.agreed(COMPUTE_IMAGE, images.hpcx_init_glob)
    all_reduce_perf = images.agreed(COMPUTE_IMAGE, images.all_reduce_perf_path)
    assert all_reduce_perf, f"the {COMPUTE_IMAGE} contracts list all_reduce_perf"
    # The validator's NCCL environment; an empty NCCL_TOPO_FILE is left out here, as the burn-in always has.
    common = {k: v for k, v in nccl_test_env(profile.nccl_topo_file).items() if v}
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
        # The compute image's contract (ndfleet/images, docs/images.md): HPC-X under /opt/hpcx-*/ (module mpi/hpcx;
        # ndfleet_node.hpcx sources its hpcx-init.sh, for the burn-in and the validator alike), nccl-tests built in
        # /opt/nccl-tests. mpirun is HPC-X's.
        "hpcx_init": hpcx_init,
        "mpirun": "mpirun",
        # Azure's NCCL validation scripts (Azure/ai-infrastructure-on-azure, infrastructure_validations/slurm/NCCL):
        # no HCOLL (NCCL does the collectives; MPI only bootstraps), no tree spawn (every VM is reached straight from
        # the launching node, which is the one with ssh trust), and the remote ranks get HPC-X's library path.
        "mpirun_args": [
            "-mca", "coll_hcoll_enable", "0", "-mca", "plm_rsh_no_tree_spawn", "1", "-x", "LD_LIBRARY_PATH",
        ],  # fmt: skip
        # UCX (MPI's transport) over reliable connection on the first InfiniBand port, as those scripts set it.
        "mpi_env": {"UCX_TLS": "rc", "UCX_NET_DEVICES": f"{profile.ib_devices[0]}:{profile.ib_port}"},
        "srun": "srun",
        "all_reduce_perf": all_reduce_perf,
    }


def impact_node_section(spec: ClusterSpec) -> dict[str, Any]:
    """The `impact` object of the node JSON: opt-in flag and the API version; the node learns the rest (its
    subscription, resource id, identity) from the instance metadata service at the time it reports."""
    return {
        "enabled": spec.health.impact_reporting,
        "api_version": IMPACT_API_VERSION,
        "stack": spec.stack,
    }
