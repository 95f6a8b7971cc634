"""The goodput report's job figures: each requeued or node-failed job's ETTR and the job-restart times, from the runs
the Slurm controller publishes from Slurm accounting (node/ndfleet_node/slurm_export.py; docs/goodput.md, "Jobs").

A run's start and end are the values of `ndfleet_slurm_job_run_start_seconds{slurm_job, run}` and
`ndfleet_slurm_job_run_end_seconds{slurm_job, run, state}`; a started run with no end seen was running at least until
its last sample + the step (a sample at t stands for [t, t + step), as for the node states), cut at the period's end.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ndfleet_node.names import JOB_LABEL, JOB_RUN_END_METRIC, JOB_RUN_START_METRIC

from ndfleet.goodput.stats import percentile
from ndfleet.monitoring.series import RESTART_CAUSES
from ndfleet.status.prometheus import QueryFailed, Series

# RESTART_CAUSES (ndfleet.monitoring.series, shared with the dashboard): the run states that put the job back in the
# queue or ended it by a node failure (sacct's NODE_FAIL, REQUEUED, PREEMPTED, as the export writes them). The run
# after one is a restart, and a job whose last run ended so may still restart, so its ETTR is not known yet.
_JOB = re.compile(r"\d{1,12}")
_RUN = re.compile(r"\d{1,4}")
_STATE = re.compile(r"[a-z][a-z_]{0,31}")


@dataclass
class Run:
    start: float
    end: float | None = None  # None: no end seen
    state: str = ""  # the end's state; "" while running
    seen_until: float = 0.0  # the last sample of its start series + the step, cut at the period's end


@dataclass
class JobFigures:
    job: str
    runs: dict[int, Run]
    until: float

    @property
    def runs_not_seen(self) -> int:
        """Earlier runs the export no longer publishes (it keeps a job's last five): the job's start is unknown."""
        return min(self.runs)

    def _ordered(self) -> list[tuple[int, Run]]:
        return sorted(self.runs.items())

    def run_end(self, run: Run) -> float:
        return run.end if run.end is not None else min(self.until, run.seen_until)

    @property
    def first_start(self) -> float:
        return self._ordered()[0][1].start

    @property
    def last_end(self) -> float:
        return self.run_end(self._ordered()[-1][1])

    @property
    def run_s(self) -> float:
        return sum(max(0.0, self.run_end(r) - r.start) for _, r in self._ordered())

    @property
    def wall_s(self) -> float:
        return max(0.0, self.last_end - self.first_start)

    @property
    def waiting(self) -> bool:
        """Its last run ended by a node failure, a requeue or a preemption and no later run was seen."""
        return self._ordered()[-1][1].state in RESTART_CAUSES

    @property
    def ettr(self) -> float | None:
        """Run time / wall time from the first run's start to the last one's end; None when that cannot be known:
        earlier runs not published, or the job may still restart."""
        if self.runs_not_seen or self.waiting or not self.wall_s:
            return None
        return self.run_s / self.wall_s

    def restarts(self, since: float, until: float) -> list[tuple[str, float]]:
        """(cause, seconds from the run's end to the next run's start) for each run that ended in [since, until) by
        a restart cause and whose next run was seen."""
        out = []
        ordered = self._ordered()
        for (i, run), (j, after) in zip(ordered, ordered[1:], strict=False):
            if j == i + 1 and run.end is not None and run.state in RESTART_CAUSES and since <= run.end < until:
                out.append((run.state, after.start - run.end))
        return out


@dataclass
class JobReport:
    jobs: list[JobFigures]
    since: float
    until: float

    @property
    def restart_s(self) -> dict[str, list[float]]:
        """Cause -> the restart times of the runs that ended in the period."""
        out: dict[str, list[float]] = {}
        for j in self.jobs:
            for cause, seconds in j.restarts(self.since, self.until):
                out.setdefault(cause, []).append(seconds)
        return dict(sorted(out.items()))

    @property
    def ettr_overall(self) -> float | None:
        """Run time over wall time of the jobs whose ETTR is known (each job weighted by its wall time)."""
        known = [j for j in self.jobs if j.ettr is not None]
        wall = sum(j.wall_s for j in known)
        return sum(j.run_s for j in known) / wall if wall else None

    @property
    def waiting(self) -> int:
        return sum(j.waiting for j in self.jobs)


def _value(series: Series, name: str) -> tuple[float, float]:
    """The series' last value (a unix time, constant while published) and its last sample's time."""
    if not series.points:
        raise QueryFailed(f"the query API's answer holds a {name} series with no sample")
    at, text = series.points[-1]
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise QueryFailed(f"the query API's answer holds {name} {text[:40]!r}, not a unix time")
    return value, at


def _labels(series: Series, name: str, *, with_state: bool) -> tuple[str, int, str]:
    job, run, state = (series.labels.get(k, "") for k in (JOB_LABEL, "run", "state"))
    if not _JOB.fullmatch(job) or not _RUN.fullmatch(run) or (with_state and not _STATE.fullmatch(state)):
        shown = {k: series.labels.get(k, "")[:40] for k in (JOB_LABEL, "run", "state")}
        raise QueryFailed(f"the query API's answer holds a {name} series with labels {shown}, not a job's run")
    return job, int(run), state


def build_jobs(starts: Iterable[Series], ends: Iterable[Series], *, since: float, until: float,
               step_s: float) -> JobReport:  # fmt: skip
    """The job figures from the two range answers; QueryFailed names a series whose labels or value do not fit."""
    runs: dict[str, dict[int, Run]] = {}
    for s in starts:
        job, index, _ = _labels(s, JOB_RUN_START_METRIC, with_state=False)
        value, at = _value(s, JOB_RUN_START_METRIC)
        run = runs.setdefault(job, {}).setdefault(index, Run(value))
        run.seen_until = max(run.seen_until, at + step_s)
    ended: dict[tuple[str, int], tuple[float, float, str]] = {}
    for s in ends:
        job, index, state = _labels(s, JOB_RUN_END_METRIC, with_state=True)
        value, at = _value(s, JOB_RUN_END_METRIC)
        if (job, index) not in ended or at > ended[job, index][1]:
            ended[job, index] = (value, at, state)
    for (job, index), (value, _, state) in ended.items():
        if (started := runs.get(job, {}).get(index)) is not None:  # an end without its start tells nothing
            started.end, started.state = value, state
    jobs = [JobFigures(job, r, until) for job, r in sorted(runs.items(), key=lambda kv: int(kv[0]))]
    return JobReport(jobs, since, until)


def jobs_json(report: JobReport) -> Mapping[str, object]:
    def job(j: JobFigures) -> Mapping[str, object]:
        return {
            "job": j.job,
            "runs": len(j.runs),
            "runsNotSeen": j.runs_not_seen,
            "firstStart": j.first_start,
            "runSeconds": round(j.run_s, 3),
            "wallSeconds": round(j.wall_s, 3),
            "ettr": None if j.ettr is None else round(j.ettr, 4),
            "waitingToRestart": j.waiting,
            "restarts": [{"cause": c, "seconds": t} for c, t in j.restarts(report.since, report.until)],
        }

    known = [j for j in report.jobs if j.ettr is not None]
    return {
        "count": len(report.jobs),
        "runs": sum(len(j.runs) for j in report.jobs),
        "knownEttrRunSeconds": round(sum(j.run_s for j in known), 3),
        "knownEttrWallSeconds": round(sum(j.wall_s for j in known), 3),
        "ettrOverall": None if report.ettr_overall is None else round(report.ettr_overall, 4),
        "waitingToRestart": report.waiting,
        "restartSeconds": {c: {"count": len(t), "median": percentile(t, 50), "p95": percentile(t, 95)}
                           for c, t in report.restart_s.items()},  # fmt: skip
        "jobs": [job(j) for j in report.jobs],
    }
