"""validate-node on a fake 8 x H100 + 8 x ConnectX-7 node: a healthy node passes, each fault fails its check.

The validator runs as systemd runs it: the rendered `validate-node` wrapper executes the `ndfleet-node` zipapp
with python3, reading the rendered node JSON; the node is tests/fakes (fake tools on a hermetic PATH, a fake /sys
and /proc under NDFLEET_SYSROOT). All scenarios run once, concurrently, in a module fixture; each test then
asserts one behaviour of one scenario.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ndfleet.nodefiles.bootstrap import render_output_files
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.fakes.node import FAKE_HPCX_INIT, Run, run_validator, write_bundle

# The run and report order, written out: the @check registrations generate it (ndfleet_node.checks.level_ids) and
# the node JSON's levels carry it, so a reordered import or decorator fails here.
QUICK_CHECKS = (
    "gpu.count", "gpu.ecc", "gpu.row_remap", "gpu.xid", "gpu.nvlink", "gpu.fabricmanager", "gpu.pcie", "gpu.throttle",
    "ib.peermem", "ib.ports", "ib.rate", "ib.flap", "ib.pcie", "host.nvme", "host.memory", "host.cpu", "host.mounts",
)  # fmt: skip
PERF_CHECKS = ("perf.nccl_allreduce", "perf.ib_write_bw", "perf.nvbandwidth", "perf.dcgm")
HUNG_TOOL_TIMEOUT_S = 1
NVIDIA_SMI_CHECKS = {"gpu.count", "gpu.ecc", "gpu.row_remap", "gpu.nvlink", "gpu.pcie", "gpu.throttle"}
PROD_MOUNTS = ["/mnt/resource_nvme", "/mnt/blob/datasets", "/mnt/blob/checkpoints", "/mnt/lustre"]
H200_MOUNTS = ["/mnt/resource_nvme", "/mnt/blob/datasets", "/mnt/blob/checkpoints"]


@dataclass(frozen=True)
class Scenario:
    script: str = "prod"  # which rendered validator (see `scripts`)
    level: str = "quick"
    faults: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    mounts: tuple[str, ...] = tuple(PROD_MOUNTS)
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] | None = None
    hpcx_init: str | None = str(FAKE_HPCX_INIT)  # burnin.hpcx_init; None: as rendered (the image's /opt/hpcx-*)


# fault -> (level, the one check it must fail, what the message must say: measured, expected and device)
FAULTS = {
    "gpu_missing": ("quick", "gpu.count", "found 7 GPUs, expected 8"),
    "ib_port_down": ("quick", "ib.ports", "mlx5_ib2 port 1: Down / Polling / InfiniBand, expected Active / LinkUp"),
    "ib_rate_200": ("quick", "ib.rate", "mlx5_ib4 port 1: 200 Gb/s, expected 400"),
    "ib_flap": ("quick", "ib.flap", "mlx5_ib3 port 1: link_downed counter 12, limit 5"),
    "fm_inactive": ("quick", "gpu.fabricmanager", "nvidia-fabricmanager is inactive, expected active"),
    "peermem_absent": ("quick", "ib.peermem", "nvidia_peermem is not in"),
    "row_remap_pending": ("quick", "gpu.row_remap", "GPU 1 (00000002:00:00.0): row remap pending"),
    "ecc_uncorrectable": (
        "quick",
        "gpu.ecc",
        "GPU 2 (00000003:00:00.0): 1 volatile / 1 aggregate uncorrectable DRAM ECC errors, limit 0",
    ),
    "xid79": ("quick", "gpu.xid", "Xid 79 on PCI:0008:00:00 (GPU 3): "),
    "xid94": ("quick", "gpu.xid", "Xid 94 on PCI:0009:00:00 (GPU 4): "),
    "xid95": ("quick", "gpu.xid", "Xid 95 on PCI:000A:00:00 (GPU 5): "),
    "gpu_pcie_x8": (
        "quick",
        "gpu.pcie",
        "GPU 5 (0000000A:00:00.0): PCIe link x8 (x16 possible), gen 5 max; expected gen 5 x16",
    ),
    "hca_pcie_x8": ("quick", "ib.pcie", "mlx5_ib6 (0107:00:00.0): PCIe link 32GT/s x8, expected 32GT/s x16"),
    "nvlink_down": ("quick", "gpu.nvlink", "GPU 2 (00000003:00:00.0): 17 of 18 NVLinks up; down: 7"),
    "thermal": ("quick", "gpu.throttle", "GPU 6 (0000000B:00:00.0): HW thermal slowdown active"),
    "nvme_missing": ("quick", "host.nvme", "found 7 NVMe disks, expected 8"),
    "memory_low": ("quick", "host.memory", "only 1430 GiB of memory, expected at least 1800 GiB"),
    "cpu_low": ("quick", "host.cpu", "found 48 vCPUs"),
    "lustre_unmounted": ("quick", "host.mounts", "not mounted: /mnt/lustre"),
    "nccl_low": ("full", "perf.nccl_allreduce", "busbw 312.4 GB/s, expected >= 460.0 GB/s"),
    "ib_bw_low": ("full", "perf.ib_write_bw", "mlx5_ib5 (GPU 5): 212.88 Gb/s, expected >= 380.0 Gb/s"),
    "h2d_low": ("full", "perf.nvbandwidth", "host->device GPU 4: 7.21 GB/s, expected >= 48.0"),
    "dcgm_fail": ("full", "perf.dcgm", "dcgmi diag -r 2: GPU Memory: Fail - GPU: 3"),
}

SCENARIOS: dict[str, Scenario] = {
    "healthy_full": Scenario(level="full"),
    "healthy_quick": Scenario(level="quick"),
    **{f"fault_{name}": Scenario(level=level, faults=(name,)) for name, (level, _, _) in FAULTS.items()},
    "hung_nvidia_smi": Scenario(script="prod_fast_timeout", faults=("nvsmi_hang",)),
    "missing_ibstat": Scenario(missing=("ibstat",)),
    "missing_nvbandwidth": Scenario(level="full", missing=("nvbandwidth",)),
    # The image's HPC-X glob (/opt/hpcx-*/hpcx-init.sh) on a machine that has none.
    "no_hpcx": Scenario(level="full", hpcx_init=None),
    # hpcx_init "" (load nothing): the tools as PATH has them, and the loader refuses all_reduce_perf and nvbandwidth.
    "hpcx_not_loaded": Scenario(level="full", hpcx_init=""),
    "no_dcgm": Scenario(level="full", missing=("dcgmi",)),
    "dmesg_instead_of_journal": Scenario(faults=("xid79",), missing=("journalctl",)),
    "bad_level": Scenario(args=("--level", "thorough", "--report", "REPORT")),
    "no_report_path": Scenario(args=("--level", "quick")),
    "h200_healthy": Scenario(
        script="h200", level="full", mounts=tuple(H200_MOUNTS), env={"NDFLEET_FAKE_GPU_MODEL": "NVIDIA H200"}
    ),
    "h200_sees_h100s": Scenario(script="h200", mounts=tuple(H200_MOUNTS)),
}


def _spec(stack: str) -> ClusterSpec:
    return load_spec(load_stack(stack).ndfleet_config, stack)


def _with_tool_timeout(spec: ClusterSpec, seconds: int) -> ClusterSpec:
    t = spec.profile.thresholds.model_copy(update={"tool_timeout_s": seconds})
    return spec.model_copy(update={"profile": spec.profile.model_copy(update={"thresholds": t})})


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bundles")
    specs = {
        "prod": _spec("prod"),  # ND H100 v5, Managed Lustre, full validation, DCGM level 2
        "prod_fast_timeout": _with_tool_timeout(_spec("prod"), HUNG_TOOL_TIMEOUT_S),
        "h200": _spec("h200"),
    }
    out = {}
    for name, spec in specs.items():
        out[name] = write_bundle(folder / name, render_output_files(spec, spec.islands[0]))
    return out


@pytest.fixture(scope="module")
def runs(scripts, tmp_path_factory) -> dict[str, Run]:
    base = tmp_path_factory.mktemp("nodes")

    def one(name: str) -> tuple[str, Run]:
        s = SCENARIOS[name]
        work = base / name
        work.mkdir()
        args = None if s.args is None else [str(work / "report.json") if a == "REPORT" else a for a in s.args]
        return name, run_validator(
            scripts[s.script], work, s.level, s.faults, s.mounts, s.missing, env=s.env, args=args, timeout=60,
            hpcx_init=s.hpcx_init,
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, SCENARIOS))


# --- a healthy node -----------------------------------------------------------------------------------------


def test_healthy_node_passes_full_validation(runs):
    r = runs["healthy_full"]
    assert r.rc == 0, r.stdout + r.stderr
    assert r.report is not None and r.report["status"] == "healthy"
    assert [c["status"] for c in r.report["checks"]] == ["pass"] * len(QUICK_CHECKS + PERF_CHECKS)


def test_full_level_runs_every_check_in_order(runs):
    r = runs["healthy_full"]
    assert r.report is not None
    assert [c["id"] for c in r.report["checks"]] == list(QUICK_CHECKS + PERF_CHECKS)


def test_quick_level_runs_only_the_quick_checks(runs):
    r = runs["healthy_quick"]
    assert r.rc == 0, r.stdout + r.stderr
    assert r.report is not None
    assert [c["id"] for c in r.report["checks"]] == list(QUICK_CHECKS)


def test_report_format(runs):
    report = runs["healthy_full"].report
    assert report is not None
    assert {"status", "vm_size", "level", "started", "duration_s", "checks"} <= set(report)
    assert report["vm_size"] == "Standard_ND96isr_H100_v5" and report["level"] == "full"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", report["started"])
    assert isinstance(report["duration_s"], float)
    for check in report["checks"]:
        assert set(check) == {"id", "status", "value", "expected", "message"}


def test_one_journal_line_per_check(runs):
    r = runs["healthy_full"]
    lines = [ln for ln in r.stdout.splitlines() if re.match(r"(PASS|FAIL|SKIP) [a-z]+\.[a-z_]+: ", ln)]
    assert [ln.split()[1].rstrip(":") for ln in lines] == list(QUICK_CHECKS + PERF_CHECKS)


def test_healthy_runtime_on_the_fake_node(runs):
    r = runs["healthy_full"]
    reported = r.report and r.report["duration_s"]
    print(f"full validation on the fake node: {r.seconds:.2f} s wall, report says {reported} s")
    assert r.seconds < 20


# --- each fault fails exactly its check ---------------------------------------------------------------------


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_fails_exactly_its_check(fault, runs):
    r = runs[f"fault_{fault}"]
    _, check, _ = FAULTS[fault]
    assert r.rc == 1, r.stdout + r.stderr
    assert r.failed == {check}


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_message_names_measurement_expectation_and_device(fault, runs):
    r = runs[f"fault_{fault}"]
    _, check, message = FAULTS[fault]
    assert message in r.check(check)["message"]


@pytest.mark.parametrize(
    ("fault", "category"),
    [("xid79", "XID79FallenOffBus"), ("xid94", "XID94ContainedECCError"), ("xid95", "XID95UncontainedECCError")],
)
def test_an_xid_with_a_category_of_its_own_files_under_it(fault, category, runs):
    # The validator's own message for the Xid, through the node's category table (impact_categories).
    from ndfleet_node.impact_categories import category_for

    message = runs[f"fault_{fault}"].check("gpu.xid")["message"]
    assert category_for("gpu.xid", message) == f"Resource.Hpc.Unhealthy.{category}"


def test_unhealthy_report_status(runs):
    r = runs["fault_gpu_missing"]
    assert r.report is not None and r.report["status"] == "unhealthy"


# --- tools that hang or are missing -------------------------------------------------------------------------


def test_hung_nvidia_smi_fails_its_checks(runs):
    r = runs["hung_nvidia_smi"]
    assert r.rc == 1, r.stdout + r.stderr
    assert r.failed == NVIDIA_SMI_CHECKS


def test_hung_nvidia_smi_fails_within_its_timeout(runs):
    r = runs["hung_nvidia_smi"]
    # One wait for the timeout (later nvidia-smi calls are not retried), plus interpreter start-up.
    assert r.seconds < HUNG_TOOL_TIMEOUT_S + 2 + 3
    hung = [c for c in r.report["checks"] if "not retried" in c["message"]] if r.report else []
    assert len(hung) >= 1, "later nvidia-smi calls must not wait again"
    assert f"nvidia-smi did not answer within {HUNG_TOOL_TIMEOUT_S} s" in r.check("gpu.count")["message"]


def test_missing_tool_fails_the_checks_that_need_it(runs):
    r = runs["missing_ibstat"]
    assert r.rc == 1
    assert r.failed == {"ib.ports", "ib.rate"}
    assert r.check("ib.ports")["message"] == "ibstat not found on PATH"


def test_nvbandwidth_the_image_lacks_is_not_run_and_the_node_stays_healthy(runs):
    # The Ubuntu 22.04 HPC image has no nvbandwidth (ndfleet/images/ubuntu-hpc-2204.json, absent): a skip with the
    # reason, never a failure for a tool the image lacks, never a silent pass.
    r = runs["missing_nvbandwidth"]
    assert r.rc == 0, r.stdout + r.stderr
    assert r.report is not None and r.report["status"] == "healthy" and r.failed == set()
    nvb = r.check("perf.nvbandwidth")
    assert nvb["status"] == "skip"
    assert nvb["message"] == (
        "nvbandwidth is not on this image (Azure/azhpc-images installs it only for GB200 / Azure Linux)"
    )
    assert "SKIP perf.nvbandwidth: nvbandwidth is not on this image" in r.stdout
    assert "1 skipped (perf.nvbandwidth)" in r.stdout.splitlines()[-1]


def test_nvbandwidth_where_the_image_has_it_runs_under_hpcx(runs):
    r = runs["healthy_full"]
    assert r.check("perf.nvbandwidth")["status"] == "pass"
    assert "skipped" not in r.stdout.splitlines()[-1]


def test_no_hpcx_fails_the_mpi_tools_with_a_named_message(runs):
    r = runs["no_hpcx"]
    assert r.failed == {"perf.nccl_allreduce", "perf.nvbandwidth"}
    for check, tool in (("perf.nccl_allreduce", "all_reduce_perf"), ("perf.nvbandwidth", "nvbandwidth")):
        assert r.check(check)["message"] == (
            "cannot find HPC-X: nothing matches burnin.hpcx_init = '/opt/hpcx-*/hpcx-init.sh'; "
            f"{tool} needs HPC-X's Open MPI libraries (libmpi.so.40), not run"
        )


def test_the_fakes_refuse_to_start_without_hpcx_as_the_real_tools_do(runs):
    # What a bare all_reduce_perf does on the image (the loader's message, exit 127): the fakes behave the same, so
    # a validator that forgot HPC-X fails here.
    r = runs["hpcx_not_loaded"]
    assert r.failed == {"perf.nccl_allreduce", "perf.nvbandwidth"}
    # The all-reduce is launched by HPC-X's mpirun, which only hpcx_load puts on PATH (the image contract: mpirun in
    # ompi/bin, env hpcx).
    assert r.check("perf.nccl_allreduce")["message"] == "mpirun not found on PATH"
    assert r.check("perf.nvbandwidth")["message"] == (
        "nvbandwidth exited with status 127: nvbandwidth: error while loading shared libraries: "
        "libmpi.so.40: cannot open shared object file: No such file or directory"
    )


def test_absent_dcgm_is_skipped_with_a_reason(runs):
    r = runs["no_dcgm"]
    assert r.rc == 0, r.stdout + r.stderr
    dcgm = r.check("perf.dcgm")
    assert dcgm["status"] == "skip" and "not installed" in dcgm["message"]


def test_kernel_log_falls_back_to_dmesg(runs):
    r = runs["dmesg_instead_of_journal"]
    assert r.failed == {"gpu.xid"}


# --- could not run ------------------------------------------------------------------------------------------


def test_bad_level_cannot_run(runs):
    r = runs["bad_level"]
    assert r.rc == 2 and r.report is None
    assert "--level must be one of quick, epilog, full" in r.stderr


def test_missing_report_path_cannot_run(runs):
    r = runs["no_report_path"]
    assert r.rc == 2
    assert "--report PATH is required" in r.stderr


# --- ND H200 v5 ---------------------------------------------------------------------------------------------


def test_h200_node_passes_with_the_h200_profile(runs):
    r = runs["h200_healthy"]
    assert r.rc == 0, r.stdout + r.stderr
    assert r.report is not None and r.report["vm_size"] == "Standard_ND96isr_H200_v5"


def test_h200_profile_rejects_h100_gpus(runs):
    r = runs["h200_sees_h100s"]
    assert r.failed == {"gpu.count"}
    assert "wrong GPU model" in r.check("gpu.count")["message"]


def test_levels_are_generated_from_the_check_decorators() -> None:
    from ndfleet_node.checks import level_ids

    assert level_ids("quick") == list(QUICK_CHECKS)
    assert level_ids("full") == [*QUICK_CHECKS, *PERF_CHECKS]


def test_the_epilog_level_is_the_quick_checks_and_the_all_reduce() -> None:
    """The Slurm Epilog's level: every quick check and the 8-GPU all-reduce (the floor a GPU slow with no clock-event
    reason fails), none of the other bandwidth tests; the full level still runs the all-reduce."""
    from ndfleet_node.checks import level_ids

    assert level_ids("epilog") == [*level_ids("quick"), "perf.nccl_allreduce"]
    assert "perf.nccl_allreduce" in level_ids("full") and len(level_ids("full")) > len(level_ids("epilog"))
