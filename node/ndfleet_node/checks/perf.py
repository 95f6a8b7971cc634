"""Full-level checks: bandwidth against the profile's floors. They contend for the GPUs and HCAs, so they run
one after another (concurrent=False), each under its own timeout from the node JSON.

What the image holds is the image contract's (ndfleet/images/ubuntu-hpc-2204.json, docs/images.md): all_reduce_perf
and nvbandwidth are built against HPC-X's Open MPI and run only with HPC-X loaded (ndfleet_node.hpcx, the node
JSON's `burnin.hpcx_init`, the setting the burn-in uses too); the Ubuntu 22.04 HPC image has no nvbandwidth, so that
check is reported as not run (skip, with the reason), never failed for a tool the image lacks.
"""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

from ndfleet_node import hpcx
from ndfleet_node.checks import Context, Result, check, failed, failed_list, passed
from ndfleet_node.parsers import ParseError
from ndfleet_node.parsers.dcgm import parse_diag_json, parse_diag_text
from ndfleet_node.parsers.perf import parse_all_reduce_perf, parse_ib_write_bw, parse_nvbandwidth
from ndfleet_node.runner import ToolResult, run_tool

NVB_TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")
# Azure/azhpc-images installs nvbandwidth (/opt/nvidia/nvbandwidth, install_nvbandwidth_tool.sh) only from
# distros/ubuntu24.04 (GB200) and distros/azurelinux3.0, not on the Ubuntu 22.04 HPC image of ND H100 / H200 v5.
NVBANDWIDTH_ABSENT = "nvbandwidth is not on this image (Azure/azhpc-images installs it only for GB200 / Azure Linux)"


def _tool_path(ctx: Context) -> str:
    return (ctx.runner.env or os.environ).get("PATH", os.defpath)


def _under_hpcx(ctx: Context, argv: list[str]) -> list[str]:
    """`argv` run with HPC-X loaded (the burn-in's setting, `burnin.hpcx_init`); HpcxError when there is none."""
    pattern = hpcx.init_pattern(ctx.config.section("burnin"))
    if not pattern:
        return argv  # "" in the node JSON: the tool as PATH has it, nothing loaded
    hpcx.find_init(pattern)
    return hpcx.with_hpcx(pattern, argv)


def _hpcx_missing(tool: str, e: hpcx.HpcxError) -> str:
    return f"{e}; {tool} needs HPC-X's Open MPI libraries (libmpi.so.40), not run"


# One MPI rank per GPU (-g 1), as Azure runs it (azurehpc-health-checks azure_nccl_allreduce.nhc); as root (the
# Epilog, the boot validation): docs/slurm.md.
MPIRUN_OPTIONS = ("--map-by", "ppr:{gpus}:node", "--bind-to", "numa", "-mca", "coll_hcoll_enable", "0",
                  "--allow-run-as-root")  # fmt: skip
# The ended job's Slurm variables, which the Epilog inherits: with them Open MPI takes that job's allocation.
CLEARED_ENV = ("SLURM_",)
# A figure below the floor is measured again; the check fails only if both are below (the time bound counts both).
ALLREDUCE_MEASUREMENTS = 2


def allreduce_command(ctx: Context, size: int, gpus: int) -> list[str]:
    """mpirun of nccl-tests' all_reduce_perf, one rank per GPU of this node, with the NCCL test settings exported."""
    env_names = [str(k) for k in ctx.config.section("nccl").get("test_env", {})]
    exports = [arg for name in ["LD_LIBRARY_PATH", *env_names] for arg in ("-x", name)]
    return ["mpirun", "-np", str(gpus), *(o.format(gpus=gpus) for o in MPIRUN_OPTIONS), *exports,
            "all_reduce_perf", "-b", str(size), "-e", str(size), "-f", "2", "-g", "1", "-c", "1"]  # fmt: skip


# impact: 8-GPU all-reduce below floor inside the VM: NVLink/NVSwitch path
# The Epilog's floor as well (level "epilog"): a GPU slow with no clock-event reason (nothing the quick checks read)
# slows the 8-GPU ring, and its job's end is when the node is free to measure it (docs/operations.md).
@check("perf.nccl_allreduce", "epilog", "HpcGenericFailure", calls=(("nccl_allreduce", ALLREDUCE_MEASUREMENTS),),
       concurrent=False)  # fmt: skip
def perf_nccl_allreduce(ctx: Context) -> Result:
    floor = float(ctx.th.nccl_busbw_gbps)
    size, gpus = int(ctx.th.nccl_bytes), int(ctx.hw.gpu_count)
    expected = f">= {floor} GB/s busbw"
    env = {str(k): str(v) for k, v in ctx.config.section("nccl").get("test_env", {}).items()}
    if shutil.which("all_reduce_perf", path=_tool_path(ctx)) is None:
        return failed("", expected, "all_reduce_perf not found on PATH")
    try:
        argv = _under_hpcx(ctx, allreduce_command(ctx, size, gpus))
    except hpcx.HpcxError as e:
        return failed("", expected, _hpcx_missing("all_reduce_perf", e))
    what = f"{gpus}-GPU all-reduce of {size} bytes"
    measured: list[str] = []
    for _ in range(ALLREDUCE_MEASUREMENTS):
        r = ctx.run(argv, "nccl_allreduce", env=env, clear_prefixes=CLEARED_ENV)
        if not r.ok:
            return failed(", ".join(measured), expected, r.error)
        result = parse_all_reduce_perf(r.text)
        busbw = f"{result.avg_busbw_gbps:g}"
        if result.out_of_bounds or result.wrong:
            return failed(f"{busbw} GB/s", expected,
                          "all_reduce_perf found wrong results (Out of bounds values FAILED)")  # fmt: skip
        if result.avg_busbw_gbps >= floor:
            again = f" (measured again: {', '.join(measured)} GB/s before)" if measured else ""
            return passed(f"{busbw} GB/s", expected, f"{what}: busbw {busbw} GB/s{again}")
        measured.append(busbw)
    return failed(f"{measured[-1]} GB/s", expected,
                  f"{what}: busbw {measured[-1]} GB/s, expected >= {floor} GB/s (NVLink/NVSwitch); below it in each "
                  f"of {len(measured)} measurements ({', '.join(measured)} GB/s)")  # fmt: skip


def _ib_write_bw_pair(ctx: Context, i: int, device: str, env: dict[str, str]) -> ToolResult:
    """GPUDirect RDMA loopback on one HCA with GPU i: a server, and a client that retries until it listens."""
    timeout = ctx.timeout("ib_write_bw")
    port = int(ctx.th.ib_write_bw_base_port) + i
    args = ["ib_write_bw", "-d", device, "-i", str(ctx.hw.ib_port), "-s", str(ctx.th.ib_write_bw_bytes),
            "-F", "--report_gbits", f"--use_cuda={i}", "-p", str(port)]  # fmt: skip
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(max_workers=1) as pool:
        server = pool.submit(run_tool, args, timeout, env)
        client = ToolResult(tuple(args), None, b"", b"", True, 0.0, f"ib_write_bw did not answer within {timeout} s")
        while (left := deadline - time.monotonic()) > 0:
            client = run_tool([*args, "localhost"], left, env)
            if client.ok or b"Couldn't connect" not in client.stdout + client.stderr:
                break
            time.sleep(0.2)
        server.result()
    return client


# impact: GPUDirect RDMA bandwidth below floor on an HCA (NHC2003)
@check("perf.ib_write_bw", "full", "IBPerformance", calls=(("ib_write_bw", 1),), concurrent=False)
def perf_ib_write_bw(ctx: Context) -> Result:
    floor, size = float(ctx.th.ib_write_bw_gbps), int(ctx.th.ib_write_bw_bytes)
    expected = f">= {floor} Gb/s per HCA (GPUDirect loopback)"
    env = {**(ctx.runner.env or os.environ)}
    if shutil.which("ib_write_bw", path=_tool_path(ctx)) is None:
        return failed("", expected, "ib_write_bw not found on PATH")
    devices = list(ctx.hw.ib_devices)
    with ThreadPoolExecutor(max_workers=len(devices) or 1) as pool:
        clients = list(pool.map(lambda a: _ib_write_bw_pair(ctx, a[0], a[1], env), enumerate(devices)))
    bad, results = [], []
    for i, (device, r) in enumerate(zip(devices, clients, strict=True)):
        try:
            bw: float | None = parse_ib_write_bw(r.text, size)
        except ParseError:
            bw = None
        if bw is None:
            said = r.error or (r.text.strip().splitlines() or [""])[0]
            bad.append(f"{device} (GPU {i}): no result: {said}")
        elif bw < floor:
            bad.append(f"{device} (GPU {i}): {bw:g} Gb/s, expected >= {floor} Gb/s")
        results.append(f"{device}={'none' if bw is None else f'{bw:g}'}")
    if bad:
        return failed_list(bad, expected)
    return passed(" ".join(results), expected, f"every HCA at >= {floor} Gb/s")


# impact: host/device copy bandwidth below floor: PCIe or NVLink
@check("perf.nvbandwidth", "full", "HpcGenericFailure", calls=(("nvbandwidth", 1),), concurrent=False)
def perf_nvbandwidth(ctx: Context) -> Result:
    hd, dd = float(ctx.th.nvbw_host_device_gbps), float(ctx.th.nvbw_device_device_gbps)
    expected = f"host<->device >= {hd} GB/s, device<->device >= {dd} GB/s"
    if shutil.which("nvbandwidth", path=_tool_path(ctx)) is None:
        return Result("skip", "", expected, NVBANDWIDTH_ABSENT)
    try:
        argv = _under_hpcx(ctx, ["nvbandwidth", "-t", *NVB_TESTS])  # built with MPI (MULTINODE=1)
    except hpcx.HpcxError as e:
        return failed("", expected, _hpcx_missing("nvbandwidth", e))
    r = ctx.run(argv, "nvbandwidth")
    if not r.ok:
        return failed("", expected, r.error)
    matrices = parse_nvbandwidth(r.text)
    bad = []
    for test in NVB_TESTS:
        cells = matrices.get(test)
        if not cells:
            bad.append(f"no result for {test}")
            continue
        for (row, col), v in sorted(cells.items()):
            if test == "device_to_device_memcpy_read_ce":
                if v < dd:
                    bad.append(f"GPU {row} <- GPU {col}: {v:g} GB/s, expected >= {dd}")
            elif v < hd:
                direction = "host->device" if test.startswith("host") else "device->host"
                bad.append(f"{direction} GPU {col}: {v:g} GB/s, expected >= {hd}")
    if bad:
        return failed_list(bad, expected)
    return passed("within floors", expected, "host<->device and device<->device bandwidth above the floors")


# impact: DCGM diagnostic failed (NHC2020)
@check("perf.dcgm", "full", "HpcGpuDcgmDiagFailure", calls=(("dcgm_diag", 1),), concurrent=False)
def perf_dcgm(ctx: Context) -> Result:
    level = int(ctx.config.validation.get("dcgm_level", 0))
    expected = f"dcgmi diag -r {level} passes"
    if level == 0:
        return Result("skip", "", expected, "skipped: health.dcgmLevel is 0 for this stack")
    if shutil.which("dcgmi", path=_tool_path(ctx)) is None:
        return Result("skip", "", expected, "skipped: DCGM (dcgmi) is not installed on this image")
    r = ctx.run(["dcgmi", "diag", "-r", str(level), "-j"], "dcgm_diag")
    if r.timed_out:
        return failed("", expected, r.error)
    try:
        tests = parse_diag_json(r.text)
    except ParseError:
        try:
            tests = parse_diag_text(r.text)
        except ParseError as e:
            return failed("", expected, r.error or str(e))
    bad = [f"{t.name}: {t.result}" + (f" - {t.detail}" if t.detail else "") for t in tests if t.failed]
    if bad:
        return Result("fail", bad[0], expected, f"dcgmi diag -r {level}: {'; '.join(bad)}")
    if not r.ok:
        return failed("", expected, r.error)
    return passed("pass", expected, f"dcgmi diag -r {level} passed")
