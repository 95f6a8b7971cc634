"""`ndfleet-node slurm-export`: on the Slurm controller, each node's Slurm state as Prometheus metrics, so that
`ndfleet status` can join it with what Azure says about the node (docs/operations.md).

Runs `scontrol show node --oneliner` through ndfleet_node.scontrol (timeout, bounded output, one reader: a "State="
inside a reason does not count, records split on newline only), and writes node_exporter's textfile format atomically:

  ndfleet_slurm_node_state{slurm_node, state, reason, boot_version} 1
                                                           one series per node; state is one of names.SLURM_STATES,
                                                           boot_version the node's `boot-<version>` feature ("" none)
  ndfleet_slurm_export_success 0|1                         0: scontrol failed, hung or said something unreadable
  ndfleet_slurm_export_last_run_timestamp_seconds          when this file was written

and, from Slurm accounting (ndfleet_node.sacct), each run of the jobs that were requeued or ended by a node failure
in the last FOLLOW_DAYS days (a run that ended NODE_FAIL, REQUEUED or PREEMPTED), for `ndfleet goodput`'s per-job
ETTR and job-restart times (docs/goodput.md):

  ndfleet_slurm_job_run_start_seconds{slurm_job, run}          a started run's start (run 0 is the job's first)
  ndfleet_slurm_job_run_end_seconds{slurm_job, run, state}     an ended run's end and its accounting state
                                                               (a FAILED run this controller requeued: REQUEUED)
  ndfleet_slurm_job_export_success 0|1                     0: sacct failed, hung or said something unreadable
  ndfleet_slurm_job_export_left_out_jobs                   such jobs past MAX_JOBS (the oldest), not published

Bounded: at most MAX_JOBS jobs (the newest) and each job's last MAX_RUNS_PER_JOB runs, so at most
MAX_JOBS x MAX_RUNS_PER_JOB x 2 job series (ndfleet/monitoring/budget.py counts them).

`slurm_node` (not `node`) names the Slurm node: the Prometheus agent adds `node` (the controller's host name) to
every series it sends. A failed run writes success 0 and no node series, never stale states; the same for jobs.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ndfleet_node.metrics import escape_label, write_atomically
from ndfleet_node.names import (
    AWAITING_BURNIN_REASON,
    JOB_EXPORT_LEFT_OUT_METRIC,
    JOB_EXPORT_SUCCESS_METRIC,
    JOB_LABEL,
    JOB_RUN_END_METRIC,
    JOB_RUN_START_METRIC,
    SPARES_RESERVATION_PREFIX,
)
from ndfleet_node.requeued_jobs import REQUEUED_JOBS, remembered
from ndfleet_node.sacct import JobRecord, Sacct, SacctError
from ndfleet_node.scontrol import MAX_LIST_BYTES, Scontrol, SlurmError, parse_nodes

DEFAULT_OUT = "/var/lib/ndfleet/textfile/ndfleet_slurm.prom"
MAX_REASON_CHARS = 120
# Removed from label values: C0 and C1 control characters and the line and paragraph separators, which a reader
# of the labels (a terminal, `ndfleet status`'s table) could take for line breaks or escape sequences.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_BUSY = ("ALLOCATED", "MIXED", "COMPLETING")
# The job series' bounds: a job is followed for FOLLOW_DAYS after its last requeue or node failure (a week: the
# report's default period), the newest MAX_JOBS such jobs, each job's last MAX_RUNS_PER_JOB runs.
FOLLOW_DAYS = 7
MAX_JOBS = 50
MAX_RUNS_PER_JOB = 5
SACCT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class JobRuns:
    runs: tuple[tuple[int, JobRecord], ...]  # (run index, the run's record), started runs only
    left_out: int  # jobs past MAX_JOBS


def slurm_state(states: Sequence[str], reason: str, spare: bool = False) -> str:
    """One of names.SLURM_STATES for scontrol's State= words (base state plus flags, e.g. IDLE+DRAIN). `spare`: the
    node is in its island's spares reservation (ndfleet_node.spares): "spare" while it is idle and fit."""
    words = {s.upper() for s in states}
    drain = bool(words & {"DRAIN", "DRAINED", "DRAINING"})
    if drain and reason.startswith(AWAITING_BURNIN_REASON):
        return "awaiting_burnin"
    if words & {"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"}:
        return "powered_down"
    if "DOWN" in words:
        return "down"
    if drain:
        return "draining" if words & set(_BUSY) else "drained"
    if spare and "IDLE" in words and not words & set(_BUSY):
        return "spare"
    for word, state in (("ALLOCATED", "allocated"), ("MIXED", "mixed"), ("COMPLETING", "completing"),
                        ("IDLE", "idle")):
        if word in words:
            return state
    return "other"


def label(text: str) -> str:
    return escape_label(_UNSAFE.sub("", text))


def node_states(text: str, spares: frozenset[str] = frozenset()) -> list[tuple[str, str, str]]:
    """(node, state, reason) for every node of `scontrol show node --oneliner` (ndfleet_node.scontrol.parse_nodes:
    records split on "\n" only); lines without NodeName= or State= are skipped (a blank line, "No nodes in the
    system")."""
    out = []
    for node in parse_nodes(text).values():
        reason = _UNSAFE.sub("", node.reason)[:MAX_REASON_CHARS]
        out.append((node.name, slurm_state(sorted(node.flags), reason, node.name in spares), reason))
    return out


def job_runs(sacct: Sacct, requeued: Mapping[str, float] | None = None) -> JobRuns:
    """The started runs of the newest MAX_JOBS jobs requeued or ended by a node failure in the last FOLLOW_DAYS
    days, and of the `requeued` ones (job -> when the controller last requeued it after it failed on a broken node,
    ndfleet_node.failed_jobs), each job's last MAX_RUNS_PER_JOB; a run's index counts every run of its job in start
    order.

    A FAILED run of a `requeued` job that ended by its requeue is given the state REQUEUED: that is what happened
    to it. Accounting writes REQUEUED itself only when the requeue came while slurmctld still had the job
    completing; after that, the run stays FAILED, as a failed job that nobody requeued does (SchedMD
    src/slurmctld/job_mgr.c, `_job_requeue_op`). Without this a job waiting to start again would read as a job that
    failed and ended, and its restart would not count as one."""
    requeued = requeued or {}
    found = sacct.restarted_jobs(f"now-{FOLLOW_DAYS}days")
    jobs = sorted({*found, *requeued}, key=int, reverse=True)
    kept = jobs[:MAX_JOBS]
    by_job: dict[str, list[JobRecord]] = {}
    for record in sacct.runs(kept):
        at = requeued.get(record.job)
        if at is not None and record.state.upper() == "FAILED" and record.end is not None and record.end <= at:
            record = replace(record, state="REQUEUED")
        by_job.setdefault(record.job, []).append(record)
    out: list[tuple[int, JobRecord]] = []
    for job in kept:
        started = sorted((r for r in by_job.get(job, ()) if r.start is not None), key=lambda r: r.start or 0.0)
        out += list(enumerate(started))[-MAX_RUNS_PER_JOB:]
    return JobRuns(tuple(out), len(jobs) - len(kept))


def render_jobs(jobs: JobRuns | None) -> list[str]:
    lines = [
        f"# HELP {JOB_RUN_START_METRIC} When each run of a requeued or node-failed job started (unix seconds).",
        f"# TYPE {JOB_RUN_START_METRIC} gauge",
    ]
    for index, r in jobs.runs if jobs else ():
        lines.append(f'{JOB_RUN_START_METRIC}{{{JOB_LABEL}="{r.job}",run="{index}"}} {r.start:.0f}')
    lines += [
        f"# HELP {JOB_RUN_END_METRIC} When each such run ended (unix seconds), with its accounting state.",
        f"# TYPE {JOB_RUN_END_METRIC} gauge",
    ]
    for index, r in jobs.runs if jobs else ():
        if r.end is not None:
            labels = f'{JOB_LABEL}="{r.job}",run="{index}",state="{r.state.lower()}"'
            lines.append(f"{JOB_RUN_END_METRIC}{{{labels}}} {r.end:.0f}")
    lines += [
        f"# HELP {JOB_EXPORT_SUCCESS_METRIC} 1 when sacct answered and its answer was read.",
        f"# TYPE {JOB_EXPORT_SUCCESS_METRIC} gauge",
        f"{JOB_EXPORT_SUCCESS_METRIC} {0 if jobs is None else 1}",
        f"# HELP {JOB_EXPORT_LEFT_OUT_METRIC} Requeued or node-failed jobs past the export's cap, not published.",
        f"# TYPE {JOB_EXPORT_LEFT_OUT_METRIC} gauge",
        f"{JOB_EXPORT_LEFT_OUT_METRIC} {0 if jobs is None else jobs.left_out}",
    ]
    return lines


def node_versions(text: str) -> dict[str, str]:
    """node -> the boot version it registered with (its `boot-<version>` feature; "" without one), from the same
    `scontrol show node --oneliner` listing as node_states."""
    return {node.name: node.boot_version for node in parse_nodes(text).values()}


def render(
    states: Sequence[tuple[str, str, str]] | None, now: float, jobs: JobRuns | None = None,
    versions: Mapping[str, str] | None = None,
) -> str:  # fmt: skip
    """The textfile for one run; `states` None when scontrol could not be read, `jobs` when sacct could not.
    `versions`: each node's boot version (node_versions), a label of its one state series, so the series per node
    stay one ("" for a node without one)."""
    versions = versions or {}
    lines = [
        "# HELP ndfleet_slurm_node_state Each Slurm node's state as the controller sees it (state, reason, "
        "boot_version labels).",
        "# TYPE ndfleet_slurm_node_state gauge",
    ]
    for node, state, reason in states or ():
        lines.append(f'ndfleet_slurm_node_state{{slurm_node="{label(node)}",state="{state}",'
                     f'reason="{label(reason)}",boot_version="{label(versions.get(node, ""))}"}} 1')
    lines += [
        "# HELP ndfleet_slurm_export_success 1 when scontrol answered and its answer was read.",
        "# TYPE ndfleet_slurm_export_success gauge",
        f"ndfleet_slurm_export_success {0 if states is None else 1}",
        "# HELP ndfleet_slurm_export_last_run_timestamp_seconds When the controller last wrote these metrics.",
        "# TYPE ndfleet_slurm_export_last_run_timestamp_seconds gauge",
        f"ndfleet_slurm_export_last_run_timestamp_seconds {now:.3f}",
        *render_jobs(jobs),
    ]
    return "\n".join(lines) + "\n"


def spare_nodes(scontrol: Scontrol) -> frozenset[str]:
    """The nodes held in the islands' spares reservations (`ndfleet-spares-<island>`)."""
    out: set[str] = set()
    for name, reservation in scontrol.reservations().items():
        if name.startswith(SPARES_RESERVATION_PREFIX) and reservation.nodes:
            out.update(scontrol.hostnames(reservation.nodes))
    return frozenset(out)


def handle(args: argparse.Namespace) -> int:
    states: list[tuple[str, str, str]] | None = None
    versions: dict[str, str] = {}
    scontrol = Scontrol(args.scontrol, args.timeout)
    try:
        listing = scontrol.call("show", "node", "--oneliner", max_bytes=MAX_LIST_BYTES)
    except SlurmError as error:
        print(f"slurm-export: {error}", file=sys.stderr)
    else:
        try:
            spares = spare_nodes(scontrol)
        except SlurmError as error:
            # The node states still count; spares then read as idle until the next run.
            print(f"slurm-export: spares not read: {error}", file=sys.stderr)
            spares = frozenset()
        states = node_states(listing, spares)
        versions = node_versions(listing)
    jobs: JobRuns | None = None
    try:
        requeued = remembered(Path(args.requeued_jobs), time.time() - FOLLOW_DAYS * 86400)
        jobs = job_runs(Sacct(args.sacct, min(args.timeout, SACCT_TIMEOUT_S)), requeued)
    except SacctError as error:
        print(f"slurm-export: jobs not read: {error}", file=sys.stderr)
    write_atomically(Path(args.out), render(states, time.time(), jobs, versions))
    return 0 if states is not None and jobs is not None else 1


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r}: between 0 and 3600 seconds")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("slurm-export", help="on the controller: publish every node's Slurm state as metrics")
    p.add_argument("--out", default=DEFAULT_OUT, help="node_exporter textfile to write")
    p.add_argument("--scontrol", nargs="+", default=["scontrol"])
    p.add_argument("--sacct", nargs="+", default=["sacct"])
    p.add_argument("--requeued-jobs", default=REQUEUED_JOBS, help="the jobs the controller requeued (failed_jobs)")
    p.add_argument("--timeout", type=_seconds, default=30.0, help="seconds for the scontrol call")
    p.set_defaults(handler=handle)


def main(argv: Sequence[str] | None = None) -> int:
    """`python3 -m ndfleet_node.slurm_export` on the controller, which has no node program."""
    parser = argparse.ArgumentParser(prog="ndfleet-slurm-export")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["slurm-export", *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
