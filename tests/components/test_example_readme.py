"""examples/bring-your-own-network works when copied out of the repository, exactly as its README says. The README's
commands are read from its fenced block: requirements.txt names the `ndfleet` package as a user installs it (by name
and version, found through PIP_FIND_LINKS, never a path into this checkout); the program imports only the public API
that docs/components.md lists; and the run is executed as written, in a copy of the example outside the repository
whose `venv` is the project's. tests/test_wheel.py runs the copied example with ndfleet installed from the wheel."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "bring-your-own-network"
FIND_LINKS = "export PIP_FIND_LINKS="
INSTALL = "python3 -m venv venv && venv/bin/pip install -r requirements.txt"


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (EXAMPLE / "README.md").read_text(), flags=re.DOTALL)
    assert len(blocks) == 1, "the example's README has one fenced bash block: its commands"
    return [line for line in blocks[0].splitlines() if line.strip() and not line.lstrip().startswith("#")]


def requirements() -> list[Requirement]:
    lines = [ln.strip() for ln in (EXAMPLE / "requirements.txt").read_text().splitlines()]
    return [Requirement(ln) for ln in lines if ln and not ln.startswith("#")]


def project_version() -> Version:
    found = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), flags=re.MULTILINE)
    assert found, "pyproject.toml: no version"
    return Version(found.group(1))


def public_api() -> dict[str, set[str]]:
    """docs/components.md's table of what a program may import: module -> names."""
    text = (REPO / "docs" / "components.md").read_text().split("## The public API", 1)[1]
    rows = re.findall(r"^\| `(ndfleet[\w.]*)` \| (.+) \|$", text, flags=re.MULTILINE)
    return {module: set(re.findall(r"`(\w+)`", names)) for module, names in rows}


def ndfleet_imports(program: Path) -> list[tuple[str, str]]:
    tree = ast.parse(program.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ndfleet":
            assert node.level == 0, "a relative import"
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name.split(".")[0] == "ndfleet"]
    return found


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """Every README command after the install, run by bash as written, in a copy of the example."""
    copy = tmp_path_factory.mktemp("example") / "bring-your-own-network"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    assert not copy.resolve().is_relative_to(REPO)
    (copy / "venv").symlink_to(Path(sys.prefix))  # what the install step makes: a venv with ndfleet in it
    script = "set -euo pipefail\n" + "\n".join(readme_commands()[2:]) + "\n"
    return subprocess.run(["bash", "-c", script], cwd=copy, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


def test_readme_installs_ndfleet_from_the_requirements_file() -> None:
    commands = readme_commands()
    assert commands[0].startswith(FIND_LINKS), "the README says where pip finds the ndfleet wheel"
    assert commands[1] == INSTALL


def test_requirements_name_the_ndfleet_package_and_a_version_range_this_checkout_meets() -> None:
    (req,) = requirements()
    assert req.name == "ndfleet" and req.url is None, "a package name, not a path or URL into a checkout"
    assert re.search(r'^name = "ndfleet"$', (REPO / "pyproject.toml").read_text(), flags=re.MULTILINE)
    assert req.specifier and project_version() in req.specifier


@pytest.mark.parametrize("name", ["requirements.txt", "Pulumi.yaml", "Pulumi.example.yaml", "__main__.py", "README.md"])
def test_the_example_relies_on_nothing_of_the_repository_layout(name: str) -> None:
    text = (EXAMPLE / name).read_text()
    assert "../" not in text and "-e " not in text and str(REPO) not in text


def test_the_program_imports_only_the_public_api() -> None:
    allowed = public_api()
    assert len(allowed) >= 10, "docs/components.md: the public API table is missing"
    imports = ndfleet_imports(EXAMPLE / "__main__.py")
    assert imports, "the example imports nothing of ndfleet"
    assert [(m, n) for m, n in imports if n not in allowed.get(m, set())] == []


def test_every_name_of_the_public_api_exists() -> None:
    missing = [
        f"{m}.{n}" for m, names in public_api().items() for n in names if not hasattr(importlib.import_module(m), n)
    ]
    assert missing == []


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
