"""The one client and reader of Slurm accounting (`sacct`) for ndfleet's programs: the controller's job export.

Every call goes through the bounded runner (timeout, output cap); a call that fails, hangs, says too much or answers
a line of another shape is a SacctError, never a guess. Times are asked for in UTC (TZ=UTC, SLURM_TIME_FORMAT=
standard: sacct prints Start and End as YYYY-MM-DDTHH:MM:SS in the local time zone, "Unknown" when there is none;
https://slurm.schedmd.com/sacct.html, "Start", "End", SLURM_TIME_FORMAT).

`--duplicates` shows every run of a requeued job: a requeue resets the job's submit time and starts a new record
under the same JobIDRaw, and without it sacct shows only the most recent (sacct.html, "Submit" and "-D").
"""

from __future__ import annotations

import calendar
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ndfleet_node.runner import run_tool
from ndfleet_node.scontrol import FAILED
from ndfleet_node.text import clip, decode, first_line

# One line per record: "JobIDRaw|Start|End|State" (--parsable2: "|" between fields, none at the end; --noheader).
FORMAT = "JobIDRaw,Start,End,State"
# sacct's JOB STATE CODES that put a job back in the queue or end it by a node failure (sacct.html, "JOB STATE
# CODES"): NF NODE_FAIL, RQ REQUEUED, PR PREEMPTED. The runs of any job with such a record are published.
RESTART_STATES = "NF,RQ,PR"
MAX_OUTPUT_BYTES = 1024 * 1024
_JOB = re.compile(r"\d{1,12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
_NO_TIME = frozenset({"Unknown", "None"})
# The state's first word ("CANCELLED by 1000" is CANCELLED); sacct's codes are upper-case words with "_".
_STATE = re.compile(r"([A-Z][A-Z_]{0,31})(?: by \d+)?")


class SacctError(RuntimeError):
    """sacct failed, hung, said too much, or answered something that is not a job record."""


@dataclass(frozen=True)
class JobRecord:
    job: str  # JobIDRaw
    start: float | None  # unix seconds; None before the run started
    end: float | None  # None while it runs (or never ran)
    state: str  # NODE_FAIL, REQUEUED, RUNNING, COMPLETED, ...


def _time(text: str, line_no: int, field: str) -> float | None:
    if text in _NO_TIME:
        return None
    if not _TIME.fullmatch(text):
        raise SacctError(f"sacct line {line_no}: {field} {clip(text, 40)!r} is not YYYY-MM-DDTHH:MM:SS or Unknown")
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))


def parse_records(text: str) -> list[JobRecord]:
    """Every line of `sacct --parsable2 --noheader --format JobIDRaw,Start,End,State`, in order; SacctError names
    the first line that is not one. Split on "\\n" only, as scontrol's listing."""
    out = []
    for line_no, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != 4:
            raise SacctError(f"sacct line {line_no}: {len(fields)} fields, not JobIDRaw|Start|End|State: "
                             f"{clip(line, 80)!r}")
        job, start, end, state = fields
        if not _JOB.fullmatch(job):
            raise SacctError(f"sacct line {line_no}: JobIDRaw {clip(job, 40)!r} is not a job number")
        word = _STATE.fullmatch(state)
        if not word:
            raise SacctError(f"sacct line {line_no}: State {clip(state, 40)!r} is not a Slurm job state")
        out.append(JobRecord(job, _time(start, line_no, "Start"), _time(end, line_no, "End"), word.group(1)))
    return out


class Sacct:
    def __init__(self, argv: Sequence[str] = ("sacct",), timeout_s: float = 10) -> None:
        self.argv = tuple(argv)
        self.timeout_s = timeout_s

    def records(self, *selection: str) -> list[JobRecord]:
        """Every allocation's record (no steps), every run (--duplicates), every user's, for `selection`."""
        args = ("--allusers", "--allocations", "--duplicates", "--parsable2", "--noheader", f"--format={FORMAT}",
                *selection)  # fmt: skip
        env = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
        result = run_tool([*self.argv, *args], self.timeout_s, env=env, max_output_bytes=MAX_OUTPUT_BYTES + 1)
        what = f"sacct {clip(' '.join(selection), 120)}"
        if not result.ok:
            raise SacctError(f"{what}: {clip(result.error, 300)}")
        if len(result.stdout) > MAX_OUTPUT_BYTES:
            raise SacctError(f"{what}: more than {MAX_OUTPUT_BYTES} bytes of output")
        said = decode(result.stderr)
        if m := FAILED.search(said):
            raise SacctError(f"{what}: exit 0 but says {first_line(said[m.start():])}")
        return parse_records(decode(result.stdout))

    def restarted_jobs(self, since: str) -> list[str]:
        """The jobs with a run that ended NODE_FAIL, REQUEUED or PREEMPTED since `since` (a sacct time such as
        now-7days), newest (highest JobIDRaw) first."""
        jobs = {r.job for r in self.records(f"--starttime={since}", "--endtime=now", f"--state={RESTART_STATES}")}
        return sorted(jobs, key=int, reverse=True)

    def runs(self, jobs: Sequence[str]) -> list[JobRecord]:
        """Every run of these jobs (with --jobs the window starts at the epoch: sacct.html, "-S")."""
        return self.records(f"--jobs={','.join(jobs)}") if jobs else []
