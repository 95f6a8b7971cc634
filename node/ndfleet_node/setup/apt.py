"""Installing a package at set-up: one apt user of ndfleet's at a time, every wait bounded.

At a compute node's first boot three things may want apt at once: cloud-init and unattended-upgrades (dpkg's own
lock), ndfleet-slurm-setup (templates/slurm/ndfleet-slurm-setup.sh.j2, installing Slurm) and this set-up (BlobFuse2
for the blob containers). ndfleet's two take APT_LOCK for their apt work, the shell script with flock(1), this with
flock(2) on the same file (the same lock); every apt-get call also waits a bounded time for dpkg's lock
(`DPkg::Lock::Timeout`, apt.conf(5)). The Azure HPC image's package lists are those of its build (its
utils/clear_history.sh empties /var/cache, not /var/lib/apt/lists), so an install starts with `apt-get update`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from ndfleet_node.setup import SetupContext, StepFailed

# Shared with ndfleet-slurm-setup (ndfleet/slurm/machines.py renders it into the script); /run: gone at reboot.
APT_LOCK = "/run/ndfleet/apt.lock"
# Each try is `apt-get update` and `apt-get install`; apt also retries each download itself (Acquire::Retries).
APT_TRIES = 3
APT_RETRY_S = 2.0  # before the second try; doubled before each later one
LOCK_POLL_S = 0.5


@contextlib.contextmanager
def apt_lock(ctx: SetupContext, deadline: float) -> Iterator[None]:
    """Hold APT_LOCK (exclusive flock) until the block ends; StepFailed when it is still held at `deadline`."""
    # The machine's own /run, never the hardware stand-in's tree (NDFLEET_SYSROOT): ndfleet-slurm-setup takes the same
    # file. The node JSON may name another (tests do); found by the twin, where the two took different files.
    path = str(ctx.config.paths.get("apt_lock", APT_LOCK))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        started = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    waited = time.monotonic() - started
                    raise StepFailed(
                        f"{APT_LOCK} still held by another apt user (ndfleet-slurm-setup?) after {waited:.0f} s"
                    ) from None
                ctx.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


def install_package(ctx: SetupContext, package: str) -> str:
    """`apt-get update`, then `apt-get install PACKAGE`, under APT_LOCK; tried APT_TRIES times with a growing pause,
    and never past the set-up unit's own deadline. StepFailed names what apt said last."""
    deadline = ctx.unit_deadline()
    # Half of each call's limit (the runner's setup_step timeout) may go to waiting for dpkg's lock: apt then says
    # who holds it, instead of being killed by the runner.
    lock_s = max(1, int(float(ctx.config.timeouts.get("setup_step", 120)) // 2))
    opts = ("-q", "-o", f"DPkg::Lock::Timeout={lock_s}", "-o", "Acquire::Retries=3")
    errors: list[str] = []
    attempt, pause = 0, APT_RETRY_S
    with apt_lock(ctx, deadline):
        while attempt < APT_TRIES:
            attempt += 1
            update = ctx.run("apt-get", *opts, "update")
            install = ctx.run("apt-get", *opts, "-y", "install", package, env={"DEBIAN_FRONTEND": "noninteractive"})
            if install.ok:
                return f"{package} installed (attempt {attempt})"
            errors = [f"apt-get update: {update.error}"] if not update.ok else []
            errors.append(f"apt-get install {package}: {install.error}")
            if attempt == APT_TRIES or deadline - time.monotonic() <= pause:
                break
            ctx.log(f"ndfleet-setup: installing {package}: attempt {attempt} failed ({'; '.join(errors)}); "
                    f"retrying in {pause:.0f} s")  # fmt: skip
            ctx.sleep(pause)
            pause *= 2
    raise StepFailed(f"{package} could not be installed after {attempt} attempt(s): {'; '.join(errors)}")
