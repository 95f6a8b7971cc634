"""A real Slurm cluster from ndfleet's configuration: munged, slurmctld and three dynamic slurmd (Debian's packages).

Islands ib00 (2 nodes) and ib01 (1 node up of 2). The test proves, in order (one cluster, started once, ~1 min):
compute nodes register by themselves with their island and GPUs; a job runs; a job needing more nodes than any one
island has is refused although the cluster has enough nodes in total; a 2-node job waits for its island instead of
taking the idle node of the other island; a node whose validation fails is drained with the check id as reason and
resumed when it passes; a hardware fault under running jobs takes the node out (drained, then DOWN): the requeueable
job goes back to the queue, the other ends NODE_FAIL; a node that is gone is deleted; slurmctld restarts without
losing the queue.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from ndfleet_node import failed_jobs
from ndfleet_node.burnin.slurm import GONE
from ndfleet_node.health import health_state
from ndfleet_node.names import AWAITING_BURNIN_REASON
from ndfleet_node.scontrol import parse_nodes, parse_reservations

from ndfleet.slurm.conf import slurm_site
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config
from tests.slurm.sandbox import REPO, SANDBOX_TOOLS, SlurmSandbox, installed_slurm_release, wait_for
from tests.system_tools import require_tools

REFUSALS = ("Requested node configuration is not available", "More processors requested than permitted",
            "Node count specification invalid")
REQUEUE_HOLD_S = 40
NODES = {"t-ib00-000000": "ib00", "t-ib00-000001": "ib00", "t-ib01-000000": "ib01"}
# Each node's `scontrol show node` line right after it registered, before anything else happened to it.
REGISTERED: dict[str, str] = {}
# ... and once its health check had seen it held for burn-in (before the stand-in burn-in resumed it).
HELD: dict[str, str] = {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmSandbox]:
    require_tools(*SANDBOX_TOOLS)  # skipped with the summary line when missing; a failure under CI
    # The stack names the release the sandbox runs, so the generator writes what that slurmctld reads (the requeue
    # hold is a 25.11 setting, cred_expire before: ndfleet.slurm.conf.requeue_hold_settings).
    year, month = installed_slurm_release()
    spec = load_spec(
        base_config(scheduler="slurm", nodes=None,
                    # ib01 is planned at 2, the fewest a Slurm island may have (its burn-in pairs nodes), and the
                    # sandbox starts one slurmd of it, as if its second VM were not up yet: a fixed island's size
                    # does not enter slurm.conf (dynamic nodes register themselves), so Slurm sees 2 + 1 nodes.
                    islands=[{"name": "ib00", "nodes": 2}, {"name": "ib01", "nodes": 2}],
                    slurm={"version": f"{year}.{month:02d}.0", "requeueHoldSeconds": REQUEUE_HOLD_S}),
        "t",
    )
    root = Path(tmp_path_factory.mktemp("slurm", numbered=True))
    # Keep paths short: Slurm and munge put unix sockets under these folders (108-byte limit).
    short = Path("/tmp") / f"ndfs-{os.getpid()}"
    short.symlink_to(root)
    sandbox = SlurmSandbox(short, slurm_site(spec), NODES)
    try:
        sandbox.start()
        sandbox.start_munge()
        sandbox.start_slurmctld()
        for node in NODES:
            sandbox.start_slurmd(node)
            REGISTERED[node] = sandbox.node_line(node)
        for node in NODES:
            # The health check marked the disk at slurmd's first start and names the registration's drain (22.05
            # drops its reason); then the burn-in (stood in for here) resumes the node.
            marker = sandbox.root / "reports" / f"{node}.burnin-queued"
            wait_for(f"{node}'s burn-in marker", marker.exists, timeout_s=90)
            named = lambda n=node: f"Reason={AWAITING_BURNIN_REASON} " in sandbox.node_line(n)  # noqa: E731
            wait_for(f"{node} named awaiting burn-in", named, timeout_s=90)
            HELD[node] = sandbox.node_line(node)
            sandbox.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
        yield sandbox
    except Exception:
        print(sandbox.logs())
        raise
    finally:
        sandbox.stop()
        short.unlink()


def _idle(cluster: SlurmSandbox, node: str) -> bool:
    line = cluster.node_line(node)
    return "State=IDLE" in line and "DRAIN" not in line


def _state(line: str) -> str:
    return line.split(" State=", 1)[1].split()[0]


def test_new_nodes_register_drained_awaiting_burnin(cluster: SlurmSandbox) -> None:
    # Drained from the moment they exist (slurmd --conf State=DRAIN); Debian's Slurm 22.05 drops the registration's
    # Reason, which the node's first health check then sets (newer Slurm keeps it from the start).
    for node in NODES:
        assert "DRAIN" in _state(REGISTERED[node]), REGISTERED[node]
        assert "DRAIN" in _state(HELD[node]) and f"Reason={AWAITING_BURNIN_REASON} [" in HELD[node], HELD[node]


def test_a_reimaged_node_is_held_for_burnin_again(cluster: SlurmSandbox) -> None:
    # A reimaged VM comes back under its old name, which slurmctld still knows: no registration state applies.
    # Its new OS disk has no burn-in marker, so its health check drains it awaiting burn-in.
    node = "t-ib01-000000"
    wait_for(f"{node} idle", lambda: _idle(cluster, node), timeout_s=90)
    marker = cluster.root / "reports" / f"{node}.burnin-queued"
    marker.unlink()
    wait_for(f"{node} to be held for burn-in", lambda: f"Reason={AWAITING_BURNIN_REASON} " in cluster.node_line(node),
             timeout_s=90)
    assert "DRAIN" in cluster.node_line(node)
    wait_for(f"{node}'s burn-in marker", marker.exists, timeout_s=60)
    cluster.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    wait_for(f"{node} to return", lambda: _idle(cluster, node), timeout_s=90)


def test_nodes_register_by_themselves_with_island_and_gpus(cluster: SlurmSandbox) -> None:
    for node, island in NODES.items():
        wait_for(f"{node} to register idle", lambda n=node: _idle(cluster, n))
        line = cluster.node_line(node)
        assert f"AvailableFeatures=island-{island}" in line
        assert "Gres=gpu:8" in line
        assert "DYNAMIC" in line
    sinfo = cluster.run(["sinfo", "--noheader", "-N", "-o", "%N %P"]).stdout.split("\n")
    assert sorted(ln for ln in sinfo if ln) == ["t-ib00-000000 ib00", "t-ib00-000001 ib00", "t-ib01-000000 ib01"]


def test_a_job_runs_on_one_island_with_its_gpus(cluster: SlurmSandbox) -> None:
    job = cluster.sbatch("-N", "2", "--gres=gpu:8", "--wrap", "srun hostname").stdout.strip()
    wait_for(f"job {job} to complete", lambda: cluster.job(job)["JobState"] == "COMPLETED", timeout_s=90)
    info = cluster.job(job)
    assert info["Partition"] == "ib00"
    detail = cluster.run(["scontrol", "show", "job", "-d", job]).stdout
    assert "JOB_GRES=gpu:16" in detail, detail  # 8 GPUs on each of the 2 nodes
    out = (cluster.root / "jobs" / f"{job}.out").read_text().split()
    assert sorted(out) == ["t-ib00-000000", "t-ib00-000001"]


def test_a_job_larger_than_every_island_is_refused_not_split(cluster: SlurmSandbox) -> None:
    # 3 nodes exist, but no island has 3: Slurm must refuse instead of joining ib00 and ib01 over no InfiniBand.
    proc = cluster.sbatch("-N", "3", "--wrap", "hostname", check=False)
    assert proc.returncode != 0
    # Which partition limit Slurm names first depends on the check order; either says "no island fits".
    assert any(m in proc.stderr for m in REFUSALS), proc.stderr


def test_a_job_waits_for_its_island_instead_of_spanning_two(cluster: SlurmSandbox) -> None:
    blocker = cluster.sbatch("-p", "ib00", "-N", "1", "-w", "t-ib00-000000", "--wrap", "sleep 300").stdout.strip()
    wait_for("the blocker to run", lambda: cluster.job(blocker)["JobState"] == "RUNNING", timeout_s=90)
    # t-ib00-000001 and t-ib01-000000 are idle: two nodes, but in two islands.
    waiting = cluster.sbatch("-N", "2", "--wrap", "hostname").stdout.strip()
    wait_for("the scheduler to consider the job", lambda: cluster.job(waiting)["Reason"] not in ("None", ""))
    info = cluster.job(waiting)
    assert info["JobState"] == "PENDING"
    assert info["Reason"] in ("Resources", "Priority")
    cluster.run(["scancel", blocker])
    wait_for(f"job {waiting} to complete", lambda: cluster.job(waiting)["JobState"] == "COMPLETED", timeout_s=90)
    assert cluster.job(waiting)["NodeList"] == "t-ib00-[000000-000001]"


def test_a_failing_node_is_drained_with_the_check_id_and_returns_when_it_passes(cluster: SlurmSandbox) -> None:
    node = "t-ib00-000001"
    fault = cluster.root / "faults" / node
    fault.write_text("gpu.ecc")
    try:
        wait_for(f"{node} to drain", lambda: "DRAIN" in cluster.node_line(node), timeout_s=90)
        assert "Reason=ndfleet:gpu.ecc" in cluster.node_line(node)
        # The report stays where the node's health endpoint reads it: Unhealthy, so automatic repairs act.
        report = str(cluster.root / "reports" / f"{node}.json")
        state, why = health_state(report, str(cluster.root / "no-marker"))
        assert (state, "gpu.ecc" in why) == ("Unhealthy", True)
        # The drain marker the node's metrics read (alert NodeDrained) appears with the drain.
        marker = cluster.root / "reports" / f"{node}.drained"
        wait_for(f"{node}'s drain marker", marker.exists, timeout_s=60)
    finally:
        fault.unlink()
    wait_for(f"{node} to return", lambda: _idle(cluster, node), timeout_s=90)
    assert health_state(report, str(cluster.root / "no-marker"))[0] == "Healthy"
    wait_for(f"{node}'s drain marker to go", lambda: not marker.exists(), timeout_s=60)


def test_an_admin_drain_is_left_alone(cluster: SlurmSandbox) -> None:
    node = "t-ib00-000000"
    # A reason that holds "State=IDLE" must not make the node look undrained (issue 17).
    cluster.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=maintenance State=IDLE"])
    # A health check runs on the node (interval 3 s; its report is rewritten) and leaves the drain alone.
    report = cluster.root / "reports" / f"{node}.json"
    before = report.stat().st_mtime_ns if report.exists() else 0
    wait_for("a health check", lambda: report.exists() and report.stat().st_mtime_ns != before, timeout_s=60)
    assert "Reason=maintenance State=IDLE [" in cluster.node_line(node)
    assert "DRAIN" in _state(cluster.node_line(node))
    cluster.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    wait_for(f"{node} to return", lambda: _idle(cluster, node))


def test_a_hardware_fault_under_jobs_requeues_them(cluster: SlurmSandbox) -> None:
    # Issue 27: the health check drains a node with jobs on a hardware fault (gpu.xid) and sets it DOWN. Slurm kills
    # the jobs: a batch job that may be requeued (JobRequeue=1, Slurm's default; `--requeue`) goes back to the queue
    # with Restarts=1, one submitted with `--no-requeue` ends NODE_FAIL (https://slurm.schedmd.com/scontrol.html,
    # DOWN). ReturnToService=2 lifts the DOWN at the node's next answer (slurmctld logs "returned to service" within
    # milliseconds); the drain keeps it out.
    jobs = {}
    for node, requeue in (("t-ib00-000000", "--no-requeue"), ("t-ib00-000001", "--requeue")):
        wait_for(f"{node} idle", lambda n=node: _idle(cluster, n), timeout_s=90)
        jobs[node] = cluster.sbatch("-p", "ib00", "-w", node, "-N", "1", requeue, "--wrap", "sleep 300").stdout.strip()
    once, again = jobs.values()
    for job in (once, again):
        wait_for(f"job {job} to run", lambda j=job: cluster.job(j)["JobState"] == "RUNNING", timeout_s=90)
    faults = [cluster.root / "faults" / node for node in jobs]
    for fault in faults:
        fault.write_text("gpu.xid")
    try:
        wait_for(f"job {once} to end", lambda: cluster.job(once)["JobState"] == "NODE_FAIL", timeout_s=90)
        wait_for(f"job {again} to be requeued", lambda: cluster.job(again)["Restarts"] == "1", timeout_s=90)
        assert cluster.job(again)["JobState"] == "PENDING"  # pinned to the broken node: it waits
        log = (cluster.root / "log" / "slurmctld.log").read_text(errors="replace")
        assert f"Requeuing JobId={again}" in log and f"Killing JobId={once} on failed node" in log
        # The next health check finds the node still out (drained, our reason), not back in service: it changes
        # nothing (slurmd logs a failing check's output). A DOWN alone came back IDLE and was drained a pass later.
        for node in jobs:
            said = lambda n=node: (cluster.root / "log" / f"slurmd-{n}.log").read_text(errors="replace")  # noqa: E731
            wait_for(f"{node}'s next health check", lambda f=said: "still failing (ndfleet:gpu.xid)" in f(),
                     timeout_s=60)
            assert said().count("down, its jobs killed or requeued: ndfleet:gpu.xid") == 1
            assert "drained: ndfleet:gpu.xid" not in said()
            line = cluster.node_line(node)
            assert "DRAIN" in _state(line) and "Reason=ndfleet:gpu.xid [" in line, line
    finally:
        for fault in faults:
            fault.unlink()
        cluster.run(["scancel", again])
    # Passing again: the health check resumes what it took out.
    for node in jobs:
        wait_for(f"{node} to return", lambda n=node: _idle(cluster, n), timeout_s=90)


def test_the_controller_restarts_without_losing_the_queue(cluster: SlurmSandbox) -> None:
    running = cluster.sbatch("-p", "ib01", "-N", "1", "--wrap", "sleep 300").stdout.strip()
    held = cluster.sbatch("--hold", "-N", "2", "--wrap", "hostname").stdout.strip()
    wait_for("the job to run", lambda: cluster.job(running)["JobState"] == "RUNNING", timeout_s=90)
    cluster.stop_slurmctld()
    cluster.start_slurmctld()
    assert cluster.job(running)["JobState"] == "RUNNING"
    assert cluster.job(held)["JobState"] == "PENDING"
    assert cluster.job(held)["Reason"] == "JobHeldUser"
    cluster.run(["scancel", running, held])


def test_the_scontrol_words_ndfleet_relies_on(cluster: SlurmSandbox) -> None:
    """The one reader reads a real listing; the burn-in's confirmations are the words this Slurm says:
    "Reservation created: <name>" (a creation confirmed) and "Requested reservation is invalid" (one that is gone)."""
    assert set(parse_nodes(cluster.run(["scontrol", "show", "node", "--oneliner"]).stdout)) == set(NODES)
    user = cluster.run(["id", "-un"]).stdout.strip()
    made = cluster.run(["scontrol", "create", "reservation", "ReservationName=ndfleet-probe", "Nodes=t-ib00-000001",
                        "StartTime=now", "Duration=5", f"Users={user}", "Flags=MAINT,IGNORE_JOBS"])
    assert "Reservation created: ndfleet-probe" in made.stdout
    cluster.run(["scontrol", "delete", "ReservationName=ndfleet-probe"])
    again = cluster.run(["scontrol", "delete", "ReservationName=ndfleet-probe"], check=False)
    assert again.returncode != 0 and GONE in again.stdout + again.stderr


def test_a_failed_job_can_be_requeued_unless_it_said_no_requeue(cluster: SlurmSandbox) -> None:
    """What the controller's requeue of a job that failed on a broken node relies on (ndfleet_node.failed_jobs):
    `scontrol requeue` puts a FAILED batch job back in the queue (Restarts=1), and refuses one submitted
    --no-requeue with the words it looks for."""
    jobs = {flag: cluster.sbatch("-p", "ib01", "-N", "1", flag, "--hold", "--wrap", "exit 3").stdout.strip()
            for flag in ("--requeue", "--no-requeue")}  # fmt: skip
    for job in jobs.values():
        cluster.run(["scontrol", "release", job])
        wait_for(f"job {job} to fail", lambda j=job: cluster.job(j)["JobState"] == "FAILED", timeout_s=90)
    # The controller asks slurmctld's own word first (failed_jobs.squeue_state's question, as it asks it).
    said = cluster.run(["squeue", "--noheader", f"--jobs={jobs['--requeue']}", "--states=all", "--format=%T"])
    assert said.stdout.strip() == "FAILED", said
    cluster.run(["scontrol", "requeue", jobs["--requeue"]])
    assert cluster.job(jobs["--requeue"])["Restarts"] == "1"
    assert cluster.job(jobs["--requeue"])["JobState"] in ("PENDING", "REQUEUED", "RUNNING", "FAILED")
    # slurmctld holds the requeued job the stack's hold, not Slurm's 120 s: its eligible time is the requeue plus
    # the hold plus 1 s (src/slurmctld/job_mgr.c, batch_requeue_fini).
    requeued_at = time.time()
    held = cluster.job(jobs["--requeue"])
    eligible = datetime.strptime(held["EligibleTime"], "%Y-%m-%dT%H:%M:%S").timestamp()
    assert REQUEUE_HOLD_S - 5 <= eligible - requeued_at <= REQUEUE_HOLD_S + 5, held
    refused = cluster.run(["scontrol", "requeue", jobs["--no-requeue"]], check=False)
    assert refused.returncode != 0 and failed_jobs.NOT_REQUEUABLE in refused.stdout + refused.stderr, refused
    assert cluster.job(jobs["--no-requeue"])["Restarts"] == "0"
    cluster.run(["scancel", *jobs.values()], check=False)


def _spares(cluster: SlurmSandbox, config: Path) -> str:
    run = cluster.run(["env", f"PYTHONPATH={REPO / 'node'}", sys.executable, "-m", "ndfleet_node.spares",
                       "--config", str(config)])
    return run.stdout + run.stderr


def test_a_spare_is_held_in_its_reservation_and_takes_a_failed_nodes_place(cluster: SlurmSandbox) -> None:
    """ib00 (2 nodes) with 1 spare: the controller program reserves one idle node in ndfleet-spares-ib00; when the
    other is drained the spare leaves the reservation (deleted: Slurm keeps none without nodes) and takes jobs; when
    the failed node is back, the spares refill first."""
    a, b = "t-ib00-000000", "t-ib00-000001"
    for node in (a, b):
        # Only a node that answers is healthy to the program (right after the fixture's start they may not, yet).
        wait_for(f"{node} idle and responding",
                 lambda n=node: _idle(cluster, n) and "NOT_RESPONDING" not in cluster.node_line(n), timeout_s=120)
    config = cluster.root / "spares.json"
    config.write_text(json.dumps({"ledger": str(cluster.root / "ledger.json"),
                                  "islands": [{"island": "ib00", "partition": "ib00", "nodes": 2, "spares": 1}]}))
    out = _spares(cluster, config)
    listing = cluster.run(["scontrol", "show", "reservation", "--oneliner"]).stdout
    assert "ndfleet-spares-ib00" in parse_reservations(listing), (listing, out)
    found = parse_reservations(listing)["ndfleet-spares-ib00"]
    assert found.nodes == a and "MAINT" in found.flags, (listing, out)
    assert "1/1 in service, 1/1 spares" in out, out
    # A user's job cannot land on the spare: a 2-node job waits (Reason=Resources/ReqNodeNotAvail), a 1-node job
    # runs on the other node.
    job = cluster.sbatch("-N", "1", "-p", "ib00", "--wrap", "hostname").stdout.strip()
    wait_for(f"job {job} to complete", lambda: cluster.job(job)["JobState"] == "COMPLETED", timeout_s=90)
    assert (cluster.root / "jobs" / f"{job}.out").read_text().split() == [b]
    # b fails: the spare is put into service at once.
    cluster.run(["scontrol", "update", f"NodeName={b}", "State=DRAIN", "Reason=spare-test:failed"])
    out = _spares(cluster, config)
    assert f"{a}: spare put into service" in out, out
    assert "ndfleet-spares-ib00" not in cluster.run(["scontrol", "show", "reservation", "--oneliner"]).stdout
    job = cluster.sbatch("-N", "1", "-p", "ib00", "--wrap", "hostname").stdout.strip()
    wait_for(f"job {job} to complete", lambda: cluster.job(job)["JobState"] == "COMPLETED", timeout_s=90)
    assert (cluster.root / "jobs" / f"{job}.out").read_text().split() == [a]
    # b is back (repaired and burned in): it refills the spares.
    cluster.run(["scontrol", "update", f"NodeName={b}", "State=RESUME"])
    wait_for(f"{b} idle", lambda: _idle(cluster, b) and "NOT_RESPONDING" not in cluster.node_line(b), timeout_s=90)
    out = _spares(cluster, config)
    assert parse_reservations(cluster.run(["scontrol", "show", "reservation", "--oneliner"]).stdout)[
        "ndfleet-spares-ib00"].nodes in (a, b), out
    assert "1/1 in service, 1/1 spares" in out, out
    cluster.run(["scontrol", "delete", "ReservationName=ndfleet-spares-ib00"])


def test_a_node_that_is_gone_is_deleted(cluster: SlurmSandbox) -> None:
    node = "t-ib01-000000"
    wait_for(f"{node} idle", lambda: _idle(cluster, node), timeout_s=90)
    cluster.stop_slurmd(node)
    # After SlurmdTimeout (10 s here) without an answer, slurmctld marks the node DOWN, "Not responding".
    wait_for(f"{node} to be marked down", lambda: "State=DOWN" in cluster.node_line(node), timeout_s=120)
    line = cluster.node_line(node)
    reap = cluster.run(["env", f"PYTHONPATH={REPO / 'node'}", sys.executable, "-m", "ndfleet_node",
                        "slurm-reap", "--after-seconds", "0"])
    assert f"deleted {node}" in reap.stdout, (line, reap.stdout, reap.stderr)
    assert cluster.node_line(node) == ""
