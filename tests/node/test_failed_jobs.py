"""The controller's requeue of a job that failed on a node its health check then took out (node/ndfleet_node/
failed_jobs.py), on sacct's line format (`JobIDRaw|Start|End|State`, as tests/data/slurm/sacct-runs.txt records it)
and scontrol's answers."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ndfleet_node import failed_jobs, requeued_jobs
from ndfleet_node.host_ledger import stamp_s
from ndfleet_node.sacct import JobRecord, Sacct, SacctError, parse_records
from ndfleet_node.scontrol import Scontrol, SlurmError, SlurmNode

DRAINED = "2026-12-05T03:00:00"  # the drain's stamp, as scontrol shows it (the controller's local time)
AT = stamp_s(DRAINED)
assert AT is not None
WITHIN = 405  # HealthCheckInterval 300 s and the check's own bound (ndfleet.slurm.conf.requeue_failed_within_s)
FAILURE = SlurmNode("prod-ib00-000001", "IDLE+DRAIN+DYNAMIC_NORM", "ndfleet:gpu.ecc", DRAINED, ("ib00",))


def utc(offset_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(AT + offset_s))


def run(job: int, ended_s: float | None, state: str) -> str:
    end = "Unknown" if ended_s is None else utc(ended_s)
    return f"{job}|{utc(-3600)}|{end}|{state}"


class FakeSacct(Sacct):
    """Answers the node's failed runs for --nodelist, and every run for --jobs; records the questions."""

    def __init__(self, on_node: Sequence[str], runs: Sequence[str], error: str = "") -> None:
        super().__init__()
        self.on_node, self.all_runs, self.error, self.asked = on_node, runs, error, []  # type: ignore[var-annotated]

    def records(self, *selection: str) -> list[JobRecord]:
        self.asked.append(selection)
        if self.error:
            raise SacctError(self.error)
        if any(s.startswith("--nodelist=") for s in selection):
            return parse_records("\n".join(self.on_node))
        wanted = next(s for s in selection if s.startswith("--jobs=")).split("=", 1)[1].split(",")
        return [r for r in parse_records("\n".join(self.all_runs)) if r.job in wanted]


class FakeScontrol(Scontrol):
    def __init__(self, refuse: dict[str, str] | None = None) -> None:
        super().__init__()
        self.refuse, self.calls = refuse or {}, []  # type: ignore[var-annotated]

    def call(self, *args: str, max_bytes: int = 0) -> str:
        self.calls.append(args)
        if args[0] == "requeue" and args[1] in self.refuse:
            raise SlurmError(f"scontrol requeue {args[1]}: {self.refuse[args[1]]}")
        return ""


def failed_now(job: str) -> str:
    return "FAILED"


def requeue(sacct: FakeSacct, slurm: FakeScontrol, now_s: float = 60,
            state_of=failed_now) -> tuple[bool, list[str]]:  # noqa: ANN001 - fmt: skip
    log: list[str] = []
    ok = failed_jobs.requeue_failed(slurm, sacct, [FAILURE], WITHIN, log.append, now=AT + now_s, state_of=state_of)
    return ok, log


def test_a_job_that_failed_on_the_node_shortly_before_its_drain_is_requeued() -> None:
    on_node = [run(11, -40, "FAILED"), run(12, -900, "FAILED"), run(13, -30, "COMPLETED"), run(14, -20, "CANCELLED")]
    sacct, slurm = FakeSacct(on_node, on_node), FakeScontrol()
    ok, log = requeue(sacct, slurm)
    assert ok and slurm.calls == [("requeue", "11")], (slurm.calls, log)
    assert any("job 11 failed on it before it was drained (ndfleet:gpu.ecc): requeued" in entry for entry in log)


def test_sacct_is_asked_for_the_nodes_failed_runs_in_the_window_in_utc() -> None:
    sacct = FakeSacct([run(11, -40, "FAILED")], [run(11, -40, "FAILED")])
    requeue(sacct, FakeScontrol())
    first, second = sacct.asked
    assert first == (f"--nodelist={FAILURE.name}", "--state=FAILED", f"--starttime={utc(-WITHIN)}",
                     f"--endtime={utc(failed_jobs.CLOCK_SLACK_S)}")  # fmt: skip
    assert second == ("--jobs=11",)


def test_a_job_requeued_already_is_not_requeued_again() -> None:
    # The first pass requeued job 11; its new run started on the spare: requeueing it again would end that run.
    on_node = [run(11, -40, "FAILED")]
    for newest in (run(11, None, "PENDING"), run(11, None, "RUNNING")):
        slurm = FakeScontrol()
        ok, _ = requeue(FakeSacct(on_node, [*on_node, newest]), slurm)
        assert ok and slurm.calls == []


def test_a_job_submitted_no_requeue_is_left_and_logged_not_failed() -> None:
    on_node = [run(11, -40, "FAILED"), run(12, -35, "FAILED")]
    slurm = FakeScontrol({"11": "Requested operation is presently disabled"})
    ok, log = requeue(FakeSacct(on_node, on_node), slurm)
    assert ok and slurm.calls == [("requeue", "11"), ("requeue", "12")]
    assert any("job 11 failed on it and was submitted --no-requeue" in entry for entry in log), log


def test_a_refused_requeue_or_an_unreadable_sacct_is_a_failed_run_tried_again() -> None:
    on_node = [run(11, -40, "FAILED")]
    ok, log = requeue(FakeSacct(on_node, on_node), FakeScontrol({"11": "Unable to contact slurm controller"}))
    assert not ok and any("requeue failed" in entry for entry in log)
    ok, log = requeue(FakeSacct([], [], "sacct: Problem talking to the database"), FakeScontrol())
    assert not ok and any("cannot read the jobs that failed on it" in entry for entry in log)


def test_an_old_drain_is_not_looked_at() -> None:
    sacct, slurm = FakeSacct([run(11, -40, "FAILED")], [run(11, -40, "FAILED")]), FakeScontrol()
    ok, _ = requeue(sacct, slurm, now_s=WITHIN + 3600)
    assert ok and sacct.asked == [] and slurm.calls == []


def test_only_a_hardware_drain_requeues_whether_or_not_its_host_is_known() -> None:
    on_node = [run(11, -40, "FAILED")]
    for reason in ("ndfleet:burnin:awaiting", "maintenance by hand", "ndfleet:host:repeat-failure"):
        sacct, slurm = FakeSacct(on_node, on_node), FakeScontrol()
        other = SlurmNode(FAILURE.name, FAILURE.state, reason, DRAINED, ("ib00",))
        assert failed_jobs.requeue_failed(slurm, sacct, [other], WITHIN, print, now=AT + 60, state_of=failed_now)
        assert sacct.asked == [] and slurm.calls == [], reason
    # FAILURE has no Comment= (no physical host published): it is still a hardware drain.
    slurm = FakeScontrol()
    assert failed_jobs.requeue_failed(slurm, FakeSacct(on_node, on_node), [FAILURE], WITHIN, print, now=AT + 60,
                                      state_of=failed_now)
    assert slurm.calls == [("requeue", "11")]


def test_the_newest_run_decides() -> None:
    records = parse_records("\n".join([run(11, -900, "FAILED"), run(11, -40, "FAILED"), run(12, -40, "NODE_FAIL")]))
    assert failed_jobs.failed_within(records, AT, WITHIN) == ["11"]
    assert failed_jobs.failed_within(records, AT, 30) == []


def test_each_requeue_is_noted_for_the_job_series(tmp_path: Path) -> None:
    noted = tmp_path / "state" / "requeued-jobs"
    on_node = [run(11, -40, "FAILED")]
    log: list[str] = []
    assert failed_jobs.requeue_failed(FakeScontrol(), FakeSacct(on_node, on_node), [FAILURE], WITHIN, log.append,
                                      now=AT + 60, requeued=noted, state_of=failed_now)  # fmt: skip
    assert noted.read_text() == f"11 {int(AT + 60)}\n"
    assert requeued_jobs.remembered(noted, AT) == {"11": int(AT + 60)}
    assert requeued_jobs.remembered(noted, AT + 61) == {}


def test_the_note_is_bounded_and_read_by_shape(tmp_path: Path) -> None:
    noted = tmp_path / "requeued-jobs"
    for job in range(requeued_jobs.MAX_REMEMBERED + 20):
        requeued_jobs.remember(noted, str(job), 1000 + job)
    lines = noted.read_text().splitlines()
    assert len(lines) == requeued_jobs.MAX_REMEMBERED and lines[0].startswith("20 ")
    noted.write_text("12 1000\nnot a line\n-3 1000\n13 soon\n14 1001\n")
    assert list(requeued_jobs.remembered(noted, 0)) == ["14", "12"]
    noted.write_text("1 1\n" * requeued_jobs.MAX_REMEMBERED * 20)  # past the bound: not ours, no job
    assert requeued_jobs.remembered(noted, 0) == {}
    assert requeued_jobs.remembered(tmp_path / "missing", 0) == {}


def test_a_job_slurmctld_no_longer_calls_failed_is_left_alone() -> None:
    # Accounting lags: sacct's newest run is FAILED, but slurmctld has the job PENDING or RUNNING again (a requeue
    # would end that run), or forgot it.
    on_node = [run(11, -40, "FAILED")]
    for now in ("PENDING", "RUNNING", ""):
        slurm = FakeScontrol()
        ok, log = requeue(FakeSacct(on_node, on_node), slurm, state_of=lambda job, s=now: s)
        assert ok and slurm.calls == [], now
        assert any(f"slurmctld says {now or 'nothing'} now" in entry for entry in log)


def test_a_job_on_two_drained_nodes_is_requeued_once_and_an_allocation_is_no_failure() -> None:
    on_node = [run(11, -40, "FAILED"), run(12, -40, "FAILED")]
    other = SlurmNode("prod-ib00-000002", FAILURE.state, FAILURE.reason, DRAINED, ("ib00",))
    slurm = FakeScontrol({"12": "Only batch jobs are accepted or processed"})
    log: list[str] = []
    assert failed_jobs.requeue_failed(slurm, FakeSacct(on_node, on_node), [FAILURE, other], WITHIN, log.append,
                                      now=AT + 60, state_of=failed_now)  # fmt: skip
    assert slurm.calls.count(("requeue", "11")) == 1


def test_squeue_is_asked_for_one_state_word(tmp_path: Path) -> None:
    tool = tmp_path / "squeue"
    tool.write_text('#!/bin/sh\necho "$*" > "$(dirname "$0")/asked"\necho FAILED\n')
    tool.chmod(0o755)
    assert failed_jobs.squeue_state("11", [str(tool)]) == "FAILED"
    assert (tmp_path / "asked").read_text().split() == ["--noheader", "--jobs=11", "--states=all", "--format=%T"]
    tool.write_text('#!/bin/sh\necho "slurm_load_jobs error: Invalid job id specified" >&2; exit 1\n')
    assert failed_jobs.squeue_state("11", [str(tool)]) == ""
    tool.write_text("#!/bin/sh\necho 'FAILED RUNNING'\n")
    assert failed_jobs.squeue_state("11", [str(tool)]) == ""
