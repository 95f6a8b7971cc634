"""The node side of monitoring: the files cloud-init writes when a stack has monitoring on.

`node_files(spec, island)` renders templates/monitoring/ into (name, path on the node, mode, content); the
bootstrap adds them to the node's cloud-config and starts `START_UNITS`. Values Azure computes after the plan
(the data collection endpoint's ingestion URL and the rule's immutable id) reach the node as scale-set tags
(`TAG_METRICS_ENDPOINT`, `TAG_METRICS_DCR`) read at boot, so customData stays deterministic.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2
from ndfleet_node.names import DRAIN_MARKER, TAG_IDENTITY_CLIENT_ID, TAG_METRICS_DCR, TAG_METRICS_ENDPOINT

from ndfleet.boot_contract import INGEST_STREAM
from ndfleet.monitoring import exporters as ex
from ndfleet.nodefiles.bootstrap import NODE_APP_PATH, BootstrapExtensions
from ndfleet.nodefiles.machinefile import MachineFile
from ndfleet.nodefiles.nodeconfig import (
    IMDS_TAGS_URL,
    REPORT_PATH,
)
from ndfleet.nodefiles.templating import environment
from ndfleet.stackconfig.clusterspec import ClusterSpec, IslandSpec

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates" / "monitoring"


INGEST_API_VERSION = "2023-04-24"
AZURE_CLOUD = "AzurePublic"

CONFIG_DIR = "/etc/ndfleet"
PROMETHEUS_CONFIG = f"{CONFIG_DIR}/prometheus.yml"
PROMETHEUS_CONFIG_TEMPLATE = f"{CONFIG_DIR}/prometheus.yml.in"
PROMETHEUS_DATA_DIR = "/var/lib/ndfleet-prometheus"
DCGM_COUNTERS_PATH = f"{CONFIG_DIR}/dcgm-counters.csv"
SETUP_PATH = "/usr/local/sbin/ndfleet-monitoring-setup"
# A scheduler (or an operator) drains a node by writing this file, its reason as the content.
DRAIN_FILE = DRAIN_MARKER
METRICS_REFRESH_S = 60
# The set-up re-reads the scale set's tags this often: a replaced data collection rule (new immutable id) reaches
# running nodes within this time, without a reimage.
SETUP_REFRESH_MIN = 15
# The Slurm controller's agent: its external label `role` (it has no island), and slurm-export's timer: every
# minute, each scontrol call bounded, the whole run bounded below the period.
CONTROLLER_ROLE_LABEL = "slurm-controller"
SLURM_EXPORT_EVERY_S = 60
SLURM_EXPORT_CALL_TIMEOUT_S = 30
SLURM_EXPORT_TIMEOUT_S = 50
SETUP_TIMEOUT_S = 900
TOOL_TIMEOUT_S = 20

# The set-up runs from its timer: 30 s after the timer starts (at first boot cloud-init starts it; at later boots
# timers.target does), then every SETUP_REFRESH_MIN; boot and validation never wait for it.
ENABLE_UNITS = ("ndfleet-monitoring-setup.timer",)
START_UNITS = ("ndfleet-monitoring-setup.timer",)


# (template, name, path on the node, mode); the name is the path's base name, as `ndfleet render` shows it.
_FILES = (
    ("prometheus.yml.j2", "prometheus.yml.in", PROMETHEUS_CONFIG_TEMPLATE, 0o644),
    (None, "dcgm-counters.csv", DCGM_COUNTERS_PATH, 0o644),
    ("ndfleet-monitoring-setup.sh.j2", "ndfleet-monitoring-setup", SETUP_PATH, 0o755),
    (
        "ndfleet-monitoring-setup.service.j2",
        "ndfleet-monitoring-setup.service",
        "/etc/systemd/system/ndfleet-monitoring-setup.service",
        0o644,
    ),
    (
        "ndfleet-prometheus.service.j2",
        "ndfleet-prometheus.service",
        "/etc/systemd/system/ndfleet-prometheus.service",
        0o644,
    ),
    (
        "ndfleet-dcgm-exporter.service.j2",
        "ndfleet-dcgm-exporter.service",
        "/etc/systemd/system/ndfleet-dcgm-exporter.service",
        0o644,
    ),
    (
        "ndfleet-monitoring-setup.timer.j2",
        "ndfleet-monitoring-setup.timer",
        "/etc/systemd/system/ndfleet-monitoring-setup.timer",
        0o644,
    ),
    ("ndfleet-metrics.service.j2", "ndfleet-metrics.service", "/etc/systemd/system/ndfleet-metrics.service", 0o644),
    ("ndfleet-metrics.timer.j2", "ndfleet-metrics.timer", "/etc/systemd/system/ndfleet-metrics.timer", 0o644),
    (
        "ndfleet-slurm-export.service.j2",
        "ndfleet-slurm-export.service",
        "/etc/systemd/system/ndfleet-slurm-export.service",
        0o644,
    ),
    (
        "ndfleet-slurm-export.timer.j2",
        "ndfleet-slurm-export.timer",
        "/etc/systemd/system/ndfleet-slurm-export.timer",
        0o644,
    ),
)
# What a compute node gets, and what the Slurm controller gets in its customData (its prometheus.yml.in comes in
# userData: controller_config).
_NODE_FILES = (
    "prometheus.yml.in", "dcgm-counters.csv", "ndfleet-monitoring-setup", "ndfleet-monitoring-setup.service",
    "ndfleet-prometheus.service", "ndfleet-dcgm-exporter.service", "ndfleet-monitoring-setup.timer",
    "ndfleet-metrics.service", "ndfleet-metrics.timer",
)  # fmt: skip
_CONTROLLER_FILES = (
    "ndfleet-monitoring-setup", "ndfleet-monitoring-setup.service", "ndfleet-monitoring-setup.timer",
    "ndfleet-prometheus.service", "ndfleet-slurm-export.service", "ndfleet-slurm-export.timer",
)  # fmt: skip


def _keep_regex(names: tuple[str, ...] | list[str]) -> str:
    return "|".join(re.escape(n) for n in sorted(names))


# Mount points the filesystem collector leaves out, set explicitly: Debian's and Ubuntu's prometheus-node-exporter
# package changes upstream's default to also leave out /mnt and /media (seen in Debian's 1.5.0 `--help`), which
# would hide the NVMe scratch, blob and Lustre mounts (all under /mnt) from the "File systems free" panel. Left out
# here: the pseudo file systems, /run (tmpfs; /run/user/UID comes and goes with every login and job user, a new
# series each time) and Docker's container mounts.
FILESYSTEM_EXCLUDE = "^/(dev|proc|run|sys|var/lib/docker/.+|var/lib/containers/storage/.+)($|/)"
# Network interfaces the netdev collector leaves out, set explicitly too (Debian's package defaults to ^lo$, upstream
# to none): loopback and Docker's bridge carry only the scrapes on the node, and the dcgm-exporter container's veth
# gets a new name at every restart, each a new series. Left: eth0, its accelerated-networking VF and IPoIB.
NETDEV_EXCLUDE = "^(lo|docker0|veth.+)$"


def node_exporter_args() -> str:
    collectors = " ".join(f"--collector.{c}" for c in ex.NODE_EXPORTER_COLLECTORS)
    return (
        f"--web.listen-address={ex.NODE_EXPORTER_ADDRESS} --collector.disable-defaults {collectors} "
        f"--collector.filesystem.mount-points-exclude={FILESYSTEM_EXCLUDE} "
        f"--collector.netdev.device-exclude={NETDEV_EXCLUDE} "
        f"--collector.textfile.directory={ex.TEXTFILE_DIR}"
    )


def build_context(spec: ClusterSpec, island: IslandSpec) -> dict[str, Any]:
    """What a compute node's monitoring templates are rendered with."""
    interval = spec.monitoring.scrape_interval_seconds
    return {
        "stack": spec.stack,
        "vcpus": spec.profile.vcpus,
        "scrape_interval_s": interval,
        "scrape_timeout_s": min(10, interval),
        "azure_cloud": AZURE_CLOUD,
        "dcgm_address": ex.DCGM_EXPORTER_ADDRESS,
        "node_exporter_address": ex.NODE_EXPORTER_ADDRESS,
        "prometheus_address": ex.PROMETHEUS_AGENT_ADDRESS,
        "dcgm_keep_regex": _keep_regex([c.field for c in ex.DCGM_COUNTERS]),
        "node_keep_regex": _keep_regex([*ex.node_exporter_metric_names(), *ex.VALIDATION_METRICS]),
        "gpu": True,
        "machine_label": ("island", island.name),
        "setup_after": "ndfleet-setup.service",
        "start_units": "ndfleet-dcgm-exporter.service ndfleet-metrics.timer",
        "off_without_tags": False,
        "prometheus_version": ex.PROMETHEUS_VERSION,
        "prometheus_url": ex.PROMETHEUS_URL,
        "prometheus_sha256sums_url": ex.PROMETHEUS_SHA256SUMS_URL,
        "prometheus_dir": f"/opt/ndfleet/prometheus-{ex.PROMETHEUS_VERSION}",
        "prometheus_config": PROMETHEUS_CONFIG,
        "prometheus_config_template": PROMETHEUS_CONFIG_TEMPLATE,
        "prometheus_data_dir": PROMETHEUS_DATA_DIR,
        "node_exporter_package": ex.NODE_EXPORTER_PACKAGE,
        "node_exporter_version_pin": ex.NODE_EXPORTER_VERSION_PIN,
        "node_exporter_args": node_exporter_args(),
        "textfile_dir": ex.TEXTFILE_DIR,
        "textfile_path": f"{ex.TEXTFILE_DIR}/{ex.TEXTFILE_NAME}",
        "dcgm_image": ex.DCGM_EXPORTER_IMAGE,
        "dcgm_counters_path": DCGM_COUNTERS_PATH,
        "imds_tags_url": IMDS_TAGS_URL,
        "tag_metrics_endpoint": TAG_METRICS_ENDPOINT,
        "tag_metrics_dcr": TAG_METRICS_DCR,
        "tag_identity_client_id": TAG_IDENTITY_CLIENT_ID,
        "ingest_stream": INGEST_STREAM,
        "ingest_api_version": INGEST_API_VERSION,
        "setup_path": SETUP_PATH,
        "setup_timeout_s": SETUP_TIMEOUT_S,
        "tool_timeout_s": TOOL_TIMEOUT_S,
        "node_program": NODE_APP_PATH,
        "report_path": REPORT_PATH,
        "drain_file": DRAIN_FILE,
        "metrics_refresh_s": METRICS_REFRESH_S,
        "setup_refresh_min": SETUP_REFRESH_MIN,
    }


def _environment() -> jinja2.Environment:
    return environment(TEMPLATES_DIR, hash_comments=True)


def node_files(spec: ClusterSpec, island: IslandSpec) -> list[MachineFile]:
    """Every monitoring file of one island's nodes; empty when the stack has monitoring off."""
    if not spec.monitoring.enabled:
        return []
    ctx = build_context(spec, island)
    out = []
    for template, name, path, mode in _FILES:
        if name not in _NODE_FILES:
            continue
        content = ex.dcgm_counters_csv() if template is None else _environment().get_template(template).render(ctx)
        out.append(MachineFile.text(path, mode, content, name))
    return out


def controller_context(spec: ClusterSpec, python_path: str) -> dict[str, Any]:
    """The compute nodes' context, changed where the Slurm controller differs: no GPU (node_exporter only), the
    label `role` instead of `island`, the Slurm states instead of the validation metrics, the Slurm set-up first.
    `python_path` is where the controller's Python finds the node-program modules it runs
    (ndfleet/slurm/machines.py)."""
    return {
        **build_context(spec, spec.islands[0]),
        "gpu": False,
        "machine_label": ("role", CONTROLLER_ROLE_LABEL),
        "node_keep_regex": _keep_regex([*ex.node_exporter_metric_names(), *ex.SLURM_EXPORT_METRICS]),
        "setup_after": "ndfleet-slurm-setup.service",
        "start_units": "ndfleet-slurm-export.timer",
        "off_without_tags": True,
        "python_path": python_path,
        "slurm_textfile_path": f"{ex.TEXTFILE_DIR}/{ex.SLURM_TEXTFILE_NAME}",
        "slurm_export_every_s": SLURM_EXPORT_EVERY_S,
        "slurm_export_call_timeout_s": SLURM_EXPORT_CALL_TIMEOUT_S,
        "slurm_export_timeout_s": SLURM_EXPORT_TIMEOUT_S,
    }


def controller_files(spec: ClusterSpec, python_path: str) -> list[MachineFile]:
    """The Slurm controller's agent, in its customData whether or not the stack has monitoring on.

    Monitoring on or off (or a new scrape interval) must not rebuild the controller, so what depends on it travels
    elsewhere: the agent's configuration in userData (`controller_config`, updated in place) and the ingestion
    endpoint in the VM's tags. Without those tags the set-up stops the agent and says monitoring is off.
    """
    ctx = controller_context(spec, python_path)
    env = _environment()
    return [
        MachineFile.text(path, mode, env.get_template(template).render(ctx), name)
        for template, name, path, mode in _FILES
        if name in _CONTROLLER_FILES and template is not None
    ]


def controller_config(spec: ClusterSpec, python_path: str) -> dict[str, str]:
    """{path: content} of the controller's agent configuration for its userData; empty when monitoring is off."""
    if not spec.monitoring.enabled:
        return {}
    ctx = controller_context(spec, python_path)
    return {PROMETHEUS_CONFIG_TEMPLATE: _environment().get_template("prometheus.yml.j2").render(ctx)}


def bootstrap_extensions(spec: ClusterSpec, island: IslandSpec) -> BootstrapExtensions | None:
    """What the metrics agent adds to an island's bootstrap (ndfleet.prepare merges it); None when off."""
    if not spec.monitoring.enabled:
        return None
    return BootstrapExtensions(
        files=node_files(spec, island), enable_units=list(ENABLE_UNITS), start_units=list(START_UNITS)
    )
