"""Elastic islands in the booted cluster (docs/elastic.md): a job that needs more nodes than are up makes the resume
program ask the Resource Manager stand-in for VMs; the stand-in boots them as new machines from the scale set's boot
data; they validate, learn their Slurm names, register, are burned in and run the job; idle, they are suspended and
their VMs deleted. A VM that never comes up is given up by the resume-fail program, and its node returns to the pool.

The twin's stack has two elastic islands that start empty: `burst` (2 nodes at most, 5 minutes' idle time: longer
than from registration to burn-in, docs/elastic.md) and `stuck`, whose VMs the stand-in creates but never boots (a
2-minute resume timeout).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

import pytest

from ndfleet.stackconfig.profiles import PROFILES
from tests.twin.conftest import STUCK_SCALE_SET
from tests.twin.machine import TwinMachine
from tests.twin.test_boot import BOOT_TIMEOUT_S
from tests.twin.test_cluster import controller, login, nodes_by_name, slurm_up  # noqa: F401 - slurm_up: a fixture
from tests.twin.twin import Twin

BURST = "burst"
BURST_SCALE_SET = "twin-burst-vmss"
STUCK = "stuck"
ELASTIC_LOG = "/srv/slurm/elastic/elastic.log"
# Slurm's power saving works in its own time (SuspendTime, SuspendTimeout, ResumeTimeout) on top of the boot.
WAIT_S = BOOT_TIMEOUT_S


def job_fields(ctl: TwinMachine, job: str) -> dict[str, str]:
    out = ctl.run(f"scontrol -o show job {shlex.quote(job)}", check=False).stdout
    fields: dict[str, str] = {}
    for token in out.split():
        key, sep, value = token.partition("=")
        if sep:
            fields.setdefault(key, value)
    return fields


def submit(twin: Twin, args: str) -> str:
    return login(twin).run(f"sbatch --parsable {args}").stdout.strip().split(";")[0]


def vm_side(twin: Twin) -> str:
    """The elastic islands' VMs as the twin sees them: what booted, what the node's gate and name lookup said."""
    lines = [f"--- twin: removed {twin.removed}, Azure-side errors {twin.azure_errors}"]
    for tm in [tm for tm in twin.role("compute") if tm.spec.island in (BURST, STUCK)]:
        states = tm.run("systemctl is-active ndfleet-validated.target ndfleet-slurmd.service slurmd.service",
                        check=False, timeout=30).stdout.split()  # fmt: skip
        lines += [f"--- VM {tm.name}: validated/ndfleet-slurmd/slurmd {states}", tm.journal("ndfleet-slurmd", 15)]
    return "\n".join(lines)


def diagnose(twin: Twin, job: str) -> str:
    # Most telling last: a CI log keeps the end of a failure.
    ctl = controller(twin)
    return "\n".join((
        "--- slurmctld\n" + ctl.run("tail -n 40 /var/log/slurm/slurmctld.log", check=False).stdout,
        "--- burn-in\n" + ctl.journal("ndfleet-burnin.service", 20),
        "--- nodes\n" + ctl.run("scontrol -o show node", check=False).stdout[-4000:],
        f"--- job {job}: {job_fields(ctl, job)}",
        f"--- Resource Manager calls: {twin.arm.calls if twin.arm else None}",
        "--- elastic log\n" + ctl.run(f"tail -n 40 {ELASTIC_LOG}", check=False).stdout,
        vm_side(twin),
    ))  # fmt: skip


def wait(twin: Twin, job: str, what: str, predicate, timeout: float = WAIT_S) -> None:  # noqa: ANN001
    """Wait for `predicate`; on time-out the failure shows Slurm's, the programs' and the stand-in's side of it."""
    try:
        controller(twin).wait_for(what, predicate, timeout)
    except AssertionError as exc:
        # The controller's console tail (in `exc`) says nothing about elastic nodes: only its first line is kept.
        raise AssertionError(f"{str(exc).splitlines()[0]}\n{diagnose(twin, job)}") from None


def node_flags(twin: Twin, node: str) -> set[str]:
    return set(nodes_by_name(controller(twin)).get(node, {}).get("State", "").split("+"))


def back_in_the_pool(twin: Twin, node: str) -> bool:
    flags = node_flags(twin, node)
    return {"IDLE", "CLOUD", "POWERED_DOWN"} <= flags and not flags & {"DRAIN", "DOWN", "POWERING_DOWN"}


@dataclass
class Submitted:
    job: str
    at: float  # time.monotonic() when submitted
    wall: float  # time.time() when submitted (the Resource Manager stand-in's clock)


def submitted(twin: Twin, args: str) -> Submitted:
    wall, at = time.time(), time.monotonic()
    return Submitted(submit(twin, args), at, wall)


def burst_cores(twin: Twin) -> int:
    """Cores of one burst VM: its size's shape (the profile), which the CLOUD node line declares."""
    p = PROFILES[twin.plan.scale_sets[BURST_SCALE_SET].vm_size]
    return p.sockets * p.cores_per_socket


@pytest.fixture(scope="module")
def elastic_ready(slurm_up: Twin) -> Twin:  # noqa: F811 - the imported fixture
    ctl = controller(slurm_up)
    wanted = {f"{BURST}-1", f"{BURST}-2", f"{STUCK}-1"}
    ctl.wait_for("the elastic islands' CLOUD nodes", lambda: wanted <= set(nodes_by_name(ctl)), 300)
    return slurm_up


@pytest.fixture(scope="module")
def stuck_job(elastic_ready: Twin) -> Submitted:
    """Submitted first: its resume timeout runs while the burst island scales out."""
    return submitted(elastic_ready, f"-p {STUCK} -N 1 --wrap true")


@pytest.fixture(scope="module")
def stuck_given_up(elastic_ready: Twin, stuck_job: Submitted) -> Twin:
    """The stuck VM's first resume given up. Slurm requeues the job, which asks for the node again (a new VM, given
    up in turn) until it is cancelled: it is cancelled here, so that whatever ran before (the scale-out takes its
    time) the first delete is the first VM's, and the node can be seen back in the pool."""
    twin = elastic_ready
    arm = twin.arm
    assert arm is not None
    wait(twin, stuck_job.job, "the stuck VM deleted", lambda: bool(arm.deleted(STUCK_SCALE_SET)))
    login(twin).run(f"scancel {stuck_job.job}")
    first_delete = min(at for method, s, _, at in arm.calls if method == "DELETE" and s == STUCK_SCALE_SET)
    twin.record("elastic resume fail: job submitted to VM deleted (resumeTimeoutMinutes 2)",
                first_delete - stuck_job.wall)  # fmt: skip
    return twin


@pytest.fixture(scope="module")
def scaled_out(elastic_ready: Twin, stuck_job: Submitted) -> Submitted:
    twin = elastic_ready
    # Its second step asks for every core of one node (test_a_step_on_every_core_of_a_new_node_runs): trivial tasks,
    # so that 96 of them finish on the twin's 2-core host.
    job = submitted(twin, f"-p {BURST} -N 2 --wrap 'srun hostname; srun -N 1 -n {burst_cores(twin)} true; sleep 20'")
    ctl = controller(twin)
    wait(twin, job.job, "the job running on new VMs",
         lambda: job_fields(ctl, job.job).get("JobState") == "RUNNING")  # fmt: skip
    twin.record("elastic scale-out: job submitted to job running (2 new VMs)", time.monotonic() - job.at)
    return job


@pytest.fixture(scope="module")
def scaled_in(elastic_ready: Twin, scaled_out: Submitted) -> Twin:
    twin = elastic_ready
    ctl = controller(twin)
    wait(twin, scaled_out.job, "the job done", lambda: job_fields(ctl, scaled_out.job).get("JobState") == "COMPLETED")
    # Its end as Slurm recorded it (the other tests may have run meanwhile), read now: slurmctld forgets a finished
    # job after MinJobAge (300 s), before the idle nodes are released.
    ended = float(ctl.run(f"date -d {shlex.quote(job_fields(ctl, scaled_out.job)['EndTime'])} +%s").stdout)
    assert twin.arm is not None
    wait(twin, scaled_out.job, "both VMs deleted", lambda: len(twin.arm.deleted(BURST_SCALE_SET)) == 2)
    wait(twin, scaled_out.job, "the nodes powered down",
         lambda: all(back_in_the_pool(twin, f"{BURST}-{n}") for n in (1, 2)))  # fmt: skip
    down = time.time()
    twin.record(
        "elastic scale-in: job end to VMs deleted (idleMinutes 5)", twin.arm.last_delete(BURST_SCALE_SET) - ended
    )
    twin.record("elastic scale-in: job end to nodes seen powered down (+ SuspendTimeout 120 s)", down - ended)
    return twin


def test_a_job_needing_more_nodes_than_are_up_gets_new_vms_from_the_scale_set(
    elastic_ready: Twin, scaled_out: Submitted
) -> None:
    twin = elastic_ready
    assert twin.arm is not None
    assert twin.arm.capacities(BURST_SCALE_SET) == [2]
    vms = [tm for tm in twin.role("compute") if tm.spec.island == BURST]
    assert sorted(tm.name for tm in vms) == ["twin-burst-000000", "twin-burst-000001"]
    # Booted from exactly the scale set's boot data, as Azure boots an instance.
    template = twin.plan.scale_sets[BURST_SCALE_SET]
    assert all((tm.spec.custom_data, tm.spec.user_data) == (template.custom_data, template.user_data) for tm in vms)


def test_the_job_runs_on_the_islands_nodes_each_on_its_own_vm(elastic_ready: Twin, scaled_out: Submitted) -> None:
    twin = elastic_ready
    assert job_fields(controller(twin), scaled_out.job)["NodeList"] == f"{BURST}-[1-2]"
    nodes = nodes_by_name(controller(twin))
    hosts = {nodes[f"{BURST}-{n}"]["NodeHostName"] for n in (1, 2)}
    assert hosts == {"twin-burst-000000", "twin-burst-000001"}
    for n in (1, 2):
        vm = twin.machine(nodes[f"{BURST}-{n}"]["NodeHostName"])
        assert f"-N {BURST}-{n} " in vm.run("cat /etc/default/slurmd").stdout


def test_a_step_on_every_core_of_a_new_node_runs(elastic_ready: Twin, scaled_out: Submitted) -> None:
    """A CLOUD node is as large as its VM size (the line's CPUs/Sockets/CoresPerSocket/ThreadsPerCore): without them
    Slurm takes it as 1 CPU and refuses a step of more tasks than that; with them but a machine that registers fewer
    CPUs, slurmctld drains it ("Low socket*core*thread count"). The twin's VMs report the size's shape through the
    hardware stand-in (tests/twin/twin.py hwloc_shape, fakes/hardware.c)."""
    twin = elastic_ready
    ctl = controller(twin)
    cores = burst_cores(twin)
    size = PROFILES[twin.plan.scale_sets[BURST_SCALE_SET].vm_size]
    nodes = nodes_by_name(ctl)
    for n in (1, 2):
        node = nodes[f"{BURST}-{n}"]
        shape = (size.vcpus, size.sockets, size.cores_per_socket, size.threads_per_core)
        assert (node["CPUTot"], node["Sockets"], node["CoresPerSocket"], node["ThreadsPerCore"]) == tuple(
            str(v) for v in shape), node  # fmt: skip
    step = f"{scaled_out.job}.1"

    def step_done() -> bool:
        out = ctl.run(f"sacct -n -P -j {step} -o JobID,State,NTasks", check=False).stdout.split()
        return any(line.split("|")[0] == step and line.split("|")[1] not in ("RUNNING", "PENDING") for line in out)

    wait(twin, scaled_out.job, f"step {step} ended (accounting)", step_done)
    lines = ctl.run(f"sacct -n -P -j {step} -o JobID,State,NTasks").stdout.split()
    assert f"{step}|COMPLETED|{cores}" in lines, lines


def test_the_job_waits_until_its_new_nodes_are_burned_in(elastic_ready: Twin, scaled_out: Submitted) -> None:
    log = controller(elastic_ready).run(f"cat {ELASTIC_LOG}").stdout
    assert f"job {scaled_out.job} held until its new nodes are burned in" in log
    assert f"job {scaled_out.job} released: its nodes are burned in" in log


def test_a_resume_that_never_comes_up_is_given_up_and_its_vm_deleted(
    stuck_given_up: Twin, stuck_job: Submitted
) -> None:
    twin = stuck_given_up
    arm = twin.arm
    assert arm is not None
    assert arm.deleted(STUCK_SCALE_SET)[:1] == ["0"]
    assert "resume of stuck-1 failed" in controller(twin).run(f"cat {ELASTIC_LOG}").stdout
    # A resume still under way when the job was cancelled is given up in turn: no VM of the island is left.
    wait(twin, stuck_job.job, "no VM left in the stuck island", lambda: arm.scale_sets[STUCK_SCALE_SET].instances == {})


def test_a_node_whose_resume_failed_returns_to_the_pool(stuck_given_up: Twin, stuck_job: Submitted) -> None:
    wait(stuck_given_up, stuck_job.job, "stuck-1 powered down in the pool",
         lambda: back_in_the_pool(stuck_given_up, f"{STUCK}-1"))  # fmt: skip


def test_idle_new_nodes_are_released_and_their_vms_deleted(scaled_in: Twin) -> None:
    assert scaled_in.arm is not None
    assert sorted(scaled_in.arm.deleted(BURST_SCALE_SET)) == ["0", "1"]
    assert scaled_in.arm.scale_sets[BURST_SCALE_SET].instances == {}
    assert not [tm for tm in scaled_in.role("compute") if tm.spec.island == BURST]
