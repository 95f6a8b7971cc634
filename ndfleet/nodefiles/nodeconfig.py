"""The node JSON (/etc/ndfleet/node.json): every per-stack figure the node program reads.

`node_config(spec, island)` turns the spec and its VM-size profile (thresholds included) into plain JSON data;
`node_config_json(...)` is its canonical text (sorted keys, so it is byte-identical between runs). The node
program (`node/ndfleet_node`) is the same for every stack: changing a threshold changes only this file.

Sections: stack/island/vm_size, `paths`, `validation` (level, the check ids of each level, DCGM level),
`timeouts` (seconds; the runner's table, also the source of the time budget), `hardware` and `thresholds` (the
node's typed `Hardware` and `Thresholds`, filled here by keyword), `nccl` (nccl.conf and the NCCL tests' environment,
ndfleet.stackconfig.profiles), `mounts` (expected mount points, NVMe RAID, blob
containers, Lustre), `imds` (tag names), `setup`, `health`. Other features add their own top-level sections.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from ndfleet_node.checks import LEVELS, budget_s, level_ids
from ndfleet_node.config import Hardware, NodeConfig, Thresholds
from ndfleet_node.names import TAG_IDENTITY_CLIENT_ID, TAG_LUSTRE_MGS, TAG_STORAGE_ACCOUNT

from ndfleet.boot_contract import HEALTH_PATH
from ndfleet.boot_version import BOOT_VERSION_PLACEHOLDER
from ndfleet.nodefiles.burnin_node_config import burnin_node_section, impact_node_section
from ndfleet.stackconfig.clusterspec import ClusterSpec, IslandSpec
from ndfleet.stackconfig.profiles import nccl_conf, nccl_test_env

SCHEMA = 1
STATE_DIR = "/run/ndfleet"  # tmpfs: every boot starts Initializing and validates again
REPORT_PATH = f"{STATE_DIR}/report.json"
FAILED_MARKER = f"{STATE_DIR}/failed"
CONFIG_DIR = "/etc/ndfleet"
NODE_CONFIG_PATH = f"{CONFIG_DIR}/node.json"
NVME_MOUNT = "/mnt/resource_nvme"  # where the Azure HPC images put the NVMe RAID0 (azhpc-images setup_nvme.sh)
NVME_MD_NAME = "ndfleet-nvme"
BLOB_MOUNT_ROOT = "/mnt/blob"
LUSTRE_MOUNT = "/mnt/lustre"
LUSTRE_FS_NAME = "lustrefs"  # Azure Managed Lustre always serves the file system "lustrefs"
# Public Azure's; the prepare step passes the stack's cloud's suffix (ndfleet.stackconfig.clouds).
BLOB_ENDPOINT_SUFFIX = "blob.core.windows.net"

# Values the node learns at boot from its scale set's tags (IMDS compute/tagsList), because Azure computes them
# after the plan. Keeping them out of customData keeps customData deterministic.
IMDS_TAGS_URL = "http://169.254.169.254/metadata/instance/compute/tagsList?api-version=2021-02-01"

# ib_write_bw loopback: one TCP port per HCA for the test's out-of-band exchange, from here upwards.
IB_WRITE_BW_BASE_PORT = 18510
# The health endpoint: connections it serves at once (the oldest idle one is dropped beyond this), how long a
# connection may take to send its request, and the listen backlog.
HEALTH_MAX_CONNECTIONS = 256
HEALTH_IDLE_TIMEOUT_S = 5
HEALTH_BACKLOG = 1024


def timeouts_section(spec: ClusterSpec) -> dict[str, int | float]:
    """The node JSON's `timeouts`: each tool call's timeout, by the key the checks declare their calls with."""
    t = spec.profile.thresholds
    level = spec.health.dcgm_level
    return {
        "tool": t.tool_timeout_s,
        "nccl_allreduce": t.nccl_allreduce_timeout_s,
        "ib_write_bw": t.ib_write_bw_timeout_s,
        "nvbandwidth": t.nvbandwidth_timeout_s,
        "dcgm_diag": t.dcgm_diag_timeout_s[level - 1] if level else 0,
        "setup": t.setup_timeout_s,
        "fabricmanager_wait": t.fabricmanager_wait_s,
        "mount_retry": t.mount_retry_s,
        "setup_step": t.setup_step_timeout_s,
    }


def node_hardware(spec: ClusterSpec) -> Hardware:
    """The node JSON's `hardware`: what the VM size has, which the checks compare the node against."""
    p = spec.profile
    return Hardware(
        gpu_count=p.gpus_per_vm,
        gpu_model=p.gpu_model,
        nvlinks_per_gpu=p.nvlinks_per_gpu,
        gpu_pcie_gen=p.gpu_pcie_gen,
        gpu_pcie_width=p.gpu_pcie_width,
        ib_devices=list(p.ib_devices),
        ib_port=p.ib_port,
        ib_rate_gbps=p.ib_rate_gbps,
        ib_link_layer=p.ib_link_layer,
        hca_pcie_gen=p.hca_pcie_gen,
        hca_pcie_width=p.hca_pcie_width,
        nvme_count=p.nvme_count,
        memory_min_gib=p.memory_min_gib,
        vcpus=p.vcpus,
    )


def checks_budget_s(spec: ClusterSpec) -> int:
    """The validation's part of the budget, summed by the node's own function (ndfleet_node.checks.budget_s) over the
    three sections of the node JSON it reads, as node_config writes them: the level's checks, their timeouts, the
    hardware their call counts follow; the rest of the node JSON is not built for it."""
    level = spec.health.validation_level
    sections = {
        "validation": {"levels": {level: level_ids(level)}},
        "timeouts": timeouts_section(spec),
        "hardware": asdict(node_hardware(spec)),
    }
    return math.ceil(budget_s(NodeConfig(sections), level))


def node_config(
    spec: ClusterSpec,
    island: IslandSpec,
    extra: dict[str, Any] | None = None,
    *,
    blob_endpoint_suffix: str = BLOB_ENDPOINT_SUFFIX,
) -> dict[str, Any]:
    """The node JSON as data. `extra`: further top-level sections (other features), kept as given.
    `blob_endpoint_suffix`: the cloud's (ndfleet.stackconfig.clouds), for BlobFuse2's https://<account>.<suffix>."""
    p = spec.profile
    t = p.thresholds
    blob = [
        {
            "container": c,
            "mountpoint": f"{BLOB_MOUNT_ROOT}/{c}",
            "config": f"{CONFIG_DIR}/blobfuse2-{c}.yaml",
            "cache_dir": f"{NVME_MOUNT}/blobfuse2/{c}",
        }
        for c in spec.storage.containers
    ]
    lustre = {"mount": LUSTRE_MOUNT, "fs_name": LUSTRE_FS_NAME} if spec.storage.lustre is not None else None
    expected = [NVME_MOUNT, *(b["mountpoint"] for b in blob), *([LUSTRE_MOUNT] if lustre else [])]
    level = spec.health.dcgm_level
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "stack": spec.stack,
        "island": island.name,
        # The island's boot version: the bundle holds the placeholder, the boot step puts the version in
        # (ndfleet/boot_version.py); the health endpoint answers with it.
        "boot_version": BOOT_VERSION_PLACEHOLDER,
        "vm_size": p.name,
        "paths": {
            "state_dir": STATE_DIR,
            "report": REPORT_PATH,
            "failed_marker": FAILED_MARKER,
            "config_dir": CONFIG_DIR,
        },
        "validation": {
            "level": spec.health.validation_level,
            "levels": {level: level_ids(level) for level in LEVELS},
            "dcgm_level": level,
        },
        "timeouts": timeouts_section(spec),
        "hardware": asdict(node_hardware(spec)),
        "thresholds": asdict(
            Thresholds(
                ecc_sram_uncorrectable_max=t.ecc_sram_uncorrectable_max,
                ecc_sram_correctable_max=t.ecc_sram_correctable_max,
                ecc_dram_uncorrectable_max=t.ecc_dram_uncorrectable_max,
                ecc_dram_correctable_max=t.ecc_dram_correctable_max,
                xid_fail_codes=list(t.xid_fail_codes),
                ib_link_down_max=t.ib_link_down_max,
                ib_flap_window_hours=t.ib_flap_window_hours,
                nccl_busbw_gbps=t.nccl_busbw_gbps,
                nccl_bytes=t.nccl_bytes,
                ib_write_bw_gbps=t.ib_write_bw_gbps,
                ib_write_bw_bytes=t.ib_write_bw_bytes,
                ib_write_bw_base_port=IB_WRITE_BW_BASE_PORT,
                nvbw_host_device_gbps=t.nvbw_host_device_gbps,
                nvbw_device_device_gbps=t.nvbw_device_device_gbps,
            )
        ),
        "nccl": {"conf": nccl_conf(p.nccl_topo_file), "test_env": nccl_test_env(p.nccl_topo_file)},
        "mounts": {
            "expected": expected,
            "nvme": {"mount": NVME_MOUNT, "md_name": NVME_MD_NAME, "count": p.nvme_count},
            "blob": blob,
            "lustre": lustre,
            "blob_endpoint_suffix": blob_endpoint_suffix,
        },
        "imds": {
            "tags_url": IMDS_TAGS_URL,
            "tag_storage_account": TAG_STORAGE_ACCOUNT,
            "tag_identity_client_id": TAG_IDENTITY_CLIENT_ID,
            "tag_lustre_mgs": TAG_LUSTRE_MGS,
        },
        "health": {
            "port": spec.health.probe_port,
            "path": HEALTH_PATH,
            "max_connections": HEALTH_MAX_CONNECTIONS,
            "idle_timeout_s": HEALTH_IDLE_TIMEOUT_S,
            "backlog": HEALTH_BACKLOG,
        },
    }
    # Burn-in figures and impact reporting (issue 11): every node can start a burn-in and report its own host.
    data["burnin"] = burnin_node_section(p)
    data["impact"] = impact_node_section(spec)
    for name, section in (extra or {}).items():
        if name in data:
            raise ValueError(f"node JSON section {name!r} already exists")
        data[name] = section
    return data


def to_json(data: dict[str, Any]) -> str:
    """Canonical text: sorted keys, two-space indent, trailing newline (deterministic customData)."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"
