"""Render each node's bootstrap (cloud-init user data) from the cluster spec.

One renderer, one plain context: `build_context(spec, island)` turns the ClusterSpec and its VmSizeProfile
(thresholds included) into strings, numbers and lists; the Jinja2 templates under `templates/` only place
those values (StrictUndefined: a missing value is an error, never an empty string). The rendered
`#cloud-config` writes the node's scripts and systemd units and starts them:

  ndfleet-setup.service      NVMe RAID0, /etc/nccl.conf, nvidia-fabricmanager, nvidia-peermem, storage mounts
  ndfleet-validate.service   `validate-node --level quick|full` after set-up, at every boot
  ndfleet-validated.target   reached only when validation passed: job runners require it
  ndfleet-health.service     local HTTP endpoint for Azure's Application Health extension (rich health states)

The scale set carries `custom_data`: base64 of the gzip-compressed user data (mtime 0, so byte-identical
between runs). Azure refuses customData whose decoded size is over 65,535 bytes; `render_bootstrap` raises
BootstrapTooLarge before that can happen.
"""

from __future__ import annotations

import base64
import functools
import gzip
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from ndfleet.spec.config import ClusterSpec, IslandSpec

# Azure's limit on customData, decoded (custom-data.md; osProfile.customData: "The maximum length of the
# binary array is 65535 bytes").
CUSTOM_DATA_MAX_BYTES = 65_535
# The health endpoint answers here, on spec.health.probe_port (the Application Health extension's requestPath).
HEALTH_PATH = "/health"

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"

# Where things live on the node.
STATE_DIR = "/run/ndfleet"  # tmpfs: every boot starts Initializing and validates again
REPORT_PATH = f"{STATE_DIR}/report.json"
FAILED_MARKER = f"{STATE_DIR}/failed"
CONFIG_DIR = "/etc/ndfleet"
NVME_MOUNT = "/mnt/resource_nvme"  # where the Azure HPC images put the NVMe RAID0 (azhpc-images setup_nvme.sh)
NVME_MD_NAME = "ndfleet-nvme"
BLOB_MOUNT_ROOT = "/mnt/blob"
LUSTRE_MOUNT = "/mnt/lustre"
LUSTRE_FS_NAME = "lustrefs"  # Azure Managed Lustre always serves the file system "lustrefs"
# Tools the Azure HPC images keep off the default PATH (nccl-tests, CUDA, DCGM, perftest, nvbandwidth).
NODE_TOOL_DIRS = (
    "/opt/nccl-tests/build",
    "/usr/local/cuda/bin",
    "/opt/nvbandwidth",
    "/opt/azurehpc/test/nvbandwidth",
)
NODE_PATH = ":".join((*NODE_TOOL_DIRS, "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"))

# Values the node learns at boot from its scale set's tags (IMDS compute/tagsList), because Azure computes them
# after the plan: the storage account, the node identity's client id and the Managed Lustre MGS address.
# Keeping them out of customData keeps customData deterministic (a customData change needs a reimage).
TAG_STORAGE_ACCOUNT = "ndfleet:storage-account"
TAG_IDENTITY_CLIENT_ID = "ndfleet:identity-client-id"
TAG_LUSTRE_MGS = "ndfleet:lustre-mgs"
IMDS_TAGS_URL = "http://169.254.169.254/metadata/instance/compute/tagsList?api-version=2021-02-01"

# PCIe signalling rate per generation as lspci prints it (PCI-SIG; not a VM figure).
PCIE_GT_PER_GEN = {3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}
# ib_write_bw loopback: one TCP port per HCA for the test's out-of-band exchange, from here upwards.
IB_WRITE_BW_BASE_PORT = 18510
# NCCL environment of the single-node all-reduce (azurehpc-health-checks azure_nccl_allreduce.nhc).
NCCL_TEST_ENV = {"NCCL_IB_PCI_RELAXED_ORDERING": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NCCL_SOCKET_IFNAME": "eth0"}

# Quick checks in the order the validator runs them; the full level appends PERF_CHECKS.
QUICK_CHECKS = (
    "gpu.count",
    "gpu.ecc",
    "gpu.row_remap",
    "gpu.xid",
    "gpu.nvlink",
    "gpu.fabricmanager",
    "gpu.pcie",
    "gpu.throttle",
    "ib.peermem",
    "ib.ports",
    "ib.rate",
    "ib.flap",
    "ib.pcie",
    "host.nvme",
    "host.memory",
    "host.cpu",
    "host.mounts",
)
PERF_CHECKS = ("perf.nccl_allreduce", "perf.ib_write_bw", "perf.nvbandwidth", "perf.dcgm")


class BootstrapTooLarge(Exception):
    """The compressed user data is over Azure's customData limit."""


@dataclass(frozen=True)
class NodeFile:
    name: str  # the name `ndfleet render` writes it under, and the key in RenderedBootstrap.files
    path: str  # where cloud-init writes it on the node
    mode: str
    content: str


@dataclass(frozen=True)
class RenderedBootstrap:
    user_data: str
    files: dict[str, str] = field(default_factory=dict)
    # name -> path on the node, for every entry of `files` except "user-data"
    node_paths: dict[str, str] = field(default_factory=dict)

    @functools.cached_property
    def custom_data_bytes(self) -> bytes:
        # mtime=0 keeps the output byte-identical between runs, so plans and diffs are deterministic.
        return gzip.compress(self.user_data.encode(), compresslevel=9, mtime=0)

    @functools.cached_property
    def custom_data(self) -> str:
        return base64.b64encode(self.custom_data_bytes).decode()

    @property
    def headroom_bytes(self) -> int:
        return CUSTOM_DATA_MAX_BYTES - len(self.custom_data_bytes)


def validation_budget_s(spec: ClusterSpec) -> int:
    """Longest a node's set-up plus validation can take, every check at its timeout (seconds).

    The scale set's Application Health grace period must be longer than this, so a node that is still
    validating is not judged; the validate unit's TimeoutStartSec uses the validation part.
    """
    return spec.profile.thresholds.setup_timeout_s + _validate_budget_s(spec)


def _validate_budget_s(spec: ClusterSpec) -> int:
    t = spec.profile.thresholds
    # Quick checks: one tool call each, ib.pcie one lspci per HCA, gpu.xid and ib.flap a log read each.
    quick = t.tool_timeout_s * (len(QUICK_CHECKS) + len(spec.profile.ib_devices))
    if spec.health.validation_level == "quick":
        return quick
    dcgm = t.dcgm_diag_timeout_s[spec.health.dcgm_level - 1] if spec.health.dcgm_level else 0
    return quick + t.nccl_allreduce_timeout_s + t.ib_write_bw_timeout_s + t.nvbandwidth_timeout_s + dcgm


def build_context(spec: ClusterSpec, island: IslandSpec) -> dict[str, Any]:
    """The plain template context: every value the templates place, derived here and nowhere else."""
    p = spec.profile
    t = p.thresholds
    blob_mounts = [
        {
            "container": c,
            "mountpoint": f"{BLOB_MOUNT_ROOT}/{c}",
            "config": f"{CONFIG_DIR}/blobfuse2-{c}.yaml",
            "cache_dir": f"{NVME_MOUNT}/blobfuse2/{c}",
        }
        for c in spec.storage.containers
    ]
    mounts = [NVME_MOUNT, *(m["mountpoint"] for m in blob_mounts)]
    if spec.storage.lustre is not None:
        mounts.append(LUSTRE_MOUNT)
    nccl_conf = {"NCCL_IB_PCI_RELAXED_ORDERING": "1", "NCCL_IGNORE_CPU_AFFINITY": "1"}
    if p.nccl_topo_file:
        nccl_conf["NCCL_TOPO_FILE"] = p.nccl_topo_file
    nccl_test_env = dict(NCCL_TEST_ENV)
    # An empty NCCL_TOPO_FILE lets NCCL detect the topology (it fixed a spurious result on H200).
    nccl_test_env["NCCL_TOPO_FILE"] = p.nccl_topo_file
    return {
        "stack": spec.stack,
        "island": island.name,
        "island_index": island.index,
        "vm_size": p.name,
        # paths on the node
        "state_dir": STATE_DIR,
        "report_path": REPORT_PATH,
        "failed_marker": FAILED_MARKER,
        "config_dir": CONFIG_DIR,
        "node_path": NODE_PATH,
        # set-up
        "nvme_mount": NVME_MOUNT,
        "nvme_md_name": NVME_MD_NAME,
        "nvme_count": p.nvme_count,
        "nccl_conf_lines": [f"{k}={v}" for k, v in nccl_conf.items()],
        "fabricmanager_wait_s": t.fabricmanager_wait_s,
        "imds_tags_url": IMDS_TAGS_URL,
        "tag_storage_account": TAG_STORAGE_ACCOUNT,
        "tag_identity_client_id": TAG_IDENTITY_CLIENT_ID,
        "tag_lustre_mgs": TAG_LUSTRE_MGS,
        "blob_mounts": blob_mounts,
        "lustre_enabled": spec.storage.lustre is not None,
        "lustre_mount": LUSTRE_MOUNT,
        "lustre_fs_name": LUSTRE_FS_NAME,
        "setup_timeout_s": t.setup_timeout_s,
        # validation
        "validation_level": spec.health.validation_level,
        "validate_timeout_s": _validate_budget_s(spec),
        "dcgm_level": spec.health.dcgm_level,
        "dcgm_timeout_s": t.dcgm_diag_timeout_s[spec.health.dcgm_level - 1] if spec.health.dcgm_level else 0,
        "quick_checks": list(QUICK_CHECKS),
        "perf_checks": list(PERF_CHECKS),
        "gpu_count": p.gpus_per_vm,
        "gpu_model": p.gpu_model,
        "nvlinks_per_gpu": p.nvlinks_per_gpu,
        "gpu_pcie_gen": p.gpu_pcie_gen,
        "gpu_pcie_width": p.gpu_pcie_width,
        "ib_devices": list(p.ib_devices),
        "ib_port": p.ib_port,
        "ib_rate_gbps": p.ib_rate_gbps,
        "ib_link_layer": p.ib_link_layer,
        "hca_pcie_speed": PCIE_GT_PER_GEN[p.hca_pcie_gen],
        "hca_pcie_width": p.hca_pcie_width,
        "memory_min_gib": p.memory_min_gib,
        "vcpus": p.vcpus,
        "expected_mounts": mounts,
        "ecc_sram_uncorrectable_max": t.ecc_sram_uncorrectable_max,
        "ecc_sram_correctable_max": t.ecc_sram_correctable_max,
        "ecc_dram_uncorrectable_max": t.ecc_dram_uncorrectable_max,
        "ecc_dram_correctable_max": t.ecc_dram_correctable_max,
        "xid_fail_codes": list(t.xid_fail_codes),
        "ib_link_down_max": t.ib_link_down_max,
        "ib_flap_window_hours": t.ib_flap_window_hours,
        "tool_timeout_s": t.tool_timeout_s,
        "nccl_bytes": t.nccl_allreduce_bytes,
        "nccl_busbw_gbps": t.nccl_allreduce_busbw_gbps,
        "nccl_timeout_s": t.nccl_allreduce_timeout_s,
        "nccl_test_env": [f"{k}={v}" for k, v in nccl_test_env.items()],
        "ib_write_bw_gbps": t.ib_write_bw_gbps,
        "ib_write_bw_bytes": t.ib_write_bw_message_bytes,
        "ib_write_bw_timeout_s": t.ib_write_bw_timeout_s,
        "ib_write_bw_base_port": IB_WRITE_BW_BASE_PORT,
        "nvbw_host_device_gbps": t.nvbandwidth_host_device_gbps,
        "nvbw_device_device_gbps": t.nvbandwidth_device_device_gbps,
        "nvbw_timeout_s": t.nvbandwidth_timeout_s,
        # health endpoint
        "health_port": spec.health.probe_port,
        "health_path": HEALTH_PATH,
    }


# (template, name, path on the node, mode) for every file the user data carries.
_NODE_FILES = (
    ("node/validate-node.sh.j2", "validate-node", "/usr/local/sbin/validate-node", "0755"),
    ("node/ndfleet-setup.sh.j2", "ndfleet-setup", "/usr/local/sbin/ndfleet-setup", "0755"),
    ("node/ndfleet-health.py.j2", "ndfleet-health", "/usr/local/lib/ndfleet/ndfleet-health", "0755"),
    ("node/nccl.conf.j2", "nccl.conf", f"{CONFIG_DIR}/nccl.conf", "0644"),
    ("systemd/ndfleet-setup.service.j2", "ndfleet-setup.service", "/etc/systemd/system/ndfleet-setup.service", "0644"),
    (
        "systemd/ndfleet-validate.service.j2",
        "ndfleet-validate.service",
        "/etc/systemd/system/ndfleet-validate.service",
        "0644",
    ),
    (
        "systemd/ndfleet-validated.target.j2",
        "ndfleet-validated.target",
        "/etc/systemd/system/ndfleet-validated.target",
        "0644",
    ),
    (
        "systemd/ndfleet-health.service.j2",
        "ndfleet-health.service",
        "/etc/systemd/system/ndfleet-health.service",
        "0644",
    ),
)
# Rendered scripts, by language, for linting (shellcheck) and tests.
BASH_FILES = ("validate-node", "ndfleet-setup")
PYTHON_FILES = ("ndfleet-health",)


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        auto_reload=False,
        # bash uses "{#" (${#array[@]}): Jinja comments get a delimiter that no script contains.
        comment_start_string="{##",
        comment_end_string="##}",
    )
    env.filters["shq"] = lambda v: shlex.quote(str(v))
    return env


@functools.cache
def _template(name: str) -> jinja2.Template:
    return _environment().get_template(name)


def render_bootstrap(spec: ClusterSpec, island: IslandSpec) -> RenderedBootstrap:
    """The island's cloud-init user data and every file it carries; raises BootstrapTooLarge over the limit."""
    ctx = build_context(spec, island)
    node_files = [NodeFile(name, path, mode, _template(tpl).render(ctx)) for tpl, name, path, mode in _NODE_FILES]
    if spec.scheduler == "slurm":  # slurmd and its set-up (ndfleet/slurm/machines.py)
        from ndfleet.slurm.machines import slurm_node_files

        node_files += slurm_node_files(spec, island)
    user_data = _template("cloud-config.yaml.j2").render(
        {**ctx, "files": [{"path": f.path, "mode": f.mode, "content": f.content} for f in node_files]}
    )
    files = {"user-data": user_data, **{f.name: f.content for f in node_files}}
    rendered = RenderedBootstrap(user_data=user_data, files=files, node_paths={f.name: f.path for f in node_files})
    size = len(rendered.custom_data_bytes)
    if size > CUSTOM_DATA_MAX_BYTES:
        raise BootstrapTooLarge(
            f"stack {spec.stack!r} island {island.name!r}: the node bootstrap is {size:,} bytes gzip-compressed "
            f"({len(rendered.custom_data):,} base64), over Azure's customData limit of {CUSTOM_DATA_MAX_BYTES:,} "
            "bytes; shrink the templates under templates/ or move content to an image"
        )
    return rendered
