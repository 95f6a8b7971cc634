"""The jobs the controller requeued after they failed on a broken node (ndfleet_node.failed_jobs), one
"<job id> <unix seconds>" a line, oldest first: accounting may keep such a job's run FAILED, so the controller's job
series (ndfleet_node.slurm_export) follow these jobs by this note. Standard library only, and nothing else of the
node program: the exporter imports it."""

from __future__ import annotations

import os
from pathlib import Path

# The jobs requeued: "<job id> <unix seconds>" a line, oldest first, the newest MAX_REMEMBERED kept.
REQUEUED_JOBS = "/var/lib/ndfleet/requeued-jobs"
MAX_REMEMBERED = 500
_MAX_FILE_BYTES = MAX_REMEMBERED * 40


def remembered(path: Path, since: float) -> dict[str, float]:
    """The jobs requeued here since `since` (unix seconds), newest job first, each with its latest requeue's time;
    lines of another shape are skipped, and a missing, unreadable or oversized file is no job (the job series do
    without)."""
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_FILE_BYTES + 1)
    except OSError:
        return {}
    if len(data) > _MAX_FILE_BYTES:
        return {}
    jobs: dict[str, float] = {}
    for line in data.decode("ascii", "replace").splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and len(fields[0]) <= 12 and fields[1].isdigit():
            jobs[fields[0]] = max(float(fields[1]), jobs.get(fields[0], 0.0))
    return {job: jobs[job] for job in sorted((j for j, at in jobs.items() if at >= since), key=int, reverse=True)}


def remember(path: Path, job: str, at: float) -> None:
    """Add the job to the file (written whole: a temporary file renamed), keeping the newest MAX_REMEMBERED."""
    try:
        with path.open("rb") as f:
            lines = f.read(_MAX_FILE_BYTES).decode("ascii", "replace").splitlines()
    except OSError:
        lines = []
    lines = [*lines, f"{job} {int(at)}"][-MAX_REMEMBERED:]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{line}\n" for line in lines), encoding="ascii")
    os.replace(tmp, path)
