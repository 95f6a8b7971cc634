"""Everything that varies by VM size, in one place.

Components, the bootstrap templates and the node validator read hardware figures and health thresholds
from here only. Figures come from the Microsoft Learn size pages and Azure/azurehpc-health-checks
`conf/nd96isr_h100_v5.conf` / `conf/nd96isr_h200_v5.conf`; docs/sources.md restates each with its source.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator

# The NCCL environment, defined here only. The Azure HPC image's /etc/nccl.conf for ND v5 (docs/sources.md), which
# the node's nccl.conf restates (NCCL reads /etc/nccl.conf itself; NCCL docs, "Environment Variables"):
NCCL_IMAGE_CONF = (("NCCL_IB_PCI_RELAXED_ORDERING", "1"), ("NCCL_IGNORE_CPU_AFFINITY", "1"))
# ...and what every NCCL test adds when it launches (azurehpc-health-checks' NCCL run): GPUs in PCI order, the
# bootstrap network on the VM's first NIC.
NCCL_LAUNCH_ENV = (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("NCCL_SOCKET_IFNAME", "eth0"))


def nccl_conf(topo_file: str) -> dict[str, str]:
    """The node's nccl.conf: the image's settings, and the profile's topology file where it names one."""
    return {**dict(NCCL_IMAGE_CONF), **({"NCCL_TOPO_FILE": topo_file} if topo_file else {})}


def nccl_test_env(topo_file: str) -> dict[str, str]:
    """The environment of every NCCL test (validator and burn-in). NCCL_TOPO_FILE is always set: empty lets NCCL
    detect the topology (it fixed a spurious result on H200, azurehpc-health-checks #142/#143)."""
    return {**dict(NCCL_IMAGE_CONF), **dict(NCCL_LAUNCH_ENV), "NCCL_TOPO_FILE": topo_file}


class HealthThresholds(BaseModel):
    """Floors and limits a healthy node must meet (Azure/azurehpc-health-checks figures).

    The floors' names are the node JSON's (ndfleet_node.config.Thresholds): one spelling on both sides."""

    model_config = ConfigDict(frozen=True)

    # NCCL all_reduce_perf, 8 GPUs in one VM, 16 GiB message, bus bandwidth floor in GB/s.
    nccl_busbw_gbps: float
    nccl_bytes: int
    # ib_write_bw, GPUDirect loopback per HCA, 8 MiB messages, floor in Gb/s (line rate is 400).
    ib_write_bw_gbps: float
    ib_write_bw_bytes: int
    # nvbandwidth floors in GB/s: host<->device catches downtrained PCIe links, device<->device NVLink.
    nvbw_host_device_gbps: float
    nvbw_device_device_gbps: float
    # GPU ECC limits: a node fails above these counts (volatile or aggregate).
    ecc_sram_uncorrectable_max: int
    ecc_sram_correctable_max: int
    ecc_dram_correctable_max: int
    ecc_dram_uncorrectable_max: int
    # Xid codes that fail a node when seen in the kernel log since boot.
    xid_fail_codes: tuple[int, ...]
    # IB link flapping: more than this many link-down / lost-carrier events fails the node.
    ib_link_down_max: int
    ib_flap_window_hours: int
    # Node validator time limits in seconds (appended by the bootstrap issue). Every check has a timeout, so a
    # hung tool fails its check instead of hanging the boot; the sum bounds the whole validation.
    tool_timeout_s: int = 20  # each nvidia-smi / ibstat / lspci / systemctl / journalctl call
    nccl_allreduce_timeout_s: int = 180  # 8-GPU all_reduce_perf at nccl_bytes (~20 s on a good node)
    ib_write_bw_timeout_s: int = 90  # all HCAs at once, GPUDirect loopback (~10 s on a good node)
    nvbandwidth_timeout_s: int = 180  # host<->device and device<->device copies (~30 s)
    dcgm_diag_timeout_s: tuple[int, int, int] = (120, 900, 1800)  # dcgmi diag -r 1 / 2 / 3
    setup_timeout_s: int = 600  # node set-up: RAID0, fabric manager, storage mounts
    fabricmanager_wait_s: int = 120  # how long set-up waits for nvidia-fabricmanager to become active
    # Set-up retries a storage mount (blob, Lustre) with backoff for at most this long before declaring it failed
    # (the storage account's private endpoint or the Lustre MGS may answer a little after the node boots). It is
    # part of setup_timeout_s, which is part of the budget the Application Health grace period must cover.
    mount_retry_s: int = 240
    setup_step_timeout_s: int = 120  # each tool call of set-up (mdadm, mkfs.xfs, mount, blobfuse2, modprobe, ...)


class MonitoringThresholds(BaseModel):
    """When the fleet alerts fire (docs/monitoring.md): how long a condition must hold before someone is paged.

    The hardware limits themselves (fatal Xids, ECC maxima, IB rate, flap count) are the HealthThresholds and
    profile figures above; these are the alert-side durations and fractions.
    """

    model_config = ConfigDict(frozen=True)

    # Fraction of wall time a GPU spends thermally or power throttled (DCGM_FI_DEV_*_VIOLATION, microseconds per
    # second) that counts as throttled, and for how long before the alert fires: short boosts clip briefly by
    # design (NVIDIA DCGM field docs), a sustained clip slows every rank of a job.
    throttle_fraction: float = 0.2
    throttle_for_minutes: int = 15
    # An IB port not ACTIVE (sysfs state 4) for this long: a link retrains within seconds.
    ib_port_down_for_minutes: int = 2
    # A node that reported Unhealthy / is drained for this long pages someone (a repair normally acts first).
    node_unhealthy_for_minutes: int = 10
    node_drained_for_minutes: int = 60
    # A scrape target down, or a node whose agent went quiet (5 minutes = Prometheus's staleness period).
    exporter_silent_for_minutes: int = 5
    # Island capacity below the stack's fraction for this long: longer than a new node's set-up and validation
    # (the health grace period, 45 minutes by default) so a first deployment or a repair in progress does not page.
    island_capacity_for_minutes: int = 60


class BurninFigures(BaseModel):
    """Cross-node NCCL burn-in (`ndfleet-node burnin`, docs/burnin.md): floors, test size, timeouts, NCCL settings.

    Floors are all_reduce_perf bus bandwidth (GB/s) at `message_bytes`, the lower of out-of-place and in-place:

    - `pair_busbw_gbps`, every 2-node test, run with NCCL_ALGO=Ring so the figure measures the fabric (a ring
      runs at the pace of its slowest link). 8 x NDR 400 Gb/s rails per VM (Microsoft Learn, ND H100 v5 /
      ND H200 v5 size pages) are 400 GB/s of line rate; NCCL reaches about 46-48 GB/s per rail, so a healthy
      pair measures about 370-385 GB/s. The floor, 85 % of line rate = 340 GB/s, is what a pair still reaches
      with one rail of eight lost (7/8 x 385 = 337 GB/s fails it) while leaving ~10 % for run-to-run noise.
      Derived, not measured by us: confirm on real hardware (docs/burnin.md says how).
    - `island_busbw_gbps`, the island-wide test, judged WITHOUT SHARP. Azure's Hopper validation (Azure/ai-
      infrastructure-on-azure, infrastructure_validations/slurm/NCCL) measures about 450 GB/s at 16 GiB on 8 ND
      H100 v5 VMs and warns below 400 GB/s, but only with in-network reduction (SHARP through CollNet: the HPC-X
      SHARP plugin loaded and its NCCL_COLLNET / SHARP variables set, configs/hopper.conf). The burn-in does not
      set that up, so 400 GB/s is not a floor a healthy island is sure to reach. Without SHARP every GPU's data
      crosses its own 400 Gb/s rail at least once per direction, so the island's busbw is bounded by the same
      per-VM line rate as a pair (8 x 50 GB/s = 400 GB/s, NCCL ~370-385 GB/s) and a ring at scale runs at its
      slowest link: the pair floor's arithmetic holds, 85 % of line rate = 340 GB/s. A lost rail anywhere in the
      island (7/8 x 385 = 337 GB/s) still fails it. Same for ND H200 v5 (same fabric).
    """

    model_config = ConfigDict(frozen=True)

    pair_busbw_gbps: float
    island_busbw_gbps: float
    message_bytes: int = 16 * 1024**3  # Azure's NCCL validation runs its quick test at 16 GiB
    warmup_iters: int = 5
    iters_quick: int = 10  # Azure's quick validation: 16 GiB x 10 iterations, about 2 minutes
    iters_full: int = 50
    # Each test's timeout is derived (ndfleet_node.burnin.runner.timeout_for): its expected duration at the floor
    # (warm-up plus timed and checked runs of message_bytes at the floor's algbw) plus this launch allowance.
    # Launch of a 2-node test (mpirun/srun start-up, CUDA and NCCL initialisation on 16 ranks, 16 GiB buffers
    # allocated and filled) is estimated at about 20 s (model_test_overhead_s); 60 s is three times that, room for
    # a slow IB connection set-up without letting a hung pair cost minutes. Per VM, 1 s more: the launcher starts
    # one daemon per VM and NCCL's bootstrap grows with the ranks (twice the modelled 0.5 s per VM).
    launch_allowance_s: float = 60.0
    launch_allowance_per_node_s: float = 1.0
    max_rounds: int = 8
    # Every test's environment is nccl_test_env() (above); these add to it.
    pair_env: tuple[tuple[str, str], ...] = (("NCCL_ALGO", "Ring"),)
    # Azure's Hopper NCCL validation settings (ai-infrastructure-on-azure, configs/hopper.conf) less the SHARP /
    # CollNet ones: the island floor is judged without in-network reduction (see island_busbw_gbps above).
    island_env: tuple[tuple[str, str], ...] = (
        ("NCCL_MIN_NCHANNELS", "32"),
        ("NCCL_IB_QPS_PER_CONNECTION", "4"),
        ("NCCL_PXN_DISABLE", "1"),
    )
    # Modelled wall time of one test, for the simulation benchmark (tests/bench/bench_burnin.py): launch plus
    # NCCL set-up plus buffer initialisation, about 20 s for 2 VMs (launcher ~2 s, CUDA context on 8 GPUs ~5 s,
    # NCCL communicator over IB ~5 s, 16 GiB buffers filled and checked a few s; Azure's quick test's "about 2
    # minutes" includes the Slurm job and container start, which a bare all_reduce_perf does not pay), plus
    # fan-out per VM. Assumptions, not measurements: docs/burnin.md shows how the table moves with them.
    model_test_overhead_s: float = 20.0
    model_test_overhead_per_node_s: float = 0.5


# Both Hopper ND sizes: same 8 x NDR fabric, same validation settings (see BurninFigures).
HOPPER_BURNIN = BurninFigures(pair_busbw_gbps=340.0, island_busbw_gbps=340.0)


class VmSizeProfile(BaseModel):
    """The hardware an Azure VM size promises, and how to tell a healthy node of that size."""

    model_config = ConfigDict(frozen=True)

    name: str
    series: str
    vcpus: int
    # The processor shape slurmd reads from the hardware (`slurmd -C`): sockets x cores per socket x threads per core
    # = vcpus. Slurm's CLOUD node lines declare it (ndfleet/slurm/conf.py): Slurm takes a missing CPUs as 1.
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    memory_gib: int
    # Memory the guest must see at least (the hypervisor keeps some): fail below this.
    memory_min_gib: int
    gpus_per_vm: int
    gpu_model: str
    gpu_memory_gib: int
    nvlinks_per_gpu: int
    gpu_pcie_gen: int
    gpu_pcie_width: int
    ib_devices: tuple[str, ...]
    ib_port: int
    ib_rate_gbps: int
    ib_link_layer: str
    hca_pcie_gen: int
    hca_pcie_width: int
    nvme_count: int
    nvme_total_tib: int
    quota_family: str
    hyper_v_generation: str
    # NCCL topology file shipped by the Azure HPC images; empty means "let NCCL detect it"
    # (an empty NCCL_TOPO_FILE fixed a spurious 15 GB/s on H200, azurehpc-health-checks #142/#143).
    nccl_topo_file: str
    thresholds: HealthThresholds
    monitoring: MonitoringThresholds = MonitoringThresholds()
    burnin: BurninFigures = HOPPER_BURNIN

    @property
    def gpus_total_label(self) -> str:
        return f"{self.gpus_per_vm} x {self.gpu_model}"

    @model_validator(mode="after")
    def _shape_is_the_vcpus(self) -> VmSizeProfile:
        shape = self.sockets * self.cores_per_socket * self.threads_per_core
        if shape != self.vcpus:
            raise ValueError(f"{self.name}: sockets x cores_per_socket x threads_per_core = {shape}, not the size's "
                             f"{self.vcpus} vCPUs")
        return self

    @property
    def slurm_real_memory_mib(self) -> int:
        """RealMemory of the size's Slurm nodes (MiB): the lower of Azure CycleCloud's rule and the validator's floor.

        CycleCloud keeps back max(1 GiB, 5 %) of the size's memory for the OS and caches (Azure/cyclecloud-slurm,
        azure-slurm/slurmcc/partition.py, `to_decrement = max(1024, memory_mb * 0.05)`; its azslurm shows 1805 GiB
        for ND96isr H100 v5). slurmctld drains a node registering less than RealMemory (dynamic nodes) or less
        than 90 % of it (CLOUD nodes; SchedMD src/slurmctld/node_mgr.c, "Low RealMemory"), and the validator already
        fails a node below memory_min_gib: never above that floor, so a validated node is never drained for it."""
        memory_mib = self.memory_gib * 1024
        cyclecloud = memory_mib - max(1024, memory_mib * 5 // 100)
        return min(cyclecloud, self.memory_min_gib * 1024)


# Xids that fail a node: Azure's NHC list (Azure/azurehpc-health-checks, customTests/azure_gpu_xid.nhc, XID_EC),
# plus the two ECC containment Xids Azure has Guest Health categories for (XID94ContainedECCError,
# XID95UncontainedECCError; node/ndfleet_node/impact_categories.py), which NHC's list leaves out. NVIDIA's Xid
# catalogue (docs.nvidia.com/deploy/xid-errors, "Analyzing Xid Errors with the Xid Catalog"): 95, uncontained memory
# error, immediate action RESET_GPU ("the affected GPU must be reset before applications can restart"); 94,
# contained memory error, RESTART_APP, and "it is recommended to reset the GPU when convenient". On an ND VM a GPU
# reset is the node's repair, and the row remap a contained DRAM error leaves pending already fails gpu.row_remap,
# so both fail the node: the job the error killed is requeued and the GPU is reset before it runs another.
_XIDS = (48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95, 119, 120)
_IB_DEVICES = tuple(f"mlx5_ib{i}" for i in range(8))

# The shape of both sizes: 96 vCPUs (Microsoft Learn, ND H100 v5 and ND H200 v5 size pages), one thread per core
# (hyper-threading off: Azure CycleCloud's azslurm lists PCPU_COUNT 96 = VCPU_COUNT 96 for ND96isr H100 v5,
# vanzod/ccslurm4ai#2), two sockets of 48 cores as `slurmd -C` is reported on these VMs (Sapphire Rapids); unconfirmed
# by us on a real VM: docs/elastic.md says how to check, and what a wrong split costs (a log line, not a drain).
H100_V5 = VmSizeProfile(
    name="Standard_ND96isr_H100_v5",
    series="ND H100 v5",
    vcpus=96,
    sockets=2,
    cores_per_socket=48,
    threads_per_core=1,
    memory_gib=1900,
    memory_min_gib=1800,
    gpus_per_vm=8,
    gpu_model="NVIDIA H100 80GB HBM3",
    gpu_memory_gib=80,
    nvlinks_per_gpu=18,
    gpu_pcie_gen=5,
    gpu_pcie_width=16,
    ib_devices=_IB_DEVICES,
    ib_port=1,
    ib_rate_gbps=400,
    ib_link_layer="InfiniBand",
    hca_pcie_gen=5,
    hca_pcie_width=16,
    nvme_count=8,
    nvme_total_tib=28,
    quota_family="standardNDSH100v5Family",
    hyper_v_generation="V2",
    nccl_topo_file="/opt/microsoft/ndv5-topo.xml",
    burnin=HOPPER_BURNIN,
    thresholds=HealthThresholds(
        nccl_busbw_gbps=460.0,
        nccl_bytes=16 * 1024**3,
        ib_write_bw_gbps=380.0,
        ib_write_bw_bytes=8 * 1024**2,
        nvbw_host_device_gbps=48.0,
        nvbw_device_device_gbps=335.0,
        ecc_sram_uncorrectable_max=0,
        ecc_sram_correctable_max=10_000,
        ecc_dram_correctable_max=20_000_000,
        ecc_dram_uncorrectable_max=0,
        xid_fail_codes=_XIDS,
        ib_link_down_max=5,
        ib_flap_window_hours=24,
    ),
)

H200_V5 = VmSizeProfile(
    name="Standard_ND96isr_H200_v5",
    series="ND H200 v5",
    vcpus=96,
    sockets=2,
    cores_per_socket=48,
    threads_per_core=1,
    memory_gib=1850,
    memory_min_gib=1750,
    gpus_per_vm=8,
    gpu_model="NVIDIA H200",
    gpu_memory_gib=141,
    nvlinks_per_gpu=18,
    gpu_pcie_gen=5,
    gpu_pcie_width=16,
    ib_devices=_IB_DEVICES,
    ib_port=1,
    ib_rate_gbps=400,
    ib_link_layer="InfiniBand",
    hca_pcie_gen=5,
    hca_pcie_width=16,
    nvme_count=8,
    nvme_total_tib=28,
    quota_family="standardNDISRH200V5Family",
    hyper_v_generation="V2",
    nccl_topo_file="",
    burnin=HOPPER_BURNIN,
    thresholds=HealthThresholds(
        nccl_busbw_gbps=431.0,
        nccl_bytes=16 * 1024**3,
        ib_write_bw_gbps=360.0,
        ib_write_bw_bytes=8 * 1024**2,
        nvbw_host_device_gbps=48.0,
        nvbw_device_device_gbps=335.0,
        ecc_sram_uncorrectable_max=0,
        ecc_sram_correctable_max=10_000,
        ecc_dram_correctable_max=20_000_000,
        ecc_dram_uncorrectable_max=0,
        xid_fail_codes=_XIDS,
        ib_link_down_max=5,
        ib_flap_window_hours=24,
    ),
)

PROFILES: dict[str, VmSizeProfile] = {p.name: p for p in (H100_V5, H200_V5)}


class LustreSku(BaseModel):
    """An Azure Managed Lustre SKU and the capacities it accepts (azure-stack-docs, create-file-system)."""

    model_config = ConfigDict(frozen=True)

    name: str
    mbps_per_tib: int
    min_tib: int
    max_tib: int
    step_tib: int

    def accepts(self, capacity_tib: int) -> bool:
        return self.min_tib <= capacity_tib <= self.max_tib and capacity_tib % self.step_tib == 0


LUSTRE_SKUS: dict[str, LustreSku] = {
    s.name: s
    for s in (
        LustreSku(name="AMLFS-Durable-Premium-40", mbps_per_tib=40, min_tib=48, max_tib=768, step_tib=48),
        LustreSku(name="AMLFS-Durable-Premium-125", mbps_per_tib=125, min_tib=16, max_tib=128, step_tib=16),
        LustreSku(name="AMLFS-Durable-Premium-250", mbps_per_tib=250, min_tib=8, max_tib=128, step_tib=8),
        LustreSku(name="AMLFS-Durable-Premium-500", mbps_per_tib=500, min_tib=4, max_tib=128, step_tib=4),
    )
}

# InfiniBand needs singlePlacementGroup: at most 100 VMs per scale set by default, 300 after a
# support request (virtual-machine-scale-sets-placement-groups.md).
DEFAULT_MAX_NODES_PER_ISLAND = 100
HARD_MAX_NODES_PER_ISLAND = 300

# The RDMA network of ND-series VMs uses this range; a VNet that overlaps it breaks InfiniBand (setup-infiniband.md).
RDMA_RESERVED_CIDR = "172.16.0.0/16"

# Storage Blob Data Contributor (built-in role id, the same in every Azure cloud).
STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"

# Monitoring roles (built-in role ids, the same in every Azure cloud; Azure built-in roles reference):
# publish metrics to a data collection rule, and read an Azure Monitor workspace's Prometheus data.
MONITORING_METRICS_PUBLISHER_ROLE_ID = "3913510d-42f4-4e42-8a64-420c390055eb"
MONITORING_DATA_READER_ROLE_ID = "b0d8363b-8ddd-447d-831f-62ca05bff136"
# Impact Reporter (built-in role "Allows access to create/report, read and delete impacts"; Microsoft Learn, Azure
# Impact Reporting / Guest Health Reporting overview: the reporting identity needs this role). Same id in every cloud.
IMPACT_REPORTER_ROLE_ID = "36e80216-a7e8-4f42-a7e1-f12c98cbaf8a"
# Key Vault Secrets User: a Slurm host or the nodes read one secret (the munge key; components/slurm.py).
KEY_VAULT_SECRETS_USER_ROLE_ID = "4633458b-17de-408a-b874-0445c86b69e6"


# ----------------------------------------------------------------------------------------------------------
# The stack's other VMs (the Slurm controller and login nodes): vCPUs and the quota family they count against.
# vCPUs: Microsoft Learn, "Dsv5 sizes series" and "Esv5 sizes series" (Sizes > General purpose / Memory optimized);
# quota family: the `family` of the size's entry in the Resource SKUs API (`az vm list-skus`), as recorded in
# tests/data/arm/compute-skus-eastus-page*.json. A size not listed here is still accepted: `ndfleet plan` says its
# vCPUs are unknown, and `ndfleet preflight` reads them and the family from Azure's SKU entry.


class MachineSize(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    vcpus: int
    quota_family: str


MACHINE_SIZES: dict[str, MachineSize] = {
    s.name: s
    for s in (
        *(
            MachineSize(name=f"Standard_D{n}s_v5", vcpus=n, quota_family="standardDSv5Family")
            for n in (2, 4, 8, 16, 32, 48, 64, 96)
        ),
        *(
            MachineSize(name=f"Standard_E{n}s_v5", vcpus=n, quota_family="standardESv5Family")
            for n in (2, 4, 8, 16, 20, 32, 48, 64, 96)
        ),
    )
}
