"""examples/bring-your-own-network runs offline exactly as its README says. The README's commands are read from its
fenced block: the install is resolved offline (requirements.txt must name this checkout, which is the `ndfleet`
package), and the run is executed as written, in a copy of the example whose `venv` is the project's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "bring-your-own-network"
INSTALL = "python3 -m venv venv && venv/bin/pip install -r requirements.txt"


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (EXAMPLE / "README.md").read_text(), flags=re.DOTALL)
    assert len(blocks) == 1, "the example's README has one fenced bash block: its commands"
    return [line for line in blocks[0].splitlines() if line.strip() and not line.lstrip().startswith("#")]


def requirement_paths() -> list[Path]:
    lines = [ln.strip() for ln in (EXAMPLE / "requirements.txt").read_text().splitlines()]
    return [(EXAMPLE / ln).resolve() for ln in lines if ln and not ln.startswith("#")]


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """Every README command after the install, run by bash as written, in a copy of the example."""
    copy = tmp_path_factory.mktemp("example") / "bring-your-own-network"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    (copy / "venv").symlink_to(Path(sys.prefix))  # what the install step makes: a venv with ndfleet in it
    script = "set -euo pipefail\n" + "\n".join(readme_commands()[1:]) + "\n"
    return subprocess.run(["bash", "-c", script], cwd=copy, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


def test_readme_installs_ndfleet_from_the_requirements_file() -> None:
    assert readme_commands()[0] == INSTALL


def test_requirements_name_this_checkout_which_is_the_ndfleet_package() -> None:
    assert requirement_paths() == [REPO]
    assert re.search(r'^name = "ndfleet"$', (REPO / "pyproject.toml").read_text(), flags=re.MULTILINE)


def test_readme_run_plans_the_example_offline(readme_run: subprocess.CompletedProcess[str]) -> None:
    assert readme_run.returncode == 0, readme_run.stdout + readme_run.stderr
    assert re.search(r"^  \+ ib00-vmss +azure-native:compute:VirtualMachineScaleSet$", readme_run.stdout, re.M)
    assert "13 Azure resources to create" in readme_run.stdout
    assert "azure-native:network:VirtualNetwork" not in readme_run.stdout


def test_program_run_as_json_carries_the_inputs(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(Path(sys.prefix) / "bin" / "ndfleet"), "plan", "--program", str(EXAMPLE), "--stack-file",
         str(EXAMPLE / "Pulumi.example.yaml"), "--format", "json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (vmss,) = [r for r in doc["resources"] if r["type"] == "azure-native:compute:VirtualMachineScaleSet"]
    assert vmss["inputs"]["singlePlacementGroup"] is True and vmss["inputs"]["sku"]["capacity"] == 4


def test_a_folder_without_a_pulumi_program_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(Path(sys.prefix) / "bin" / "ndfleet"), "plan", "--program", str(tmp_path), "--stack-file",
         str(EXAMPLE / "Pulumi.example.yaml")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    said = f"ndfleet plan: error: --program {tmp_path}: no Pulumi.yaml there (a Pulumi project folder)"
    assert proc.stderr.strip() == said


def test_the_install_resolves_to_ndfleet_from_this_checkout_offline() -> None:
    """pip reads requirements.txt from the example's folder, as the README's install does; offline, dry run."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index", "--no-build-isolation",
         "--disable-pip-version-check", "-r", "requirements.txt"],
        cwd=EXAMPLE, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Would install ndfleet-" in proc.stdout
