"""On the controller: requeue a batch job that failed on a node the health check then took out for a hardware fault.

Slurm requeues a batch job when a node under it fails or is set DOWN (NODE_FAIL), not when the job ends on its own.
A GPU that falls off the bus or an uncorrectable ECC error kills the job's processes; `srun --kill-on-bad-exit`
ends the step, the batch script exits non-zero and the job ends FAILED before the node's health check (the Epilog at
the job's end, or the next HealthCheckInterval) drains it. The job never asked to die, and its checkpoint is where
the last one was: it is requeued as if the node had failed under it.

A job is requeued when its newest run ended FAILED on the node within `within_s` before the node's hardware failure
drain (host_ledger.hardware_failure: the health check's check ids or a burn-in verdict against the host, whether or
not the node's physical host is known; a node that hung is set DOWN under its jobs, which Slurm requeues itself).
`scontrol requeue` refuses a job submitted `--no-requeue` (sbatch(1): "Specifies that the batch job should never be
requeued under any circumstances") and an allocation that is no batch job (salloc, the burn-in's tests); both are
logged, not retried. Accounting may lag slurmctld, and `scontrol requeue` would end a run that started again: the
job is requeued only while slurmctld itself still says FAILED (`squeue --states=all -o %T`), and once per pass.
Accounting says which jobs ran on the node and how they ended (sacct --nodelist --state FAILED, ndfleet_node.sacct);
slurmctld must still hold the job (MinJobAge, ndfleet.slurm.conf.min_job_age_s). A job that failed for its own
reasons on a node that broke within the window is requeued once too: Slurm's MaxBatchRequeue (5 by default) bounds
a job that keeps failing.

Requeued while slurmctld still has the job completing (its epilog running), accounting writes the run REQUEUED
(seen in the twin); requeued once it has completed, the run stays FAILED: a completed job's requeue writes no
record of its own (SchedMD src/slurmctld/job_mgr.c, `_job_requeue_op`), and sacct cannot tell it from a job that
failed and was never restarted. Each requeue is noted (ndfleet_node.requeued_jobs)
for the controller's job series (ndfleet_node.slurm_export), so that `ndfleet goodput` counts the restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ndfleet_node.host_ledger import hardware_failure, stamp_s
from ndfleet_node.requeued_jobs import remember
from ndfleet_node.runner import run_tool
from ndfleet_node.sacct import JobRecord, Sacct, SacctError
from ndfleet_node.scontrol import Scontrol, SlurmError, SlurmNode

# scontrol's answer for a job that may not be requeued (ESLURM_DISABLED, "Requested operation is presently disabled").
NOT_REQUEUABLE = "presently disabled"
# Answers that leave nothing to do (SchedMD src/common/slurm_errno.c): no batch job (ESLURM_BATCH_ONLY), requeued
# already (ESLURM_JOB_PENDING), forgotten by slurmctld (ESLURM_INVALID_JOB_ID).
NOTHING_TO_DO = ("Only batch jobs are accepted", "Job is pending execution", "Invalid job id specified")
# A drain stamp and sacct's End are whole seconds, the drain written after the job ended.
CLOCK_SLACK_S = 5


def _sacct_time(at: float) -> str:
    """A sacct -S/-E time in UTC (ndfleet_node.sacct asks with TZ=UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))


def newest_runs(records: Sequence[JobRecord]) -> dict[str, JobRecord]:
    """Each job's newest run: sacct --duplicates lists a job's runs oldest first."""
    out: dict[str, JobRecord] = {}
    for record in records:
        out[record.job] = record
    return out


def failed_within(records: Sequence[JobRecord], drained_at: float, within_s: int) -> list[str]:
    """The jobs whose newest run ended FAILED in [drained_at - within_s, drained_at + CLOCK_SLACK_S], by number."""
    jobs = [r.job for r in newest_runs(records).values() if r.state == "FAILED" and r.end is not None
            and drained_at - within_s <= r.end <= drained_at + CLOCK_SLACK_S]  # fmt: skip
    return sorted(jobs, key=int)


def squeue_state(job: str, argv: Sequence[str] = ("squeue",), timeout_s: float = 30) -> str:
    """slurmctld's state of the job now ("FAILED", "PENDING", ...); "" when it cannot say (the job forgotten, squeue
    failed or answered something that is not one state word)."""
    result = run_tool([*argv, "--noheader", f"--jobs={job}", "--states=all", "--format=%T"], timeout_s,
                      max_output_bytes=256)  # fmt: skip
    word = result.stdout.decode("ascii", "replace").strip() if result.ok else ""
    return word if word.isalpha() and word.isupper() and len(word) <= 32 else ""


def requeue_failed(slurm: Scontrol, sacct: Sacct, nodes: Sequence[SlurmNode], within_s: int,
                   log: Callable[[str], None], now: float | None = None, requeued: Path | None = None,
                   state_of: Callable[[str], str] = squeue_state) -> bool:  # fmt: skip
    """Requeue the jobs that failed on each node drained for a hardware failure lately; False when a call failed
    (tried again at the next run)."""
    now = time.time() if now is None else now
    ok = True
    done: set[str] = set()  # requeued in this pass: a job on two drained nodes is requeued once
    for failure in filter(hardware_failure, nodes):
        drained_at = stamp_s(failure.reason_time)
        if drained_at is None or now - drained_at > within_s + 2 * 60:
            continue  # an old drain: its jobs were dealt with (or forgotten by slurmctld) long ago
        try:
            # The runs that failed on the node, then every run of those jobs: a job requeued already has a newer run,
            # which may run on other nodes (and must not be requeued again: that would end it).
            on_node = sacct.records(f"--nodelist={failure.name}", "--state=FAILED",
                                    f"--starttime={_sacct_time(drained_at - within_s)}",
                                    f"--endtime={_sacct_time(drained_at + CLOCK_SLACK_S)}")  # fmt: skip
            candidates = failed_within(on_node, drained_at, within_s)
            jobs = failed_within(sacct.runs(candidates), drained_at, within_s) if candidates else []
        except SacctError as error:
            log(f"{failure.name}: cannot read the jobs that failed on it: {error}")
            ok = False
            continue
        for job in jobs:
            if job in done:
                continue
            if (state := state_of(job)) != "FAILED":
                log(f"{failure.name}: job {job} failed on it; slurmctld says {state or 'nothing'} now: left as it is")
                continue
            try:
                slurm.call("requeue", job)
            except SlurmError as error:
                if NOT_REQUEUABLE in str(error):
                    log(f"{failure.name}: job {job} failed on it and was submitted --no-requeue: left as it is")
                    continue
                if any(words in str(error) for words in NOTHING_TO_DO):
                    log(f"{failure.name}: job {job} failed on it; not requeued: {error}")
                    continue
                log(f"{failure.name}: job {job} failed on it; requeue failed: {error}")
                ok = False
                continue
            done.add(job)
            log(f"{failure.name}: job {job} failed on it before it was drained ({failure.reason}): requeued")
            if requeued is not None:
                try:
                    remember(requeued, job, now)
                except OSError as error:
                    log(f"{requeued}: cannot note job {job}'s requeue for the job series: {error}")
    return ok
