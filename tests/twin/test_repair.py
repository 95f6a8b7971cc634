"""The repair loop on the booted cluster (docs/operations.md, "When hardware breaks"): a node breaks under a running
job; Slurm's health check (or, for a node that stops answering, slurmctld itself) takes the node out with the reason;
the job, which asked to be requeued, goes back to the queue; the node files an impact report for its host (the Impact
API stand-in) and answers Unhealthy, or, hung, answers nothing (Unknown); automatic repairs (tests/twin/repairs.py)
replace the VM; the new VM boots, validates, registers awaiting burn-in, is burned in with an idle partner and enters
service; the job runs again and the island is back at full strength.

The twin starts with automatic repairs suspended on every scale set (an operator's `set-orchestration-service-state`);
this module resumes them on the fixed islands. The first repair is the node the burn-in found a bad cable on
(test_cluster.py, ib00), which answers Unhealthy; ib01's node whose first validation failed (test_boot.py) is held
`Initializing` for the extension's whole grace period (40 minutes) and is replaced near the end of the run.
Then the fault kinds go round the loop on nodes that have run longer than the repair grace period (PT10M), under a
job on every schedulable node of the island. The kinds, from Meta's Llama 3 report (The Llama 3 Herd of
Models, arXiv:2407.21783, table 5, 419 unexpected interruptions in 54 days): faulty GPUs 30.1 % and GPU HBM3 memory
17.2 % (an uncorrectable ECC error: nvidia-smi's volatile uncorrectable count, check `gpu.ecc`), network switch and
cable 8.4 % (an InfiniBand port down: ibstat, check `ib.ports`), GPU thermal interface and sensor 1.4 % (a GPU held
at a fraction of its clocks: nvidia-smi's HW Thermal Slowdown clock event; nvidia-smi(1) says HW Slowdown cuts the
core clocks by a factor of two or more, temperature being one cause; check `gpu.throttle`), and the host's own
failures, host maintenance 7.6 %, CPU, system memory, power supply and chassis (a node that stops answering: every
process of the machine stopped, tests/twin/machine.py `freeze`).
Like a GPU that fell off the bus, the stand-in's hardware faults leave the job's processes where they are (stuck in
a collective): the health check, not the job's own exit, takes the node out; but in `gpu-ecc-kills-job` the error
ends the job's processes on the node, as a CUDA error ends the rank that meets it. A GPU slow with no clock-event
reason (`gpu-slow-epilog`: the 8-GPU all-reduce's bus bandwidth below the VM size's floor, the all_reduce_perf
stand-in's `nccl_low`) is seen by no check under the job: the job ends (its user cancels it) and the node's Epilog,
which measures the node at a job's end (validation level `epilog`, check `perf.nccl_allreduce`), takes it out;
nothing is requeued.

`ib01` has no spare: the requeued job waits for the replacement (a node that stops answering, then a slow GPU).
`ib00` keeps one warm spare (`spares: 1`, the reservation `ndfleet-spares-ib00`, node/ndfleet_node/spares.py): the
spare takes the failed node's place within the controller's 30 s spares timer, and the repaired node refills the
spares (an InfiniBand port down, and an ECC error that kills the job's processes, so that the job ends FAILED on its
own: the node's Epilog drains the node and the controller requeues the job, ndfleet_node.failed_jobs; then a GPU
slow with no clock-event reason, whose job ends as it asked). The two
islands' loops run at once (their scale sets repair independently).

A host that fails twice: the hung node reports nothing, so the repair stand-in puts its replacement on the same host
(Twin.hosts); `ib01`'s second loop breaks that replacement, and the controller's host ledger holds the host, has the
node report it and never resumes the node (REPEATS). Every other loop breaks a node on a host no loop broke before.

One poll loop per fault watches every stage at once and records when each was first seen; each stage is its own test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node import slurm_export
from ndfleet_node.host_ledger import REPEAT_CATEGORY
from ndfleet_node.impact_categories import category_for
from ndfleet_node.names import (
    AWAITING_BURNIN_REASON,
    BURNIN_REASON_PREFIX,
    JOB_EXPORT_SUCCESS_METRIC,
    JOB_LABEL,
    JOB_RUN_END_METRIC,
    JOB_RUN_START_METRIC,
    REPEAT_HOST_REASON,
    SPARES_RESERVATION_PREFIX,
)
from ndfleet_node.spares import DEFAULT_CONFIG as SPARES_CONFIG

from ndfleet.goodput.compute import cause
from ndfleet.slurm.conf import HEALTH_CHECK_LOCK, HOST_LEDGER
from tests.twin.conftest import BAD_CABLE_NODE, FAULTY_NODE, MEASURING_REPAIRS
from tests.twin.machine import BootError
from tests.twin.repairs import Repair
from tests.twin.test_cluster import controller, login, nodes_by_name, slurm_up  # noqa: F401 - slurm_up: a fixture
from tests.twin.test_elastic import job_fields
from tests.twin.test_status import status_now
from tests.twin.twin import Twin

LOOP_TIMEOUT_S = 1800  # grace and probes (~2 min), slurmctld's SlurmdTimeout (300 s) for a hung node, the
# replacement's boot and burn-in (~3 min), the grace period of a young replacement (PT10M), on a loaded machine
POLL_S = 3
JOB_SLEEP_S = 3000  # each loop's job: one step of `sleep` on every node
# The job series' state of the run of a job that ended FAILED on its own and was then requeued by the controller:
# accounting writes REQUEUED when slurmctld still had the job completing (its epilog running: seen in the twin, the
# requeue's time as the run's end) and keeps FAILED when it had completed (a completed job's requeue writes no record
# of its own: SchedMD src/slurmctld/job_mgr.c, _job_requeue_op); the exporter publishes either as requeued, from the
# controller's note of its requeues (ndfleet_node.slurm_export.job_runs).
RESTARTED_OWN_EXIT = ("requeued",)
WITH_SPARE, NO_SPARE = "ib00", "ib01"  # the twin stack's islands: ib00 keeps one spare, ib01 has none


@dataclass(frozen=True)
class FaultKind:
    faults: tuple[str, ...]  # the hardware stand-in's faults (tests/fakes/lib/common.sh); none: the node hangs
    reason: str  # what the node's Slurm reason names: the validator's check id, or slurmctld's "Not responding"
    app_health: str  # what the Application Health extension reports: the node's own Unhealthy, or Unknown (no answer)
    files_impact: bool = True  # a hung node files nothing (docs/operations.md says who reports it)
    # The fault kills the job's processes on the node, as a GPU error ends the process that meets it (a CUDA error
    # in the rank): `srun --kill-on-bad-exit` ends the step and the job ends FAILED on its own, before the health
    # check looks. The node's Epilog takes it out and the controller requeues the job (ndfleet_node.failed_jobs).
    kills_job: bool = False
    # A fault no check sees under a job: the job ends (its user cancels it here; one that completes ends the same
    # way) with the fault in place, and the node's Epilog, which measures the node at a job's end, takes it out.
    # Nothing is requeued: the job asked to end.
    ends_job: bool = False


KINDS = {
    "gpu-ecc": FaultKind(("ecc_uncorrectable",), "gpu.ecc", "Unhealthy"),
    "gpu-ecc-kills-job": FaultKind(("ecc_uncorrectable",), "gpu.ecc", "Unhealthy", kills_job=True),
    "ib-port-down": FaultKind(("ib_port_down",), "ib.ports", "Unhealthy"),
    "gpu-slow": FaultKind(("thermal",), "gpu.throttle", "Unhealthy"),
    # A GPU slow with no clock-event reason: the quick checks pass, the 8-GPU all-reduce is below the VM size's floor.
    "gpu-slow-epilog": FaultKind(("nccl_low",), "perf.nccl_allreduce", "Unhealthy", ends_job=True),
    "unresponsive": FaultKind((), "Not responding", "Unknown", files_impact=False),
}
# (island, fault kind), in the order each island's loops run: each kind once, two without a spare, three with one.
# The hung node's replacement lands on the hung node's host (it reported nothing: the repair stand-in, Twin.hosts),
# and the loop after it breaks that replacement: the host's second failure (REPEATS, "A host that fails twice").
# NDFLEET_TWIN_REPAIR_LOOPS=every runs every kind on both islands (a measurement run, docs/operations.md; CI runs
# four loops): the twin then boots no node with a bad GPU (conftest.MEASURING_REPAIRS), so that no loop's job starts
# again on a node another repair brought and the figures without a spare are the failed node's own repair.
EVERY_KIND = MEASURING_REPAIRS
# ib01's hung node goes first and ib00's, in the measurement run, last: the host ledger counts a hang only when no
# other node went silent within 10 minutes (host_ledger.HANG_WINDOW_S). CI's loops are the kinds each island's
# earlier CI runs did not measure (docs/operations.md keeps the table of every kind, with and without a spare).
# The Epilog's loop (gpu-slow-epilog) runs in the measurement run only, for now: in CI goodput once attributed its
# short drain (the VM replaced about 80 s after it) to slurm-down, its 60-s samples missing the drain's reason.
LOOPS = [(NO_SPARE, "unresponsive"), (NO_SPARE, "gpu-slow"), (WITH_SPARE, "ib-port-down"),
         (WITH_SPARE, "gpu-ecc-kills-job")]  # fmt: skip
if EVERY_KIND:
    LOOPS += [(NO_SPARE, "gpu-ecc"), (NO_SPARE, "ib-port-down"), (NO_SPARE, "gpu-ecc-kills-job"),
              (NO_SPARE, "gpu-slow-epilog"), (WITH_SPARE, "gpu-slow-epilog"),
              (WITH_SPARE, "gpu-ecc"), (WITH_SPARE, "gpu-slow"), (WITH_SPARE, "unresponsive")]  # fmt: skip
# The loop that breaks the previous loop's replacement, on the host the hung node failed on: the ledger's repeat.
# (With a spare the hung node's replacement refills the spares' reservation and runs no job.)
REPEATS = {(NO_SPARE, "gpu-slow")}
STAGES = ("drained", "requeued", "impact", "unhealthy", "replaced", "validated", "awaiting", "in_service",
          "running_again", "full_strength")  # fmt: skip
# With a spare: the spare left its reservation (the spares timer saw the node out of service), ran the requeued job,
# and the repaired node made the spares whole again. A hung node's job waits for slurmctld's SlurmdTimeout, by when
# the replacement is usually in service: the spare is released and refilled, but the job need not run on it.
SPARE_STAGES = ("spare_out", "spare_in", "refilled")
# A repeat: the controller's host ledger drained the node `ndfleet:host:repeat-failure` and the node filed the report
# that takes its host out (host_ledger.REPEAT_CATEGORY).
REPEAT_STAGES = ("host_held", "host_reported")
# `ndfleet status` is read at these stages of each loop (docs/operations.md shows what it said in a twin run); the
# outputs are written under STATUS_OUT, one file per loop.
STATUS_STAGES = ("drained", "replaced", "running_again", "full_strength")
STATUS_OUT = Path(os.environ.get("NDFLEET_TWIN_STATUS_OUT", "/tmp/ndfleet-twin-status"))
_STATUS_LOCK = threading.Lock()  # status runs in process and redirects sys.stdout: one at a time


RESTART_STAGES = ("requeued", "running_again", "spare_in")  # none for a job that ended as it asked (ends_job)


def stages(island: str, kind: str) -> tuple[str, ...]:
    own = tuple(s for s in STAGES if s != "impact" or KINDS[kind].files_impact)
    spare = tuple(s for s in SPARE_STAGES if s != "spare_in" or KINDS[kind].files_impact)
    if KINDS[kind].ends_job:
        own, spare = (tuple(s for s in group if s not in RESTART_STAGES) for group in (own, spare))
    return own + (spare if island == WITH_SPARE else ()) + (REPEAT_STAGES if (island, kind) in REPEATS else ())


def loop_id(island: str, kind: str) -> str:
    return f"{kind}-{'spare' if island == WITH_SPARE else 'no-spare'}"


def in_service(fields: dict[str, str]) -> bool:
    flags = set(fields.get("State", "").split("+"))
    return bool(flags & {"IDLE", "ALLOCATED", "MIXED"}) and not flags & {"DRAIN", "DOWN", "NOT_RESPONDING"}


def scale_set_of(twin: Twin, island: str) -> str:
    return next(m.extra["scale_set"] for m in twin.plan.machines if m.island == island and m.extra.get("scale_set"))


def island_in_service(twin: Twin, island: str) -> list[str]:
    nodes = nodes_by_name(controller(twin))
    names = {tm.name for tm in twin.role("compute") if tm.spec.island == island}
    return sorted(n for n in names if n in nodes and in_service(nodes[n]))


def island_size(twin: Twin, island: str) -> int:
    """The island's node count in the plan: its machines, less one for each replacement a repair added."""
    scale_set = scale_set_of(twin, island)
    machines = sum(1 for m in twin.plan.machines if m.extra.get("scale_set") == scale_set)
    return machines - sum(1 for r in twin.repairs.done() if r.scale_set == scale_set and r.new)


def spares_of(twin: Twin, island: str) -> int:
    """The island's spares, as the controller's spares timer reads them (its spares JSON, from the plan)."""
    doc = json.loads(controller(twin).run(f"cat {SPARES_CONFIG}").stdout)
    return sum(int(i["spares"]) for i in doc["islands"] if i["island"] == island)


def read_ledger(twin: Twin) -> dict[str, Any]:
    """The controller's host ledger as it is now (node/ndfleet_node/host_ledger.py)."""
    return dict(json.loads(controller(twin).run(f"cat {shlex.quote(HOST_LEDGER)}").stdout))


def reserved(twin: Twin, island: str) -> list[str]:
    """The nodes of the island's spares reservation now (none when it does not exist)."""
    ctl = controller(twin)
    out = ctl.run(f"scontrol -o show reservation {SPARES_RESERVATION_PREFIX}{island}", check=False).stdout
    nodes = next((kv.split("=", 1)[1] for kv in out.split() if kv.startswith("Nodes=")), "")
    return expand(ctl, nodes) if nodes and nodes != "(null)" else []


@dataclass
class Loop:
    island: str
    kind: str
    node: str
    job: str
    host: str
    fault_at: float  # time.time()
    serving_before: int  # the island's nodes in service (its spares included) when the fault came
    spares_before: list[str] = field(default_factory=list)
    seen: dict[str, float] = field(default_factory=dict)  # stage -> time.time() first seen
    repair: Repair | None = None
    cancelled: bool = False
    log: list[str] = field(default_factory=list)
    status: dict[str, tuple[int, str]] = field(default_factory=dict)  # stage -> (exit code, table) when first seen
    drain_reason: str = ""  # the node's Slurm reason when it was first seen out, up to its [user@time] stamp
    repeat_of: Loop | None = None  # the earlier loop whose node failed on this loop's node's host
    resumed_held: bool = False  # the node was seen in service after the ledger held its host

    def took(self, stage: str) -> float:
        return self.seen[stage] - self.fault_at

    def done(self) -> bool:
        return (
            ({"full_strength"} if KINDS[self.kind].ends_job else {"running_again", "full_strength"}) <= set(self.seen)
            and (self.island != WITH_SPARE or "refilled" in self.seen)
            and (self.repeat_of is None or set(REPEAT_STAGES) <= set(self.seen))
        )

    def explain(self, stage: str) -> str:
        got = ", ".join(f"{s} +{self.took(s):.0f} s" for s in (*STAGES, *SPARE_STAGES, *REPEAT_STAGES)
                        if s in self.seen)  # fmt: skip
        return (f"{self.kind} on {self.node} in {self.island} (job {self.job}): {stage} never seen; seen: {got}\n"
                + "\n".join(self.log[-12:]))  # fmt: skip


def validated(tm) -> bool:  # noqa: ANN001
    try:
        return tm.unit_state("ndfleet-validated.target") == "active"
    except Exception:  # noqa: BLE001 - a VM still starting cannot be entered yet
        return False


def observe(twin: Twin, loop: Loop) -> None:
    kind = KINDS[loop.kind]
    ctl = controller(twin)
    nodes = nodes_by_name(ctl)
    now = time.time()
    me = nodes.get(loop.node, {})
    flags = set(me.get("State", "").split("+"))
    held = loop.repeat_of is not None and me.get("Reason", "").startswith(REPEAT_HOST_REASON)
    if flags & {"DRAIN", "DOWN"} and (kind.reason in me.get("Reason", "") or held):
        loop.seen.setdefault("drained", now)
    if flags & {"DRAIN", "DOWN"} and kind.reason in me.get("Reason", ""):
        # The Reason field as read here runs to the line's end: cut it at its [user@time] stamp.
        loop.drain_reason = loop.drain_reason or re.split(r"\s*\[", me.get("Reason", ""), maxsplit=1)[0].strip()
    if held and flags & {"DRAIN"}:
        loop.seen.setdefault("host_held", now)
    if "host_held" in loop.seen and me and in_service(me):
        loop.resumed_held = True
    job = job_fields(ctl, loop.job)
    job_nodes = expand(ctl, job["NodeList"]) if job.get("JobState") == "RUNNING" else []
    if int(job.get("Restarts", "0") or 0) >= 1:
        loop.seen.setdefault("requeued", now)
        if job_nodes and loop.node not in job_nodes:
            loop.seen.setdefault("running_again", now)
            if set(job_nodes) & set(loop.spares_before):
                loop.seen.setdefault("spare_in", now)
    assert twin.impact is not None
    if kind.files_impact and any(
        i["_at"] >= loop.fault_at and i.get("impactCategory") == category_for(kind.reason)
        and i.get("additionalProperties", {}).get("PhysicalHostName") == loop.host for i in twin.impact.filed()
    ):  # fmt: skip
        loop.seen.setdefault("impact", now)
    if loop.repeat_of is not None and any(
        i["_at"] >= loop.fault_at and i.get("impactCategory") == REPEAT_CATEGORY
        and i.get("additionalProperties", {}).get("PhysicalHostName") == loop.host for i in twin.impact.filed()
    ):  # fmt: skip
        loop.seen.setdefault("host_reported", now)
    repair = next((r for r in twin.repairs.done() if r.old == loop.node), None)
    if twin.repairs.state(loop.node) == kind.app_health or repair is not None and repair.state == kind.app_health:
        loop.seen.setdefault("unhealthy", now)
    spares = reserved(twin, loop.island) if loop.island == WITH_SPARE else []
    if repair is not None and repair.new:
        loop.repair = repair
        loop.seen.setdefault("replaced", now)
        new = twin.machines.get(repair.new)
        if new is not None and validated(new):
            loop.seen.setdefault("validated", now)
        fields = nodes.get(repair.new, {})
        # Held for burn-in: seen drained so, or (when the timer burned it in between two polls) named in the
        # controller's burn-in report, which holds only nodes that were awaiting burn-in.
        report = ctl.run(f"cat /var/lib/ndfleet/burnin-{loop.island}.json", check=False).stdout
        if fields.get("Reason", "").startswith((AWAITING_BURNIN_REASON, BURNIN_REASON_PREFIX)) or (
            f'"{repair.new}"' in report
        ):
            loop.seen.setdefault("awaiting", now)
        if fields and in_service(fields):
            loop.seen.setdefault("in_service", now)
    if loop.spares_before and not set(loop.spares_before) <= set(spares):
        loop.seen.setdefault("spare_out", now)
    if "spare_out" in loop.seen and len(spares) >= spares_of(twin, loop.island):
        loop.seen.setdefault("refilled", now)
    whole = len(spares) >= spares_of(twin, loop.island)
    # The failed node does not count, even while Slurm has not noticed yet (a hung node is in service for
    # slurmctld until SlurmdTimeout): the island is whole when its replacement serves in its place.
    serving = len([n for n in island_in_service(twin, loop.island) if n != loop.node])
    if "in_service" in loop.seen and whole and serving >= loop.serving_before:
        loop.seen.setdefault("full_strength", now)
    for stage in STATUS_STAGES:
        if stage in loop.seen and stage not in loop.status:
            loop.status[stage] = read_status(twin, loop, stage)
    if loop.island == WITH_SPARE and "running_again" in loop.seen and not loop.cancelled:
        # The job holds every node but the replacement, which a burn-in must pair with an idle partner: it is burned
        # in when a job ends (docs/operations.md). The spare has already run the job again; end it here.
        login(twin).run(f"scancel {loop.job}", check=False)
        loop.cancelled = True
    loop.log.append(f"+{now - loop.fault_at:.0f} s: {loop.node} {me.get('State')} [{me.get('Reason', '')}]; job "
                    f"{job.get('JobState')} restarts {job.get('Restarts')} on {job.get('NodeList')}; repair {repair}; "
                    f"spares {spares}")  # fmt: skip


def recorded_header() -> str:
    """The status table's header line in the recorded twin output docs/operations.md shows."""
    recorded = Path(__file__).resolve().parents[1] / "data" / "twin" / "status"
    lines = [ln for f in sorted(recorded.glob("*.txt")) for ln in f.read_text().splitlines()]
    return next(ln for ln in lines if ln.startswith("ISLAND "))


def read_status(twin: Twin, loop: Loop, stage: str) -> tuple[int, str]:
    try:
        with _STATUS_LOCK:
            code, table, _ = status_now(twin)
    except Exception as exc:  # noqa: BLE001 - said by the test that reads it
        return -1, f"status raised {exc!r}"
    took = time.time() - loop.fault_at
    STATUS_OUT.mkdir(parents=True, exist_ok=True)
    with (STATUS_OUT / f"{loop_id(loop.island, loop.kind)}.txt").open("a") as out:
        out.write(f"## {stage}, fault +{took:.0f} s: failed node {loop.node}, exit {code}\n{table}\n")
    return code, table


def go_round(
    twin: Twin, island: str, kind: str, repeat_of: Loop | None = None, avoid_hosts: set[str] | None = None
) -> Loop:
    """One fault round the loop; `repeat_of`: the earlier loop whose replacement (on its node's host) breaks; else
    the job's oldest node on none of `avoid_hosts`."""
    ctl = controller(twin)
    # Every schedulable node of the island in service: no idle node to start again on but a spare. (ib01's node
    # that failed validation is out of service until automatic repairs replace it after the extension's grace
    # period, about 40 minutes after its creation: test_a_node_that_failed_validation_is_replaced_after_the_grace.)
    serving = island_in_service(twin, island)
    spares = reserved(twin, island) if island == WITH_SPARE else []
    size = len(serving) - len(spares)
    # A training job's launch: one rank's death ends the step (srun(1) --kill-on-bad-exit), so the job ends.
    step = f"srun{' --kill-on-bad-exit=1' if KINDS[kind].kills_job else ''} sleep {JOB_SLEEP_S}"
    job = (
        login(twin)
        .run(f"sbatch --parsable --requeue -p {island} -N {size} -o /dev/null --wrap {shlex.quote(step)}")
        .stdout.strip()
        .split(";")[0]
    )
    ctl.wait_for(f"job {job} running", lambda: job_fields(ctl, job).get("JobState") == "RUNNING", LOOP_TIMEOUT_S)
    # The job's oldest node: a repair waits the grace period (PT10M) after a VM's creation, and the twin's first
    # VMs have run longer than that by now; a replacement made by an earlier loop may not have.
    nodes = expand(ctl, job_fields(ctl, job)["NodeList"])
    fresh = [n for n in nodes if twin.hosts.get(n) not in (avoid_hosts or set())] or nodes
    node = min(fresh, key=lambda n: twin.repairs.instances[n].created if n in twin.repairs.instances else 1e18)
    if repeat_of is not None:
        assert repeat_of.repair is not None and repeat_of.repair.new in nodes, (nodes, repeat_of.explain("repeat"))
        node = repeat_of.repair.new
    # The measured times hold for a VM older than the repair grace period (docs/operations.md): wait for it.
    if (young := twin.repairs.grace_left(node)) > 0:
        twin.record(f"repair loop, {kind}: waited for the node to pass the repair grace", young)
        time.sleep(young + POLL_S)
    tm = twin.machine(node)
    if KINDS[kind].kills_job:
        # The job ends on its own before the periodic health check looks: the check is held off the node (its
        # one-at-a-time lock, taken as a run of it would) until the job has ended, so that the Epilog finds the
        # fault, as on a node whose check was not due in those seconds (at 60 s here, a run could fall in them).
        tm.run(f"systemd-run --unit=twin-hold-health-check --collect flock {HEALTH_CHECK_LOCK} sleep 600")
        tm.wait_for("the health check held off", lambda: tm.run(f"flock -n {HEALTH_CHECK_LOCK} true",
                                                               check=False).returncode != 0, 120)  # fmt: skip
    loop = Loop(island, kind, node, job, twin.hosts[node], time.time(), len(serving), spares, repeat_of=repeat_of)
    if KINDS[kind].kills_job:
        twin.inject_fault(node, list(KINDS[kind].faults))
        # srun starts the step by its full path (/usr/bin/sleep 3000); pkill's pattern is an extended regex.
        tm.run(f"pkill -KILL -f '(^|/)sleep {JOB_SLEEP_S}$'")
        ctl.wait_for(f"job {job} ended on its own", lambda: job_fields(ctl, job).get("JobState") != "RUNNING", 120)
        tm.run("systemctl stop twin-hold-health-check", check=False)
        loop.log.append(f"+{time.time() - loop.fault_at:.0f} s: job {job} {job_fields(ctl, job).get('JobState')}")
    elif KINDS[kind].ends_job:
        twin.inject_fault(node, list(KINDS[kind].faults))
        login(twin).run(f"scancel {job}")
        ctl.wait_for(f"job {job} ended", lambda: job_fields(ctl, job).get("JobState") != "RUNNING", 120)
        loop.log.append(f"+{time.time() - loop.fault_at:.0f} s: job {job} {job_fields(ctl, job).get('JobState')}")
    elif KINDS[kind].faults:
        twin.inject_fault(node, list(KINDS[kind].faults))
    else:
        twin.stop_answering(node)
    deadline = time.monotonic() + LOOP_TIMEOUT_S
    while time.monotonic() < deadline and not loop.done():
        observe(twin, loop)
        time.sleep(POLL_S)
    login(twin).run(f"scancel {job}", check=False)
    if repeat_of is not None and not loop.drain_reason:
        # The ledger's repeat drain can replace the health check's reason between two polls; the ledger keeps it.
        doc = read_ledger(twin)
        entries = [e["reason"] for e in doc["hosts"].get(loop.host, []) if e["node"] == node]
        loop.drain_reason = entries[0] if entries else ""
    label = "spare" if island == WITH_SPARE else "no spare"
    for stage in stages(island, kind):
        if stage in loop.seen:
            twin.record(f"repair loop, {kind} ({label}): fault to {stage}", loop.took(stage))
    return loop


def expand(ctl, nodelist: str) -> list[str]:  # noqa: ANN001
    return ctl.run(f"scontrol show hostnames {shlex.quote(nodelist)}").stdout.split()


@pytest.fixture(scope="session")
def repairs_resumed(slurm_up: Twin) -> Twin:  # noqa: F811 - the imported fixture
    twin = slurm_up
    for island in (NO_SPARE, WITH_SPARE):
        twin.repairs.resume(scale_set_of(twin, island))
    return twin


def repair_view(twin: Twin, name: str) -> str:
    """What the Application Health and repair stand-ins make of `name`, and what the node itself says (its health
    report, failure marker and burn-in report marker, the impacts filed, whether its systemd still starts processes):
    a wait for a repair that never came says which step stopped."""
    with twin.repairs.lock:
        inst = twin.repairs.instances.get(name)
        seen = (f"state {inst.state}, last probe answer {inst.last_raw or '-'} ({inst.streak} in a row), created "
                f"{time.monotonic() - inst.created:.0f} s ago") if inst else "not an instance (gone, or repaired)"
        repairs = [(r.scale_set, r.old, r.state, r.new) for r in twin.repairs.repairs]
    lines = [f"--- repair stand-in: {name}: {seen}; repairs so far: {repairs}"]
    filed = twin.impact.filed() if twin.impact else []
    lines.append(f"--- impacts filed: {[(f.get('impactCategory'), f.get('impactedResourceId')) for f in filed]}")
    tm = twin.machines.get(name)
    if tm is not None:
        with contextlib.suppress(subprocess.TimeoutExpired, BootError):
            shown = tm.run("tail -c 2000 /run/ndfleet/report.json; echo; cat /run/ndfleet/failed; journalctl "
                           "--no-pager -n 30 -u slurmd -u ndfleet-impact", check=False, timeout=60)  # fmt: skip
            lines += [f"--- {name}: report, failure marker, slurmd and impact report:", shown.stdout,
                      shown.stderr]  # fmt: skip
            lines.append(f"--- {name}: its systemd cannot start processes: {tm.pid1_cannot_spawn()}")
    return "\n".join(lines)


def replaced_into_service(twin: Twin, island: str, old: str, what: str) -> tuple[Repair, list[str]]:
    ctl = controller(twin)
    start = time.time()

    def replacement_in_service() -> bool:
        repair = next((r for r in twin.repairs.done() if r.old == old and r.new), None)
        return repair is not None and in_service(nodes_by_name(ctl).get(repair.new, {}))

    try:
        ctl.wait_for(f"{old} replaced and its replacement in service", replacement_in_service, LOOP_TIMEOUT_S,
                     ("ndfleet-burnin.service", "ndfleet-spares.service"))  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{repair_view(twin, old)}") from None
    twin.record(f"repair: resumed to {what} replacement in service", time.time() - start)
    return next(r for r in twin.repairs.done() if r.old == old), island_in_service(twin, island)


def in_thread(work: Callable[[], Any]) -> Callable[[], Any]:
    """Run `work` now on its own thread; the returned call waits for it and gives its result (or raises its error)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting test
            out["error"] = exc

    thread = threading.Thread(target=run, name="twin-repair-loop", daemon=True)
    thread.start()

    def wait() -> Any:
        thread.join()
        if "error" in out:
            raise out["error"]
        return out["result"]

    return wait


@pytest.fixture(scope="session")
def bad_cable_replaced(repairs_resumed: Twin) -> tuple[Repair, list[str]]:
    """The node the burn-in found a bad cable on (ib00) replaced, its replacement in service, and ib00's spare
    reservation holding its spare (the island has its three nodes again, one more than it keeps in service)."""
    twin = repairs_resumed
    out = replaced_into_service(twin, WITH_SPARE, BAD_CABLE_NODE, "the burn-in-failed node's")
    ctl = controller(twin)
    ctl.wait_for("ib00's spare reserved", lambda: len(reserved(twin, WITH_SPARE)) >= spares_of(twin, WITH_SPARE),
                 600, ("ndfleet-spares.service",))  # fmt: skip
    return out


@pytest.fixture(scope="session")
def loops(bad_cable_replaced: tuple[Repair, list[str]], repairs_resumed: Twin) -> dict[str, Loop]:
    twin = repairs_resumed

    def island_loops(island: str) -> dict[str, Loop]:
        done: dict[str, Loop] = {}
        previous: Loop | None = None
        for i, k in LOOPS:
            if i == island:
                repeat_of = previous if (i, k) in REPEATS else None
                # Any other loop breaks a node on a host no loop has broken yet: one repeat, where it is meant.
                avoid = {loop.host for loop in done.values()}
                previous = done[loop_id(i, k)] = go_round(twin, i, k, repeat_of, avoid)
        return done

    spare = in_thread(lambda: island_loops(WITH_SPARE))
    return {**island_loops(NO_SPARE), **spare()}


def test_a_node_the_burn_in_failed_is_replaced_and_the_spares_fill(
    bad_cable_replaced: tuple[Repair, list[str]], repairs_resumed: Twin
) -> None:
    twin = repairs_resumed
    repair, serving = bad_cable_replaced
    assert repair.state in ("Unhealthy", "Unknown")
    assert repair.new in serving and BAD_CABLE_NODE not in twin.machines
    assert len(serving) == island_size(twin, WITH_SPARE)
    spares = reserved(twin, WITH_SPARE)
    assert len(spares) == spares_of(twin, WITH_SPARE) == 1 and set(spares) <= set(serving), spares


@pytest.mark.skipif(MEASURING_REPAIRS, reason="the repair loops' measurement run boots no node with a bad GPU")
def test_a_node_that_failed_validation_is_replaced_after_the_grace(
    loops: dict[str, Loop], repairs_resumed: Twin
) -> None:
    """ib01's node whose first validation failed (test_boot.py) never answered Healthy, so the Application Health
    extension holds it `Initializing` for the extension's whole grace period (the plan's validation budget, 2,400 s
    for full validation) before it is `Unhealthy` and automatic repairs replace it (Microsoft Learn, "Using
    Application Health extension with Virtual Machine Scale Sets", rich health states). Runs among the last tests
    (conftest.py), while Slurm's own clocks run."""
    twin = repairs_resumed
    repair, _ = replaced_into_service(twin, NO_SPARE, FAULTY_NODE, "the failed-validation node's")
    assert repair.state == "Unhealthy" and FAULTY_NODE not in twin.machines


@pytest.mark.parametrize(
    ("island", "kind", "stage"),
    [pytest.param(i, k, s, id=f"{loop_id(i, k)}-{s}") for i, k in LOOPS for s in stages(i, k)],
)
def test_each_fault_goes_round_the_repair_loop(loops: dict[str, Loop], island: str, kind: str, stage: str) -> None:
    loop = loops[loop_id(island, kind)]
    assert stage in loop.seen, loop.explain(stage)


@pytest.mark.parametrize(("island", "kind"), [pytest.param(i, k, id=loop_id(i, k)) for i, k in LOOPS])
def test_the_stages_come_in_the_loops_order(loops: dict[str, Loop], island: str, kind: str) -> None:
    """The repair before the new VM's burn-in, the burn-in before service; the node out before its job is requeued
    and runs again. A hardware fault is found before the repair; a hung node may be replaced before slurmctld's
    SlurmdTimeout (300 s) sets it DOWN, as on Azure the extension's probes and slurmctld's pings run apart."""
    loop = loops[loop_id(island, kind)]
    seen = loop.seen
    orders = [["replaced", "validated", "in_service"]]
    if not KINDS[kind].ends_job:
        orders.append(["drained", "requeued", "running_again"])
    if KINDS[kind].files_impact:
        orders.append(["drained", "replaced"])
    for order in orders:
        at = [seen[s] for s in order if s in seen]
        assert len(at) == len(order) and at == sorted(at), loop.explain(f"order {order}")


def test_the_spare_runs_the_job_again_before_the_replacement_is_in_service(loops: dict[str, Loop]) -> None:
    for island, kind in LOOPS:
        loop = loops[loop_id(island, kind)]
        # A hung node: the repair may beat slurmctld's timeout; a job that ended as it asked runs nowhere again.
        if island == WITH_SPARE and kind != "unresponsive" and not KINDS[kind].ends_job:
            assert loop.seen["spare_in"] < loop.seen["in_service"], loop.explain("spare first")


@pytest.mark.parametrize(("island", "kind"), [pytest.param(i, k, id=loop_id(i, k)) for i, k in LOOPS])
def test_status_answers_at_each_stage_and_names_the_island(loops: dict[str, Loop], island: str, kind: str) -> None:
    """`ndfleet status` against the booted twin (tests/twin/test_status.py) at the loop's stages: it ran (exit 0,
    or 1 for findings, never 2 "could not run") and reported the island. What it says lags the twin by up to two
    minutes (the controller's 60 s export and the agent's scrape), so its details are shown in the docs, not
    asserted here; test_status.py checks them against the twin at rest."""
    loop = loops[loop_id(island, kind)]
    assert set(loop.status) == {s for s in STATUS_STAGES if s in loop.seen}, loop.explain("status")
    for stage, (code, table) in loop.status.items():
        assert code in (0, 1), f"{stage}: exit {code}\n{table}"
        assert island in table, f"{stage}: {table}"
        # The table docs/operations.md shows from a recorded run (tests/docs/test_twin_status.py): same columns.
        assert recorded_header() in table.splitlines(), f"{stage}: the table's header changed; record again\n{table}"


def test_a_fault_takes_out_only_its_own_node(loops: dict[str, Loop], repairs_resumed: Twin) -> None:
    """No other node of a loop's island was taken out by Slurm on its way: when a hung node is the job's batch host,
    the job's steps on its healthy nodes cannot tell the hung srun they ended, and Slurm drains a node whose killed
    processes outlive UnkillableStepTimeout as "Kill task failed", a drain nothing takes back (docs/slurm.md)."""
    ctl = controller(repairs_resumed)
    islands = {loop.island for loop in loops.values()}
    names = {tm.name for tm in repairs_resumed.role("compute") if tm.spec.island in islands}
    stuck = {n: f.get("Reason", "") for n, f in nodes_by_name(ctl).items()
             if n in names and f.get("Reason", "").startswith("Kill task failed")}  # fmt: skip
    assert not stuck, (stuck, "\n".join(loop.explain("no collateral drain") for loop in loops.values()))


def test_the_impact_names_the_broken_nodes_host_not_its_replacements(
    loops: dict[str, Loop], repairs_resumed: Twin
) -> None:
    """A node that reported its host (its own report, or the ledger's repeat) is replaced on another host: the report
    named the host the node ran on, and that host is out of the pool. A hung node reports nothing, and its replacement
    may land on the same host (the stand-in's worst case): the next test is about that."""
    twin = repairs_resumed
    for loop in loops.values():
        assert loop.repair is not None and loop.repair.new
        if KINDS[loop.kind].files_impact:
            assert twin.hosts[loop.repair.new] != loop.host, loop.explain("a new host")


def test_a_host_that_fails_twice_is_held_reported_and_never_resumed(
    loops: dict[str, Loop], repairs_resumed: Twin
) -> None:
    """The hung node reported nothing, so its replacement came up on the same host (Twin.hosts); the next loop broke
    that replacement. The controller's ledger (docs/operations.md, "A host that fails twice is not taken back") holds
    both failures under the host, drains the node `ndfleet:host:repeat-failure`, has it file the report that takes
    the host out (`Resource.Hpc.Unhealthy.HpcGenericFailure`), and nothing resumes it: it leaves only by its repair,
    whose replacement is on another host."""
    twin = repairs_resumed
    doc = read_ledger(twin)
    for island, kind in REPEATS:
        loop = loops[loop_id(island, kind)]
        first = loop.repeat_of
        assert first is not None and first.repair is not None and loop.node == first.repair.new, loop.explain("repeat")
        assert loop.host == first.host, (loop.host, first.host)
        assert {e["node"] for e in doc["hosts"].get(loop.host, [])} == {first.node, loop.node}, doc
        assert {"host_held", "host_reported"} <= set(loop.seen), loop.explain("held and reported")
        assert not loop.resumed_held, loop.explain("never resumed once held")
        assert loop.repair is not None and twin.hosts[loop.repair.new] != loop.host


def test_the_host_ledger_holds_each_broken_nodes_host(loops: dict[str, Loop], repairs_resumed: Twin) -> None:
    """The controller's host ledger (docs/operations.md, "A host that fails twice is not taken back") has one failure
    for each loop's node under the physical host it ran on: the health check's drain reason for a hardware fault,
    slurmctld's "Not responding" for the node that hung (it reported nothing itself)."""
    from ndfleet_node.host_ledger import NOT_RESPONDING_REASON

    doc = read_ledger(repairs_resumed)
    for loop in loops.values():
        want = loop.drain_reason if KINDS[loop.kind].files_impact else NOT_RESPONDING_REASON
        entries = [e for e in doc["hosts"].get(loop.host, []) if e["node"] == loop.node]
        assert [e["reason"] for e in entries] == [want], (loop.kind, loop.host, doc)


def restarted(loops: dict[str, Loop]) -> dict[str, Loop]:
    """The loops whose job was requeued: all but those whose job ended as it asked (ends_job)."""
    return {k: loop for k, loop in loops.items() if not KINDS[loop.kind].ends_job}


def test_the_controller_publishes_each_requeued_jobs_runs(loops: dict[str, Loop], repairs_resumed: Twin) -> None:
    """The controller's job series (docs/goodput.md, "Jobs"), from the twin's own slurmdbd through the exporter's real
    `sacct` questions: each loop's job, requeued when its node was taken out, has a run 0 that ended node_fail after
    the fault (Slurm writes the killed run to accounting as NODE_FAIL; a job that ended on its own and that the
    controller requeued: requeued, RESTARTED_OWN_EXIT) and a run 1 that started after that; the restart
    time they give is within the loop's own measure of fault to running again."""
    ctl = controller(repairs_resumed)
    loops = restarted(loops)
    end_of = {loop.job: re.compile(rf'^{JOB_RUN_END_METRIC}{{{JOB_LABEL}="{loop.job}",run="0",state="(\w+)"}} (\d+)$',
                                   re.M) for loop in loops.values()}  # fmt: skip
    start_of = {loop.job: re.compile(rf'^{JOB_RUN_START_METRIC}{{{JOB_LABEL}="{loop.job}",run="1"}} (\d+)$', re.M)
                for loop in loops.values()}  # fmt: skip

    def textfile() -> str:
        return str(ctl.run(f"cat {slurm_export.DEFAULT_OUT}", check=False).stdout)

    def published() -> bool:
        text = textfile()
        return f"{JOB_EXPORT_SUCCESS_METRIC} 1" in text and all(
            end_of[job].search(text) and start_of[job].search(text) for job in end_of
        )

    ctl.wait_for("every loop's job runs in the controller's job series", published, 300,
                 ("ndfleet-slurm-export.service",))  # fmt: skip
    text = textfile()
    for loop in loops.values():
        ended, started = end_of[loop.job].search(text), start_of[loop.job].search(text)
        assert ended and started, loop.explain("job series")
        state, end, start = ended.group(1), int(ended.group(2)), int(started.group(1))
        assert state in (RESTARTED_OWN_EXIT if KINDS[loop.kind].kills_job else ("node_fail",)), (loop.job, state)
        assert loop.fault_at - 2 <= end <= start, (loop.job, loop.fault_at, end, start)  # whole seconds in sacct
        assert start - end <= loop.took("running_again") + 2, (loop.job, start - end, loop.explain("restart"))
        repairs_resumed.record(f"repair loop, {loop.kind} ({loop.island}): job restart time from accounting",
                               start - end)  # fmt: skip


def test_goodput_counts_each_islands_interruptions_as_the_faults_injected(
    loops: dict[str, Loop], repairs_resumed: Twin
) -> None:
    """`ndfleet goodput` over the loops (from just before the first fault) against the booted twin: in each island,
    one interruption for each fault the loops injected there, caused by the check that found it (`check:<id>`, from
    the health check's drain reason) or, for the hung node, `slurm-down`; no other check and no other cause, but
    `burnin` (an in-service node the controller drains to pair with a replacement for its burn-in: docs/burnin.md).
    A spare leaving or rejoining its reservation is no interruption. Read until the hung node's `slurm-down` is
    there (the series reach the workspace up to about two minutes after the controller sees a state)."""
    twin = repairs_resumed
    since = datetime.fromtimestamp(min(loop.fault_at for loop in loops.values()) - 30, timezone.utc).isoformat()
    injected: dict[str, dict[str, int]] = {}
    for loop in loops.values():
        # The health check's drain names every check that failed; goodput counts the first (docs/goodput.md).
        by = cause("drained", loop.drain_reason) if KINDS[loop.kind].files_impact else "slurm-down"
        assert by == "slurm-down" or by.startswith("check:"), (loop.kind, by, loop.drain_reason)
        injected.setdefault(loop.island, {})
        injected[loop.island][by] = injected[loop.island].get(by, 0) + 1
    # A repeat's node may already carry the ledger's reason when the controller's export samples it out of service
    # (the ledger re-drains it within its 30 s timer): either cause is that one interruption.
    held = cause("drained", REPEAT_HOST_REASON)

    def interruptions(doc: dict[str, Any], island: str) -> dict[str, int]:
        return dict(((doc.get("islands") or {}).get(island) or {}).get("interruptions") or {})

    def faults_of(doc: dict[str, Any], island: str) -> dict[str, int]:
        """The island's interruptions but burn-in's, a repeat's held reason counted as its health check's."""
        faults = {c: n for c, n in interruptions(doc, island).items() if c != "burnin"}
        repeats = [loops[loop_id(i, k)] for i, k in REPEATS if i == island]
        if (n := faults.pop(held, 0)) > len(repeats):
            faults[held] = n - len(repeats)  # more than the repeats: left in, so the comparison fails
        for loop in repeats[:n]:
            by = cause("drained", loop.drain_reason)
            faults[by] = faults.get(by, 0) + 1
        return faults

    deadline = time.monotonic() + 600
    while True:
        code, out, err = twin.goodput(since)
        doc = json.loads(out) if code in (0, 1) and out.strip() else {}
        if all(faults_of(doc, i).get(c, 0) >= n for i, counts in injected.items() for c, n in counts.items()):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(15)
    assert code in (0, 1), f"goodput exited {code}: {err}"
    # The report as an operator reads it, for the record (docs/goodput.md; the closing note of a twin run).
    _, table, table_err = twin.goodput(since, "table")
    STATUS_OUT.mkdir(parents=True, exist_ok=True)
    (STATUS_OUT / "goodput.txt").write_text(table + table_err)
    for island, expected in injected.items():
        got = interruptions(doc, island)
        faults = faults_of(doc, island)
        explained = "\n".join(loop.explain("goodput") for loop in loops.values() if loop.island == island)
        assert faults == expected, (island, got, explained)


def test_goodput_reads_each_loops_job_as_accounting_recorded_it(loops: dict[str, Loop], repairs_resumed: Twin) -> None:
    """`ndfleet goodput` against the booted twin (its workspace stand-in, fed by the controller's job series through
    the agent's own rules): each loop's job is there with both runs, one restart caused by the node failure the loop
    injected, taking no longer than the loop's own fault to running again, and an ETTR below 1 (the run lost to the
    fault). The series reach the workspace up to about two minutes after sacct has them (the controller's 60 s export,
    the relay and the agent's scrape), so this reads until every job is there."""
    twin = repairs_resumed
    since = datetime.fromtimestamp(min(loop.fault_at for loop in loops.values()) - 900, timezone.utc).isoformat()
    want = {loop.job: loop for loop in restarted(loops).values()}
    deadline = time.monotonic() + 600
    while True:
        code, out, err = twin.goodput(since)
        doc = json.loads(out) if code in (0, 1) and out.strip() else {}
        jobs = {str(j["job"]): j for j in ((doc.get("jobs") or {}).get("jobs") or [])}
        if all(jobs.get(job, {}).get("runs", 0) >= 2 for job in want) or time.monotonic() > deadline:
            break
        time.sleep(15)
    assert code in (0, 1), f"goodput exited {code}: {err}"
    for job, loop in want.items():
        assert job in jobs, (job, sorted(jobs), loop.explain("goodput"))
        figures = jobs[job]
        causes = RESTARTED_OWN_EXIT if KINDS[loop.kind].kills_job else ("node_fail",)
        restarts = [r for r in figures["restarts"] if r["cause"] in causes]
        assert figures["runs"] >= 2 and len(restarts) == 1, (figures, loop.explain("goodput"))
        assert 0 < restarts[0]["seconds"] <= loop.took("running_again") + 2, (figures, loop.explain("goodput"))
        assert figures["ettr"] is not None and 0 < figures["ettr"] < 1, figures
        twin.record(f"goodput, {loop.kind} ({loop.island}): job restart time", restarts[0]["seconds"])
