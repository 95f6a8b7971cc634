"""mpirun command lines for each VM size and test kind, and the verdict of a finished / killed / failed run."""

from __future__ import annotations

import pytest
from ndfleet_node.burnin.planner import TestSpec
from ndfleet_node.burnin.runner import ProcessRun, judge, mpirun_command, timeout_for
from ndfleet_node.burnin.settings import settings_from_section

from ndfleet.nodefiles.burnin_node_config import burnin_node_section
from ndfleet.stackconfig.profiles import H100_V5, H200_V5, VmSizeProfile

PAIR = TestSpec("r1-a+b", 1, "pairwise", ("nd-a", "nd-b"), 340.0)
ISLAND = TestSpec("r3-island", 3, "island", ("nd-a", "nd-b", "nd-c"), 340.0)


def exported(cmd: list[str]) -> dict[str, str | None]:
    """`-x NAME=VALUE` as NAME: VALUE; `-x NAME` (export mpirun's own value) as NAME: None."""
    pairs = [cmd[i + 1].partition("=") for i, a in enumerate(cmd) if a == "-x"]
    return {name: value if eq else None for name, eq, value in pairs}


@pytest.mark.parametrize("profile", [H100_V5, H200_V5], ids=lambda p: p.name)
def test_pair_command_line(profile: VmSizeProfile) -> None:
    settings = settings_from_section(burnin_node_section(profile))
    cmd = mpirun_command(settings, PAIR, "quick")
    assert cmd[:6] == ["mpirun", "-np", "16", "-H", "nd-a:8,nd-b:8", "--map-by"]
    assert cmd[cmd.index("--map-by") + 1] == "ppr:8:node"
    tail = cmd[cmd.index("/opt/nccl-tests/build/all_reduce_perf") :]
    size = str(16 * 1024**3)
    assert tail[1:] == ["-b", size, "-e", size, "-f", "2", "-g", "1", "-w", "5", "-n", "10", "-c", "1"]
    env = exported(cmd)
    assert env["NCCL_ALGO"] == "Ring" and "NCCL_COLLNET_ENABLE" not in env
    assert env["NCCL_IB_PCI_RELAXED_ORDERING"] == "1"
    # H200: no topology file (an empty NCCL_TOPO_FILE fixed a spurious low figure there); H100: the image's file.
    assert env.get("NCCL_TOPO_FILE") == (profile.nccl_topo_file or None)
    # 60 s launch + 2 x 1 s per VM + (5 warm-up + 2 x (10 + 1 checked)) x 16 GiB at algbw 340 x 16 / 30 GB/s
    # = 62 + 27 x 0.0947 s = 64.6 s -> 65 s (a fixed 300 s before).
    assert timeout_for(settings, PAIR, "quick") == 65


@pytest.mark.parametrize("profile", [H100_V5, H200_V5], ids=lambda p: p.name)
def test_mpirun_gets_azures_hpcx_flags(profile: VmSizeProfile) -> None:
    """Azure's NCCL scripts: -mca coll_hcoll_enable 0 -mca plm_rsh_no_tree_spawn 1 -x LD_LIBRARY_PATH
    -x UCX_TLS=rc -x UCX_NET_DEVICES=mlx5_ib0:1 (the remote ranks need HPC-X's library path)."""
    cmd = mpirun_command(settings_from_section(burnin_node_section(profile)), PAIR, "quick")
    joined = " ".join(cmd)
    assert "-mca coll_hcoll_enable 0" in joined and "-mca plm_rsh_no_tree_spawn 1" in joined
    env = exported(cmd)
    assert env["LD_LIBRARY_PATH"] is None  # exported with mpirun's own value: HPC-X loaded
    assert (env["UCX_TLS"], env["UCX_NET_DEVICES"]) == ("rc", "mlx5_ib0:1")
    assert cmd.index(settings_from_section(burnin_node_section(profile)).all_reduce_perf) > cmd.index("UCX_TLS=rc")


def test_island_command_line_uses_island_settings_and_full_iterations() -> None:
    settings = settings_from_section(burnin_node_section(H100_V5))
    cmd = mpirun_command(settings, ISLAND, "full")
    assert cmd[1:5] == ["-np", "24", "-H", "nd-a:8,nd-b:8,nd-c:8"]
    env = exported(cmd)
    assert env["NCCL_MIN_NCHANNELS"] == "32" and "NCCL_ALGO" not in env
    assert cmd[cmd.index("-n") + 1] == "50"
    # 60 + 3 x 1 s launch + (5 + 2 x 51) x 16 GiB at algbw 340 x 24 / 46 GB/s = 63 + 10.4 s -> 74 s (1,800 s before).
    assert timeout_for(settings, ISLAND, "full") == 74


@pytest.mark.parametrize("profile", [H100_V5, H200_V5], ids=lambda p: p.name)
def test_island_is_judged_without_sharp(profile: VmSizeProfile) -> None:
    """The island test sets up no SHARP / CollNet, so its floor must hold without in-network reduction: at most
    85 % of the VM's InfiniBand line rate (the pair floor's arithmetic), not Azure's SHARP warning level."""
    settings = settings_from_section(burnin_node_section(profile))
    env = exported(mpirun_command(settings, ISLAND, "quick"))
    assert not [name for name in env if "COLLNET" in name or "SHARP" in name]
    line_rate_gbytes = len(profile.ib_devices) * profile.ib_rate_gbps / 8
    assert settings.island_floor_gbps <= 0.85 * line_rate_gbytes


def test_override_and_derived_timeouts_scale_with_the_island() -> None:
    from dataclasses import replace

    settings = settings_from_section(burnin_node_section(H100_V5))
    big = TestSpec("r3-island", 3, "island", tuple(f"nd-{i}" for i in range(300)), 340.0)
    assert timeout_for(settings, big, "quick") == 60 + 300 + 3  # launch fan-out dominates at 300 VMs
    assert timeout_for(replace(settings, timeout_override_s=17), big, "quick") == 17


GOOD = (
    "#  Rank  0 Group  0 Pid 1 on nd-a device  0 [0000:01:00] NVIDIA H100 80GB HBM3\n"
    "  17179869184  4294967296  float  sum  -1  83210  206.46  {bw}  {w}  83302  206.23  {bw}  {w}\n"
    "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {bw}\n"
)


@pytest.mark.parametrize(
    ("run", "outcome", "busbw"),
    [
        (ProcessRun(0, GOOD.format(bw=383.2, w=0), 1.0), "pass", 383.2),
        (ProcessRun(0, GOOD.format(bw=339.9, w=0), 1.0), "slow", 339.9),
        (ProcessRun(1, GOOD.format(bw=383.2, w=40), 1.0), "wrong", 383.2),
        (ProcessRun(None, "#  Rank  0 ...", 300.0), "hang", None),
        (ProcessRun(255, "ssh: connect to host nd-b port 22: No route to host", 0.2), "error", None),
        (ProcessRun(0, "", 0.1), "error", None),
        (ProcessRun(134, GOOD.format(bw=383.2, w=0) + "free(): invalid pointer\n", 1.0), "error", 383.2),
    ],
    ids=["pass", "below-floor", "wrong", "hang", "unreachable", "no-output", "crash-after-results"],
)
def test_judge(run: ProcessRun, outcome: str, busbw: float | None) -> None:
    result = judge(PAIR, run, 300)
    assert (result.outcome, result.busbw_gbps) == (outcome, busbw)
    assert result.message


def test_settings_refuse_non_positive_figures() -> None:
    from ndfleet_node.burnin.settings import SettingsError

    section = burnin_node_section(H100_V5) | {"gpus_per_node": 0, "island_busbw_floor_gbps": -1, "warmup_iters": -2}
    with pytest.raises(SettingsError) as err:
        settings_from_section(section)
    text = str(err.value)
    assert "burnin.gpus_per_node = 0" in text and "burnin.island_busbw_floor_gbps = -1" in text
    assert "burnin.warmup_iters = -2" in text
