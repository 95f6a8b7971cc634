"""The fleet's alerts: one table, generated from the VM-size profile and the stack's monitoring settings.

Each alert names the node (every series carries the agent's external labels stack, island, node and
physical_host) and says what to do. The same table becomes a Prometheus rule file (checked and unit-tested with
`promtool`) and the `alertsmanagement` PrometheusRuleGroup resources Azure Monitor evaluates
(components/monitoring.py), so what is tested is what is deployed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml

from ndfleet.monitoring.series import island_query_selector
from ndfleet.stackconfig.clusterspec import ClusterSpec

# Azure Monitor alert severities (0 = Critical ... 4 = Verbose) for our three levels.
AZURE_SEVERITY = {"critical": 0, "warning": 2, "info": 3}
# Rule groups: Azure evaluates each PrometheusRuleGroup at its interval.
EVALUATION_INTERVAL_MINUTES = 1
RULE_GROUPS = ("gpu", "fabric", "node", "fleet", "goodput")
# Azure Monitor managed Prometheus takes at most 20 rules per rule group (Microsoft Learn, "Azure Monitor service
# limits", Prometheus alert and recording rules). A table group with more (IslandCapacityLow is one rule per
# island) is deployed as several rule groups: `fleet`, `fleet-2`, ... (`rule_groups`).
MAX_RULES_PER_GROUP = 20

# Xid 79: "GPU has fallen off the bus" (NVIDIA Xid catalogue); it has its own alert.
XID_FELL_OFF_BUS = 79
# sysfs /sys/class/infiniband/<dev>/ports/<n>/state: 4 = ACTIVE (IBTA; node_exporter's state_id).
IB_STATE_ACTIVE = 4


@dataclass(frozen=True)
class Alert:
    name: str
    group: str
    expr: str
    for_minutes: int
    severity: str  # critical | warning | info
    summary: str  # names the node; Prometheus templates ({{ $labels.node }}) allowed
    action: str  # what to do
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def for_prometheus(self) -> str:
        return f"{self.for_minutes}m"

    @property
    def for_iso8601(self) -> str:
        return f"PT{self.for_minutes}M"

    @property
    def annotations(self) -> dict[str, str]:
        return {"summary": self.summary, "action": self.action}

    @property
    def all_labels(self) -> dict[str, str]:
        return {"severity": self.severity, **dict(self.labels)}


_NODE = "{{ $labels.node }} (island {{ $labels.island }}, host {{ $labels.physical_host }})"
_GPU = _NODE + " GPU {{ $labels.gpu }}"
_PORT = _NODE + " port {{ $labels.device }}/{{ $labels.port }}"


def _ib_devices(spec: ClusterSpec) -> str:
    return "|".join(spec.profile.ib_devices)


def alerts(spec: ClusterSpec) -> list[Alert]:
    """Every alert for the stack, in table order (docs/monitoring.md shows the same table)."""
    p, t, m = spec.profile, spec.profile.thresholds, spec.profile.monitoring
    fatal_xids = [x for x in t.xid_fail_codes if x != XID_FELL_OFF_BUS]
    xid_expr = " or ".join(f"DCGM_FI_DEV_XID_ERRORS == {x}" for x in fatal_xids)
    ib = f'device=~"{_ib_devices(spec)}"'
    ib_rate_bytes = p.ib_rate_gbps * 1_000_000_000 // 8
    throttle_us_per_s = m.throttle_fraction * 1_000_000
    out = [
        Alert(
            "GpuXidFatal", "gpu", xid_expr, 0, "critical",
            f"{_GPU} reported fatal Xid {{{{ $value }}}}",
            "Drain the node; Xids in this set need a GPU reset or node replacement. If it returns after a "
            "reboot, replace the node (Restart/Reimage repair, or deallocate and let Azure move it).",
        ),
        Alert(
            "GpuFellOffBus", "gpu",
            f"DCGM_FI_DEV_XID_ERRORS == {XID_FELL_OFF_BUS} or "
            f"count by (stack, island, node, physical_host) (DCGM_FI_DEV_GPU_TEMP) < {p.gpus_per_vm}",
            0, "critical",
            f"{_NODE} lost a GPU (Xid 79 or fewer than {p.gpus_per_vm} GPUs reporting)",
            "Drain and replace the node: a GPU that fell off the PCIe bus does not come back without a host "
            "repair. Report the physical host to Azure support if it repeats.",
        ),
        Alert(
            "GpuEccUncorrectable", "gpu",
            f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > {t.ecc_dram_uncorrectable_max}",
            0, "critical",
            f"{_GPU} has uncorrectable ECC errors",
            "Drain the node and reset the GPU (reboot) so the row remap takes effect; replace the node if "
            "uncorrectable errors return or a remap fails.",
        ),
        Alert(
            "GpuRowRemapPending", "gpu", "DCGM_FI_DEV_ROW_REMAP_PENDING > 0", 0, "warning",
            f"{_GPU} has a row remap pending a GPU reset",
            "Drain the node when its job ends and reboot it; the remap takes effect at the next GPU reset.",
        ),
        Alert(
            "GpuRowRemapFailed", "gpu", "DCGM_FI_DEV_ROW_REMAP_FAILURE > 0", 0, "critical",
            f"{_GPU} failed to remap a memory row",
            "Replace the node: the GPU has no spare rows left (NVIDIA: RMA condition).",
        ),
        Alert(
            "GpuThermalThrottle", "gpu",
            f"rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m]) > {throttle_us_per_s:g}",
            m.throttle_for_minutes, "warning",
            f"{_GPU} thermally throttled over {m.throttle_fraction:.0%} of the time for {m.throttle_for_minutes}m",
            "Check the GPU temperature panel; if one GPU runs hot while others do not, drain the node and "
            "report the physical host to Azure support (cooling).",
        ),
        Alert(
            "GpuPowerThrottle", "gpu",
            f"rate(DCGM_FI_DEV_POWER_VIOLATION[5m]) > {throttle_us_per_s:g}",
            m.throttle_for_minutes, "warning",
            f"{_GPU} power throttled over {m.throttle_fraction:.0%} of the time for {m.throttle_for_minutes}m",
            "Check the power panel and `nvidia-smi -q -d PERFORMANCE`; a power brake or cap on one node "
            "slows every rank: drain it and report the host.",
        ),
        Alert(
            "IbPortDown", "fabric", f"node_infiniband_state_id{{{ib}}} != {IB_STATE_ACTIVE}",
            m.ib_port_down_for_minutes, "critical",
            f"{_PORT} is not ACTIVE",
            "Drain the node; run `ibstat` on it. A port that stays down needs the node replaced "
            "(Reimage or Replace repair); NCCL jobs across the island will fail or slow down.",
        ),
        Alert(
            "IbPortFlapping", "fabric",
            f"increase(node_infiniband_link_downed_total{{{ib}}}[{t.ib_flap_window_hours}h]) > {t.ib_link_down_max}",
            0, "warning",
            f"{_PORT} went down more than {t.ib_link_down_max} times in {t.ib_flap_window_hours}h",
            "Drain the node and replace it; a flapping link breaks collective operations. Report the physical "
            "host if the replacement flaps too.",
        ),
        Alert(
            "IbLinkRateLow", "fabric",
            f"node_infiniband_rate_bytes_per_second{{{ib}}} < {ib_rate_bytes}",
            m.ib_port_down_for_minutes, "critical",
            f"{_PORT} links below {p.ib_rate_gbps} Gb/s",
            "Drain the node; a downtrained link caps the whole job's all-reduce. Reboot once; replace the node "
            "if the rate stays low.",
        ),
        Alert(
            "NodeUnhealthy", "node", "ndfleet_node_validated == 1 and ndfleet_node_healthy == 0",
            m.node_unhealthy_for_minutes, "warning",
            f"{_NODE} failed validation and is still in the scale set",
            "Read /run/ndfleet/report.json on the node (failed checks are on the node dashboard). Automatic "
            "repairs should replace it; if not, check the scale set's repair state or repair it by hand.",
        ),
        Alert(
            "NodeDrained", "node", "ndfleet_node_drained == 1", m.node_drained_for_minutes, "info",
            f"{_NODE} has been drained for over {m.node_drained_for_minutes}m",
            "Resume the node or replace it; a drained node is paid for and idle.",
        ),
        Alert(
            "ExporterDown", "node", 'up{job=~"dcgm|node"} == 0', m.exporter_silent_for_minutes, "warning",
            f"{_NODE}: the {{{{ $labels.job }}}} exporter does not answer",
            "On the node: `systemctl status ndfleet-dcgm-exporter prometheus-node-exporter`; without it the "
            "GPU or fabric alerts of this node cannot fire.",
        ),
        Alert(
            "NodeMetricsSilent", "node", "max_over_time(up[1h]) unless max_over_time(up[5m])",
            0, "warning",
            f"{_NODE} stopped sending metrics",
            "If the node was deleted or replaced, this clears within the hour. Otherwise check "
            "`systemctl status ndfleet-prometheus` on it and that it can reach the data collection endpoint.",
        ),
    ]
    for island in spec.islands:
        floor = island_capacity_floor(island.nodes, spec.monitoring.island_capacity_alert_fraction)
        out.append(
            Alert(
                "IslandCapacityLow", "fleet",
                f'(sum(ndfleet_node_healthy{{island="{island.name}"}}) or vector(0)) < {floor}',
                m.island_capacity_for_minutes, "critical",
                f"island {island.name}: fewer than {floor} of {island.nodes} nodes healthy",
                "Look at the fleet dashboard for the island's unhealthy nodes and pending repairs; jobs sized for "
                "the whole island will not start. Check quota and capacity in the region if repairs fail.",
                labels=(("island", island.name), ("stack", spec.stack)),
            )
        )
    if spec.scheduler == "slurm":
        out += in_service_alerts(spec)
    return out


# The Slurm states in which a node takes or runs jobs (ndfleet.status.metrics_view.SLURM_SERVING, the goodput
# report's "in service").
_IN_SERVICE_STATES = "idle|allocated|mixed|completing"


def in_service_alerts(spec: ClusterSpec) -> list[Alert]:
    """IslandInServiceLow, one rule per island (docs/goodput.md): fewer of the island's nodes in service in Slurm,
    as the controller publishes them (ndfleet_slurm_node_state, whose `slurm_node` is the host name
    `<namePrefix>-<island>-<n>`), than the island's capacity floor. It counts what IslandCapacityLow does not: a
    healthy node drained by hand, held by the burn-in or down in Slurm. The floor is a share of the nodes the island
    keeps in service (`nodes` less its warm spares, which the controller holds out of scheduling on purpose)."""

    out = []
    m = spec.profile.monitoring
    for island in spec.islands:
        floor = island_capacity_floor(island.in_service, spec.monitoring.island_capacity_alert_fraction)
        selector = island_query_selector(spec, island.name, f'state=~"{_IN_SERVICE_STATES}"')
        out.append(
            Alert(
                "IslandInServiceLow", "goodput",
                f"(count({selector} == 1) or vector(0)) < {floor}",
                m.island_capacity_for_minutes, "warning",
                f"island {island.name}: fewer than {floor} of {island.in_service} nodes in service in Slurm",
                "Run `ndfleet status` for the island's drained, down and burn-in nodes and `ndfleet goodput` for "
                "where the hours went; resume nodes an operator drained and left, and check the repair queue.",
                labels=(("island", island.name), ("stack", spec.stack)),
            )
        )
    return out


def island_capacity_floor(nodes: int, fraction: float) -> int:
    """The fewest healthy nodes that do not raise IslandCapacityLow: `fraction` of `nodes`, rounded up to a whole
    node (healthy nodes are counted in whole nodes: fewer than 57.6 of 64 is fewer than 58). The product is rounded
    to 9 places first, so 0.7 x 10 (7.000000000000001 in floating point) stays 7."""
    return math.ceil(round(nodes * fraction, 9))


def rule_groups(table: list[Alert]) -> list[tuple[str, list[Alert]]]:
    """The table as (rule group name, rules), in RULE_GROUPS order, none over MAX_RULES_PER_GROUP: a larger
    group is split in table order into `name`, `name-2`, `name-3`, ... (the first keeps its name, so a stack that
    grows past the limit keeps its existing rule group)."""
    out: list[tuple[str, list[Alert]]] = []
    for group in RULE_GROUPS:
        rules = [a for a in table if a.group == group]
        for start in range(0, len(rules), MAX_RULES_PER_GROUP):
            part = start // MAX_RULES_PER_GROUP + 1
            out.append((group if part == 1 else f"{group}-{part}", rules[start : start + MAX_RULES_PER_GROUP]))
    return out


def rule_file(spec: ClusterSpec) -> dict[str, Any]:
    """The alerts as a Prometheus rule file (groups -> rules), for promtool and for review; the same groups as
    the deployed PrometheusRuleGroups (`rule_groups`)."""
    return {
        "groups": [
            {
                "name": f"ndfleet-{group}",
                "interval": f"{EVALUATION_INTERVAL_MINUTES}m",
                "rules": [
                    {
                        "alert": a.name,
                        "expr": a.expr,
                        "for": a.for_prometheus,
                        "labels": a.all_labels,
                        "annotations": a.annotations,
                    }
                    for a in rules
                ],
            }
            for group, rules in rule_groups(alerts(spec))
        ]
    }


def rule_file_yaml(spec: ClusterSpec) -> str:
    return yaml.safe_dump(rule_file(spec), sort_keys=False, width=1000)


def alerts_table_markdown(spec: ClusterSpec) -> str:
    """The alert table docs/monitoring.md carries for the prod example (a test keeps the two equal)."""
    lines = ["| alert | expression | for | severity | what to do |", "|---|---|---|---|---|"]
    seen: set[str] = set()
    for a in alerts(spec):
        if a.name in seen:  # IslandCapacityLow, IslandInServiceLow: one rule per island, shown once
            continue
        seen.add(a.name)
        expr = a.expr.replace("|", "\\|")
        if a.name in ("IslandCapacityLow", "IslandInServiceLow"):
            expr += f" (one rule per island; here island {dict(a.labels)['island']})"
        lines.append(f"| `{a.name}` | `{expr}` | {a.for_prometheus} | {a.severity} | {a.action} |")
    return "\n".join(lines)
