"""Set-up steps for the machine itself: NVMe RAID0, /etc/nccl.conf, fabric manager, peermem, DCGM."""

from __future__ import annotations

import glob
import os
import time

from ndfleet_node.names import NCCL_CONF_PATH
from ndfleet_node.setup import SetupContext, StepFailed


def _write_if_changed(ctx: SetupContext, path: str, content: str, mode: int = 0o644) -> bool:
    if ctx.read(path) == content:
        return False
    os.makedirs(os.path.dirname(ctx.path(path)), exist_ok=True)
    with open(ctx.path(path), "w", encoding="utf-8") as f:
        f.write(content)
    os.chmod(ctx.path(path), mode)
    return True


def _unused_nvme_disks(ctx: SetupContext) -> list[str]:
    """/dev/nvme*n1 without partitions, holders (an array) or a mount: the disks we may stripe."""
    mounted = {ln.split()[0] for ln in ctx.read("/proc/mounts").splitlines() if ln.split()}
    disks = []
    for dev in sorted(glob.glob(ctx.path("/dev/nvme*n1"))):
        name = os.path.basename(dev)
        sys_block = ctx.path(f"/sys/block/{name}")
        busy = bool(glob.glob(f"{sys_block}/holders/*")) or bool(glob.glob(f"{sys_block}/{name}p*"))
        if not busy and f"/dev/{name}" not in mounted:
            disks.append(f"/dev/{name}")
    return disks


def setup_nvme(ctx: SetupContext) -> str:
    nvme = ctx.config.mounts["nvme"]
    mnt, md = str(nvme["mount"]), f"/dev/md/{nvme['md_name']}"
    if ctx.mounted(mnt):
        return f"{mnt} is already mounted"
    if not os.path.exists(ctx.path(md)):
        ctx.run("mdadm", "--assemble", "--scan")  # after a reboot the array is on the disks, not yet assembled
    done = []
    if not os.path.exists(ctx.path(md)):
        disks = _unused_nvme_disks(ctx)
        if not disks:
            raise StepFailed(f"no unused local NVMe disk found; {mnt} not created")
        if len(disks) != int(nvme["count"]):
            ctx.log(f"ndfleet-setup: found {len(disks)} unused NVMe disks, expected {nvme['count']}; striping them")
        ctx.must("mdadm", "--create", md, "--level=0", f"--raid-devices={len(disks)}", "--homehost=any", "--run",
                 "--force", *disks)  # fmt: skip
        done.append(f"RAID0 {md} over {len(disks)} disks")
    if not ctx.run("blkid", "-o", "value", "-s", "TYPE", md).text.strip():
        ctx.must("mkfs.xfs", "-q", "-f", md)
        done.append("XFS created")
    os.makedirs(ctx.path(mnt), exist_ok=True)
    ctx.must("mount", "-o", "noatime", md, mnt)
    os.chmod(ctx.path(mnt), 0o1777)
    return ", ".join([*done, f"{md} mounted at {mnt}"])


def setup_nccl(ctx: SetupContext) -> str:
    source = f"{ctx.config.paths.get('config_dir', '/etc/ndfleet')}/nccl.conf"
    content = ctx.read(source)
    if not content:
        raise StepFailed(f"{source} is missing")
    if _write_if_changed(ctx, NCCL_CONF_PATH, content):
        return f"{NCCL_CONF_PATH} written"
    return f"{NCCL_CONF_PATH} is up to date"


def setup_fabricmanager(ctx: SetupContext) -> str:
    unit = "nvidia-fabricmanager.service"
    if ctx.run("systemctl", "is-active", "--quiet", unit).ok:
        return f"{unit} is active"
    started = ctx.run("systemctl", "enable", "--now", unit)
    wait = float(ctx.config.timeouts.get("fabricmanager_wait", 120))
    deadline = time.monotonic() + wait
    while not ctx.run("systemctl", "is-active", "--quiet", unit).ok:
        if time.monotonic() >= deadline:
            why = "" if started.ok else f" ({started.error})"
            raise StepFailed(f"{unit} is not active after {wait:g} s{why}")
        ctx.sleep(2)
    return f"{unit} started and active"


def setup_peermem(ctx: SetupContext) -> str:
    wrote = _write_if_changed(ctx, "/etc/modules-load.d/ndfleet-peermem.conf", "nvidia-peermem\n")
    listed = "listed in modules-load.d" if wrote else ""
    if any(ln.split()[:1] == ["nvidia_peermem"] for ln in ctx.read("/proc/modules").splitlines()):
        return ", ".join(filter(None, ["nvidia-peermem is loaded", listed]))
    ctx.must("modprobe", "nvidia-peermem")
    return ", ".join(filter(None, ["nvidia-peermem loaded", listed]))


def setup_dcgm(ctx: SetupContext) -> str:
    for unit in ("nvidia-dcgm.service", "dcgm.service"):
        if ctx.run("systemctl", "cat", unit).ok:
            if ctx.run("systemctl", "is-active", "--quiet", unit).ok:
                return f"{unit} is active"
            ctx.must("systemctl", "enable", "--now", unit)
            return f"{unit} started"
    return "DCGM is not installed; perf.dcgm will be skipped"
