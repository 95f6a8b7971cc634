"""`ndfleet --help` and `--version` load no heavy dependency: the parser is built from the command modules alone,
and each command imports Pulumi, the Azure SDK, pydantic and Jinja2 in its handler (ndfleet/cli.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from ndfleet import cli

REPO = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT_S = 120  # a fresh interpreter on a loaded 2-core machine; only a hang gets near it
# What `pulumi up`, preflight and the configuration load; none is needed to print the help.
HEAVY = ("pulumi", "pulumi_azure_native", "azure", "pydantic", "jinja2")

LOADED_BY = """
import json, sys
from ndfleet import cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})), file=sys.stderr)
"""


def top_level_modules_loaded(*argv: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after `ndfleet ARGV` (the help printed, then exit)."""
    proc = subprocess.run([sys.executable, "-c", LOADED_BY, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [("--help",), ("plan", "--help"), ("preflight", "--help"), ("impact", "--help")])
def test_help_loads_no_heavy_dependency(argv: tuple[str, ...]) -> None:
    loaded = top_level_modules_loaded(*argv)
    assert "ndfleet" in loaded  # the probe did run the CLI
    assert not loaded & set(HEAVY), f"`ndfleet {' '.join(argv)}` imported {sorted(loaded & set(HEAVY))}"


def test_the_probe_sees_a_command_that_loads_pulumi() -> None:
    """The check above can fail: running a command that needs Pulumi (a plan of a missing stack file) shows it."""
    loaded = top_level_modules_loaded("plan", "--stack-file", str(REPO / "no-such-stack.yaml"))
    assert "pulumi" in loaded


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"ndfleet {version('ndfleet')}"


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    shown = capsys.readouterr().out
    for name in ("plan", "diff", "policy", "render", "preflight", "monitoring", "impact"):
        assert re.search(rf"^ {{4}}{name}\b", shown, re.MULTILINE), name
