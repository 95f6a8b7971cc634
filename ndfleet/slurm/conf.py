"""Render the Slurm configuration of a cluster from its spec: slurm.conf, gres.conf, cgroup.conf, slurmd options.

Plain functions over a `SlurmSite` (every value the files hold). `slurm_site(spec, ...)` derives the site of a
deployed cluster; the real-scheduler test derives the same site and points its paths into a temporary folder.

Why the files look the way they do (docs/slurm.md has the sources):
- Compute nodes are *dynamic nodes* (Slurm >= 22.05, `slurmd -Z --conf "Feature=island-<name> ..."`): a node
  registers itself under its host name, so a node that automatic repairs replaced joins under its new name, and
  slurm.conf never lists node names (scale-set host names end in a base-36 instance id, not a range Slurm parses).
- One NodeSet per island selects the island's nodes by feature, one partition per island holds that NodeSet, and
  `JobSubmitPlugins=all_partitions` submits a job without `-p` to every island partition: Slurm runs a job in
  exactly one partition, so no job spans islands (InfiniBand does not cross scale sets).
- Configless: slurmd fetches slurm.conf, gres.conf and cgroup.conf from slurmctld (`--conf-server`).
"""

from __future__ import annotations

import functools
import ipaddress
import json
from dataclasses import asdict, dataclass
from typing import Any

import jinja2
from ndfleet_node.checks.perf import ALLREDUCE_MEASUREMENTS
from ndfleet_node.names import AWAITING_BURNIN_REASON, BOOT_VERSION_FEATURE_PREFIX

from ndfleet.boot_contract import HEALTH_PROBE_INTERVAL_S, HEALTH_PROBES_TO_AGREE
from ndfleet.nodefiles.bootstrap import TEMPLATES_DIR
from ndfleet.nodefiles.nodebundle import BOOT_VERSION_PLACEHOLDER, ISLAND_PLACEHOLDER
from ndfleet.nodefiles.templating import environment
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.settings import node_headroom

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURMDBD_PORT = 6819
# Where the controller keeps its state: the managed data disk (components/slurm_host.py mounts it here).
CONTROLLER_STATE_MOUNT = "/srv/slurm"
HEALTH_CHECK_PROGRAM = "/usr/local/sbin/ndfleet-slurm-health"
# How long slurmd waits for a killed job's processes before it drains the node "Kill task failed" (Slurm's default:
# 60 s). When a job's batch host hangs, the job's steps on its healthy nodes cannot report their end to the hung srun
# and take their message timeouts to give up; within 60 s Slurm drained a healthy node of the twin's hung-node loop,
# which nothing takes back into service (docs/slurm.md, "Choices and their sources").
UNKILLABLE_STEP_TIMEOUT_S = 180
# The controller's ledger of failed physical hosts (node/ndfleet_node/host_ledger.py): on the state disk, with
# slurmctld's state, so it outlives the controller's OS disk.
HOST_LEDGER = f"{CONTROLLER_STATE_MOUNT}/ndfleet/host-ledger.json"
# How often the controller keeps the warm spares (node/ndfleet_node/spares.py): a failed node's place is taken
# within this, plus Slurm's next scheduling pass (docs/operations.md, "Warm spares").
SPARES_EVERY_S = 30
# The health check's bound on the node's quick validation: slurmd kills its HealthCheckProgram after 60 s, and the
# program's scontrol calls and impact launch come after the validation.
HEALTH_CHECK_VALIDATE_TIMEOUT_S = 45
# The health check is the Epilog too: one run at a time on a node. A periodic check that finds another run leaves it
# to that one; an epilog waits for it (at most slurmd's 60-s bound on a periodic run) and then checks: the job that
# just ended may have met the fault after that run's look.
EPILOG_LOCK_WAIT_S = 60
HEALTH_CHECK_LOCK = "/run/ndfleet-slurm-health.lock"
# A batch job that ended FAILED on a node within this many seconds before the node's hardware drain is requeued by
# the controller (node/ndfleet_node/failed_jobs.py): the fault killed its processes before the health check (or the
# node's epilog at the job's end) looked. The check runs every HealthCheckInterval and takes up to its validation
# bound and its scontrol calls.
HEALTH_CHECK_CALLS_S = 60
REQUEUE_SLACK_S = HEALTH_CHECK_VALIDATE_TIMEOUT_S + HEALTH_CHECK_CALLS_S
# A controller run can be late: the spares timer's period, and a run held up by its own calls before it asks about
# failed jobs (the node listing, the reservations, a repeat's drain, sacct, squeue: six calls at their 30-s bound).
REQUEUE_RUN_LATE_S = 2 * SPARES_EVERY_S + 180


def epilog_level(spec: ClusterSpec) -> str:
    """The validation level the Epilog runs at a job's end: `epilog` (the quick checks and the 8-GPU all-reduce
    against the VM size's floor) unless `slurm.epilogPerformanceCheck` is off, then `quick` (docs/slurm.md)."""
    return "epilog" if spec.slurm is not None and spec.slurm.epilog_performance_check else "quick"


def epilog_validate_timeout_s(spec: ClusterSpec) -> int:
    """The Epilog's bound on its validation: the periodic check's, plus the all-reduce's own timeout (the VM size's
    profile) for each of its measurements (a figure below the floor is measured again: ALLREDUCE_MEASUREMENTS) when
    the Epilog measures the node."""
    allreduce = spec.profile.thresholds.nccl_allreduce_timeout_s * ALLREDUCE_MEASUREMENTS
    return HEALTH_CHECK_VALIDATE_TIMEOUT_S + (allreduce if epilog_level(spec) == "epilog" else 0)


# How long slurmctld holds a requeued job (its BeginTime: requeue + hold + 1 s). Slurm 25.11 added
# SchedulerParameters=requeue_delay (SchedMD/slurm CHANGELOG/slurm-25.11.md, "Changes in 25.11.0rc2"; slurm.conf(5):
# "Delay before a non-Expedited Requeue job is eligible to run after being requeued. Defaults to the
# AuthInfo=cred_expire setting"; src/slurmctld/job_mgr.c `_requeue_delay`), which sets the hold and leaves the job
# step credential its default lifetime (120 s). Before 25.11 the hold is cred_expire and nothing else, and slurmctld
# looks each SchedulerParameters option up by name, so it ignores requeue_delay without a word and would hold for
# cred_expire's 120 s: an older release (the twin's Debian Slurm 24.11) gets cred_expire instead.
REQUEUE_DELAY_SINCE = (25, 11)


def slurm_release(version: str) -> tuple[int, int]:
    """(year, month) of a validated `slurm.version` (YY.MM.P or YY.MM.P-R)."""
    year, month = version.split(".")[:2]
    return int(year), int(month)


def requeue_hold_settings(spec: ClusterSpec) -> tuple[str, str]:
    """(AuthInfo, SchedulerParameters) that hold a requeued job `slurm.requeueHoldSeconds` on the stack's release:
    requeue_delay from 25.11 on (the credential keeps Slurm's lifetime), cred_expire before."""
    if spec.slurm is None:
        raise ValueError("requeue_hold_settings needs a spec with ndfleet:scheduler = 'slurm'")
    hold = spec.slurm.requeue_hold_s
    if slurm_release(spec.slurm.version) >= REQUEUE_DELAY_SINCE:
        return "", f"requeue_delay={hold}"
    return f"cred_expire={hold}", ""


def requeue_failed_within_s(spec: ClusterSpec) -> int:
    """How long before its node's drain a failed job may have ended and still be requeued: a periodic check runs
    within HealthCheckInterval of the fault and takes its bound; the Epilog starts at the job's end, waits up to
    EPILOG_LOCK_WAIT_S for a periodic run, takes its own, longer bound and exits non-zero (slurmctld drains the node
    "Epilog error", which the controller's requeue does not read), and the next periodic pass, within
    HealthCheckInterval, names the check in the drain within its bound and calls."""
    if spec.slurm is None:
        raise ValueError("requeue_failed_within_s needs a spec with ndfleet:scheduler = 'slurm'")
    periodic = spec.slurm.health_check_interval_s + REQUEUE_SLACK_S
    epilog = EPILOG_LOCK_WAIT_S + epilog_validate_timeout_s(spec) + periodic
    return max(periodic, epilog)


def min_job_age_s(spec: ClusterSpec) -> int:
    """slurm.conf MinJobAge: slurmctld forgets a finished job this long after it ended, and `scontrol requeue` needs
    the job's record (slurm.conf(5): default 300 s). Long enough for the controller's requeue, run every
    SPARES_EVERY_S and sometimes late, to find a job that failed up to `requeue_failed_within_s` before its node's
    drain. slurmctld holds every job ended within it (MaxJobCount, 10,000 by default, bounds them all): with the
    longest HealthCheckInterval (3,600 s) about 75 minutes of finished jobs."""
    return max(300, requeue_failed_within_s(spec) + REQUEUE_RUN_LATE_S)


def island_feature(island: str) -> str:
    return f"island-{island}"


def boot_version_feature(version: str) -> str:
    """The Slurm feature naming the boot version a node runs (ndfleet/boot_version.py): `boot-<version>`. A node
    feature is what Slurm shows per node (`sinfo -N -o %f`, `scontrol show node`: AvailableFeatures) and what a job
    may ask for (`--constraint`; slurm.conf(5), Features), so `status` and the roll read a node's version from
    Slurm itself."""
    return f"{BOOT_VERSION_FEATURE_PREFIX}{version}"


# An elastic island's nodes are Slurm CLOUD nodes <island>-1 ... <island>-<maxNodes> (docs/elastic.md); these
# programs on the controller create and delete their VMs (ndfleet_node/elastic, shipped by ndfleet/slurm/machines.py).
RESUME_PROGRAM = "/usr/local/sbin/ndfleet-elastic-resume"
SUSPEND_PROGRAM = "/usr/local/sbin/ndfleet-elastic-suspend"
RESUME_FAIL_PROGRAM = "/usr/local/sbin/ndfleet-elastic-resume-fail"
# SuspendTimeout: "maximum time permitted (in seconds) between when a node suspend request is issued and when the
# node is shutdown" (slurm.conf(5), https://slurm.schedmd.com/slurm.conf.html#OPT_SuspendTimeout); Slurm may resume
# the node again once it has passed. Azure CycleCloud's Slurm uses 600 s (Azure/cyclecloud-slurm,
# azure-slurm-install/templates/slurm.conf.template: "SuspendTimeout=600"; its Chef attributes called it "10 minutes
# to shutdown"). ndfleet's suspend program needs it for the delete it asks Azure for: a delete refused for now (409,
# 429 with Retry-After, 5xx) is asked again within this time (ndfleet/slurm/elastic.py DELETE_BUDGET_S), and a node
# that comes back within it would meet its old VM still Deleting. 120 s left a throttled delete one or two tries.
ELASTIC_SUSPEND_TIMEOUT_S = 600
# The controller's burn-in timer: how often it looks for nodes awaiting burn-in, and the validation level the burn-in
# asks of them (docs/burnin.md). Here rather than in machines.py because the elastic idle-time bound needs them too.
BURNIN_EVERY_S = 120
# The burn-in leaves a node out until it has awaited burn-in this long (`burnin-slurm --settle`): Azure's Application
# Health extension must have seen it Healthy (HEALTH_PROBES_TO_AGREE answers in a row) before a failure counts, or it
# holds the node Initializing for the extension's whole grace period before automatic repairs act (found by the twin:
# a node whose burn-in failed 70 s after its boot waited out the 40-minute grace). One probe more than the count: the
# first may come just before the node turned Healthy.
BURNIN_SETTLE_S = (HEALTH_PROBES_TO_AGREE + 1) * HEALTH_PROBE_INTERVAL_S
BURNIN_LEVEL = "quick"
# Idle in-service nodes the burn-in takes as known-good partners (burnin-slurm --idle-partners): a lone new node (a
# repair's replacement) has no one else awaiting burn-in to be paired with, and a burn-in needs two hosts; one
# partner is enough for every pair test, and reserves one idle node for the few minutes of a quick burn-in.
BURNIN_IDLE_PARTNERS = 1


def elastic_node_name(island: str, number: int) -> str:
    return f"{island}-{number}"


def elastic_nodes(island: str, max_nodes: int) -> str:
    """The island's CLOUD nodes as a Slurm host list: `gpu-[1-8]` (`gpu-1` for one)."""
    return f"{island}-[1-{max_nodes}]" if max_nodes > 1 else elastic_node_name(island, 1)


@dataclass(frozen=True)
class SlurmIsland:
    name: str
    feature: str
    nodeset: str
    partition: str
    nodes: int
    # Elastic islands only: the CLOUD nodes' host list, how many stay up, idle seconds before a node is released,
    # and seconds a resumed node has to register.
    elastic_nodes: str = ""
    min_nodes: int = 0
    suspend_time_s: int = 0
    resume_timeout_s: int = 0


@dataclass(frozen=True)
class SlurmSite:
    """Every value the rendered Slurm files hold."""

    cluster_name: str
    controller_host: str
    controller_addr: str
    islands: tuple[SlurmIsland, ...]
    max_node_count: int
    gpus_per_node: int
    real_memory_mib: int
    # The VM size's processor shape (profile): what a CLOUD node line declares, as `slurmd -C` reports it.
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    health_check_interval_s: int
    min_job_age_s: int = 300
    # slurmdbd on the controller (AccountingStorageHost is the controller's address); False: no accounting.
    accounting: bool = True
    slurmctld_port: int = SLURMCTLD_PORT
    slurmd_port: int = SLURMD_PORT
    slurm_user: str = "slurm"
    slurmd_user: str = "root"
    auth_info: str = ""
    scheduler_parameters: str = ""
    state_save_location: str = f"{CONTROLLER_STATE_MOUNT}/state"
    slurmd_spool_dir: str = "/var/spool/slurmd"
    # In the units' RuntimeDirectory (SchedMD etc/slurmctld.service.in runs slurmctld as slurm: /run is not its own).
    slurmctld_pid_file: str = "/run/slurmctld/slurmctld.pid"
    slurmd_pid_file: str = "/run/slurm/slurmd.pid"
    slurmctld_log_file: str = "/var/log/slurm/slurmctld.log"
    slurmd_log_file: str = "/var/log/slurm/slurmd.log"
    proctrack_type: str = "proctrack/cgroup"
    task_plugin: str = "task/cgroup,task/affinity"
    cgroup_plugin: str = "autodetect"
    gpu_device_files: str = ""
    health_check_program: str = HEALTH_CHECK_PROGRAM
    slurmd_timeout_s: int = 300
    unkillable_step_timeout_s: int = UNKILLABLE_STEP_TIMEOUT_S
    resume_program: str = RESUME_PROGRAM
    suspend_program: str = SUSPEND_PROGRAM
    resume_fail_program: str = RESUME_FAIL_PROGRAM
    suspend_timeout_s: int = ELASTIC_SUSPEND_TIMEOUT_S

    @property
    def conf_server(self) -> str:
        return f"{self.controller_addr}:{self.slurmctld_port}"

    @property
    def elastic(self) -> bool:
        return any(i.elastic_nodes for i in self.islands)


def slurm_islands(spec: ClusterSpec) -> tuple[SlurmIsland, ...]:
    """Each island as Slurm sees it: its feature, NodeSet and partition (and, when elastic, its CLOUD nodes)."""
    return tuple(
        SlurmIsland(
            name=i.name, feature=island_feature(i.name), nodeset=f"ns-{i.name}", partition=i.name, nodes=i.nodes,
            elastic_nodes=elastic_nodes(i.name, i.nodes) if i.elastic else "",
            min_nodes=i.elastic.min_nodes if i.elastic else 0,
            suspend_time_s=i.elastic.idle_minutes * 60 if i.elastic else 0,
            resume_timeout_s=i.elastic.resume_timeout_minutes * 60 if i.elastic else 0,
        )
        for i in spec.islands
    )


def node_attributes(feature: str, gpus_per_node: int, real_memory_mib: int) -> str:
    """What every compute node line says of a node, dynamic or CLOUD: the one place node attributes are written.

    RealMemory is the profile's slurm_real_memory_mib (CycleCloud's rule, never above the validator's memory floor):
    Slurm drains a node that reports less memory than RealMemory, and a node below the floor fails validation
    first. The processor shape is node_shape's, on CLOUD lines only (node_lines)."""
    return f"Feature={feature} Gres=gpu:{gpus_per_node} RealMemory={real_memory_mib}"


def node_shape(sockets: int, cores_per_socket: int, threads_per_core: int) -> str:
    """A CLOUD node line's processor shape, as `slurmd -C` reports it: `CPUs=96 Sockets=2 CoresPerSocket=48
    ThreadsPerCore=1`.

    A CLOUD node is defined by its line alone: slurm.conf(5) defaults a missing CPUs to 1 (the product of Boards,
    Sockets, CoresPerSocket and ThreadsPerCore, each 1 by default), and a node registering more does not raise it
    (SchedMD src/slurmctld/node_mgr.c, validate_node_specs, only drains for less: "Low socket*core*thread count",
    "Low CPUs"), so a job asking for more than one task per node would be refused. Dynamic nodes (`slurmd -Z`)
    take the shape `slurmd -C` reads from the hardware unless --conf overrides it (slurmd(8), --conf): their line
    leaves it to the hardware, so a VM that lost CPUs shows it instead of hiding it."""
    cpus = sockets * cores_per_socket * threads_per_core
    return f"CPUs={cpus} Sockets={sockets} CoresPerSocket={cores_per_socket} ThreadsPerCore={threads_per_core}"


def partition_lines(islands: tuple[SlurmIsland, ...]) -> list[str]:
    """The NodeSet and partition lines of the islands: the same lines in slurm.conf and in the slurmTopology output.

    OverSubscribe=EXCLUSIVE: "Allocates entire nodes to jobs even with SelectType=select/cons_tres configured"
    (slurm.conf(5), https://slurm.schedmd.com/slurm.conf.html#OPT_EXCLUSIVE). Under cons_tres, the default select
    plugin since Slurm 23.02 and ndfleet's own, jobs would otherwise share a node's cores and GPUs; an island's
    8-GPU nodes are allocated whole, as ndfleet's slurm.conf always did."""
    lines = [f"NodeSet={i.nodeset} Feature={i.feature}" for i in islands]
    for i in islands:
        line = f"PartitionName={i.partition} Nodes={i.nodeset} MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE"
        if i.elastic_nodes:
            line += f" SuspendTime={i.suspend_time_s} ResumeTimeout={i.resume_timeout_s}"
        lines.append(line)
    return lines


def spares_config(spec: ClusterSpec) -> str:
    """The controller's spares JSON (ndfleet_node.spares.load_config): every fixed island with spares, its
    partition and size, the host ledger's path, and how long before a node's hardware drain a job that failed on it
    is requeued. Each island's spares are held in the reservation
    `ndfleet-spares-<island>` (names.SPARES_RESERVATION_PREFIX); with no spares anywhere the program keeps only the
    ledger."""
    islands = [{"island": i.name, "partition": s.partition, "nodes": i.nodes, "spares": i.spares}
               for i, s in zip(spec.islands, slurm_islands(spec), strict=True) if i.spares]
    if spec.slurm is None:
        raise ValueError("spares_config needs a spec with ndfleet:scheduler = 'slurm'")
    within = requeue_failed_within_s(spec)
    doc = {"ledger": HOST_LEDGER, "islands": islands, "requeue_failed_within_s": within}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def island_partitions(spec: ClusterSpec) -> str:
    """The slurm.conf lines that keep jobs inside one island, for any Slurm (ndfleet's or your own, >= 22.05).

    Scale-set host names end in a base-36 instance id (no range Slurm parses) and a repaired node comes back under a
    new name, so the nodes are selected by feature, not by name: a node registers with `Feature=island-<name>`
    (`slurmd -Z --conf ...`), the island's NodeSet picks it up and the island's partition holds the NodeSet.
    """
    lines = [
        "# ndfleet: one partition per InfiniBand island (scale set); InfiniBand does not cross islands.",
        "# Nodes register as dynamic nodes: slurmd -Z --conf \"Feature=island-<island> ...\"",
        *partition_lines(slurm_islands(spec)),
        "JobSubmitPlugins=all_partitions",
    ]
    return "\n".join(lines) + "\n"


def max_node_count(total_nodes: int) -> int:
    """Dynamic nodes at most: the planned ones and the subnet's headroom (automatic repairs create a new VM before
    the old one is gone; ndfleet.stackconfig.settings sizes the subnet for the same headroom)."""
    return total_nodes + node_headroom(total_nodes)


def gpu_device_files(gpus: int) -> str:
    """`/dev/nvidia[0-7]` for 8 GPUs: the device files of the GPUs, in gres.conf's range form."""
    return f"/dev/nvidia[0-{gpus - 1}]" if gpus > 1 else "/dev/nvidia0"


def controller_host(spec: ClusterSpec) -> str:
    """The controller VM's host name (components/slurm_host.py gives the VM this computer name)."""
    return f"{spec.name_prefix}-slurmctld"


def slurm_addresses(spec: ClusterSpec) -> tuple[str, list[str]]:
    """Static private addresses of the controller and the login VMs: the top of the compute subnet.

    Azure keeps the last address of a subnet and hands out dynamic addresses from the bottom, so the scale sets
    never take these; a fixed controller address lets slurm.conf and the nodes' `--conf-server` be rendered
    before deployment (no value only known after `pulumi up` in customData).
    """
    if spec.slurm is None:
        raise ValueError("slurm_addresses needs a spec with ndfleet:scheduler = 'slurm'")
    net = ipaddress.IPv4Network(spec.network.compute.cidr)
    top = int(net.broadcast_address) - 1
    controller = str(ipaddress.IPv4Address(top))
    logins = [str(ipaddress.IPv4Address(top - 1 - i)) for i in range(spec.slurm.login_count)]
    return controller, logins


def slurm_site(spec: ClusterSpec, controller_addr: str | None = None) -> SlurmSite:
    """The Slurm site of a cluster; `controller_addr` defaults to the controller's static private address."""
    if spec.slurm is None:
        raise ValueError("slurm_site needs a spec with ndfleet:scheduler = 'slurm'")
    profile = spec.profile
    if controller_addr is None:
        controller_addr = slurm_addresses(spec)[0]
    islands = slurm_islands(spec)
    auth_info, scheduler_parameters = requeue_hold_settings(spec)
    return SlurmSite(
        cluster_name=spec.name_prefix,
        controller_host=controller_host(spec),
        controller_addr=controller_addr,
        islands=islands,
        max_node_count=max_node_count(spec.total_nodes),
        gpus_per_node=profile.gpus_per_vm,
        real_memory_mib=profile.slurm_real_memory_mib,
        sockets=profile.sockets,
        cores_per_socket=profile.cores_per_socket,
        threads_per_core=profile.threads_per_core,
        health_check_interval_s=spec.slurm.health_check_interval_s,
        min_job_age_s=min_job_age_s(spec),
        auth_info=auth_info,
        scheduler_parameters=scheduler_parameters,
        gpu_device_files=gpu_device_files(profile.gpus_per_vm),
    )


def _environment() -> jinja2.Environment:
    return environment(TEMPLATES_DIR, hash_comments=True)


# Cached per site: asdict deep-copies every island, and a stack renders a dozen templates per island from the same
# site (103 islands: 648 renders, 1.4 million asdict calls uncached). Callers copy it ({**ctx, **extra}); the
# templates only read it.
@functools.lru_cache(maxsize=4)
def _context(site: SlurmSite) -> dict[str, Any]:
    ctx = asdict(site)
    ctx["islands"] = [asdict(i) for i in site.islands]
    ctx["elastic"] = site.elastic
    ctx["elastic_islands"] = [asdict(i) for i in site.islands if i.elastic_nodes]
    ctx["node_lines"] = node_lines(site)
    ctx["partition_lines"] = partition_lines(site.islands)
    return ctx


def node_attrs(site: SlurmSite, island: SlurmIsland) -> str:
    return node_attributes(island.feature, site.gpus_per_node, site.real_memory_mib)


def node_lines(site: SlurmSite) -> list[str]:
    """slurm.conf's node lines: the elastic islands' CLOUD nodes (dynamic nodes are not listed)."""
    lines = []
    for i in site.islands:
        if i.elastic_nodes:
            lines.append(f"# Elastic island {i.name}: up to {i.nodes} CLOUD nodes, created when a job needs them.")
            shape = node_shape(site.sockets, site.cores_per_socket, site.threads_per_core)
            lines.append(f"NodeName={i.elastic_nodes} State=CLOUD {shape} {node_attrs(site, i)}")
    return lines


def render(template: str, site: SlurmSite, **extra: Any) -> str:
    return _environment().get_template(template).render({**_context(site), **extra})


def render_slurm_conf(site: SlurmSite) -> str:
    return render("slurm/slurm.conf.j2", site)


def render_gres_conf(site: SlurmSite) -> str:
    return render("slurm/gres.conf.j2", site)


def render_cgroup_conf(site: SlurmSite) -> str:
    return render("slurm/cgroup.conf.j2", site)


def config_files(site: SlurmSite) -> dict[str, str]:
    """The files slurmctld serves to configless slurmd and clients: name -> content."""
    return {
        "slurm.conf": render_slurm_conf(site),
        "gres.conf": render_gres_conf(site),
        "cgroup.conf": render_cgroup_conf(site),
    }


def dynamic_node_conf(site: SlurmSite, island: str, boot_version: str = BOOT_VERSION_PLACEHOLDER) -> str:
    """The node line a compute node registers with (`slurmd -Z --conf "..."`): its island and boot version as
    features (`Feature=island-<name>,boot-<version>`: slurm.conf(5), Features, a comma-separated list), GPUs and
    memory (node_attributes), and drained awaiting burn-in. The bundle is rendered with the placeholders of both,
    which the boot step replaces (ndfleet/nodefiles/nodebundle.py).

    A dynamic node's features are those it registers with (slurmd(8), --conf). Whether slurmctld takes new ones from
    a node it already knows (a reimaged VM keeps its host name) is not shown offline: the roll (issue 42) checks it
    in the twin, and the health endpoint reports the version either way. An elastic island's CLOUD nodes take
    theirs from slurm.conf's line (node_lines), which names no version: each resume creates a VM on the scale set's
    latest model, and the health endpoint reports its version.

    `State=DRAIN Reason=...`: a node
    slurmctld does not know yet is created drained with that reason in the same step that creates it (Slurm
    src/slurmctld/node_mgr.c, create_dynamic_reg_node, since 22.05), so no job can land on it before the burn-in
    resumes it. A node slurmctld already knows (a reboot) keeps the state it had. The line holds no quote and no
    backslash: it travels inside double quotes in /etc/default/slurmd.
    """
    # The node bundle's placeholder stands for whichever island's node unpacks it (ndfleet/nodefiles/nodebundle.py).
    if island != ISLAND_PLACEHOLDER and not any(i.name == island for i in site.islands):
        raise ValueError(f"unknown island {island!r}; the cluster has {[i.name for i in site.islands]}")
    features = f"{island_feature(island)},{boot_version_feature(boot_version)}"
    attrs = node_attributes(features, site.gpus_per_node, site.real_memory_mib)
    return f"{attrs} State=DRAIN Reason={AWAITING_BURNIN_REASON}"


def slurmd_args(site: SlurmSite, island: str, boot_version: str = BOOT_VERSION_PLACEHOLDER) -> list[str]:
    """slurmd's arguments on a compute node of `island`: dynamic, configless, registering drained awaiting burn-in."""
    return ["-Z", "--conf-server", site.conf_server, "--conf", dynamic_node_conf(site, island, boot_version)]


def slurmd_options(site: SlurmSite, island: str, boot_version: str = BOOT_VERSION_PLACEHOLDER) -> str:
    """`slurmd_args` as the value of SLURMD_OPTIONS in /etc/default/slurmd, for the package's unit
    (`ExecStart=/usr/sbin/slurmd --systemd $SLURMD_OPTIONS`).

    systemd splits an unbraced `$VAR` that stands as a word of its own at whitespace and removes quotes while doing
    so (systemd src/basic/env-util.c replace_env_argv: strv_split_full(..., EXTRACT_UNQUOTE)); an EnvironmentFile=
    value that does not start with a quote keeps its inner quotes (src/basic/env-file.c). So the --conf line, which
    holds spaces, is written in double quotes and arrives as one argument. Azure CycleCloud writes the same form
    (Azure/cyclecloud-slurm azure-slurm-install/install.py, setup_slurmd).
    """
    args = slurmd_args(site, island, boot_version)
    for arg in args:
        if any(c in arg for c in "\"\\'$`\n"):
            raise ValueError(f"slurmd argument {arg!r} holds a quote, backslash, $ or newline")
    return " ".join(f'"{a}"' if " " in a else a for a in args)
