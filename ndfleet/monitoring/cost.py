"""What monitoring costs: series per node, and the price of a sample ingested.

Azure Monitor managed Prometheus bills per sample ingested (and a small amount per sample queried); there is no
storage charge (18 months' retention included). Samples per minute = (series per node x nodes + the Slurm
controller's series) x 60 / scrape interval: the stack's figure, and its bill, come from one place,
ndfleet/monitoring/budget.py (`SeriesBudget.events_per_minute`), which adds the controller to the nodes counted here.
The series count comes from the exporters' configuration (ndfleet/monitoring/exporters.py) and the VM-size profile;
the counts that depend on the image (mounts, block devices, network interfaces) are estimates for the Ubuntu 22.04
HPC image on ND H100 v5 / H200 v5, stated here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ndfleet_node.checks import level_ids

from ndfleet.monitoring import exporters
from ndfleet.slurm.machines import NFS_MOUNTS
from ndfleet.stackconfig.clusterspec import ClusterSpec

# Azure Monitor pricing page (azure.microsoft.com/pricing/details/monitor), Metrics tab, meter "Metrics ingestion
# Metric samples": USD 0.16 per 10 million samples ingested, pay-as-you-go, East US, the price published since
# managed Prometheus became generally available (May 2023). Our machines cannot reach the page: re-check it (or
# the Azure Retail Prices API, docs/monitoring.md) for your region before you budget.
USD_PER_10M_SAMPLES = 0.16
# The meter's region: the figure is East US's whatever the stack's region; every line that shows the bill says so.
PRICE_REGION = "eastus"
PRICE_NOTE = (f"at the East US ({PRICE_REGION}) meter, USD {USD_PER_10M_SAMPLES} per 10 million samples, whatever the "
              "stack's region")

# What the image and ndfleet's set-up add to the hardware (Ubuntu 22.04 HPC image on ND H100 v5 / H200 v5), as
# node_exporter counts it with our flags. tests/monitoring/nd_node.py builds such a node for the real node_exporter
# and tests/monitoring/test_series_budget.py holds every count here to what it exports.
# - file systems: / (sda1), /boot/efi (sda15), /mnt (the temporary disk), the NVMe RAID0, plus the stack's own
#   mounts (_per_collector). /run, /dev, /proc, /sys and Docker's mounts are excluded (agent.FILESYSTEM_EXCLUDE).
BASE_FILESYSTEMS = 4
# - block devices: the OS disk, the temporary disk, the provisioning DVD Azure attaches (sr0), the RAID0 md device,
#   plus the NVMe disks; node_exporter's default filter drops partitions and loop devices.
BASE_BLOCK_DEVICES = 4
# - network interfaces: eth0 and its accelerated-networking VF (enP...), plus IPoIB ib0.. per InfiniBand HCA; lo,
#   docker0 and the dcgm-exporter container's veth are excluded (agent.NETDEV_EXCLUDE).
BASE_INTERFACES = 2
# - HCAs besides the profile's InfiniBand ones: the accelerated-networking mlx5_an0 the infiniband collector reads.
EXTRA_HCAS = 1
# Every scrape target also yields up, scrape_duration_seconds, scrape_samples_scraped,
# scrape_samples_post_metric_relabeling and scrape_series_added (Prometheus's report series; metric relabelling
# does not apply to them).
SERIES_PER_TARGET = 5
SCRAPE_TARGETS = 2


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


def ingestion_usd(samples: float) -> float:
    """What Azure Monitor charges for ingesting `samples` (at the East US meter, PRICE_REGION)."""
    return samples / 10_000_000 * USD_PER_10M_SAMPLES


def _per_collector(spec: ClusterSpec) -> dict[str, int]:
    p = spec.profile
    mounts = (
        BASE_FILESYSTEMS
        + len(spec.storage.containers)
        + (1 if spec.storage.lustre is not None else 0)
        + (len(NFS_MOUNTS) if spec.scheduler == "slurm" else 0)  # Slurm's shared home and apps (Azure Files NFS)
    )
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
