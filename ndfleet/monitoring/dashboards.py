"""Grafana dashboards as code: fleet overview, per-island fabric view, per-node drill-down.

Plain functions return Grafana dashboard JSON models (schemaVersion 39) whose queries use only metric names the
nodes export (ndfleet/monitoring/exporters.py; a test holds every query to that list). The Azure Monitor
workspace is Managed Grafana's Prometheus data source; each dashboard picks it with a `datasource` variable.
`ndfleet monitoring --stack NAME --out DIR` (docs/monitoring.md) writes them for `az grafana dashboard import`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ndfleet_node.names import JOB_LABEL, JOB_RUN_END_METRIC, JOB_RUN_START_METRIC

from ndfleet.monitoring.series import RESTART_CAUSES
from ndfleet.stackconfig.clusterspec import ClusterSpec

SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
_IB_RATE = "rate({metric}{{{sel}}}[5m])"


def _target(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {"refId": ref, "datasource": DS, "expr": expr, "legendFormat": legend or "__auto"}
    if instant:
        t["instant"] = True
        t["range"] = False
        t["format"] = "table"
    return t


class _Layout:
    """Places panels left to right, 24 grid columns wide, and numbers them."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.x = 0
        self.y = 0
        self.row_h = 0

    def add(self, panel_type: str, title: str, targets: list[dict[str, Any]], w: int = 12, h: int = 8,
            unit: str = "", description: str = "") -> None:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel: dict[str, Any] = {
            "id": len(self.panels) + 1,
            "type": panel_type,
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": {"x": self.x, "y": self.y, "w": w, "h": h},
            "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit} if unit else {}, "overrides": []},
            "options": {},
        }
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)


def _variables(spec: ClusterSpec, *, node: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"name": "datasource", "label": "Azure Monitor workspace", "type": "datasource", "query": "prometheus"},
        {
            "name": "island",
            "label": "island",
            "type": "query",
            "datasource": DS,
            "query": {"query": f'label_values(up{{stack="{spec.stack}"}}, island)', "refId": "island"},
            "definition": f'label_values(up{{stack="{spec.stack}"}}, island)',
            "includeAll": True,
            "multi": True,
            "refresh": 2,
        },
    ]
    if node:
        query = f'label_values(up{{stack="{spec.stack}", island=~"$island"}}, node)'
        out.append(
            {
                "name": "node",
                "label": "node",
                "type": "query",
                "datasource": DS,
                "query": {"query": query, "refId": "node"},
                "definition": query,
                "includeAll": False,
                "multi": False,
                "refresh": 2,
            }
        )
    return out


def _dashboard(spec: ClusterSpec, uid: str, title: str, layout: _Layout, *, node_var: bool) -> dict[str, Any]:
    return {
        "uid": f"ndfleet-{spec.stack}-{uid}"[:40],
        "title": f"ndfleet {spec.stack}: {title}",
        "tags": ["ndfleet", spec.stack],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "templating": {"list": _variables(spec, node=node_var)},
        "panels": layout.panels,
    }


def fleet_overview(spec: ClusterSpec) -> dict[str, Any]:
    s = f'stack="{spec.stack}", island=~"$island"'
    gpus = spec.profile.gpus_per_vm
    lay = _Layout()
    lay.add("stat", "Healthy nodes", [_target(f"sum(ndfleet_node_healthy{{{s}}})")], w=6, h=4)
    lay.add("stat", "Unhealthy nodes",
            [_target(f"sum(ndfleet_node_validated{{{s}}}) - sum(ndfleet_node_healthy{{{s}}})")], w=6, h=4)
    lay.add("stat", "Drained nodes", [_target(f"sum(ndfleet_node_drained{{{s}}})")], w=6, h=4)
    lay.add("stat", "GPUs in service",
            [_target(f"count(DCGM_FI_DEV_GPU_TEMP{{{s}}} * on(node) group_left() (ndfleet_node_healthy{{{s}}} == 1))")],
            w=6, h=4, description=f"GPUs reporting on healthy nodes ({gpus} per node).")
    lay.add("bargauge", "Healthy / unhealthy nodes per island", [
        _target(f"sum by (island) (ndfleet_node_healthy{{{s}}})", "{{island}} healthy", "A"),
        _target(f"sum by (island) (ndfleet_node_validated{{{s}}}) - sum by (island) (ndfleet_node_healthy{{{s}}})",
                "{{island}} unhealthy", "B"),
    ], w=12)
    lay.add("timeseries", "Mean GPU utilisation per island",
            [_target(f"avg by (island) (DCGM_FI_DEV_GPU_UTIL{{{s}}})", "{{island}}")], unit="percent")
    lay.add("table", "Failed validation checks",
            [_target(f'ndfleet_validation_check_status{{{s}, status="fail"}}', instant=True)], w=12)
    lay.add("table", "Nodes not reporting (exporter down)",
            [_target(f"up{{{s}}} == 0", instant=True)], w=12)
    lay.add("timeseries", "Xid errors (last Xid per GPU)",
            [_target(f"DCGM_FI_DEV_XID_ERRORS{{{s}}} > 0", "{{node}} GPU {{gpu}}")], w=24)
    if spec.scheduler == "slurm":
        _goodput_panels(spec, lay)
    return _dashboard(spec, "fleet", "fleet overview", lay, node_var=False)


def _goodput_panels(spec: ClusterSpec, lay: _Layout) -> None:
    """The goodput report's node states over time (docs/goodput.md), from the controller's published Slurm states.
    Their `island` label is the controller's, so the node's island is read from its host name
    (`<namePrefix>-<island>-<n>`) and the $island variable does not apply."""
    def by_island(state: str) -> str:
        selector = f'ndfleet_slurm_node_state{{stack="{spec.stack}",{state}}} == 1'
        return (f'count by (slurm_island) (label_replace({selector}, "slurm_island", "$1", "slurm_node", '
                f'"(?i){spec.name_prefix}-(.+)-[^-]+"))')  # fmt: skip

    serving, paid = 'state=~"idle|allocated|mixed|completing"', 'state!~"powered_down|spare"'
    lay.add("timeseries", "Nodes by Slurm state (goodput)",
            [_target(f'count by (state) (ndfleet_slurm_node_state{{stack="{spec.stack}"}} == 1)', "{{state}}")],
            description="What `ndfleet goodput` integrates: running (allocated, mixed, completing), idle, drained, "
            "down, burn-in. Not filtered by the island variable.")
    lay.add("timeseries", "Share of nodes in service in Slurm per island",
            [_target(by_island(serving) + " / " + by_island(paid), "{{slurm_island}}")],
            unit="percentunit",
            description="In service (idle, allocated, mixed, completing) over the nodes paid for and meant for "
            "jobs (powered-down elastic nodes and held warm spares left out), as `ndfleet goodput` counts; "
            "IslandInServiceLow fires when an island "
            "stays below its floor (docs/goodput.md).")
    # The controller's job series (ndfleet_node.slurm_export, from Slurm accounting): one start and one end per run
    # of each job that was requeued or ended by a node failure, the end labelled with the run's accounting state.
    runs = f'{JOB_RUN_START_METRIC}{{stack="{spec.stack}"}}'
    restarted = f'{JOB_RUN_END_METRIC}{{stack="{spec.stack}",state=~"{"|".join(RESTART_CAUSES)}"}}'
    lay.add("table", "Requeued and node-failed jobs: runs per job",
            [_target(f"count by ({JOB_LABEL}) ({runs})", instant=True)],
            description="Each job Slurm requeued or ended by a node failure, and how many times it ran; "
            "`ndfleet goodput` gives each one's ETTR (docs/goodput.md, \"Jobs\").")
    lay.add("table", "Latest restart time per job",
            [_target(f"(max by ({JOB_LABEL}) ({runs}) - max by ({JOB_LABEL}) ({restarted})) > 0", instant=True)],
            unit="s",
            description="From the end of a job's last requeued, preempted or node-failed run to the start of its "
            "next run: the requeue hold (slurm.requeueHoldSeconds), the wait for nodes and the start. A job not "
            "started again yet is not listed. Percentiles over every restart: `ndfleet goodput`.")


def island_fabric(spec: ClusterSpec) -> dict[str, Any]:
    sel = f'stack="{spec.stack}", island=~"$island", device=~"{"|".join(spec.profile.ib_devices)}"'
    rate_bytes = spec.profile.ib_rate_gbps * 1_000_000_000 // 8
    lay = _Layout()
    lay.add("timeseries", "IB receive per port", [
        _target(_IB_RATE.format(metric="node_infiniband_port_data_received_bytes_total", sel=sel),
                "{{node}} {{device}}")], unit="Bps")
    lay.add("timeseries", "IB transmit per port", [
        _target(_IB_RATE.format(metric="node_infiniband_port_data_transmitted_bytes_total", sel=sel),
                "{{node}} {{device}}")], unit="Bps")
    lay.add("timeseries", "Symbol errors per port", [
        _target(f"increase(node_infiniband_symbol_error_total{{{sel}}}[15m]) > 0", "{{node}} {{device}}")])
    lay.add("timeseries", "Receive errors per port", [
        _target(f"increase(node_infiniband_port_errors_received_total{{{sel}}}[15m]) > 0", "{{node}} {{device}}")])
    lay.add("timeseries", "Link downed events per port", [
        _target(f"increase(node_infiniband_link_downed_total{{{sel}}}[1h]) > 0", "{{node}} {{device}}")])
    lay.add("timeseries", "Transmit wait (congestion) per port", [
        _target(_IB_RATE.format(metric="node_infiniband_port_transmit_wait_total", sel=sel), "{{node}} {{device}}")])
    lay.add("table", "Ports not ACTIVE or below line rate", [
        _target(f"node_infiniband_state_id{{{sel}}} != 4", instant=True, ref="A"),
        _target(f"node_infiniband_rate_bytes_per_second{{{sel}}} < {rate_bytes}", instant=True, ref="B"),
    ], w=24, description=f"State 4 = ACTIVE; line rate {spec.profile.ib_rate_gbps} Gb/s.")
    return _dashboard(spec, "fabric", "InfiniBand fabric per island", lay, node_var=False)


def node_drilldown(spec: ClusterSpec) -> dict[str, Any]:
    n = f'stack="{spec.stack}", node="$node"'
    ib = f'{n}, device=~"{"|".join(spec.profile.ib_devices)}"'
    lay = _Layout()
    lay.add("stat", "Validation", [_target(f"ndfleet_node_healthy{{{n}}}")], w=6, h=4,
            description="1 = healthy, 0 = unhealthy or not validated yet")
    lay.add("table", "Validation checks (last run)",
            [_target(f"ndfleet_validation_check_status{{{n}}}", instant=True)], w=18, h=8)
    lay.add("timeseries", "GPU utilisation", [_target(f"DCGM_FI_DEV_GPU_UTIL{{{n}}}", "GPU {{gpu}}")],
            unit="percent")
    lay.add("timeseries", "GPU memory used", [_target(f"DCGM_FI_DEV_FB_USED{{{n}}}", "GPU {{gpu}}")], unit="decmbytes")
    lay.add("timeseries", "GPU temperature", [
        _target(f"DCGM_FI_DEV_GPU_TEMP{{{n}}}", "GPU {{gpu}}", "A"),
        _target(f"DCGM_FI_DEV_MEMORY_TEMP{{{n}}}", "HBM {{gpu}}", "B"),
    ], unit="celsius")
    lay.add("timeseries", "GPU power", [_target(f"DCGM_FI_DEV_POWER_USAGE{{{n}}}", "GPU {{gpu}}")], unit="watt")
    lay.add("timeseries", "Throttled time (thermal, power)", [
        _target(f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{{{n}}}[5m]) / 1e6", "thermal {{gpu}}", "A"),
        _target(f"rate(DCGM_FI_DEV_POWER_VIOLATION{{{n}}}[5m]) / 1e6", "power {{gpu}}", "B"),
    ], unit="percentunit")
    lay.add("timeseries", "ECC and row remapping", [
        _target(f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{n}}}", "SBE {{gpu}}", "A"),
        _target(f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{n}}}", "DBE {{gpu}}", "B"),
        _target(f"DCGM_FI_DEV_ROW_REMAP_PENDING{{{n}}}", "remap pending {{gpu}}", "C"),
        _target(f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{n}}}", "uncorrectable rows {{gpu}}", "D"),
    ])
    lay.add("timeseries", "NVLink and PCIe errors", [
        _target(f"increase(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL{{{n}}}[15m])", "NVLink FLIT CRC {{gpu}}", "A"),
        _target(f"increase(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL{{{n}}}[15m])", "NVLink replay {{gpu}}", "B"),
        _target(f"increase(DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{n}}}[15m])", "PCIe replay {{gpu}}", "C"),
    ])
    lay.add("timeseries", "Last Xid per GPU", [_target(f"DCGM_FI_DEV_XID_ERRORS{{{n}}}", "GPU {{gpu}}")])
    lay.add("timeseries", "IB throughput per port", [
        _target(_IB_RATE.format(metric="node_infiniband_port_data_received_bytes_total", sel=ib), "rx {{device}}", "A"),
        _target(_IB_RATE.format(metric="node_infiniband_port_data_transmitted_bytes_total", sel=ib), "tx {{device}}",
                "B"),
    ], unit="Bps")
    lay.add("table", "IB ports", [
        _target(f"node_infiniband_state_id{{{ib}}}", instant=True, ref="A"),
        _target(f"node_infiniband_rate_bytes_per_second{{{ib}}}", instant=True, ref="B"),
    ])
    lay.add("timeseries", "CPU busy", [
        _target(f'1 - avg(rate(node_cpu_seconds_total{{{n}, mode="idle"}}[5m]))', "busy")], unit="percentunit")
    lay.add("timeseries", "Memory available", [
        _target(f"node_memory_MemAvailable_bytes{{{n}}} / node_memory_MemTotal_bytes{{{n}}}", "available")],
        unit="percentunit")
    lay.add("timeseries", "NVMe throughput", [
        _target(f'rate(node_disk_read_bytes_total{{{n}, device=~"nvme.*|md.*"}}[5m])', "read {{device}}", "A"),
        _target(f'rate(node_disk_written_bytes_total{{{n}, device=~"nvme.*|md.*"}}[5m])', "write {{device}}", "B"),
    ], unit="Bps")
    lay.add("timeseries", "File systems free", [
        _target(f"node_filesystem_avail_bytes{{{n}}} / node_filesystem_size_bytes{{{n}}}", "{{mountpoint}}")],
        unit="percentunit")
    return _dashboard(spec, "node", "node drill-down", lay, node_var=True)


def dashboards(spec: ClusterSpec) -> dict[str, dict[str, Any]]:
    """file name -> dashboard JSON model."""
    return {
        "fleet-overview.json": fleet_overview(spec),
        "island-fabric.json": island_fabric(spec),
        "node-drilldown.json": node_drilldown(spec),
    }


def dashboard_files(spec: ClusterSpec) -> dict[str, str]:
    return {name: json.dumps(model, indent=2, sort_keys=True) + "\n" for name, model in dashboards(spec).items()}


def queries(model: dict[str, Any]) -> list[str]:
    """Every PromQL expression in a dashboard: panel targets and query variables."""
    out = [t["expr"] for p in model["panels"] for t in p["targets"]]
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            # Grafana's label_values(<selector>, <label>): the selector is the PromQL part.
            match = re.fullmatch(r"label_values\((.*),\s*\w+\)", var["definition"])
            out.append(match.group(1) if match else var["definition"])
    return out


def panels_markdown(spec: ClusterSpec) -> str:
    """Each dashboard's panels, for docs/monitoring.md (a test keeps the two equal)."""
    lines = []
    for name, model in dashboards(spec).items():
        lines += ["", f"**{model['title']}** (`{name}`):", ""]
        lines += [f"- {p['title']}" for p in model["panels"]]
    return "\n".join(lines).strip("\n")
