"""The twin's fixtures: collected only with `pytest --twin` (it boots containers and needs real root in namespaces
of its own: `unshare --net --mount --pid --fork --mount-proc .venv/bin/pytest --twin tests/twin`); see docs/twin.md."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.twin.twin import Twin, in_private_namespaces

HERE = Path(__file__).resolve().parent
STACK_FILE = HERE / "Pulumi.twin.yaml"
CACHE = Path(os.environ.get("NDFLEET_TWIN_CACHE", "/var/cache/ndfleet-twin"))
# The node the twin gives a bad GPU (hardware stand-in fault), and the one burn-in finds a bad cable on.
FAULTY_NODE = "twin-ib01-000000"
# The repair loops' measurement run (NDFLEET_TWIN_REPAIR_LOOPS=every, tests/twin/test_repair.py) boots no node with a
# bad GPU: its replacement, 40 minutes in, would take a job of ib01's no-spare loops.
MEASURING_REPAIRS = os.environ.get("NDFLEET_TWIN_REPAIR_LOOPS", "") == "every"
BAD_CABLE_NODE = "twin-ib00-000002"
# The elastic island whose new VMs never boot (the Resource Manager stand-in's doing): its resume fails.
STUCK_SCALE_SET = "twin-stuck-vmss"
BUILD_TIMEOUT_S = 1800


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@pytest.fixture(scope="session")
def twin_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    cp = subprocess.run(
        [sys.executable, "-m", "ndfleet.cli", "plan", "--stack-file", str(STACK_FILE), "--format", "json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert cp.returncode == 0, cp.stderr
    out.write_text(cp.stdout)
    return out


@pytest.fixture(scope="session")
def twin_root() -> tuple[Path, Path, Path]:
    """The plain image's root, the HPC image's layer over it, and the package pool (tests/twin/build-root.sh)."""
    cp = subprocess.run(
        ["bash", str(HERE / "build-root.sh"), str(CACHE)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    assert cp.returncode == 0, f"building the twin's root failed:\n{cp.stderr[-4000:]}"
    root, hpc = (Path(line) for line in cp.stdout.strip().splitlines()[-2:])
    return root, hpc, root.parent / root.name.replace("root-", "pool-")


@pytest.fixture(scope="session")
def twin(
    twin_plan: Path, twin_root: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Twin]:
    reason = in_private_namespaces()
    if reason:
        pytest.fail(reason)
    root, hpc, pool = twin_root
    # A TERM (CI's time limit, a person's kill) unwinds through the tear-down below instead of skipping it.
    signal.signal(signal.SIGTERM, _interrupt)
    faults = {} if MEASURING_REPAIRS else {FAULTY_NODE: "gpu_missing"}
    t = Twin(twin_plan, tmp_path_factory.mktemp("twin"), root, hpc, pool, faults=faults,
             never_boots={STUCK_SCALE_SET}, bad_hosts=[BAD_CABLE_NODE], stack_file=STACK_FILE)  # fmt: skip
    try:
        t.start()
        yield t
    finally:
        t.close()
        _TIMINGS.update(t.timings)


_TIMINGS: dict[str, list[float]] = {}
# Tests that wait out Slurm's own clocks (an elastic island's idleMinutes, then its SuspendTimeout: about 20 minutes
# from the scale-out's job end) run last, so that every other module's tests run while those clocks run.
# The same for the stuck island's nodes, each back in the pool only after its SuspendTimeout (600 s).
RUN_LAST_FIXTURES = ("scaled_in",)
RUN_LAST_TESTS = (
    "test_a_node_whose_resume_failed_returns_to_the_pool",
    "test_a_node_whose_vm_failed_to_allocate_returns_to_the_pool",
    "test_a_node_that_failed_validation_is_replaced_after_the_grace",  # 40-minute extension grace: test_repair.py
)


# Tests that run inside the wait of the last one (the extension's 40-minute grace of the node that failed validation,
# counted from the twin's start): placed just before it, after the other waits, their minutes cost the run nothing as
# long as everything before that test ends that much before the grace does (docs/twin.md). The roll by hand drains,
# reimages and burns in the nodes of ib01 (test_roll.py, branch roll-twin42); here it also runs after every repair
# loop, so no repair meets a node whose automatic-repairs grace a reimage has just restarted.
# The roll's twin case (branch roll-twin42) is not in CI yet (docs/upgrades.md).
RUN_IN_THE_GRACE_WAIT: tuple[str, ...] = ()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def name(it: pytest.Item) -> str:
        return getattr(it, "originalname", it.name)

    in_grace = [it for it in items if name(it) in RUN_IN_THE_GRACE_WAIT]
    waits = [it for it in items if it not in in_grace and (set(RUN_LAST_FIXTURES) & set(getattr(it, "fixturenames", ()))
             or name(it) in RUN_LAST_TESTS)]  # fmt: skip
    last = [it for it in waits if name(it) == RUN_LAST_TESTS[-1]]
    waits = [it for it in waits if it not in last] + in_grace + last
    items[:] = [it for it in items if it not in waits] + waits


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for what, values in _TIMINGS.items():
        terminalreporter.write_line(
            f"twin: {what}: " + ", ".join(f"{v:.0f} s" for v in values) + f" (max {max(values):.0f} s)"
        )
