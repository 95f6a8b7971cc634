"""Run a round's all_reduce_perf tests with mpirun (hostfile mode) or srun (Slurm mode): command lines, parallel
runs, timeouts, verdict per test.

Each test runs as `mpirun` (Open MPI / HPC-X syntax) in a new session, so the whole process tree (mpirun, its
ssh / prted launchers and the ranks) is one process group: when the test outlives its timeout the group gets
SIGTERM, then SIGKILL after a grace period, and the test counts as hung. Output goes to a file, not a pipe, so
a straggler that keeps a descriptor open can never block the reader.

Why not `ndfleet_node.runner` (the validator's runner): its `Runner` runs one call per tool name at a time (a
round runs many `mpirun`s at once), and `run_tool` kills with SIGKILL at once, where mpirun gets SIGTERM first to
take its remote ranks down; and an interrupted burn-in must stop every test still running (`stop_all`).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ndfleet_node import hpcx
from ndfleet_node.burnin.parser import parse_nccl_test_output
from ndfleet_node.burnin.planner import TestResult, TestSpec
from ndfleet_node.burnin.settings import BurninSettings


def env_for(settings: BurninSettings, test: TestSpec) -> dict[str, str]:
    env = dict(settings.nccl_env)
    env.update(settings.island_env if test.phase == "island" else settings.pair_env)
    return env


def all_reduce_perf_args(settings: BurninSettings, level: str) -> list[str]:
    """One message size (`-b S -e S`), one GPU per rank (`-g 1`), every result checked (`-c 1`, the `#wrong` column)."""
    size = str(settings.message_bytes)
    return [
        "-b", size, "-e", size, "-f", "2", "-g", "1",
        "-w", str(settings.warmup_iters), "-n", str(settings.iters[level]), "-c", "1",
    ]  # fmt: skip


def mpirun_command(settings: BurninSettings, test: TestSpec, level: str) -> list[str]:
    """`mpirun -np N -H a:8,b:8 ... -x NCCL_...=... all_reduce_perf -b S -e S ...` for one test.

    One rank per GPU (`--map-by ppr:G:node`); `-x` exports each NCCL and MPI setting to the remote ranks, and
    `mpirun_args` carry Azure's flags (`-x LD_LIBRARY_PATH` among them: HPC-X's libraries on the remote ranks).
    """
    gpus = settings.gpus_per_node
    cmd = [
        settings.mpirun,
        "-np",
        str(gpus * len(test.hosts)),
        "-H",
        ",".join(f"{h}:{gpus}" for h in test.hosts),
        "--map-by",
        f"ppr:{gpus}:node",
        "--bind-to",
        "numa",
        *settings.mpirun_args,
    ]
    for name, value in sorted({**settings.mpi_env, **env_for(settings, test)}.items()):
        cmd += ["-x", f"{name}={value}"]
    return [*cmd, settings.all_reduce_perf, *all_reduce_perf_args(settings, level)]


# Slurm's mpi/pmix plugin dlopen()s libpmix where srun runs (SchedMD/slurm src/plugins/mpi/pmix/mpi_pmix.c), and
# Microsoft's slurm-smd packages do not depend on PMIx (SchedMD's debian/control): the controller and login nodes,
# plain Ubuntu images, have none, and an `srun --mpi=pmix` started there fails to load the plugin. The compute
# nodes' HPC image has PMIx (docs/images.md). So the controller starts one plain step (--mpi=none) on the test's
# first node, and that node starts the test's PMIx step inside the same allocation. The inner srun must not read
# the outer step's SLURM_* settings as its own (SLURM_NTASKS=1 would be -n 1): they are dropped, the job id kept.
ON_FIRST_NODE = 'j=$SLURM_JOB_ID; for v in $(compgen -v SLURM_); do unset "$v"; done; exec "$0" --jobid="$j" "$@"'


def srun_command(settings: BurninSettings, test: TestSpec, level: str, reservation: str, partition: str) -> list[str]:
    """`salloc --reservation=R -w a,b -N 2 --exclusive ... srun --nodes=1 --mpi=none ... srun --overcommit
    --ntasks-per-node=8 --mpi=pmix ...`: the allocation from here, the PMIx step from the first node (ON_FIRST_NODE).

    One task per GPU, PMIx wires up MPI (no ssh, no mpirun); each task loads HPC-X on its own node first
    (`hpcx.with_hpcx`). `--time` makes Slurm end the step a minute after the burn-in's own timeout even if srun
    itself is killed; `--kill-on-bad-exit` ends the test when one rank dies.
    """
    gpus = settings.gpus_per_node
    timeout_min = math.ceil(timeout_for(settings, test, level) / 60) + 1
    # The whole nodes first (salloc, exclusive, every GPU), then one task per GPU inside that allocation with
    # --overcommit: the ranks drive GPUs, not CPUs, so a node whose Slurm CPU count is below its GPU count (core
    # specialisation, or the twin's small machines) still runs them; a job allocation would refuse that. --overlap:
    # the test's step shares the first node with the step that started it.
    salloc = os.path.join(os.path.dirname(settings.srun), "salloc")
    cmd = [
        salloc, f"--reservation={reservation}", f"--partition={partition}", "-w", ",".join(test.hosts),
        "-N", str(len(test.hosts)), f"--gpus-per-node={gpus}", "--exclusive", f"--time={timeout_min}",
        settings.srun, "--nodes=1", "--ntasks=1", f"--nodelist={test.hosts[0]}", "--mpi=none", "--overlap",
        "/bin/bash", "-c", ON_FIRST_NODE,
        settings.srun, "--overlap", "--overcommit", "-N", str(len(test.hosts)), f"--ntasks-per-node={gpus}",
        "--mpi=pmix", "--kill-on-bad-exit=1",
    ]  # fmt: skip
    task = [settings.all_reduce_perf, *all_reduce_perf_args(settings, level)]
    return cmd + (hpcx.with_hpcx(settings.hpcx_init, task) if settings.hpcx_init else task)


def srun_env(settings: BurninSettings, test: TestSpec, base: dict[str, str]) -> dict[str, str]:
    """srun exports its own environment to the tasks (`--export=ALL`, the default): the NCCL and MPI settings."""
    # mpirun_args' `-mca NAME VALUE` in Open MPI's environment form, OMPI_MCA_NAME=VALUE (no mpirun reads the flags
    # here); launcher-only ones (`plm_*`: how mpirun spawns) do not apply.
    a = settings.mpirun_args
    mca = {f"OMPI_MCA_{a[i + 1]}": a[i + 2] for i in range(len(a) - 2) if a[i] == "-mca" and a[i + 1][:4] != "plm_"}
    return {**base, **mca, **settings.mpi_env, **env_for(settings, test)}


def expected_duration_s(settings: BurninSettings, vms: int, floor_gbps: float, level: str) -> float:
    """How long the data part of one test takes when its busbw is exactly the floor.

    nccl-tests runs, for the one message size, the warm-up iterations once, then the timed iterations out of place
    and in place, each followed by one checked run (`-c 1`; NVIDIA/nccl-tests `src/common.cu`, `TimeTest` /
    `BenchTime`). One all-reduce of S bytes takes S / algbw, with algbw = busbw x r / (2 (r - 1)) for r ranks
    (nccl-tests `doc/PERFORMANCE.md`).
    """
    ranks = vms * settings.gpus_per_node
    algbw_gbps = floor_gbps * ranks / (2 * (ranks - 1)) if ranks > 1 else floor_gbps
    runs = settings.warmup_iters + 2 * (settings.iters[level] + 1)
    return runs * settings.message_bytes / (algbw_gbps * 1e9)


def timeout_for(settings: BurninSettings, test: TestSpec, level: str) -> int:
    """The test's expected duration at its floor plus the launch allowance (whole seconds, rounded up): a hung
    pair costs about a minute, not the five a fixed timeout gave it; `--test-timeout` overrides it."""
    if settings.timeout_override_s is not None:
        return settings.timeout_override_s
    vms = len(test.hosts)
    launch = settings.launch_allowance_s + settings.launch_allowance_per_node_s * vms
    return math.ceil(launch + expected_duration_s(settings, vms, test.floor_gbps, level))


@dataclass(frozen=True)
class ProcessRun:
    returncode: int | None  # None: killed at the timeout
    output: str
    duration_s: float


def kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the test's process group, then SIGKILL what is left after `grace_s`."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            # The leader is gone; members of its group may not be: one more SIGKILL for them.
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
        return


# Process groups of the tests running now: an interrupted burn-in (Ctrl-C) stops them all (`stop_all`), since
# each runs in its own session and would not see the terminal's SIGINT.
_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()
# Set by stop_all: a test started after it looked (Ctrl-C between Popen and _LIVE) is stopped by its own thread.
_STOP = threading.Event()


def stop_all(grace_s: float = 5.0) -> None:
    _STOP.set()
    with _LIVE_LOCK:
        live = list(_LIVE)
    for proc in live:
        kill_group(proc, grace_s)


def run_bounded(
    cmd: Sequence[str], timeout_s: float, grace_s: float, workdir: Path, env: dict[str, str] | None = None
) -> ProcessRun:
    """Run `cmd` in its own process group; kill the group at the timeout. Never raises for the command's sake."""
    start = time.monotonic()
    with tempfile.NamedTemporaryFile(dir=workdir, prefix="test-", suffix=".out", delete=False) as out:
        out_path = Path(out.name)
        try:
            proc = subprocess.Popen(
                list(cmd), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env=env,
            )
        except OSError as exc:
            return ProcessRun(127, f"cannot start {cmd[0]}: {exc}", time.monotonic() - start)
        with _LIVE_LOCK:
            _LIVE.add(proc)
        try:
            if _STOP.is_set():
                raise subprocess.TimeoutExpired(cmd, 0)
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc, grace_s)
            code = None
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
    output = read_bounded(out_path)
    out_path.unlink(missing_ok=True)
    return ProcessRun(code, output, time.monotonic() - start)


# One test's output: nccl-tests prints a few KiB for one message size, NCCL_DEBUG=INFO some more per rank. Only the
# last this many bytes are read (the table and its trailers come last): a flood is never read whole.
MAX_OUTPUT_BYTES = 2 * 1024 * 1024


def read_bounded(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - MAX_OUTPUT_BYTES))
        return f.read(MAX_OUTPUT_BYTES).decode(errors="replace")


def judge(test: TestSpec, run: ProcessRun, timeout_s: float) -> TestResult:
    """The test's outcome from what the process did and printed."""
    if run.returncode is None:
        return TestResult(test, "hang", None, 0, f"no result within {timeout_s:g} s; process group killed",
                          run.duration_s)  # fmt: skip
    parsed = parse_nccl_test_output(run.output)
    busbw = parsed.busbw
    if parsed.problems:
        # A figure that is not a number (nan, inf, 1.2.3, 10^5000) cannot clear a floor: fail, and say which.
        return TestResult(test, "unreadable", None, parsed.wrong,
                          f"unreadable nccl-tests output: {'; '.join(parsed.problems)[:300]}",
                          run.duration_s)  # fmt: skip
    if parsed.complete and busbw is not None:
        if parsed.wrong > 0:
            return TestResult(test, "wrong", busbw, parsed.wrong, f"nccl-tests found {parsed.wrong} wrong values",
                              run.duration_s)  # fmt: skip
        if busbw < test.floor_gbps:
            return TestResult(test, "slow", busbw, 0, f"busbw {busbw:.2f} GB/s < floor {test.floor_gbps:g} GB/s",
                              run.duration_s)  # fmt: skip
        if run.returncode == 0:
            return TestResult(test, "pass", busbw, 0, f"busbw {busbw:.2f} GB/s", run.duration_s)
    tail = " | ".join(line.strip() for line in run.output.strip().splitlines()[-3:])[:300]
    return TestResult(test, "error", busbw, parsed.wrong,
                      f"mpirun exit {run.returncode}, no complete result: {tail or 'no output'}",
                      run.duration_s)  # fmt: skip


RunTest = Callable[[TestSpec], TestResult]


def mpirun_executor(settings: BurninSettings, level: str, workdir: Path) -> RunTest:
    """A function that runs one test for real (HPC-X's mpirun, when the node JSON names HPC-X) and judges it."""

    def run(test: TestSpec) -> TestResult:
        timeout = timeout_for(settings, test, level)
        cmd = mpirun_command(settings, test, level)
        if settings.hpcx_init:
            cmd = hpcx.with_hpcx(settings.hpcx_init, cmd)
        return judge(test, run_bounded(cmd, timeout, settings.kill_grace_s, workdir), timeout)

    return run


def srun_executor(settings: BurninSettings, level: str, workdir: Path, reservation: str, partition: str) -> RunTest:
    """A function that runs one test as a Slurm job step in the burn-in's reservation and judges it."""
    base = dict(os.environ)

    def run(test: TestSpec) -> TestResult:
        timeout = timeout_for(settings, test, level)
        cmd = srun_command(settings, test, level, reservation, partition)
        proc = run_bounded(cmd, timeout, settings.kill_grace_s, workdir, srun_env(settings, test, base))
        return judge(test, proc, timeout)

    return run


def run_round(tests: Sequence[TestSpec], run_test: RunTest, max_parallel: int = 0) -> list[TestResult]:
    """All tests of a round at once (they share no host), at most `max_parallel` when set."""
    if not tests:
        return []
    workers = len(tests) if max_parallel <= 0 else min(max_parallel, len(tests))
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        return list(pool.map(run_test, tests))
    except BaseException:  # Ctrl-C: stop every running test's process group, then let the interrupt through
        pool.shutdown(wait=False, cancel_futures=True)
        stop_all()
        raise
    finally:
        pool.shutdown(wait=True)
