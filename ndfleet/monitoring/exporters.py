"""What each node runs to export its metrics, pinned, and exactly which metric names that gives.

Three exporters on every node, all bound to 127.0.0.1 and scraped by the node's Prometheus agent:

- NVIDIA dcgm-exporter (GPU health and use), the container image NVIDIA publishes on NGC, pinned to the tag
  Azure's own cyclecloud-monitoring runs on ND-series VMs; it reads `DCGM_COUNTERS` below (its `-f` counters
  file), so the GPU metric names are exactly the DCGM field names listed there.
- Prometheus node_exporter (host and InfiniBand), Ubuntu 22.04's `prometheus-node-exporter` package
  (upstream 1.3.1), with only the collectors in `NODE_EXPORTER_COLLECTORS` enabled.
- the validation results, written by `ndfleet-node metrics` as a textfile node_exporter's textfile collector
  reads (`VALIDATION_METRICS`; `node/ndfleet_node/metrics.py` writes them).

The Prometheus agent itself is the upstream release binary (Ubuntu 22.04's own prometheus 2.31 predates the
managed-identity remote write Azure Monitor needs; Microsoft asks for a release newer than 2.45).

`exported_metric_names()` is the single list dashboards and alert rules may query; the tests hold every query
to it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from ndfleet_node import metrics as node_metrics
from ndfleet_node import names as shared_names
from ndfleet_node import slurm_export

# --- versions, each with where it comes from ---------------------------------------------------------------

# Prometheus LTS release (prometheus.io/docs/introduction/release-cycle): `--agent` mode and
# `remote_write.azuread.managed_identity`. Downloaded from the project's GitHub release and checked against the
# release's published sha256sums.txt.
PROMETHEUS_VERSION = "2.53.5"
PROMETHEUS_URL = (
    f"https://github.com/prometheus/prometheus/releases/download/v{PROMETHEUS_VERSION}/"
    f"prometheus-{PROMETHEUS_VERSION}.linux-amd64.tar.gz"
)
PROMETHEUS_SHA256SUMS_URL = (
    f"https://github.com/prometheus/prometheus/releases/download/v{PROMETHEUS_VERSION}/sha256sums.txt"
)
# Ubuntu 22.04 (jammy) ships node_exporter 1.3.1 as prometheus-node-exporter; apt pins the upstream version.
NODE_EXPORTER_PACKAGE = "prometheus-node-exporter"
NODE_EXPORTER_VERSION_PIN = "1.3.1-*"
# NVIDIA dcgm-exporter on NGC: <dcgm-exporter version>-<DCGM version>-<base image>; the same tag Azure's
# cyclecloud-monitoring pins for ND-series nodes (specs/default/cluster-init/scripts/40_dcgm_exporter.sh).
DCGM_EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"

# --- ports, paths --------------------------------------------------------------------------------------------

NODE_EXPORTER_ADDRESS = "127.0.0.1:9100"
DCGM_EXPORTER_ADDRESS = "127.0.0.1:9400"
PROMETHEUS_AGENT_ADDRESS = "127.0.0.1:9090"
# Where `ndfleet-node metrics` writes (its DEFAULT_OUT): node_exporter's textfile folder and the file.
TEXTFILE_DIR, TEXTFILE_NAME = posixpath.split(node_metrics.DEFAULT_OUT)
# On the Slurm controller: what `ndfleet_node.slurm_export` writes (its DEFAULT_OUT), in the same folder.
SLURM_TEXTFILE_NAME = posixpath.basename(slurm_export.DEFAULT_OUT)

# --- what dcgm-exporter exports ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DcgmCounter:
    field: str  # DCGM field name = the Prometheus metric name dcgm-exporter exports
    kind: str  # gauge | counter (dcgm-exporter's counters-file types)
    help: str


# The counters file (dcgm-exporter `-f`): use, memory, temperature and power, plus every error signal the alerts
# read. Field names from NVIDIA's DCGM field list (dcgm_fields.h) and dcgm-exporter's etc/default-counters.csv;
# dcgm-exporter refuses a name it does not know, and every name here is in the field map of the go-dcgm commit
# the pinned dcgm-exporter builds with (NVIDIA/go-dcgm 7c92211, dcgm-exporter 4.2.3-4.1.3's go.mod).
DCGM_COUNTERS: tuple[DcgmCounter, ...] = (
    DcgmCounter("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    DcgmCounter("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    DcgmCounter("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    DcgmCounter("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    DcgmCounter("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    DcgmCounter("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    DcgmCounter("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    DcgmCounter("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Clock throttle reasons (bitmask)."),
    DcgmCounter("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in us)."),
    DcgmCounter("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in us)."),
    DcgmCounter("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    DcgmCounter("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Single-bit volatile ECC errors."),
    DcgmCounter("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Double-bit volatile ECC errors."),
    DcgmCounter("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "Double-bit persistent ECC errors."),
    DcgmCounter("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for uncorrectable errors."),
    DcgmCounter("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Rows remapped for correctable errors."),
    DcgmCounter("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether remapping of rows is pending (needs a GPU reset)."),
    DcgmCounter("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed."),
    DcgmCounter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    DcgmCounter("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "NVLink flow-control CRC errors."),
    DcgmCounter("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "NVLink data CRC errors."),
    DcgmCounter("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "NVLink retries."),
    DcgmCounter("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "NVLink recovery errors."),
)
# No profiling fields (DCGM_FI_PROF_*). dcgm-exporter runs DCGM embedded in its container (NVIDIA/dcgm-exporter
# issue #421, maintainer), beside the host's own nv-hostengine that the Azure HPC image runs for `dcgmi diag`; the
# profiling counters are one resource per GPU (DCGM API "Profiling": groups that share hardware cannot be watched
# together; `dcgmi profile --pause` exists so that Nsight and CUPTI profilers can have them), so an embedded engine
# beside the host's reports them "not enabled" (dcgm-exporter issues #22, #707) and, when it does get them, takes
# them from a job's own profiler. Reading them through the host's engine (`-r`) would tie the exporter's DCGM to the
# image's (3.3.7 on the pinned image, 4.1.3 in this tag). No alert and no dashboard reads them.


def dcgm_counters_csv() -> str:
    """The counters file in dcgm-exporter's format: `FIELD, type, help` per line, '#' comments."""
    lines = ["# ndfleet/monitoring/exporters.py: FIELD, type, help"]
    lines += [f"{c.field}, {c.kind}, {c.help}" for c in DCGM_COUNTERS]
    return "\n".join(lines) + "\n"


# --- what node_exporter exports ----------------------------------------------------------------------------

# node_exporter runs with --collector.disable-defaults and these collectors only: a default node_exporter on a
# 96-vCPU VM exports well over 1,500 series (cpu alone: 96 CPUs x 8 modes), the main cost driver. Metric names per
# collector as node_exporter v1.3.1 defines them (collector/<name>_linux.go); `cpu` is filtered to mode="idle"
# by the agent (templates/monitoring/prometheus.yml.j2).
NODE_EXPORTER_COLLECTORS: dict[str, tuple[str, ...]] = {
    "cpu": ("node_cpu_seconds_total",),
    "loadavg": ("node_load1", "node_load5", "node_load15"),
    "meminfo": ("node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes"),
    "filesystem": ("node_filesystem_size_bytes", "node_filesystem_avail_bytes", "node_filesystem_readonly"),
    "diskstats": ("node_disk_read_bytes_total", "node_disk_written_bytes_total", "node_disk_io_time_seconds_total"),
    "netdev": ("node_network_receive_bytes_total", "node_network_transmit_bytes_total"),
    "infiniband": (
        "node_infiniband_info",
        "node_infiniband_state_id",
        "node_infiniband_physical_state_id",
        "node_infiniband_rate_bytes_per_second",
        "node_infiniband_port_data_received_bytes_total",
        "node_infiniband_port_data_transmitted_bytes_total",
        "node_infiniband_link_downed_total",
        "node_infiniband_link_error_recovery_total",
        "node_infiniband_symbol_error_total",
        "node_infiniband_port_errors_received_total",
        "node_infiniband_port_discards_received_total",
        "node_infiniband_port_transmit_wait_total",
        "node_infiniband_port_receive_remote_physical_errors_total",
    ),
    "textfile": ("node_textfile_scrape_error", "node_textfile_mtime_seconds"),
}
# Only the metrics above leave the node (the agent's metric_relabel_configs keep exactly these names).

# --- what `ndfleet-node metrics` writes (node/ndfleet_node/metrics.py defines the names) -----------------------

VALIDATION_METRICS: tuple[str, ...] = node_metrics.METRIC_NAMES

# --- what `ndfleet_node.slurm_export` writes on the Slurm controller (a test keeps the two equal) --------------

SLURM_EXPORT_METRICS: tuple[str, ...] = (
    "ndfleet_slurm_node_state",
    "ndfleet_slurm_export_success",
    "ndfleet_slurm_export_last_run_timestamp_seconds",
    shared_names.JOB_RUN_START_METRIC,
    shared_names.JOB_RUN_END_METRIC,
    shared_names.JOB_EXPORT_SUCCESS_METRIC,
    shared_names.JOB_EXPORT_LEFT_OUT_METRIC,
)

# Series the Prometheus agent writes for every scrape target itself.
AGENT_METRICS: tuple[str, ...] = ("up",)

# Labels every series carries (the agent's external_labels), so every alert can name the node.
NODE_LABELS: tuple[str, ...] = ("stack", "island", "node", "physical_host")


def node_exporter_metric_names() -> tuple[str, ...]:
    return tuple(name for names in NODE_EXPORTER_COLLECTORS.values() for name in names)


def exported_metric_names() -> frozenset[str]:
    """Every metric name a node sends to Azure Monitor: what dashboards and alerts may query."""
    return frozenset(
        (
            *(c.field for c in DCGM_COUNTERS),
            *node_exporter_metric_names(),
            *VALIDATION_METRICS,
            *SLURM_EXPORT_METRICS,
            *AGENT_METRICS,
        )
    )


def exported_markdown() -> str:
    """The exported metric names by source, for docs/monitoring.md (a test keeps the two equal)."""
    lines = [
        "- dcgm-exporter (per GPU, label `gpu`): " + ", ".join(f"`{c.field}`" for c in DCGM_COUNTERS),
    ]
    for collector, names in NODE_EXPORTER_COLLECTORS.items():
        lines.append(f"- node_exporter `{collector}`: " + ", ".join(f"`{n}`" for n in names))
    lines.append("- `ndfleet-node metrics` (textfile): " + ", ".join(f"`{n}`" for n in VALIDATION_METRICS))
    slurm = ", ".join(f"`{n}`" for n in SLURM_EXPORT_METRICS)
    lines.append(f"- `ndfleet_node.slurm_export` (textfile, Slurm controller only): {slurm}")
    lines.append("- the agent, per scrape target (`job` dcgm / node): " + ", ".join(f"`{n}`" for n in AGENT_METRICS))
    return "\n".join(lines)
