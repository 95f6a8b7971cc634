"""The series budget: how many active series a stack sends its Azure Monitor workspace, against the workspace's limits.

A workspace takes, by default, 1,000,000 active time series (series that received a sample in the last ~12 hours)
and 1,000,000 events (samples) per minute; both can be raised on request (Microsoft Learn, "Azure Monitor service
limits", Prometheus metrics > Ingestion: https://learn.microsoft.com/azure/azure-monitor/fundamentals/service-limits).
Past a limit Azure throttles ingestion. Microsoft's documented ways out ("Best practices for scaling Azure Monitor
Workspaces", https://learn.microsoft.com/azure/azure-monitor/metrics/azure-monitor-workspace-scaling-best-practice):
request a limit increase, split the data over more workspaces, or send fewer series.

Each node's series come from ndfleet/monitoring/cost.py (held to the real exporters' output by
tests/monitoring/test_series_budget.py); this adds the Slurm controller and compares the cluster with the limits.
`ndfleet plan` prints the figures and warns before deploying when a limit would be crossed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ndfleet_node import slurm_export
from ndfleet_node.names import JOB_RUN_END_METRIC, JOB_RUN_START_METRIC

from ndfleet.cost.money import usd
from ndfleet.cost.month import MINUTES_PER_MONTH, MONTH_NAME
from ndfleet.monitoring import cost, exporters
from ndfleet.slurm.machines import NFS_MOUNTS
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.profiles import MACHINE_SIZES
from ndfleet.stackconfig.settings import NAMESPACE

# Microsoft Learn, Azure Monitor service limits, Prometheus metrics > Ingestion (page dated 2025-08-28): the
# defaults of an Azure Monitor workspace. Both "You can request an increase".
WORKSPACE_ACTIVE_SERIES_LIMIT = 1_000_000
WORKSPACE_EVENTS_PER_MINUTE_LIMIT = 1_000_000
LIMITS_SOURCE = "Microsoft Learn, Azure Monitor service limits, Prometheus metrics"
# What one GPU node may send (issue 28): the per-node figure the tests hold the exporters' real output to.
SERIES_PER_NODE_BUDGET = 2_000
# The Slurm controller's VM size when it is not in ndfleet's table: counted as the largest listed (more CPUs, more
# node_cpu_seconds_total series), so the estimate errs high.
_UNKNOWN_CONTROLLER_VCPUS = max(s.vcpus for s in MACHINE_SIZES.values())


@dataclass(frozen=True)
class SeriesBudget:
    nodes: int
    series_per_node: int
    # The Slurm controller: its own series, and one more per node (that node's Slurm state); 0 and 0 without Slurm.
    controller_own: int
    controller_per_node: int
    scrape_interval_s: int

    @property
    def controller_series(self) -> int:
        return self.controller_own + self.nodes * self.controller_per_node

    @property
    def series(self) -> int:
        return self.nodes * self.series_per_node + self.controller_series

    @property
    def events_per_minute(self) -> float:
        """The stack's samples per minute, nodes and Slurm controller: the one figure `plan`, `monitoring`, the
        bill and docs/monitoring.md give."""
        return self.series * 60 / self.scrape_interval_s

    @property
    def samples_per_month(self) -> float:
        return self.events_per_minute * MINUTES_PER_MONTH

    @property
    def ingestion_usd_per_month(self) -> float:
        return cost.ingestion_usd(self.samples_per_month)

    @property
    def max_nodes(self) -> int:
        """The most GPU nodes one workspace holds at its default limits, at this stack's scrape interval."""
        by_events = WORKSPACE_EVENTS_PER_MINUTE_LIMIT * self.scrape_interval_s / 60
        room = min(WORKSPACE_ACTIVE_SERIES_LIMIT, by_events) - self.controller_own
        return max(0, math.floor(room / (self.series_per_node + self.controller_per_node)))


def controller_own_series(spec: ClusterSpec) -> int:
    """The Slurm controller's series besides one per node (0 without Slurm): node_exporter's collectors on a VM
    without GPUs, InfiniBand or Docker, the Slurm exporter's two, its scrape target's (agent.controller_config)."""
    if spec.scheduler != "slurm" or spec.slurm is None:
        return 0
    size = MACHINE_SIZES.get(spec.slurm.controller_vm_size)
    vcpus = size.vcpus if size is not None else _UNKNOWN_CONTROLLER_VCPUS
    host = {
        "cpu": vcpus,
        "loadavg": 3,
        "meminfo": 2,
        # Slurm's state disk instead of the NVMe RAID0, and the NFS shares (counted whether or not it mounts them)
        "filesystem": 3 * (cost.BASE_FILESYSTEMS + len(NFS_MOUNTS)),
        "diskstats": 3 * cost.BASE_BLOCK_DEVICES,  # the state disk instead of the md device
        "netdev": 2 * cost.BASE_INTERFACES,
        "infiniband": 0,
        "textfile": 2,
    }
    assert set(host) == set(exporters.NODE_EXPORTER_COLLECTORS)
    # ndfleet_slurm_node_state is counted per node, the job runs' series by the export's bound; the rest are one each
    slurm = len(set(exporters.SLURM_EXPORT_METRICS) - {SLURM_NODE_METRIC, JOB_RUN_START_METRIC, JOB_RUN_END_METRIC})
    return sum(host.values()) + slurm + JOB_RUN_SERIES + cost.SERIES_PER_TARGET


# The controller's job series (ndfleet_node.slurm_export): a start and an end for each published run, at most
# MAX_JOBS jobs of MAX_RUNS_PER_JOB runs at a time. A job that leaves the published set (followed past FOLLOW_DAYS,
# or pushed out by newer ones) stays active for ~12 hours more: this is the steady bound, as for the node states.
JOB_RUN_SERIES = 2 * slurm_export.MAX_JOBS * slurm_export.MAX_RUNS_PER_JOB


SLURM_NODE_METRIC = "ndfleet_slurm_node_state"
# The controller's `ndfleet_slurm_node_state{slurm_node, state, reason}`: one series per node. A node whose Slurm
# state or drain reason changes starts a new one, active for ~12 hours: this is the steady count.
SLURM_SERIES_PER_NODE = 1


def budget(spec: ClusterSpec) -> SeriesBudget:
    return SeriesBudget(
        nodes=spec.total_nodes,
        series_per_node=cost.estimate(spec).series_per_node,
        controller_own=controller_own_series(spec),
        controller_per_node=SLURM_SERIES_PER_NODE if spec.scheduler == "slurm" else 0,
        scrape_interval_s=spec.monitoring.scrape_interval_seconds,
    )


def workspace_warnings(spec: ClusterSpec) -> list[str]:
    """What `ndfleet plan` warns about before deploying: a stack whose monitoring would cross a default limit of its
    Azure Monitor workspace, and what to do."""
    if not spec.monitoring.enabled:
        return []
    b = budget(spec)
    remedies = (
        "ask Azure support to raise the workspace's limit before deploying (Microsoft Learn: Azure Monitor service "
        "limits; the workspace's ActiveTimeSeries and EventsPerMinuteIngested metrics show the use), split the "
        "cluster over more stacks (each has its own workspace), or send fewer series (docs/monitoring.md, series "
        "budget)"
    )
    warnings = []
    if b.series > WORKSPACE_ACTIVE_SERIES_LIMIT:
        warnings.append(
            f"{NAMESPACE}:monitoring.enabled with {b.nodes:,} nodes: about {b.series:,} active series "
            f"({b.series_per_node:,} per node), more than the {WORKSPACE_ACTIVE_SERIES_LIMIT:,} an Azure Monitor "
            f"workspace takes by default (it holds about {b.max_nodes:,} nodes); Azure throttles the rest: " + remedies
        )
    if b.events_per_minute > WORKSPACE_EVENTS_PER_MINUTE_LIMIT:
        warnings.append(
            f"{NAMESPACE}:monitoring.scrapeIntervalSeconds = {b.scrape_interval_s} with {b.nodes:,} nodes: about "
            f"{b.events_per_minute:,.0f} samples per minute, more than the {WORKSPACE_EVENTS_PER_MINUTE_LIMIT:,} an "
            f"Azure Monitor workspace ingests per minute by default; Azure throttles the rest: scrape less often "
            f"(scrapeIntervalSeconds: {2 * b.scrape_interval_s} halves it), or " + remedies
        )
    return warnings


def plan_lines(spec: ClusterSpec) -> list[str]:
    """The monitoring line of `ndfleet plan`'s summary; none when monitoring is off."""
    if not spec.monitoring.enabled:
        return []
    b = budget(spec)
    return [
        f"  monitoring: about {b.series:,} active series ({b.series_per_node:,} per node), "
        f"{b.events_per_minute:,.0f} samples/min; an Azure Monitor workspace takes "
        f"{WORKSPACE_ACTIVE_SERIES_LIMIT:,} and {WORKSPACE_EVENTS_PER_MINUTE_LIMIT:,}/min by default, about "
        f"{b.max_nodes:,} nodes at this scrape interval"
    ]


def ingestion_line(spec: ClusterSpec) -> str:
    """The plan's line for what ingestion costs, with the meter's region (East US, whatever the stack's)."""
    return (f"  monitoring ingestion: about {usd(budget(spec).ingestion_usd_per_month)} per {MONTH_NAME} on top, "
            f"{cost.PRICE_NOTE} (docs/monitoring.md)")  # fmt: skip


def as_json(spec: ClusterSpec) -> dict[str, object] | None:
    """The monitoring figures of the plan's JSON summary (the ones plan_lines and ingestion_line print); None off."""
    if not spec.monitoring.enabled:
        return None
    b = budget(spec)
    return {
        "activeSeries": b.series,
        "seriesPerNode": b.series_per_node,
        "samplesPerMinute": round(b.events_per_minute),
        "scrapeIntervalSeconds": b.scrape_interval_s,
        "nodesPerWorkspace": b.max_nodes,
        "ingestionUsdPerMonth": round(b.ingestion_usd_per_month, 2),
        "ingestionPriceRegion": cost.PRICE_REGION,
        "usdPer10MSamples": cost.USD_PER_10M_SAMPLES,
    }


def cost_markdown(spec: ClusterSpec) -> str:
    """The cost table docs/monitoring.md carries for the prod example (a test keeps the two equal)."""
    c = cost.estimate(spec)
    b = budget(spec)
    lines = ["| source | series per node |", "|---|---|"]
    lines += [f"| {name} | {n:,} |" for name, n in c.series_by_source.items()]
    controller = f" (and the Slurm controller's {b.controller_series:,} series)" if b.controller_series else ""
    lines += [
        f"| **total** | **{c.series_per_node:,}** |",
        "",
        f"Stack `{spec.stack}`: {c.nodes:,} nodes{controller}, scraped every {c.scrape_interval_s} s: "
        f"{c.samples_per_minute_per_node:,.0f} samples/min per node, **{b.events_per_minute:,.0f} samples/min** in "
        f"all, {b.samples_per_month / 1e9:,.2f} billion samples per {MONTH_NAME}, about "
        f"**USD {b.ingestion_usd_per_month:,.0f} per month** for ingestion {cost.PRICE_NOTE}.",
    ]
    return "\n".join(lines)


def budget_markdown(spec: ClusterSpec) -> str:
    """The workspace figures docs/monitoring.md carries for the prod example (a test keeps the two equal)."""
    b = budget(spec)

    def holds(interval_s: int) -> str:
        at = SeriesBudget(b.nodes, b.series_per_node, b.controller_own, b.controller_per_node, interval_s)
        per_minute = 60 / interval_s
        binds = (
            "the samples-per-minute limit binds first"
            if per_minute > 1
            else ("both limits bind together" if per_minute == 1 else "the active-series limit binds first")
        )
        rate = f"{per_minute:g} sample{'s' if per_minute != 1 else ''} per series per minute"
        return f"about **{at.max_nodes:,}** scraped every {interval_s} s ({rate}: {binds})"

    return (
        f"Stack `{spec.stack}`: {b.nodes:,} nodes x {b.series_per_node:,} series + the Slurm controller's "
        f"{b.controller_series:,} = **{b.series:,} active series**, {b.events_per_minute:,.0f} samples per minute at "
        f"{b.scrape_interval_s} s. One workspace at its default limits holds such nodes: {holds(b.scrape_interval_s)}; "
        f"{holds(60)}."
    )


def with_workspace_warnings(spec: ClusterSpec) -> ClusterSpec:
    """The spec with `workspace_warnings` added to its warnings: what `ndfleet plan` prints and the Pulumi program
    logs. Here, not in the spec's own checks (ndfleet/stackconfig), which sit below the exporters they would count."""
    over = workspace_warnings(spec)
    return spec.model_copy(update={"warnings": (*spec.warnings, *over)}) if over else spec
