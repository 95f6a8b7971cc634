"""A missing system tool: the tests that need it skip with one summary line (tool, count, install command), and
under CI they fail instead. Proven on a tiny synthetic suite run by pytest in a subprocess with a PATH lacking it;
plus the registry, tests/run and .ci/run agree on where the packages come from."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.system_tools import TOOLS, install_command, load_registry

REPO = Path(__file__).resolve().parent.parent

SYNTHETIC_SUITE = '''
import pytest
from tests.system_tools import require_tool

@pytest.fixture(scope="module")
def promtool():
    return require_tool("promtool")

def test_uses_promtool_a(promtool):
    assert promtool

def test_uses_promtool_b(promtool):
    assert promtool

@pytest.mark.needs_tool("cloud-init")
def test_marked_for_cloud_init():
    pass

def test_needs_no_tool():
    pass
'''


def run_synthetic(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The synthetic suite under pytest, with a PATH holding no system tool at all (an empty folder)."""
    (tmp_path / "test_synthetic.py").write_text(SYNTHETIC_SUITE)
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "NDFLEET_REQUIRE_TOOLS", "PYTEST_ADDOPTS")}
    full_env = {**base, "PATH": str(empty_bin), "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.system_tools", "-p", "no:cacheprovider", "-q",
         "--rootdir", str(tmp_path), str(tmp_path / "test_synthetic.py")],
        cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def summary_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("system tools missing:")]


def test_missing_tools_skip_with_one_summary_line(tmp_path: Path) -> None:
    result = run_synthetic(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 3 skipped" in result.stdout
    assert summary_lines(result.stdout) == [
        "system tools missing: cloud-init, promtool: 3 tests skipped; install them with "
        "`sudo apt-get install -y --no-install-recommends cloud-init prometheus` "
        "(or run `bash tests/run` as root, which installs them)"
    ]


@pytest.mark.parametrize("env", [{"CI": "1"}, {"CI": "true"}, {"NDFLEET_REQUIRE_TOOLS": "1"}])
def test_missing_tools_fail_under_ci(tmp_path: Path, env: dict[str, str]) -> None:
    result = run_synthetic(tmp_path, **env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed" in result.stdout and "skipped" not in result.stdout
    assert "system tool missing: promtool" in result.stdout
    assert "system tool missing: cloud-init" in result.stdout


def test_summary_line_is_absent_when_nothing_is_missing(tmp_path: Path) -> None:
    (tmp_path / "test_synthetic.py").write_text("def test_plain():\n    pass\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.system_tools", "-p", "no:cacheprovider", "-q",
         "--rootdir", str(tmp_path), str(tmp_path / "test_synthetic.py")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary_lines(result.stdout) == []


def test_registry_reads_alternatives_and_packages(tmp_path: Path) -> None:
    registry = tmp_path / "packages.txt"
    registry.write_text("# comment\n\nnode-exp|node_exporter  prometheus-node-exporter  why it is needed\n")
    (tool,) = load_registry(registry).values()
    assert (tool.name, tool.alternatives, tool.package, tool.why) == (
        "node-exp", ("node_exporter",), "prometheus-node-exporter", "why it is needed")


def test_one_install_command_per_package() -> None:
    assert install_command(["slurmctld", "sbatch", "scontrol"]) == (
        "sudo apt-get install -y --no-install-recommends slurm-client slurmctld"
    )


def test_every_tool_the_ci_used_to_install_is_in_the_registry() -> None:
    assert {"promtool", "prometheus", "prometheus-node-exporter", "cloud-init", "munged", "slurmctld", "slurmd",
            "sbatch", "ip"} <= set(TOOLS)  # fmt: skip


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    # Run as it is (beside the twin, niced, its output kept for after the twin's), not commented out.
    runs = [line for line in ci.splitlines() if not line.lstrip().startswith("#") and "bash tests/run" in line]
    assert len(runs) == 1 and re.search(r"(^|\s)bash tests/run(\s|$)", runs[0]), runs
    assert "apt-get install" not in ci.split("== twin")[0], "the unit suite's packages belong in tests/run"
    assert "\nbash tests/run\n" in readme


def test_tests_run_reads_the_registry() -> None:
    script = (REPO / "tests" / "run").read_text()
    assert "tests/system-packages.txt" in script
    assert os.access(REPO / "tests" / "run", os.X_OK)
