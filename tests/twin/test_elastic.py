"""Elastic islands in the booted cluster (docs/elastic.md): a job that needs more nodes than are up makes the resume
program ask the Resource Manager stand-in for VMs; the stand-in boots them as new machines from the scale set's boot
data; they validate, learn their Slurm names, register, are burned in and run the job; idle, they are suspended and
their VMs deleted. A VM that never comes up is given up by the resume-fail program, and its node returns to the pool.

The twin's stack has two elastic islands that start empty: `burst` (2 nodes at most, 10 minutes' idle time: longer
than from resume to burn-in, as the configuration check demands: docs/elastic.md) and `stuck`, whose VMs the
stand-in creates but never boots (a 2-minute resume timeout).
"""

from __future__ import annotations

import copy
import shlex
import time
from dataclasses import dataclass

import pytest

from ndfleet.stackconfig.profiles import PROFILES
from tests.twin.conftest import STUCK_SCALE_SET
from tests.twin.machine import TwinMachine
from tests.twin.test_boot import BOOT_TIMEOUT_S
from tests.twin.test_cluster import controller, login, nodes_by_name, slurm_up  # noqa: F401 - slurm_up: a fixture
from tests.twin.test_status import status_now, wait_for
from tests.twin.twin import Twin

BURST = "burst"
BURST_SCALE_SET = "twin-burst-vmss"
STUCK = "stuck"
ELASTIC_LOG = "/srv/slurm/elastic/elastic.log"
JOB_S = 180  # how long the scale-out's job runs
# The answers the burst island's first deletes get (tests/twin/arm.py `inject`): in conflict, busy, then throttled
# (Retry-After 5 s) more often than the suspend program asks (20 attempts, about 100 s here), so that the reconcile
# timer asks for the rest.
REFUSED_DELETES = [409, 503] + [429] * 22
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


def accounted(ctl: TwinMachine, job: str) -> tuple[str, str]:
    """The job's state and end time in Slurm's accounting (slurmdbd), which keeps a finished job after slurmctld has
    forgotten it; ("", "") until slurmdbd has the job."""
    out = ctl.run(f"sacct -n -P -X -j {shlex.quote(job)} -o State,End", check=False).stdout.strip().splitlines()
    state, _, end = (out[0] if out else "").partition("|")
    return state.strip(), end.strip()


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


@pytest.fixture(scope="session")
def elastic_ready(slurm_up: Twin) -> Twin:  # noqa: F811 - the imported fixture
    ctl = controller(slurm_up)
    wanted = {f"{BURST}-1", f"{BURST}-2", f"{STUCK}-1"}
    ctl.wait_for("the elastic islands' CLOUD nodes", lambda: wanted <= set(nodes_by_name(ctl)), 300)
    return slurm_up


@pytest.fixture(scope="session")
def stuck_job(elastic_ready: Twin) -> Submitted:
    """Submitted first: its resume timeout runs while the burst island scales out."""
    return submitted(elastic_ready, f"-p {STUCK} -N 1 --wrap true")


@pytest.fixture(scope="session")
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


@pytest.fixture(scope="session")
def scaled_out(elastic_ready: Twin, stuck_job: Submitted) -> Submitted:
    twin = elastic_ready
    # Its second step asks for every core of one node (test_a_step_on_every_core_of_a_new_node_runs): trivial tasks,
    # so that 96 of them finish on the twin's 2-core host. Then long enough to be running still when a later
    # deployment lands (test_a_later_deployment_leaves_the_running_vms_and_their_job_alone).
    job = submitted(
        twin, f"-p {BURST} -N 2 --wrap 'srun hostname; srun -N 1 -n {burst_cores(twin)} true; sleep {JOB_S}'"
    )
    ctl = controller(twin)
    wait(twin, job.job, "the job running on new VMs",
         lambda: job_fields(ctl, job.job).get("JobState") == "RUNNING")  # fmt: skip
    twin.record("elastic scale-out: job submitted to job running (2 new VMs)", time.monotonic() - job.at)
    # Azure refuses the island's deletes for a while, as Resource Manager does when it throttles or is busy: more
    # refusals than the suspend program's attempts (MAX_DELETE_ATTEMPTS), so that the reconcile timer has to finish
    # the delete from the elastic state file (docs/elastic.md). Set now, before the idle time can end: the scale-in's
    # own tests run last (conftest.py), while the idle time runs out under the other modules' tests.
    assert twin.arm is not None
    twin.arm.inject(BURST_SCALE_SET, "delete", REFUSED_DELETES)
    return job


@pytest.fixture(scope="session")
def scaled_in(elastic_ready: Twin, scaled_out: Submitted) -> Twin:
    twin = elastic_ready
    ctl = controller(twin)
    assert twin.arm is not None
    # The job's end as Slurm's accounting recorded it: slurmctld itself forgets a finished job after MinJobAge
    # (300 s), and the tests between the scale-out and this one (the later deployment, the stuck island) may take
    # longer than that.
    wait(twin, scaled_out.job, "the job done", lambda: accounted(ctl, scaled_out.job)[0] == "COMPLETED")
    ended = float(ctl.run(f"date -d {shlex.quote(accounted(ctl, scaled_out.job)[1])} +%s").stdout)
    assert twin.arm is not None
    wait(twin, scaled_out.job, "both VMs deleted", lambda: len(twin.arm.deleted(BURST_SCALE_SET)) == 2)
    wait(twin, scaled_out.job, "the nodes powered down",
         lambda: all(back_in_the_pool(twin, f"{BURST}-{n}") for n in (1, 2)))  # fmt: skip
    down = time.time()
    twin.record(
        "elastic scale-in: job end to VMs deleted (idleMinutes 10)", twin.arm.last_delete(BURST_SCALE_SET) - ended
    )
    twin.record("elastic scale-in: job end to nodes seen powered down (+ SuspendTimeout 600 s)", down - ended)
    return twin


def test_a_job_needing_more_nodes_than_are_up_gets_new_vms_from_the_scale_set(
    elastic_ready: Twin, scaled_out: Submitted
) -> None:
    twin = elastic_ready
    assert twin.arm is not None
    assert twin.arm.capacities(BURST_SCALE_SET, "PATCH") == [2]
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


def test_status_shows_each_new_vm_with_the_health_its_extension_reports(
    elastic_ready: Twin, scaled_out: Submitted
) -> None:
    """A new VM of an elastic island runs the scale set model's Application Health extension like any instance, so
    Azure has its health (the instance view's vmHealth) and `ndfleet status` shows it: healthy once the node has
    validated, as the Application Health stand-in reads the node's endpoint. Before, the twin's elastic VMs had no
    vmHealth, which no VM of a scale set with the extension lacks."""
    twin = elastic_ready
    vms = sorted(tm.name for tm in twin.role("compute") if tm.spec.island == BURST)
    seen: dict[str, object] = {}

    def agrees() -> bool:
        _, table, doc = status_now(twin)
        shown = {n["name"]: n["vmHealth"] for n in doc.get("nodes", ()) if n.get("island") == BURST}
        states = {name: twin.repairs.state(name) for name in vms}
        seen.update(shown=shown, states=states, table=table)
        return set(shown) == set(vms) and all(states[n] == "Healthy" and shown[n] == "healthy" for n in vms)

    wait_for("status showing the new VMs healthy", agrees,
             explain=lambda: f"status {seen.get('shown')}, the stand-in {seen.get('states')}\n{seen.get('table')}")


def test_a_later_deployment_leaves_the_running_vms_and_their_job_alone(
    elastic_ready: Twin, scaled_out: Submitted
) -> None:
    """A later `pulumi up` that changes the scale set (a tag here) while the job runs: pulumi-azure-native PUTs the
    whole body as the plan's resource holds it, with the capacity the program read live (docs/elastic.md). The
    stand-in answers the PUT as Azure does (its capacity wins), so this fails if the program sent anything else."""
    twin = elastic_ready
    arm = twin.arm
    assert arm is not None
    ctl = controller(twin)
    running = job_fields(ctl, scaled_out.job)
    assert running.get("JobState") == "RUNNING", diagnose(twin, scaled_out.job)
    # The scale-out itself requeued the job once (the resume program drains the new nodes until their burn-in, which
    # requeues what Slurm gave them: docs/elastic.md); the deployment must add no restart.
    restarts = running["Restarts"]
    vms = sorted(tm.name for tm in twin.role("compute") if tm.spec.island == BURST)
    body = copy.deepcopy(twin.plan.scale_sets[BURST_SCALE_SET].body)
    assert body["sku"]["capacity"] == 0  # the plan's: what ignoreChanges kept in Pulumi's state
    body["tags"]["owner"] = "a later deployment"
    body["sku"]["capacity"] = arm.get(BURST_SCALE_SET)["sku"]["capacity"]  # the program's live read
    status, answer = arm.deploy(BURST_SCALE_SET, body)
    assert (status, answer["sku"]["capacity"], answer["tags"]["owner"]) == (200, 2, "a later deployment")
    # Its end, whatever it is: a VM deleted under it would fail the job or requeue it (PENDING, Restarts 1).
    wait(twin, scaled_out.job, "the job's end",
         lambda: job_fields(ctl, scaled_out.job).get("JobState") not in ("RUNNING", "COMPLETING"))  # fmt: skip
    done = job_fields(ctl, scaled_out.job)
    assert (done["JobState"], done["Restarts"], done["NodeList"]) == ("COMPLETED", restarts, f"{BURST}-[1-2]")
    assert (arm.deleted(BURST_SCALE_SET), sorted(arm.scale_sets[BURST_SCALE_SET].instances)) == ([], ["0", "1"])
    assert sorted(tm.name for tm in twin.role("compute") if tm.spec.island == BURST) == vms
    assert not set(vms) & set(twin.removed)


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


def test_a_refused_delete_is_retried_and_finished_by_the_reconcile_timer(scaled_in: Twin) -> None:
    """Every injected refusal was met by another attempt; the suspend program kept the delete on record when its
    attempts ran out, and the reconcile timer asked again until Azure took it and the VMs left the list."""
    assert scaled_in.arm is not None
    assert scaled_in.arm.refused(BURST_SCALE_SET) == REFUSED_DELETES
    log = controller(scaled_in).run(f"cat {ELASTIC_LOG}").stdout
    assert "on record, the reconcile timer asks again" in log
    assert "delete confirmed" in log
    assert sorted(scaled_in.arm.deleted(BURST_SCALE_SET)) == ["0", "1"]


@pytest.fixture(scope="session")
def stuck_vm_failed(stuck_given_up: Twin) -> tuple[Twin, Submitted]:
    """The stuck island's next VM fails to allocate (the stand-in lists it Failed): the resume program gives its node
    up at once, without waiting for the ResumeTimeout."""
    twin = stuck_given_up
    assert twin.arm is not None
    with twin.arm.lock:
        twin.arm.fails_allocation.add(STUCK_SCALE_SET)
    job = submitted(twin, f"-p {STUCK} -N 1 --wrap true")
    ctl = controller(twin)
    wait(twin, job.job, "a node given up for its Failed VM",
         lambda: "Failed: deleted, and stuck-" in ctl.run(f"cat {ELASTIC_LOG}", check=False).stdout)  # fmt: skip
    login(twin).run(f"scancel {job.job}")
    return twin, job


def failed_vm_node(twin: Twin) -> str:
    log = controller(twin).run(f"cat {ELASTIC_LOG}").stdout
    line = next(x for x in log.splitlines() if "Failed: deleted, and stuck-" in x)
    return line.rsplit("and ", 1)[1].split(" ")[0]


def test_a_vm_that_failed_to_allocate_is_given_up_at_once_and_deleted(
    stuck_vm_failed: tuple[Twin, Submitted],
) -> None:
    twin, job = stuck_vm_failed
    node = failed_vm_node(twin)
    # Given up by the resume program with its own reason, not by slurmctld's ResumeTimeout (resume-fail's reason).
    assert "ndfleet:elastic:vm-failed" in nodes_by_name(controller(twin))[node].get("Reason", "")
    arm = twin.arm
    assert arm is not None

    def failed_vms_left() -> list[str]:
        with arm.lock:
            listed = list(arm.scale_sets[STUCK_SCALE_SET].instances.values())
        return [i.instance_id for i in listed if i.provisioning_state == "Failed"]

    wait(twin, job.job, "the Failed VM's delete asked for",
         lambda: any(m == "DELETE" and s == STUCK_SCALE_SET and at >= job.wall for m, s, _, at in list(arm.calls)))
    wait(twin, job.job, "no Failed VM left in the stuck island", lambda: not failed_vms_left())


def test_a_node_whose_vm_failed_to_allocate_returns_to_the_pool(stuck_vm_failed: tuple[Twin, Submitted]) -> None:
    """Slurm's SuspendTimeout (600 s) runs before the node is back: this waits last (conftest.py)."""
    twin, job = stuck_vm_failed
    node = failed_vm_node(twin)
    wait(twin, job.job, f"{node} back in the pool", lambda: back_in_the_pool(twin, node))
