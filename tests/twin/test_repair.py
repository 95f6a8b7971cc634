"""The repair loop on the booted cluster (docs/operations.md, "When hardware breaks"): a node's hardware breaks under a
running job; Slurm's health check finds it and takes the node out with the check's id; the job, which asked to be
requeued, goes back to the queue; the node files an impact report for its host (the Impact API stand-in) and answers
Unhealthy; automatic repairs (tests/twin/repairs.py) replace the VM; the new VM boots, validates, registers awaiting
burn-in, is burned in with an idle partner and enters service; the job runs again and the island is back at full
strength.

The twin starts with automatic repairs suspended on every scale set (an operator's `set-orchestration-service-state`);
this module resumes them on `ib00`. The first repair is the node the burn-in found a bad cable on
(test_cluster.py): the node filed the burn-in's verdict for its host and answers Unhealthy. Then each fault kind goes
round the loop on a node that has run longer than the repair grace period (PT10M), under a job on every node of the
island (no spare). The fault kinds, from Meta's Llama 3 report (The Llama 3 Herd of Models, arXiv:2407.21783, table
5: of 419 unexpected interruptions in 54 days, faulty GPUs 30.1 % and GPU HBM3 memory 17.2 %, network switch and
cable 8.4 %): an uncorrectable ECC error on a GPU (nvidia-smi's volatile uncorrectable count, check `gpu.ecc`) and
an InfiniBand port going down (ibstat, check `ib.ports`). Like a GPU that fell off the bus, the stand-in's fault
leaves the job's processes where they are (stuck in a collective): the health check, not the job's own exit, takes
the node out.

One poll loop watches every stage at once and records when each was first seen; each stage is its own test.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field

import pytest
from ndfleet_node.impact_categories import category_for
from ndfleet_node.names import AWAITING_BURNIN_REASON, BURNIN_REASON_PREFIX

from tests.twin.conftest import BAD_CABLE_NODE
from tests.twin.repairs import Repair
from tests.twin.test_cluster import controller, login, nodes_by_name, slurm_up  # noqa: F401 - slurm_up: a fixture
from tests.twin.test_elastic import job_fields
from tests.twin.twin import Twin

ISLAND = "ib00"
LOOP_TIMEOUT_S = 1500  # grace and probes (~2 min), the replacement's boot and burn-in (~3 min), on a loaded machine
POLL_S = 3
# fault kind -> (the hardware stand-in's faults, the validator check that finds it)
FAULTS = {
    "gpu-ecc": (["ecc_uncorrectable"], "gpu.ecc"),
    "ib-port-down": (["ib_port_down"], "ib.ports"),
}
STAGES = ("drained", "requeued", "impact", "unhealthy", "replaced", "validated", "awaiting", "in_service",
          "running_again", "full_strength")  # fmt: skip


def in_service(fields: dict[str, str]) -> bool:
    flags = set(fields.get("State", "").split("+"))
    return bool(flags & {"IDLE", "ALLOCATED", "MIXED"}) and not flags & {"DRAIN", "DOWN", "NOT_RESPONDING"}


def island_in_service(twin: Twin) -> list[str]:
    nodes = nodes_by_name(controller(twin))
    names = {tm.name for tm in twin.role("compute") if tm.spec.island == ISLAND}
    return sorted(n for n in names if n in nodes and in_service(nodes[n]))


def island_size(twin: Twin) -> int:
    """The island's node count in the plan: its machines, less one for each replacement a repair added."""
    scale_set = twin.plan.get(BAD_CABLE_NODE).extra["scale_set"]
    machines = sum(1 for m in twin.plan.machines if m.extra.get("scale_set") == scale_set)
    return machines - sum(1 for r in twin.repairs.done() if r.scale_set == scale_set and r.new)


@dataclass
class Loop:
    kind: str
    node: str
    job: str
    host: str
    fault_at: float  # time.time()
    seen: dict[str, float] = field(default_factory=dict)  # stage -> time.time() first seen
    repair: Repair | None = None
    log: list[str] = field(default_factory=list)

    def took(self, stage: str) -> float:
        return self.seen[stage] - self.fault_at

    def explain(self, stage: str) -> str:
        got = ", ".join(f"{s} +{self.took(s):.0f} s" for s in STAGES if s in self.seen)
        return f"{self.kind} on {self.node} (job {self.job}): {stage} never seen; seen: {got}\n" + "\n".join(
            self.log[-12:])


def validated(tm) -> bool:  # noqa: ANN001
    try:
        return tm.unit_state("ndfleet-validated.target") == "active"
    except Exception:  # noqa: BLE001 - a VM still starting cannot be entered yet
        return False


def observe(twin: Twin, loop: Loop, check: str) -> None:
    ctl = controller(twin)
    nodes = nodes_by_name(ctl)
    now = time.time()
    me = nodes.get(loop.node, {})
    flags = set(me.get("State", "").split("+"))
    if flags & {"DRAIN", "DOWN"} and check in me.get("Reason", ""):
        loop.seen.setdefault("drained", now)
    job = job_fields(ctl, loop.job)
    if int(job.get("Restarts", "0") or 0) >= 1:
        loop.seen.setdefault("requeued", now)
        if job.get("JobState") == "RUNNING" and loop.node not in job.get("NodeList", ""):
            loop.seen.setdefault("running_again", now)
    assert twin.impact is not None
    category = category_for(check)
    if any(i["_at"] >= loop.fault_at and i.get("impactCategory") == category
           and i.get("additionalProperties", {}).get("PhysicalHostName") == loop.host
           for i in twin.impact.filed()):  # fmt: skip
        loop.seen.setdefault("impact", now)
    repair = next((r for r in twin.repairs.done() if r.old == loop.node), None)
    if twin.repairs.state(loop.node) == "Unhealthy" or repair is not None and repair.state == "Unhealthy":
        loop.seen.setdefault("unhealthy", now)
    if repair is not None and repair.new:
        loop.repair = repair
        loop.seen.setdefault("replaced", now)
        new = twin.machines.get(repair.new)
        if new is not None and validated(new):
            loop.seen.setdefault("validated", now)
        fields = nodes.get(repair.new, {})
        # Held for burn-in: seen drained so, or (when the timer burned it in between two polls) named in the
        # controller's burn-in report, which holds only nodes that were awaiting burn-in.
        report = ctl.run(f"cat /var/lib/ndfleet/burnin-{ISLAND}.json", check=False).stdout
        if fields.get("Reason", "").startswith((AWAITING_BURNIN_REASON, BURNIN_REASON_PREFIX)) or (
            f'"{repair.new}"' in report
        ):
            loop.seen.setdefault("awaiting", now)
        if fields and in_service(fields):
            loop.seen.setdefault("in_service", now)
    if "replaced" in loop.seen and len(island_in_service(twin)) >= island_size(twin):
        loop.seen.setdefault("full_strength", now)
    loop.log.append(f"+{now - loop.fault_at:.0f} s: {loop.node} {me.get('State')} [{me.get('Reason', '')}]; job "
                    f"{job.get('JobState')} restarts {job.get('Restarts')} on {job.get('NodeList')}; repair {repair}")


def go_round(twin: Twin, kind: str) -> Loop:
    faults, check = FAULTS[kind]
    ctl = controller(twin)
    # Every node of the island: no idle node to start again on, so the job waits for the replacement (no spare).
    size = island_size(twin)
    job = login(twin).run(
        f"sbatch --parsable --requeue -p {ISLAND} -N {size} -o /dev/null --wrap {shlex.quote('srun sleep 3000')}"
    ).stdout.strip().split(";")[0]
    ctl.wait_for(f"job {job} running", lambda: job_fields(ctl, job).get("JobState") == "RUNNING", LOOP_TIMEOUT_S)
    # The job's oldest node: a repair waits the grace period (PT10M) after a VM's creation, and the twin's first
    # VMs have run longer than that by now; a replacement made by an earlier loop may not have.
    nodes = expand(ctl, job_fields(ctl, job)["NodeList"])
    node = min(nodes, key=lambda n: twin.repairs.instances[n].created if n in twin.repairs.instances else 1e18)
    loop = Loop(kind, node, job, twin.hosts[node], time.time())
    twin.inject_fault(node, faults)
    deadline = time.monotonic() + LOOP_TIMEOUT_S
    while time.monotonic() < deadline and not {"running_again", "full_strength"} <= set(loop.seen):
        observe(twin, loop, check)
        time.sleep(POLL_S)
    login(twin).run(f"scancel {job}", check=False)
    for stage in STAGES:
        if stage in loop.seen:
            twin.record(f"repair loop, {kind} (no spare): fault to {stage}", loop.took(stage))
    return loop


def expand(ctl, nodelist: str) -> list[str]:  # noqa: ANN001
    return ctl.run(f"scontrol show hostnames {shlex.quote(nodelist)}").stdout.split()


@pytest.fixture(scope="session")
def repairs_resumed(slurm_up: Twin) -> Twin:  # noqa: F811 - the imported fixture
    twin = slurm_up
    scale_set = twin.plan.get(BAD_CABLE_NODE).extra["scale_set"]
    twin.repairs.resume(scale_set)
    return twin


@pytest.fixture(scope="session")
def bad_cable_replaced(repairs_resumed: Twin) -> tuple[Repair | None, list[str]]:
    """The node the burn-in found a bad cable on, replaced, and its replacement in service."""
    twin = repairs_resumed
    ctl = controller(twin)
    start = time.time()

    def replacement_in_service() -> bool:
        repair = next((r for r in twin.repairs.done() if r.old == BAD_CABLE_NODE and r.new), None)
        return repair is not None and in_service(nodes_by_name(ctl).get(repair.new, {}))

    ctl.wait_for("the bad-cable node replaced and its replacement in service", replacement_in_service,
                 LOOP_TIMEOUT_S, ("ndfleet-burnin.service",))  # fmt: skip
    twin.record("repair: resumed to the burn-in-failed node's replacement in service", time.time() - start)
    return next(r for r in twin.repairs.done() if r.old == BAD_CABLE_NODE), island_in_service(twin)


@pytest.fixture(scope="session")
def loops(bad_cable_replaced: tuple[Repair | None, list[str]], repairs_resumed: Twin) -> dict[str, Loop]:
    return {kind: go_round(repairs_resumed, kind) for kind in FAULTS}


def test_a_node_the_burn_in_failed_is_replaced_and_its_replacement_enters_service(
    bad_cable_replaced: tuple[Repair | None, list[str]], repairs_resumed: Twin
) -> None:
    repair, serving = bad_cable_replaced
    assert repair is not None and repair.state in ("Unhealthy", "Unknown")
    assert repair.new in serving and BAD_CABLE_NODE not in repairs_resumed.machines
    assert len(serving) == island_size(repairs_resumed)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("kind", list(FAULTS))
def test_each_fault_goes_round_the_repair_loop(loops: dict[str, Loop], kind: str, stage: str) -> None:
    loop = loops[kind]
    assert stage in loop.seen, loop.explain(stage)


@pytest.mark.parametrize("kind", list(FAULTS))
def test_the_stages_come_in_the_loops_order(loops: dict[str, Loop], kind: str) -> None:
    """Detection before the repair, the repair before the new VM's burn-in, the burn-in before service."""
    seen = loops[kind].seen
    order = ["drained", "replaced", "validated", "in_service"]
    at = [seen[s] for s in order if s in seen]
    assert len(at) == len(order) and at == sorted(at), loops[kind].explain("order")


def test_the_impact_names_the_broken_nodes_host_not_its_replacements(
    loops: dict[str, Loop], repairs_resumed: Twin
) -> None:
    twin = repairs_resumed
    for loop in loops.values():
        assert loop.repair is not None and loop.repair.new
        assert twin.hosts[loop.repair.new] != loop.host
