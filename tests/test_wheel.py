"""The wheel: built offline from the source tree, installed (not editable) into a fresh virtual environment, and
used from a folder outside the checkout with no Pulumi project around: plan, render, diff and policy all work.

Offline (the suite runs under `unshare -rn`): the wheel is built with --no-build-isolation (setuptools comes with
the dev extra) and installed with --no-deps --no-index; the fresh venv reaches the dependencies (pulumi, pydantic,
...) through a .pth line naming this venv's site-packages. A path added by a .pth line is not scanned for further
.pth files, so the editable install of the checkout stays invisible there: `ndfleet` can only come from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from ndfleet.stackconfig.stackfile import find_project_file
from tests.conftest import REPO, STACKS_DIR

TIMEOUT_S = 600  # a loaded 2-core machine: generous
_SKIP_IN_COPY = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"
)


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the venv it is installed into)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(REPO, source, symlinks=True, ignore=_SKIP_IN_COPY)
    built = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w",
         str(work / "dist"), str(source)],
        cwd=work,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (work / "dist").glob("ndfleet-*.whl")

    venv = work / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=work)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=work)
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib.stdout.strip()) / "ndfleet-test-deps.pth").write_text("\n".join(sorted(ours)) + "\n")
    install = run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        cwd=work,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return wheel, venv


def test_wheel_holds_the_package_components_templates_and_node_program(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {f"ndfleet/templates/{p.relative_to(REPO / 'templates')}" for p in (REPO / "templates").rglob("*")
                 if p.is_file()}
    components = {f"ndfleet/components/{p.name}" for p in (REPO / "components").glob("*.py")}
    node = {f"ndfleet_node/{p.name}" for p in (REPO / "node" / "ndfleet_node").glob("*.py")}
    images = {f"ndfleet/images/{p.name}" for p in (REPO / "ndfleet" / "images").glob("*.json")}
    assert templates and components and node and images
    assert templates | components | node | images | {"ndfleet/py.typed", "ndfleet/cli.py",
                                                     "ndfleet/status/schema.json"} <= names
    assert not any(n.startswith(("components/", "templates/", "tests/")) for n in names)


def test_installed_commands_work_outside_the_checkout(installed: tuple[Path, Path], tmp_path: Path) -> None:
    _, venv = installed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert find_project_file(elsewhere) is None  # no Pulumi.yaml here or above: --stack-file alone
    shutil.copy(STACKS_DIR / "Pulumi.dev.yaml", elsewhere / "Pulumi.dev.yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    ndfleet = str(venv / "bin" / "ndfleet")

    where = run([str(venv / "bin" / "python"), "-c",
                 "import ndfleet, ndfleet.components.cluster, ndfleet_node; print(ndfleet.__file__)"], elsewhere, env)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(venv)), where.stdout  # the wheel's copy, not the checkout

    table = run([ndfleet, "plan", "--stack-file", "Pulumi.dev.yaml"], elsewhere, env)
    assert table.returncode == 0, table.stderr
    assert "Azure resources to create" in table.stdout and "example key" in table.stdout

    plan = run([ndfleet, "plan", "--stack-file", "Pulumi.dev.yaml", "--format", "json"], elsewhere, env)
    assert plan.returncode == 0, plan.stderr
    (elsewhere / "plan.json").write_text(plan.stdout)
    assert json.loads(plan.stdout)["stack"] == "dev"

    render = run([ndfleet, "render", "--stack-file", "Pulumi.dev.yaml", "--out", "out"], elsewhere, env)
    assert render.returncode == 0, render.stderr
    assert (elsewhere / "out" / "compute" / "validate-node").read_text().startswith("#!")
    assert (elsewhere / "out" / "compute" / "custom-data.b64").stat().st_size > 0

    diff = run([ndfleet, "diff", "plan.json", "plan.json"], elsewhere, env)
    assert diff.returncode == 0, diff.stderr
    assert "dev" in diff.stdout

    policy = run([ndfleet, "policy", "plan.json"], elsewhere, env)
    assert policy.returncode == 0, policy.stdout + policy.stderr


def test_the_example_copied_out_of_the_repository_installs_and_plans_with_the_wheel(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    """examples/bring-your-own-network, copied to a folder outside the checkout: its requirements.txt resolves to the
    wheel through PIP_FIND_LINKS (as its README says; offline, so --no-deps --no-index and a dry run), and its program,
    run by the wheel's `ndfleet plan --program .` under the mock runtime, creates the island and its storage."""
    wheel, venv = installed
    example = tmp_path / "bring-your-own-network"
    shutil.copytree(REPO / "examples" / "bring-your-own-network", example, ignore=_SKIP_IN_COPY)
    assert not example.resolve().is_relative_to(REPO)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}

    resolve = run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index", "--disable-pip-version-check",
         "--ignore-installed", "-r", "requirements.txt"],
        example, {**env, "PIP_FIND_LINKS": str(wheel.parent)},
    )  # fmt: skip
    assert resolve.returncode == 0, resolve.stdout + resolve.stderr
    assert f"Would install ndfleet-{wheel.name.split('-')[1]}" in resolve.stdout

    (example / "venv").symlink_to(venv)  # what the README's install makes: a venv with ndfleet in it
    plan = run([str(example / "venv" / "bin" / "ndfleet"), "plan", "--program", ".", "--stack-file",
                "Pulumi.example.yaml", "--format", "json"], example, env)  # fmt: skip
    assert plan.returncode == 0, plan.stdout + plan.stderr
    types = [r["type"] for r in json.loads(plan.stdout)["resources"]]
    assert "azure-native:compute:VirtualMachineScaleSet" in types and "azure-native:storage:StorageAccount" in types
    assert "azure-native:network:VirtualNetwork" not in types  # the network is the user's


def test_wheel_installs_the_node_program_command(installed: tuple[Path, Path], tmp_path: Path) -> None:
    """`ndfleet-node` (project.scripts) comes with the wheel and runs the node program's parser."""
    _, venv = installed
    command = venv / "bin" / "ndfleet-node"
    assert command.is_file(), "the wheel installed no ndfleet-node command"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    shown = run([str(command), "--help"], tmp_path, env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: ndfleet-node") and "validate" in shown.stdout


def test_uv_lock_matches_pyproject(tmp_path: Path) -> None:
    """uv.lock (what `pulumi up` installs with the uv toolchain) is current with pyproject.toml: `uv lock --check`
    fails when a dependency range changed without `uv lock`. Offline and with an empty cache, as in CI."""
    uv = Path(sys.prefix) / "bin" / "uv"
    assert uv.exists(), "uv comes with the dev extra"
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    check = run([str(uv), "lock", "--check", "--offline"], REPO, env)
    assert check.returncode == 0, check.stdout + check.stderr
