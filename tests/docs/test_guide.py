"""docs/guide.md: every `ndfleet` command line in its fenced blocks runs as the guide says.

Each such line carries its expected exit status as a trailing comment (`# exit 0`). Commands that run offline are
executed, in the guide's order, in one folder (so `plan.json` written by one is read by the next), with the
example stacks of this checkout; those that need Azure are in NEEDS_AZURE with the reason, and for them the
subcommand and every option they use must exist (`--help`). A misspelt command or option fails either way."""

from __future__ import annotations

import argparse
import functools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import STACKS_DIR

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "guide.md"
NDFLEET = str(Path(sys.executable).with_name("ndfleet"))
TIMEOUT_S = 300  # a plan takes seconds; generous for a loaded 2-core machine
# Subcommands that ask Azure, with why they are not run here.
NEEDS_AZURE = {
    "preflight": "asks Azure Resource Manager (quota, SKUs, permissions); offline it exits 2, 'could not check'",
    "impact": "lists Guest Health Reports from Azure Resource Manager",
}


@functools.cache
def guide_commands() -> list[tuple[str, int]]:
    """(command line, expected exit) for every line starting with `ndfleet` inside a ```bash block (the plain
    blocks show output)."""
    commands: list[tuple[str, int]] = []
    fence: str | None = None
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            continue
        if fence == "bash" and line.strip().startswith("ndfleet"):
            command, _, comment = line.strip().partition("#")
            status = re.fullmatch(r"\s*exit (\d+)\s*", comment)
            assert status, f"docs/guide.md: {line.strip()!r} does not say its exit status (# exit N)"
            commands.append((command.strip(), int(status.group(1))))
    return commands


def argv_and_output(command: str) -> tuple[list[str], str | None]:
    """`ndfleet ... > FILE` -> (argv after `ndfleet`, FILE); no other shell syntax is allowed in the guide."""
    words = shlex.split(command)
    out = None
    if ">" in words:
        at = words.index(">")
        assert len(words) == at + 2, f"{command!r}: only a trailing '> FILE' is supported"
        out, words = words[at + 1], words[:at]
    assert not any(w in ("|", "&&", ";", "<", ">>") for w in words), f"{command!r}: shell syntax"
    assert words[0] == "ndfleet", command
    return words[1:], out


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NDFLEET, *argv], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def test_the_guide_has_offline_and_azure_commands() -> None:
    subcommands = {argv_and_output(c)[0][0] for c, _ in guide_commands()}
    assert {"plan", "render", "policy", "diff", "monitoring"} <= subcommands
    assert "preflight" in subcommands


def test_every_offline_command_exits_as_the_guide_says(tmp_path: Path) -> None:
    # The checkout's project file and example stacks, as in a clone of the repository.
    (tmp_path / "Pulumi.yaml").symlink_to(REPO / "Pulumi.yaml")
    (tmp_path / "stacks").symlink_to(STACKS_DIR, target_is_directory=True)
    ran = 0
    for command, expected in guide_commands():
        argv, out = argv_and_output(command)
        if argv[0] in NEEDS_AZURE:
            continue
        result = run(argv, tmp_path)
        assert result.returncode == expected, f"{command}: exit {result.returncode}\n{result.stderr[-2000:]}"
        if out is not None:
            (tmp_path / out).write_text(result.stdout)
        ran += 1
    assert ran >= 5


@pytest.mark.parametrize("subcommand", sorted(NEEDS_AZURE))
def test_azure_commands_are_spelt_right(subcommand: str, tmp_path: Path) -> None:
    lines = [argv_and_output(c)[0] for c, _ in guide_commands() if argv_and_output(c)[0][0] == subcommand]
    for argv in lines:
        words = [w for w in argv if not w.startswith("<")]
        positional = [w for w in words[1:] if not w.startswith("-")]
        sub = [words[0], *positional[:1]] if subcommand == "impact" else [words[0]]
        help_text = run([*sub, "--help"], tmp_path)
        assert help_text.returncode == 0, f"ndfleet {' '.join(sub)}: {help_text.stderr}"
        for option in (w.split("=")[0] for w in words if w.startswith("--")):
            assert option in help_text.stdout, f"ndfleet {' '.join(argv)}: no option {option}"


def test_a_misspelt_command_would_fail(tmp_path: Path) -> None:
    # The check above relies on argparse refusing an unknown subcommand or option with a non-zero exit.
    assert run(["plna", "--stack", "dev"], tmp_path).returncode != 0
    assert run(["plan", "--stak", "dev"], tmp_path).returncode != 0


def test_the_guide_lists_every_command_the_tool_has() -> None:
    """Step 1 names the commands `ndfleet --help` shows: all of them, in the parser's order."""
    from ndfleet.cli import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    listed = ", ".join(f"`{name}`" for name in commands.choices)
    assert f"You should see the command list: {listed}." in " ".join(GUIDE.read_text().split())
