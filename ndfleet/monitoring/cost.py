"""What monitoring costs: series per node, samples per minute, the Azure Monitor ingestion bill.

Azure Monitor managed Prometheus bills per sample ingested (and a small amount per sample queried); there is no
storage charge (18 months' retention included). Samples per minute = series per node x nodes x 60 / scrape
interval. The series count comes from the exporters' configuration (ndfleet/monitoring/exporters.py) and the
VM-size profile; the counts that depend on the image (mounts, block devices, network interfaces) are estimates
for the Ubuntu 22.04 HPC image on ND H100 v5 / H200 v5, stated here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ndfleet_node.checks import level_ids

from ndfleet.monitoring import exporters
from ndfleet.stackconfig.clusterspec import ClusterSpec

# Azure Monitor pricing page (azure.microsoft.com/pricing/details/monitor), Metrics tab, meter "Metrics ingestion
# Metric samples": USD 0.16 per 10 million samples ingested, pay-as-you-go, East US, the price published since
# managed Prometheus became generally available (May 2023). Our machines cannot reach the page: re-check it (or
# the Azure Retail Prices API, docs/monitoring.md) for your region before you budget.
USD_PER_10M_SAMPLES = 0.16

# Image-dependent counts (estimates, Ubuntu 22.04 HPC image): file systems besides the stack's own mounts
# (/, /boot, /boot/efi, /mnt, /run, /dev/shm, /run/lock, /run/user), block devices besides the NVMe disks (OS
# disk, temporary disk, the RAID0 md device), network interfaces besides IPoIB (lo, eth0, docker0), HCAs besides
# the profile's InfiniBand ones (the accelerated-networking mlx5_an0 the infiniband collector also reads).
BASE_FILESYSTEMS = 8
BASE_BLOCK_DEVICES = 3
BASE_INTERFACES = 3
EXTRA_HCAS = 1
# Every scrape target also yields up, scrape_duration_seconds, scrape_samples_scraped,
# scrape_samples_post_metric_relabeling and scrape_series_added.
SERIES_PER_TARGET = 5
SCRAPE_TARGETS = 2
MINUTES_PER_MONTH = 60 * 24 * 30


@dataclass(frozen=True)
class Cost:
    series_by_source: dict[str, int]
    nodes: int
    scrape_interval_s: int

    @property
    def series_per_node(self) -> int:
        return sum(self.series_by_source.values())

    @property
    def samples_per_minute_per_node(self) -> float:
        return self.series_per_node * 60 / self.scrape_interval_s

    @property
    def samples_per_minute(self) -> float:
        return self.samples_per_minute_per_node * self.nodes

    @property
    def samples_per_month(self) -> float:
        return self.samples_per_minute * MINUTES_PER_MONTH

    @property
    def usd_per_month(self) -> float:
        return self.samples_per_month / 10_000_000 * USD_PER_10M_SAMPLES


def _per_collector(spec: ClusterSpec) -> dict[str, int]:
    p = spec.profile
    mounts = BASE_FILESYSTEMS + len(spec.storage.containers) + (1 if spec.storage.lustre is not None else 0)
    counts = {
        "cpu": p.vcpus,  # mode="idle" only
        "loadavg": 3,
        "meminfo": 2,
        "filesystem": 3 * mounts,
        "diskstats": 3 * (p.nvme_count + BASE_BLOCK_DEVICES),
        "netdev": 2 * (BASE_INTERFACES + len(p.ib_devices)),  # IPoIB ib0..ib7
        "infiniband": len(exporters.NODE_EXPORTER_COLLECTORS["infiniband"]) * (len(p.ib_devices) + EXTRA_HCAS),
        "textfile": 2,
    }
    assert set(counts) == set(exporters.NODE_EXPORTER_COLLECTORS)
    return counts


def estimate(spec: ClusterSpec) -> Cost:
    checks = len(level_ids(spec.health.validation_level))
    sources = {
        "dcgm-exporter": len(exporters.DCGM_COUNTERS) * spec.profile.gpus_per_vm,
        **{f"node_exporter {k}": v for k, v in _per_collector(spec).items()},
        "validation (textfile)": len(exporters.VALIDATION_METRICS) - 1 + checks,
        "agent (per scrape target)": SERIES_PER_TARGET * SCRAPE_TARGETS,
    }
    return Cost(
        series_by_source=sources, nodes=spec.total_nodes, scrape_interval_s=spec.monitoring.scrape_interval_seconds
    )


def cost_markdown(spec: ClusterSpec) -> str:
    """The cost table docs/monitoring.md carries for the prod example (a test keeps the two equal)."""
    c = estimate(spec)
    lines = ["| source | series per node |", "|---|---|"]
    lines += [f"| {name} | {n:,} |" for name, n in c.series_by_source.items()]
    lines += [
        f"| **total** | **{c.series_per_node:,}** |",
        "",
        f"Stack `{spec.stack}`: {c.nodes:,} nodes, scraped every {c.scrape_interval_s} s: "
        f"{c.samples_per_minute_per_node:,.0f} samples/min per node, **{c.samples_per_minute:,.0f} samples/min** in "
        f"all, {c.samples_per_month / 1e9:,.2f} billion samples per 30-day month, about "
        f"**USD {c.usd_per_month:,.0f} per month** for ingestion at USD {USD_PER_10M_SAMPLES} per 10 million samples.",
    ]
    return "\n".join(lines)
