"""Issue 27: a hardware fault on a node with jobs takes the jobs off it (State=DOWN: Slurm kills them and requeues
those that may be requeued) and files the impact report once, without making slurmd wait for it.

scontrol's node states are SchedMD's (https://slurm.schedmd.com/scontrol.html, NODE STATE: ALLOCATED, MIXED,
COMPLETING, DOWN, DRAIN); `State=DOWN` on `scontrol update` kills the node's jobs and requeues the requeueable ones
(same page, "DOWN"; https://slurm.schedmd.com/slurm.conf.html, JobRequeue).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ndfleet_node import slurm_health
from ndfleet_node.__main__ import main
from ndfleet_node.names import SPARES_RESERVATION_PREFIX
from ndfleet_node.scontrol import parse_line
from ndfleet_node.slurm_health import Verdict, act, held_by_health_check

from tests.fakes.fleet import node_json_data
from tests.slurm.test_slurm_health_unit import FakeScontrol

XID = Verdict(False, ("gpu.xid",))  # Resource.Hpc.Unhealthy.GpuXIDError / XID79FallenOffBus
IB_DOWN = Verdict(False, ("host.mounts", "ib.ports"))  # one software, one hardware check: hardware wins
MOUNTS = Verdict(False, ("host.mounts",))  # category None: configuration, not the host
HUNG = Verdict(False, ("validate-timeout",))  # the validator itself: not a hardware finding
PASS = Verdict(True, ())
STAMP = "[root@2026-12-05T06:00:00]"


def test_only_checks_with_an_impact_category_are_hardware() -> None:
    assert XID.hardware and IB_DOWN.hardware
    assert not MOUNTS.hardware and not HUNG.hardware and not PASS.hardware


@pytest.mark.parametrize(
    ("line", "verdict", "calls", "took_out"),
    [
        # Jobs on the node and a hardware fault: DOWN, so Slurm kills and requeues them now; drained first, so the
        # node stays out when ReturnToService=2 lifts the DOWN at its next answer.
        ("State=MIXED", XID, ["drain ndfleet:gpu.xid", "down ndfleet:gpu.xid"], True),
        ("State=ALLOCATED+DYNAMIC_NORM", IB_DOWN,
         ["drain ndfleet:host.mounts,ib.ports", "down ndfleet:host.mounts,ib.ports"], True),
        ("State=IDLE+COMPLETING", XID, ["drain ndfleet:gpu.xid", "down ndfleet:gpu.xid"], True),
        # No jobs: a drain, as before.
        ("State=IDLE+DYNAMIC_NORM", XID, ["drain ndfleet:gpu.xid"], True),
        # Jobs, but the fault is not the hardware's: they finish where they are (drain).
        ("State=MIXED", MOUNTS, ["drain ndfleet:host.mounts"], True),
        ("State=ALLOCATED", HUNG, ["drain ndfleet:validate-timeout"], True),
        # Our drain for a software fault with jobs still finishing; now the GPU fails too: DOWN.
        (f"State=MIXED+DRAIN Reason=ndfleet:host.mounts {STAMP}", XID,
         ["drain ndfleet:gpu.xid", "down ndfleet:gpu.xid"], True),
        # Drained by an earlier pass whose DOWN failed: the jobs still run, so DOWN now.
        (f"State=MIXED+DRAIN Reason=ndfleet:gpu.xid {STAMP}", XID, ["drain ndfleet:gpu.xid", "down ndfleet:gpu.xid"],
         True),
        # An administrator's drain with jobs on it: theirs, left alone.
        (f"State=MIXED+DRAIN Reason=swap DIMM {STAMP}", XID, [], False),
        # DOWN by us, still failing the same way: left alone, and no second report.
        (f"State=DOWN Reason=ndfleet:gpu.xid {STAMP}", XID, [], False),
        (f"State=DOWN+DRAIN+COMPLETING Reason=ndfleet:gpu.xid {STAMP}", XID, [], False),
        # Back from DOWN at the node's next answer (ReturnToService=2), still drained: left alone.
        (f"State=IDLE+DRAIN Reason=ndfleet:gpu.xid {STAMP}", XID, [], False),
        # A drain by us for a software fault, jobs still finishing, same fault: left to finish.
        (f"State=MIXED+DRAIN Reason=ndfleet:host.mounts {STAMP}", MOUNTS, [], False),
    ],
)
def test_take_out_decisions(line: str, verdict: Verdict, calls: list[str], took_out: bool) -> None:
    fake = FakeScontrol("NodeName=n " + line)
    outcome = act(fake, "n", verdict)  # type: ignore[arg-type]
    assert fake.calls == calls
    assert outcome.took_out is took_out
    assert outcome.drained  # out of service afterwards, whoever took it out: the NodeDrained marker follows


@pytest.mark.parametrize(
    ("line", "ours", "calls"),
    [
        (f"State=DOWN Reason=ndfleet:gpu.xid {STAMP}", True, ["resume"]),
        (f"State=DOWN+DRAIN Reason=ndfleet:ib.ports {STAMP}", True, ["resume"]),
        ("State=DOWN*+DYNAMIC_NORM Reason=Not responding [slurm@2026-12-05T06:00:00]", False, []),
        (f"State=DOWN Reason=ops: reseat GPU {STAMP}", False, []),
        (f"State=DOWN Reason=ndfleet:elastic:resume-failed {STAMP}", False, []),
    ],
)
def test_a_node_down_by_us_is_resumed_when_it_passes_and_no_other(line: str, ours: bool, calls: list[str]) -> None:
    node = parse_line("NodeName=n " + line)
    assert node is not None and held_by_health_check(node) is ours
    fake = FakeScontrol("NodeName=n " + line)
    act(fake, "n", PASS)  # type: ignore[arg-type]
    assert fake.calls == calls


# --- the whole program, as slurmd runs it: a fake scontrol that keeps the node's line, a fake systemd-run ---

FAILING_XID = ('json.dump({"status": "unhealthy", "checks": [{"id": "gpu.xid", "status": "fail", '
               '"message": "Xid 79 on GPU 3"}]}, open(sys.argv[-1], "w")); sys.exit(1)')
FAILING_MOUNTS = ('json.dump({"status": "unhealthy", "checks": [{"id": "host.mounts", "status": "fail"}]}, '
                  'open(sys.argv[-1], "w")); sys.exit(1)')

# scontrol: `show node` prints the line in state.txt; `update ... State=X Reason=Y` rewrites it as Slurm shows the
# node afterwards (State=DRAIN keeps the jobs: MIXED+DRAIN; State=DOWN kills them and keeps the drain flag:
# DOWN+DRAIN, as tests/slurm/test_real_scheduler.py sees Slurm do) and logs the call.
SCONTROL = """
import json
import subprocess
import sys
import time
from pathlib import Path
here = Path(sys.argv[0]).parent
line = (here / "state.txt").read_text().strip()
if sys.argv[1] == "show":
    print(line)
    sys.exit(0)
with open(here / "updates.log", "a") as log:
    log.write(" ".join(sys.argv[2:]) + "\\n")
settings = dict(a.split("=", 1) for a in sys.argv[3:])
if "State" in settings:
    now = line.split(" State=", 1)[1].split()[0]
    drain = "+DRAIN" if "DRAIN" in now or settings["State"] == "DRAIN" else ""
    state = ("DOWN" if settings["State"] == "DOWN" else now.split("+")[0]) + drain
    (here / "state.txt").write_text(f"NodeName=n1 State={state} Reason={settings['Reason']} [root@2026-12-05T06:00:00]")
"""

# systemd-run (systemd src/run/run.c): with --no-block it queues the transient unit and exits 0; a unit of that name
# that is still loaded (running, or failed and not yet collected) makes it exit 1 with the manager's error
# "Unit NAME.service was already loaded or has a fragment file." (systemd src/core/dbus-manager.c, transient units).
SYSTEMD_RUN = """
import sys, time
from pathlib import Path
here = Path(sys.argv[0]).parent
mode = (here / "systemd-run.mode").read_text().strip() if (here / "systemd-run.mode").exists() else "ok"
with open(here / "launches.log", "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
if mode == "exists":
    print("Failed to start transient service unit: Unit ndfleet-impact.service was already loaded or has a "
          "fragment file.", file=sys.stderr)
    sys.exit(1)
if mode == "hang":
    time.sleep(120)
"""


def _script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport json, sys\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture(autouse=True)
def node_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node JSON names the failure marker the impact report writes (paths.failed_marker)."""
    doc = node_json_data()
    doc["paths"]["failed_marker"] = str(tmp_path / "failed")
    (tmp_path / "node.json").write_text(json.dumps(doc))
    monkeypatch.setenv("NDFLEET_NODE_CONFIG", str(tmp_path / "node.json"))


def _pass(tmp_path: Path, validator_body: str) -> int:
    launch = f"{_script(tmp_path, 'systemd-run', SYSTEMD_RUN)} --no-block --unit=ndfleet-impact echo report"
    return main(["slurm-health", "--validator", _script(tmp_path, "validate", validator_body),
                 "--report", str(tmp_path / "r.json"), "--scontrol", _script(tmp_path, "scontrol", SCONTROL),
                 "--node-name", "n1", "--drain-marker", str(tmp_path / "drained"),
                 "--burnin-marker", str(tmp_path / "queued"), "--kvp-pool", str(tmp_path / "no-kvp"),
                 "--epilog-marker", str(tmp_path / "epilog-failed"), "--impact-launch", launch])  # fmt: skip


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_gpu_fault_under_a_job_downs_the_node_and_files_one_report(tmp_path: Path) -> None:
    (tmp_path / "queued").touch()
    (tmp_path / "state.txt").write_text("NodeName=n1 State=MIXED")
    assert _pass(tmp_path, FAILING_XID) == 1
    assert _lines(tmp_path / "updates.log") == ["NodeName=n1 State=DRAIN Reason=ndfleet:gpu.xid",
                                                "NodeName=n1 State=DOWN Reason=ndfleet:gpu.xid"]
    assert "State=DOWN+DRAIN " in (tmp_path / "state.txt").read_text()
    assert _lines(tmp_path / "launches.log") == ["--no-block --unit=ndfleet-impact echo report"]
    assert "down, its jobs killed or requeued" in (tmp_path / "drained").read_text()
    # The next pass finds the node DOWN for the same fault: nothing changes, no second report.
    assert _pass(tmp_path, FAILING_XID) == 1
    assert len(_lines(tmp_path / "updates.log")) == 2
    assert len(_lines(tmp_path / "launches.log")) == 1


def test_a_software_fault_files_no_report(tmp_path: Path) -> None:
    (tmp_path / "queued").touch()
    (tmp_path / "state.txt").write_text("NodeName=n1 State=MIXED")
    assert _pass(tmp_path, FAILING_MOUNTS) == 1
    assert _lines(tmp_path / "updates.log") == ["NodeName=n1 State=DRAIN Reason=ndfleet:host.mounts"]
    assert _lines(tmp_path / "launches.log") == []


@pytest.mark.parametrize("mode", ["exists", "hang"])
def test_a_launch_refused_or_hung_does_not_fail_the_health_check(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(slurm_health, "IMPACT_LAUNCH_TIMEOUT_S", 2.0)
    (tmp_path / "queued").touch()
    (tmp_path / "systemd-run.mode").write_text(mode)
    (tmp_path / "state.txt").write_text("NodeName=n1 State=ALLOCATED")
    # The same exit as without a report (1: failing), the node out and marked, the launch tried once and logged.
    assert _pass(tmp_path, FAILING_XID) == 1
    assert _lines(tmp_path / "updates.log")[-1] == "NodeName=n1 State=DOWN Reason=ndfleet:gpu.xid"
    assert (tmp_path / "drained").exists()
    assert len(_lines(tmp_path / "launches.log")) == 1
    err = capsys.readouterr().err
    assert "impact report not started" in err
    assert ("already loaded" if mode == "exists" else "timed out") in err


PASSING = 'json.dump({"status": "healthy", "checks": [{"id": "gpu.count", "status": "pass"}]}, open(sys.argv[-1], "w"))'


@pytest.mark.parametrize(
    ("reason", "reported"),
    [
        ("ndfleet:burnin:busbw-below-floor", ["--check burnin.busbw-below-floor"]),
        ("ndfleet:burnin:hang", ["--check burnin.hang"]),
        ("ndfleet:burnin:awaiting", []),  # not a verdict
        ("ndfleet:burnin:island-below-floor", []),  # the fabric at scale, not this host
        ("ndfleet:burnin:unresolved", []),
        ("ops: reseat cable", []),  # an administrator's drain
        # The controller's host ledger held the host (its second failure): the node files the report that takes the
        # host out; the controller has no ssh trust to ask it (the twin's repeat loop found its request failing).
        ("ndfleet:host:repeat-failure", ["--check host.repeat-failure"]),
    ],
)
def test_a_burn_in_verdict_against_the_host_is_reported_by_the_node_until_the_report_ran(
    tmp_path: Path, reason: str, reported: list[str]
) -> None:
    """The burn-in runs on the controller, which has neither the node's identity nor its KVP data (nor ssh to it):
    the node's own health check files the report for the verdict, and the report's failure marker keeps the node
    Unhealthy so that automatic repairs replace it (the twin's repair loop found such a node left Healthy). Once that
    marker names the check, the report has run: later passes start nothing."""
    (tmp_path / "queued").touch()
    (tmp_path / "state.txt").write_text(f"NodeName=n1 State=IDLE+DRAIN Reason={reason} {STAMP}")
    assert _pass(tmp_path, PASSING) == 0
    for check in [ln.split()[5] for ln in _lines(tmp_path / "launches.log")]:
        # What the report writes (ndfleet_node.impact.mark_failed), then a line of another check's.
        with (tmp_path / "failed").open("a") as f:
            f.write(f"impact: {check}: {reason}\nimpact: gpu.xid: other\n")
    assert _pass(tmp_path, PASSING) == 0
    launches = _lines(tmp_path / "launches.log")
    assert [" ".join(ln.split()[4:6]) for ln in launches] == reported
    assert _lines(tmp_path / "updates.log") == []  # the burn-in's drain is the burn-in's: left as it is


@pytest.mark.parametrize("mode", ["ok", "exists"])
def test_a_verdict_report_that_never_ran_is_started_again_at_the_next_pass(tmp_path: Path, mode: str) -> None:
    """systemd-run --no-block answers before the unit runs: a report that systemd could not spawn under load, or a
    start refused because a unit of that name was loaded, left no failure marker. The node stayed drained and
    Healthy to Azure, never repaired, when the first start counted as the report (suspected in a twin run)."""
    (tmp_path / "queued").touch()
    (tmp_path / "systemd-run.mode").write_text(mode)
    (tmp_path / "state.txt").write_text(f"NodeName=n1 State=IDLE+DRAIN Reason=ndfleet:burnin:hang {STAMP}")
    (tmp_path / "failed").write_text("impact: burnin.hang-other: a check whose name starts alike\n")
    for _ in range(3):
        assert _pass(tmp_path, PASSING) == 0
    assert [" ".join(ln.split()[4:6]) for ln in _lines(tmp_path / "launches.log")] == ["--check burnin.hang"] * 3


def test_without_a_failure_marker_in_the_node_json_no_verdict_report_is_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report could not keep the node Unhealthy, and nothing could tell that it ran: it would be filed at every
    pass. Every node JSON ndfleet renders names the marker (ndfleet.nodefiles.nodeconfig FAILED_MARKER)."""
    doc = node_json_data()
    doc["paths"].pop("failed_marker", None)
    (tmp_path / "node.json").write_text(json.dumps(doc))
    (tmp_path / "queued").touch()
    (tmp_path / "state.txt").write_text(f"NodeName=n1 State=IDLE+DRAIN Reason=ndfleet:burnin:hang {STAMP}")
    assert _pass(tmp_path, PASSING) == 0
    assert _lines(tmp_path / "launches.log") == []


FAILING_FLOOR = ('json.dump({"status": "unhealthy", "checks": [{"id": "gpu.count", "status": "pass"}, {"id": '
                 '"perf.nccl_allreduce", "status": "fail", "message": "busbw 312.4 GB/s"}]}, open(sys.argv[-1], "w")); '
                 'sys.exit(1)')


# Any call of it is a Slurm command the Epilog must not make (SchedMD, "Prolog and Epilog Guide").
TRIPWIRE = """
from pathlib import Path
with open(Path(sys.argv[0]).parent / "slurm-commands.log", "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
sys.exit(1)
"""
# What slurmctld shows once an Epilog exited non-zero (slurm.conf(5), Epilog; names.EPILOG_ERROR_REASON).
EPILOG_ERROR_LINE = "NodeName=n1 State=IDLE+DRAIN Reason=Epilog error [slurm@2026-12-05T06:00:00]"


def _epilog_pass(tmp_path: Path, validator_body: str, monkeypatch: pytest.MonkeyPatch | None = None,
                 reservation: str = "", lock_wait: str = "60") -> int:  # fmt: skip
    """The program as the rendered Epilog runs it (templates/slurm/ndfleet-slurm-health.sh.j2): --epilog, no
    --impact-launch, the scontrol it would find a tripwire."""
    if monkeypatch is not None and reservation:
        monkeypatch.setenv("SLURM_JOB_RESERVATION", reservation)
    tripwire = _script(tmp_path, "scontrol-tripwire", TRIPWIRE)
    return main(["slurm-health", "--epilog", "--lock", str(tmp_path / "health.lock"), "--lock-wait", lock_wait,
                 "--level", "epilog", "--validator", _script(tmp_path, "validate", validator_body),
                 "--report", str(tmp_path / "r.json"), "--scontrol", tripwire, "--node-name", "n1",
                 "--drain-marker", str(tmp_path / "drained"), "--burnin-marker", str(tmp_path / "queued"),
                 "--kvp-pool", str(tmp_path / "no-kvp"), "--epilog-marker", str(tmp_path / "epilog-failed")])


def test_the_epilog_calls_no_slurm_command_and_tells_slurm_by_its_exit_status(tmp_path: Path) -> None:
    """Failing: exit 1 (slurmctld drains the node "Epilog error") and the failed checks recorded; healthy: exit 0
    and nothing recorded. Neither calls scontrol, which an Epilog should not (a busy controller can lose the drain)."""
    (tmp_path / "queued").touch()
    assert _epilog_pass(tmp_path, FAILING_FLOOR) == 1
    assert (tmp_path / "epilog-failed").read_text() == "ndfleet:perf.nccl_allreduce\n"
    (tmp_path / "epilog-failed").unlink()
    assert _epilog_pass(tmp_path, PASSING) == 0
    assert not (tmp_path / "epilog-failed").exists()
    assert _lines(tmp_path / "slurm-commands.log") == []
    assert _lines(tmp_path / "launches.log") == []  # the report is the periodic pass's


def test_the_next_periodic_pass_names_the_epilogs_check_files_the_report_and_keeps_the_node_out(
    tmp_path: Path,
) -> None:
    """The Epilog's all-reduce below its floor (twice): the Epilog exits 1, slurmctld drains "Epilog error"; the next
    periodic pass (quick, which does not run the all-reduce, passes) replaces that reason with the check's, which the
    repair loop, the ledger and the impact category read, and files the report with the check named, so that the
    failure marker keeps the node Unhealthy; later passes neither resume the node nor file again (the twin's loop
    found a quick pass resuming such a node, Healthy again, never repaired)."""
    (tmp_path / "queued").touch()
    assert _epilog_pass(tmp_path, FAILING_FLOOR) == 1
    (tmp_path / "state.txt").write_text(EPILOG_ERROR_LINE)
    assert _pass(tmp_path, PASSING) == 1  # the Epilog's finding is this pass's verdict too
    assert _lines(tmp_path / "updates.log") == ["NodeName=n1 State=DRAIN Reason=ndfleet:perf.nccl_allreduce"]
    assert _lines(tmp_path / "launches.log") == [
        "--no-block --unit=ndfleet-impact echo report --check perf.nccl_allreduce"
    ]
    (tmp_path / "failed").write_text("impact: perf.nccl_allreduce: busbw 312.4 GB/s\n")  # what the report writes
    assert _pass(tmp_path, PASSING) == 1  # the node shows the Epilog's reason now: the marker is done with
    assert not (tmp_path / "epilog-failed").exists()
    assert _pass(tmp_path, PASSING) == 0
    assert len(_lines(tmp_path / "updates.log")) == 1  # not resumed
    assert len(_lines(tmp_path / "launches.log")) == 1  # the marker names the check: filed once
    assert "which does not measure perf.nccl_allreduce" in (tmp_path / "drained").read_text()
    assert _lines(tmp_path / "slurm-commands.log") == []


def test_a_pass_before_slurmctld_drained_the_node_drains_it_and_one_after_renames_it_again(tmp_path: Path) -> None:
    """The periodic pass can come between the Epilog's exit and slurmctld's drain: it drains with the check's
    reason; slurmctld's "Epilog error" may then overwrite that, and the marker, kept, has the next pass rename it."""
    (tmp_path / "queued").touch()
    assert _epilog_pass(tmp_path, FAILING_FLOOR) == 1
    (tmp_path / "state.txt").write_text("NodeName=n1 State=IDLE+COMPLETING")
    assert _pass(tmp_path, PASSING) == 1
    assert (tmp_path / "epilog-failed").exists()
    (tmp_path / "state.txt").write_text(EPILOG_ERROR_LINE)
    assert _pass(tmp_path, PASSING) == 1
    # Still COMPLETING (slurmctld had not heard of the Epilog's end): a hardware fault with a job on the node, so
    # drained and set DOWN as any (test_take_out_decisions); then the rename.
    reason = "Reason=ndfleet:perf.nccl_allreduce"
    assert _lines(tmp_path / "updates.log") == [f"NodeName=n1 State=DRAIN {reason}", f"NodeName=n1 State=DOWN {reason}",
                                                f"NodeName=n1 State=DRAIN {reason}"]


def test_an_epilog_error_drain_with_a_quick_fault_takes_the_faults_reason(tmp_path: Path) -> None:
    """An ECC error that ended the job: the Epilog fails on gpu.ecc; the periodic pass, which sees it too, names it
    even if the marker was lost (the reason the controller's requeue and the impact category read)."""
    (tmp_path / "queued").touch()
    (tmp_path / "state.txt").write_text(EPILOG_ERROR_LINE)
    assert _pass(tmp_path, FAILING_XID) == 1
    assert _lines(tmp_path / "updates.log") == ["NodeName=n1 State=DRAIN Reason=ndfleet:gpu.xid"]
    assert _lines(tmp_path / "launches.log") == ["--no-block --unit=ndfleet-impact echo report"]


def test_an_epilog_error_drain_with_no_record_is_left_drained(tmp_path: Path) -> None:
    """Nothing says which check failed at the job's end, nor that the node is fit: not resumed, nothing filed."""
    (tmp_path / "queued").touch()
    (tmp_path / "state.txt").write_text(EPILOG_ERROR_LINE)
    assert _pass(tmp_path, PASSING) == 0
    assert _lines(tmp_path / "updates.log") == [] and _lines(tmp_path / "launches.log") == []
    assert "no record of the Epilog's failed checks" in (tmp_path / "drained").read_text()


@pytest.mark.parametrize("text", ["gpu.xid\n", "ndfleet:gpu.xid;rm -rf /\n", "ndfleet:" + "a," * 3000 + "\n"])
def test_a_marker_not_understood_is_a_named_failure(tmp_path: Path, text: str) -> None:
    (tmp_path / "queued").touch()
    (tmp_path / "epilog-failed").write_text(text)
    (tmp_path / "state.txt").write_text(EPILOG_ERROR_LINE)
    assert _pass(tmp_path, PASSING) == 1
    assert _lines(tmp_path / "updates.log") == ["NodeName=n1 State=DRAIN Reason=ndfleet:epilog-bad-marker"]


def test_a_burn_in_jobs_end_is_not_checked_nor_waits_for_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each burn-in test is a Slurm job in the burn-in's reservation (names.BURNIN_RESERVATION_PREFIX): its nodes'
    Epilog returns at once, validating nothing, even while a periodic check holds the lock; the burn-in's launch
    allowance is not spent on it. A job of any other reservation (the warm spares') is checked."""
    from ndfleet_node.burnin import slurm as burnin_slurm

    ran = tmp_path / "validated"
    failing_and_noted = f"open({str(ran)!r}, 'a').write('ran\\n')\n" + FAILING_FLOOR
    name = burnin_slurm.reservation_name()
    with subprocess.Popen(["flock", str(tmp_path / "health.lock"), "sleep", "30"]) as holder:
        try:
            _wait_held(tmp_path / "health.lock")
            started = time.monotonic()
            assert _epilog_pass(tmp_path, failing_and_noted, monkeypatch, reservation=name) == 0
            assert time.monotonic() - started < 5
        finally:
            holder.kill()
    assert not ran.exists() and not (tmp_path / "epilog-failed").exists()
    assert _epilog_pass(tmp_path, failing_and_noted, monkeypatch, reservation=f"{SPARES_RESERVATION_PREFIX}ib00") == 1
    assert ran.read_text() == "ran\n"


def _wait_held(lock: Path) -> None:
    for _ in range(100):
        if subprocess.run(["flock", "-n", str(lock), "true"], check=False).returncode != 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"{lock} never held")


def test_the_epilog_waits_for_a_periodic_run_then_checks(tmp_path: Path) -> None:
    """The job that just ended may have met the fault after the running check looked: the Epilog takes the lock
    flock(1) holds once it is free (flock(2), the same lock) and checks."""
    with subprocess.Popen(["flock", str(tmp_path / "health.lock"), "sleep", "2"]) as holder:
        _wait_held(tmp_path / "health.lock")
        assert _epilog_pass(tmp_path, FAILING_FLOOR) == 1
        assert holder.poll() is not None  # it waited for the holder


def test_the_epilog_gives_up_on_a_lock_held_past_its_wait(tmp_path: Path) -> None:
    with subprocess.Popen(["flock", str(tmp_path / "health.lock"), "sleep", "30"]) as holder:
        try:
            _wait_held(tmp_path / "health.lock")
            assert _epilog_pass(tmp_path, FAILING_FLOOR, lock_wait="1") == 0
        finally:
            holder.kill()
    assert not (tmp_path / "epilog-failed").exists()


def test_a_floor_report_that_never_ran_is_started_by_the_periodic_check(tmp_path: Path) -> None:
    (tmp_path / "queued").touch()
    (tmp_path / "state.txt").write_text(f"NodeName=n1 State=IDLE+DRAIN Reason=ndfleet:perf.nccl_allreduce {STAMP}")
    assert _pass(tmp_path, PASSING) == 0
    assert [" ".join(ln.split()[4:6]) for ln in _lines(tmp_path / "launches.log")] == ["--check perf.nccl_allreduce"]
    assert _lines(tmp_path / "updates.log") == []


