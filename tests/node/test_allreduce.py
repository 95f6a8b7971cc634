"""The validator's 8-GPU all-reduce (`perf.nccl_allreduce`), in-process on the fake node (tests/fakes): how it is
launched, in which environment, and how a figure below the floor is confirmed.

- Launched as the Azure references launch it: HPC-X's `mpirun -np 8 ... all_reduce_perf ... -g 1`, one rank per GPU
  (Azure/azurehpc-health-checks customTests/azure_nccl_allreduce.nhc), with --allow-run-as-root (the Epilog and the
  boot validation run as root; the fake mpirun, tests/fakes/lib/mpirun-local, refuses root without it as Open MPI's
  does).
- Without the ended job's Slurm variables, which slurmd gives its Epilog (SchedMD prep_script_slurmd.c): with
  SLURM_JOBID set, Open MPI takes the job's allocation instead of this node (the fake mpirun stops, as Open MPI does
  without SLURM_TASKS_PER_NODE).
- A figure below the floor is measured again, and the check fails only if that is below too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node import hpcx
from ndfleet_node.checks import Context, check_budget_s, load_all
from ndfleet_node.checks.perf import ALLREDUCE_MEASUREMENTS, perf_nccl_allreduce
from ndfleet_node.config import parse
from ndfleet_node.runner import Runner

from ndfleet.nodefiles.nodeconfig import node_config
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.fakes.node import FAKE_HPCX_INIT, FAKES, build_sysroot, hermetic_path

# What slurmd puts in an Epilog's environment (SchedMD src/plugins/prep/script/prep_script_slurmd.c, _build_env, at
# commit 04778b4dee74): the ended job's id and nodes among them.
EPILOG_ENV = {"SLURM_JOBID": "42", "SLURM_JOB_ID": "42", "SLURM_NODELIST": "nd-ib00000000,nd-ib00000001",
              "SLURM_JOB_NODELIST": "nd-ib00000000,nd-ib00000001", "SLURM_JOB_NUM_NODES": "2",
              "SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "SLURMD_NODENAME": "nd-ib00000000"}  # fmt: skip


@pytest.fixture(scope="module")
def node_json() -> dict[str, Any]:
    spec = load_spec(load_stack("prod").ndfleet_config, "prod")
    doc = node_config(spec, spec.islands[0])
    doc["burnin"]["hpcx_init"] = str(FAKE_HPCX_INIT)
    return doc


def _run(node_json: dict[str, Any], tmp_path: Path, faults: str = "", env: dict[str, str] | None = None,
         bin_dir: Path | None = None) -> tuple[Any, Runner, Path]:  # fmt: skip
    root = build_sysroot(tmp_path / "root", ())
    log = tmp_path / "mpirun.log"
    environ = {"PATH": str(bin_dir) if bin_dir else hermetic_path(tmp_path / "bin"), "NDFLEET_SYSROOT": str(root),
               "NDFLEET_FAKES": str(FAKES), "NDFLEET_FAKE_FAULTS": faults, "NDFLEET_FAKE_MPIRUN_LOG": str(log),
               **(env or {})}  # fmt: skip
    runner = Runner(environ)
    ctx = Context(parse(json.dumps(node_json)), runner, str(root))
    return perf_nccl_allreduce(ctx), runner, log


def test_it_is_mpirun_one_rank_per_gpu_as_root_under_hpcx(node_json: dict[str, Any], tmp_path: Path) -> None:
    result, runner, log = _run(node_json, tmp_path)
    assert result.status == "pass", result
    (call,) = runner.calls
    pattern, argv = hpcx.unwrap(call.argv)
    assert pattern == str(FAKE_HPCX_INIT)
    assert argv[:3] == ["mpirun", "-np", "8"] and "--allow-run-as-root" in argv
    assert argv[3:5] == ["--map-by", "ppr:8:node"] and "--bind-to" in argv
    program = argv.index("all_reduce_perf")
    assert argv[program:] == ["all_reduce_perf", "-b", "17179869184", "-e", "17179869184", "-f", "2", "-g", "1",
                              "-c", "1"]  # fmt: skip
    # The fake mpirun started eight copies of it (log: ranks and the program).
    assert log.read_text().split()[:2] == ["8", "all_reduce_perf"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the run-as-root refusal needs root (the suite runs under unshare -r)")
def test_the_fake_mpirun_refuses_root_without_the_option(tmp_path: Path) -> None:
    """The stand-in behaves as Open MPI's mpirun does for root (mpirun(1) of v4.1, --allow-run-as-root)."""
    import subprocess

    cp = subprocess.run([str(FAKES / "lib" / "mpirun-local"), "-np", "2", "true"], capture_output=True, text=True,
                        timeout=30, env={"PATH": "/usr/bin:/bin"}, check=False)  # fmt: skip
    assert cp.returncode == 1 and "attempt to run as root" in cp.stderr


def test_the_epilogs_slurm_variables_do_not_reach_mpirun(node_json: dict[str, Any], tmp_path: Path) -> None:
    """Open MPI inside a Slurm job's environment takes that job's allocation (the ended job's nodes), or stops for
    want of SLURM_TASKS_PER_NODE: the all-reduce of this node alone runs without them."""
    result, runner, _ = _run(node_json, tmp_path, env=EPILOG_ENV)
    assert result.status == "pass", result


def test_the_fake_mpirun_stops_in_a_slurm_jobs_environment(tmp_path: Path) -> None:
    import subprocess

    cp = subprocess.run([str(FAKES / "lib" / "mpirun-local"), "--allow-run-as-root", "-np", "2", "true"],
                        capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin", **EPILOG_ENV},
                        check=False)  # fmt: skip
    assert cp.returncode == 1 and "SLURM_TASKS_PER_NODE" in cp.stderr


def test_a_figure_below_the_floor_is_measured_again_and_fails_only_if_again_below(
    node_json: dict[str, Any], tmp_path: Path
) -> None:
    result, runner, _ = _run(node_json, tmp_path, faults="nccl_low")
    assert result.status == "fail"
    assert len(runner.calls) == ALLREDUCE_MEASUREMENTS == 2
    assert "busbw 312.4 GB/s, expected >= 460.0 GB/s" in result.message
    assert "below it in each of 2 measurements (312.4, 312.4 GB/s)" in result.message


def _flaky_bin(tmp_path: Path) -> Path:
    """The fake tools, with an all_reduce_perf that is slow at its first run only (a straggler the job left)."""
    bin_dir = Path(hermetic_path(tmp_path / "bin"))
    state = tmp_path / "ran-once"
    real = FAKES / "bin" / "all_reduce_perf"
    flaky = bin_dir / "all_reduce_perf"
    flaky.unlink()
    flaky.write_text(f"#!/bin/sh\n[ \"${{OMPI_COMM_WORLD_RANK:-0}}\" = 0 ] || exec '{real}' \"$@\"\n"
                     f"if [ -e '{state}' ]; then exec '{real}' \"$@\"; fi\n"
                     f"touch '{state}'; NDFLEET_FAKE_FAULTS=nccl_low exec '{real}' \"$@\"\n")  # fmt: skip
    flaky.chmod(0o755)
    return bin_dir


def test_one_slow_measurement_confirmed_by_none_passes(node_json: dict[str, Any], tmp_path: Path) -> None:
    result, runner, _ = _run(node_json, tmp_path, bin_dir=_flaky_bin(tmp_path))
    assert result.status == "pass", result
    assert len(runner.calls) == 2 and "measured again: 312.4 GB/s before" in result.message


def test_the_checks_time_bound_counts_every_measurement(node_json: dict[str, Any]) -> None:
    config = parse(json.dumps(node_json))
    bound = check_budget_s(load_all()["perf.nccl_allreduce"], config)
    assert bound == ALLREDUCE_MEASUREMENTS * float(config.timeouts["nccl_allreduce"])
