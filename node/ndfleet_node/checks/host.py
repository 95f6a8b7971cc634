"""Host checks: local NVMe disks, memory, vCPUs, mounts (all from /sys and /proc)."""

from __future__ import annotations

import glob

from ndfleet_node.checks import Context, Result, check, failed, passed
from ndfleet_node.parsers import ParseError
from ndfleet_node.parsers.procfs import cpu_count, mem_total_gib, mount_points


# impact: local NVMe disk missing: no dedicated category
@check("host.nvme", "quick", "HpcGenericFailure")
def host_nvme(ctx: Context) -> Result:
    want = int(ctx.hw.nvme_count)
    found = len(glob.glob(ctx.host_path("/sys/block/nvme*n1")))
    if found == want:
        return passed(str(found), str(want), f"all {want} local NVMe disks present")
    return failed(str(found), str(want), f"found {found} NVMe disks, expected {want}")


# impact: memory below the size's: no dedicated category
@check("host.memory", "quick", "HpcGenericFailure")
def host_memory(ctx: Context) -> Result:
    want = int(ctx.hw.memory_min_gib)
    expected = f">= {want} GiB"
    text = ctx.read("/proc/meminfo")
    try:
        gib = mem_total_gib(text or "")
    except ParseError:
        return failed("", expected, f"cannot read MemTotal from {ctx.host_path('/proc/meminfo')}")
    if gib >= want:
        return passed(f"{gib} GiB", expected, f"{gib} GiB of memory")
    return failed(f"{gib} GiB", expected, f"only {gib} GiB of memory, expected at least {want} GiB")


# impact: vCPU count: a VM configuration matter, not the host
@check("host.cpu", "quick", None)
def host_cpu(ctx: Context) -> Result:
    want = int(ctx.hw.vcpus)
    cpus = cpu_count(ctx.read("/proc/cpuinfo") or "")
    if cpus == want:
        return passed(str(cpus), str(want), f"{cpus} vCPUs online")
    return failed(str(cpus), str(want), f"found {cpus} vCPUs in {ctx.host_path('/proc/cpuinfo')}, expected {want}")


# impact: storage mounts: software or network
@check("host.mounts", "quick", None, setup_steps=("nvme", "blob", "lustre"))
def host_mounts(ctx: Context) -> Result:
    wanted = [str(m) for m in ctx.config.mounts.get("expected", [])]
    expected = " ".join(wanted)
    mounted = mount_points(ctx.read("/proc/mounts") or "")
    missing = [m for m in wanted if m not in mounted]
    if missing:
        listed = "".join(f" {m}" for m in missing)
        return failed(f"missing:{listed}", expected, f"not mounted:{listed} (see journalctl -u ndfleet-setup)")
    return passed("all mounted", expected, f"{len(wanted)} file systems mounted")
