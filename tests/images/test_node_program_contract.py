"""The node program holds to every contract of the compute image (ndfleet/images/ubuntu-hpc-2204*.json, one per image
version; docs/images.md).

Which tools the node program runs is not a list copied here: it is what the program itself runs, recorded where it
runs them, on the fake node (tests/fakes):
- the validator and set-up call every tool through `ndfleet_node.runner.Runner` (its module docstring), which keeps
  each call in `Runner.calls`: every check of the registry and every set-up step run in-process, and the argv of
  each call is read back;
- the burn-in starts its tests through `run_bounded` (ndfleet_node.burnin.runner): the executors run one test with
  `run_bounded` recording, and the impact requests (burnin.notify) with a recording `run`.
Each tool must be in the contract's `tools` or `absent`; one the contract says needs an environment (HPC-X) must be
run with it loaded (`ndfleet_node.hpcx.with_hpcx`), whichever path reaches it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node import hpcx
from ndfleet_node.burnin import runner as burnin_runner
from ndfleet_node.burnin.notify import NODE_PROGRAM, report_impacts
from ndfleet_node.burnin.planner import TestSpec
from ndfleet_node.burnin.runner import ProcessRun, mpirun_executor, srun_executor
from ndfleet_node.burnin.settings import settings_from_section
from ndfleet_node.checks import Context, load_all
from ndfleet_node.checks.perf import NVBANDWIDTH_ABSENT
from ndfleet_node.config import parse
from ndfleet_node.runner import Runner
from ndfleet_node.setup import SetupContext, run_steps
from ndfleet_node.validate import run_checks

from ndfleet.images import COMPUTE_IMAGE, ImageContract, load, versions
from ndfleet.nodefiles.nodeconfig import node_config
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.fakes.node import FAKE_HPCX_INIT, FAKES, build_sysroot, hermetic_path

PROD_MOUNTS = ["/mnt/resource_nvme", "/mnt/blob/datasets", "/mnt/blob/checkpoints", "/mnt/lustre"]


@pytest.fixture(scope="module", params=versions(COMPUTE_IMAGE))
def contract(request: pytest.FixtureRequest) -> ImageContract:
    """Each contracted version of the compute image in turn: the node program must work on every one."""
    return load(COMPUTE_IMAGE, request.param)


@pytest.fixture(scope="module")
def node_json() -> dict[str, Any]:
    """The node JSON `ndfleet` renders for the prod stack (full validation, DCGM, blob and Lustre), with the fake
    HPC-X tree as burnin.hpcx_init."""
    spec = load_spec(load_stack("prod").ndfleet_config, "prod")
    doc = node_config(spec, spec.islands[0])
    doc["burnin"]["hpcx_init"] = str(FAKE_HPCX_INIT)
    return doc


def _env(bindir: Path, root: Path) -> dict[str, str]:
    return {"PATH": str(bindir), "NDFLEET_SYSROOT": str(root), "NDFLEET_FAKES": str(FAKES), "NDFLEET_FAKE_FAULTS": ""}


def _validator_calls(doc: dict[str, Any], work: Path, missing: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every check of the registry, in-process on the fake node: the argv of each tool call."""
    root = build_sysroot(work / "root", PROD_MOUNTS)
    runner = Runner(_env(Path(hermetic_path(work / "bin", missing)), root))
    ctx = Context(parse(json.dumps(doc)), runner, str(root))
    results = run_checks(list(load_all()), ctx)
    assert results and runner.calls
    return [c.argv for c in runner.calls]


def _setup_calls(doc: dict[str, Any], work: Path, missing: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every set-up step, in-process on a fake node that needs all of them (no RAID yet, nothing mounted)."""
    root = build_sysroot(work / "root", (), ("peermem_absent",))
    (root / "etc" / "ndfleet").mkdir(parents=True)
    (root / "etc" / "ndfleet" / "nccl.conf").write_text("NCCL_IB_PCI_RELAXED_ORDERING=1\n")
    imds = doc["imds"]
    tags = {imds["tag_storage_account"]: "ndfleetprodsa", imds["tag_lustre_mgs"]: "10.50.2.4"}
    doc = {**doc, "timeouts": {**doc["timeouts"], "mount_retry": 0, "fabricmanager_wait": 0}}
    runner = Runner(_env(Path(hermetic_path(work / "bin", missing)), root))
    ctx = SetupContext(parse(json.dumps(doc)), runner, str(root), log=lambda _: None, sleep=lambda _: None,
                       tags=tags)  # fmt: skip
    run_steps(ctx)
    return [c.argv for c in runner.calls]


@pytest.fixture(scope="module")
def runner_calls(node_json: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, ...]]:
    """What the validator and set-up run on a compute node: on a healthy fake node, and on fake nodes that lack the
    tools whose absence takes the program down another path (the kernel log from dmesg, BlobFuse2 installed)."""
    work = tmp_path_factory.mktemp("calls")
    return [
        *_validator_calls(node_json, work / "validate"),
        *_validator_calls(node_json, work / "validate-no-journal", missing=("journalctl",)),
        *_setup_calls(node_json, work / "setup"),
        *_setup_calls(node_json, work / "setup-no-blobfuse2", missing=("blobfuse2",)),
    ]


def _launched(argv: tuple[str, ...] | list[str]) -> tuple[str, bool]:
    """(the tool an argv runs, whether HPC-X is loaded for it)."""
    pattern, command = hpcx.unwrap(argv)
    return os.path.basename(command[0]), pattern is not None


# mpirun's options that take values (mpirun(1) of Open MPI v4.1), to find the program it starts.
_MPIRUN_VALUES = {"-np": 1, "-n": 1, "--map-by": 1, "--bind-to": 1, "-x": 1, "-mca": 2, "--mca": 2, "-H": 1}


def _every_launched(argv: tuple[str, ...] | list[str]) -> list[tuple[str, bool]]:
    """_launched, and for mpirun also the program it starts (in the same environment: HPC-X loaded or not)."""
    name, under = _launched(argv)
    if name != "mpirun":
        return [(name, under)]
    rest = list(hpcx.unwrap(argv)[1][1:])
    while rest and rest[0].startswith("-"):
        del rest[: 1 + _MPIRUN_VALUES.get(rest[0], 0)]
    return [(name, under), *([(os.path.basename(rest[0]), under)] if rest else [])]


def test_the_recording_sees_the_programs_paths(runner_calls: list[tuple[str, ...]]) -> None:
    # The recording is wide enough to mean something: the MPI tools, the kernel-log fallback, the apt install.
    names = {name for argv in runner_calls for name, _ in _every_launched(argv)}
    assert {"mpirun", "all_reduce_perf", "nvbandwidth", "nvidia-smi", "dmesg", "journalctl", "mdadm",
            "apt-get"} <= names


def test_every_tool_the_validator_and_setup_run_is_in_the_contract(
    runner_calls: list[tuple[str, ...]], contract: ImageContract
) -> None:
    names = {name for argv in runner_calls for name, _ in _every_launched(argv)}
    unknown = names - contract.tool_names - contract.absent_names
    assert not unknown, f"tools the node program runs that ndfleet/images/{COMPUTE_IMAGE}.json does not list: {unknown}"


def test_tools_that_need_hpcx_are_run_only_under_hpcx(
    runner_calls: list[tuple[str, ...]], contract: ImageContract
) -> None:
    needing = [(argv, name, under) for argv in runner_calls for name, under in _every_launched(argv)
               if contract.needs_env(name)]  # fmt: skip
    assert {name for _, name, _ in needing} == {"mpirun", "all_reduce_perf", "nvbandwidth"}
    for argv, name, under in needing:
        assert contract.needs_env(name) == "hpcx"
        assert under, f"{name} run without HPC-X loaded: {argv}"


# --- the burn-in ----------------------------------------------------------------------------------------------


@pytest.fixture
def burnin_commands(node_json: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    """The command each burn-in executor runs for one test (hostfile mode: on a compute node; Slurm mode: on the
    controller, its task on the compute nodes), and the impact request for an unhealthy host."""
    recorded: list[list[str]] = []

    def record(cmd: list[str], *args: object, **kwargs: object) -> ProcessRun:
        recorded.append(list(cmd))
        return ProcessRun(0, "", 0.0)

    monkeypatch.setattr(burnin_runner, "run_bounded", record)
    settings = settings_from_section(node_json["burnin"])
    test = TestSpec("t1", 1, "pairwise", ("nd-ib00000000", "nd-ib00000001"), 1.0)
    mpirun_executor(settings, "quick", tmp_path)(test)
    srun_executor(settings, "quick", tmp_path, "ndfleet-burnin", "gpu")(test)
    host = {"host": "nd-ib00000001", "status": "unhealthy", "reason": "slow", "partners_failed": ["nd-ib00000000"],
            "busbw_gbps": 1.0}  # fmt: skip
    report_impacts({"hosts": [host]}, lambda cmd, timeout: record(list(cmd)), NODE_PROGRAM, lambda _: None)
    hostfile, slurm, impact = recorded
    yield {"settings": settings, "hostfile": hostfile, "slurm": slurm, "impact": impact}


def test_hostfile_burnin_runs_mpirun_and_all_reduce_perf_under_hpcx(burnin_commands: dict, contract: ImageContract):
    settings, cmd = burnin_commands["settings"], burnin_commands["hostfile"]
    launcher, under = _launched(cmd)
    assert launcher == "mpirun" and contract.needs_env("mpirun") == "hpcx" and under
    program = os.path.basename(settings.all_reduce_perf)
    assert program in contract.tool_names and contract.needs_env(program) == "hpcx"
    # The remote ranks get HPC-X's library path from mpirun (-x LD_LIBRARY_PATH), the local one from hpcx_load.
    assert settings.all_reduce_perf in cmd and "LD_LIBRARY_PATH" in cmd[cmd.index("-x") :]


def test_slurm_burnin_task_loads_hpcx_on_the_compute_node(burnin_commands: dict, contract: ImageContract) -> None:
    settings, cmd = burnin_commands["settings"], burnin_commands["slurm"]
    srun = cmd.index(settings.srun)
    task = cmd[cmd.index("--kill-on-bad-exit=1", srun) + 1 :]
    name, under = _launched(task)
    assert name == os.path.basename(settings.all_reduce_perf) and contract.needs_env(name) == "hpcx" and under


def test_impact_request_uses_tools_of_the_image(burnin_commands: dict, contract: ImageContract) -> None:
    cmd = burnin_commands["impact"]
    assert _launched(cmd)[0] in contract.tool_names  # ssh, from the launching compute node
    remote = cmd[-1].split()
    assert remote[0] in contract.tool_names  # sudo, on the reported node


# --- the node program's own words agree with the contract -----------------------------------------------------


def test_the_hpcx_default_and_the_rendered_setting_are_the_contracts(
    contract: ImageContract, node_json: dict[str, Any]
) -> None:
    spec = load_spec(load_stack("prod").ndfleet_config, "prod")
    rendered = node_config(spec, spec.islands[0])["burnin"]
    env = contract.environments["hpcx"]
    assert hpcx.DEFAULT_INIT == env.init_glob == rendered["hpcx_init"]
    assert Path(env.init).match(env.init_glob)
    arp = contract.tool("all_reduce_perf")
    assert arp is not None and rendered["all_reduce_perf"] == arp.path


def test_the_nvbandwidth_skip_reason_is_the_contracts(contract: ImageContract) -> None:
    absent = contract.absent_entry("nvbandwidth")
    assert absent is not None and absent.why.startswith(NVBANDWIDTH_ABSENT)


def test_the_fake_hpcx_tree_is_laid_out_as_the_contract_says(contract: ImageContract) -> None:
    env = contract.environments["hpcx"]
    fake_home = FAKE_HPCX_INIT.parent
    assert FAKE_HPCX_INIT.name == Path(env.init).name
    libmpi = next(lib for lib in contract.libraries if lib.name == "libmpi.so.40")
    assert (fake_home / Path(libmpi.path).relative_to(env.home)).is_file()
    assert str(Path(libmpi.path).parent) in env.lib_dirs
