"""The Epilog's side of `ndfleet-node slurm-health` (slurm_health's docstring): its failure marker, its lock, and
which jobs' ends it does not check. Standard library only, as the rest of the node program."""

from __future__ import annotations

import fcntl
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ndfleet_node.names import BURNIN_RESERVATION_PREFIX, DRAIN_REASON_PREFIX
from ndfleet_node.report import read_regular

# A check id as it may appear in a drain reason (slurm_health reads it from here too).
CHECK_ID = re.compile(r"[A-Za-z0-9_.+-]{1,64}")
# The Epilog's failed checks, one line "ndfleet:<id>[,<id>...]", for the next periodic pass (kept across reboots: a
# Restart repair leaves Slurm's "Epilog error" drain, which this names).
EPILOG_MARKER = "/var/lib/ndfleet/epilog-failed"
MAX_EPILOG_MARKER_BYTES = 4096
BAD_MARKER = ("epilog-bad-marker",)


def write_epilog_failure(marker: Path, failed_checks: Sequence[str]) -> None:
    """Record the Epilog's failed checks for the next periodic pass. Best effort: the exit status already has Slurm
    drain the node, and a node drained "Epilog error" with no record is left drained (act)."""
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(DRAIN_REASON_PREFIX + ",".join(failed_checks) + "\n", encoding="utf-8")
    except OSError as error:
        print(f"ndfleet-slurm-health: {marker}: {error}", file=sys.stderr)


def read_epilog_failure(marker: Path) -> tuple[str, ...] | None:
    """The Epilog's failed checks (None: no marker). A marker this program cannot read or understand still says the
    Epilog failed: a failure named epilog-bad-marker, never a pass."""
    try:
        raw = read_regular(str(marker), MAX_EPILOG_MARKER_BYTES)
    except FileNotFoundError:
        return None
    except OSError:
        return BAD_MARKER
    line = raw.decode("utf-8", "replace").strip()
    if len(raw) > MAX_EPILOG_MARKER_BYTES or not line.startswith(DRAIN_REASON_PREFIX):
        return BAD_MARKER
    ids = line.removeprefix(DRAIN_REASON_PREFIX).split(",")
    if not all(CHECK_ID.fullmatch(i) for i in ids):
        return BAD_MARKER
    return tuple(dict.fromkeys(ids))


def burnin_job(environ: Mapping[str, str]) -> bool:
    """The job that ended is one of the burn-in's tests (slurmd gives the Epilog the job's SLURM_JOB_RESERVATION:
    SchedMD src/plugins/prep/script/prep_script_slurmd.c, _build_env)."""
    return environ.get("SLURM_JOB_RESERVATION", "").startswith(BURNIN_RESERVATION_PREFIX)


_held_locks: list[int] = []  # the Epilog's lock stays held until the process ends, as flock(1) holds it for its command


def take_lock(path: Path, wait_s: float) -> bool:
    """flock(2) on `path` (the periodic check's flock(1) takes the same lock), waiting up to `wait_s` seconds.
    A lock file that cannot be opened is no reason to skip the check: True."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        print(f"ndfleet-slurm-health: lock {path}: {error}", file=sys.stderr)
        return True
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _held_locks.append(fd)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return False
            time.sleep(0.2)


