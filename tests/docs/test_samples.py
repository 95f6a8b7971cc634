"""Every sample of the tool's output in README.md and docs/*.md is the tool's output, checked here by running it.

A sample is a fenced block right after a marker line naming the command and its exit status:

    <!-- sample: exit 0: ndfleet plan --stack dev -->

Several commands may be joined with ` && `, and a command's stdout written to a file with ` > FILE`, as a shell
would; the exit status and output checked are the last command's.

The block's lines must appear in the command's output (stdout, then stderr), in order and whole; a line `...`
stands for any number of lines the page leaves out. The commands run from a scratch folder holding a copy of
stacks/ and Pulumi.yaml (so `--out` writes nowhere in the repository), without Azure credentials, with networking
off like the rest of the suite. A page that quotes output without a marker is not checked: mark it.
"""

from __future__ import annotations

import operator
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!-- sample: exit (\d+): (ndfleet .*?) -->$")
TIMEOUT_S = 600  # generous: a plan of the prod stack under the mocks takes seconds; a loaded 2-core runner more


@dataclass(frozen=True)
class Sample:
    page: str
    line: int
    command: str
    exit_status: int
    expected: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.command}"


def marked_blocks(page: Path, marker: re.Pattern[str]) -> list[tuple[int, re.Match[str], tuple[str, ...]]]:
    """(line number, the marker's match, the fenced block's lines) for each marker line on the page."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found = []
    for i, line in enumerate(lines):
        m = marker.match(line.strip())
        if not m:
            continue
        start = i + 1
        if start >= len(lines) or not lines[start].startswith("```"):
            raise AssertionError(f"{page.name}:{i + 1}: a sample marker must be followed by a fenced block")
        end = next(j for j in range(start + 1, len(lines)) if lines[j].startswith("```"))
        found.append((i + 1, m, tuple(lines[start + 1 : end])))
    return found


def samples_in(page: Path) -> list[Sample]:
    return [Sample(page.relative_to(REPO).as_posix(), n, m.group(2), int(m.group(1)), block)
            for n, m, block in marked_blocks(page, MARKER)]  # fmt: skip


def unmatched(
    expected: tuple[str, ...], output: list[str], same: Callable[[str, str], bool] = operator.eq
) -> str | None:
    """None when every expected line appears in order (`...` skipping any lines); else the first that does not.
    `same(expected, printed)`: whether a line is the printed one (whole, unless a caller says otherwise)."""
    at = 0
    skipping = False
    for want in expected:
        if want.strip() == "...":
            skipping = True
            continue
        want = want.rstrip()
        if skipping:
            while at < len(output) and not same(want, output[at]):
                at += 1
        if at >= len(output) or not same(want, output[at]):
            return want
        at += 1
        skipping = False
    return None


ALL = [s for page in PAGES for s in samples_in(page)]


def test_the_pages_have_samples() -> None:
    assert len(ALL) >= 5, [str(s) for s in ALL]


@pytest.mark.parametrize("sample", ALL, ids=str)
def test_sample_is_what_the_tool_prints(sample: Sample, tmp_path: Path) -> None:
    shutil.copytree(REPO / "stacks", tmp_path / "stacks")
    shutil.copy(REPO / "Pulumi.yaml", tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "ARM_"))}
    for step in sample.command.split(" && "):  # earlier steps prepare files (`... > plan.json`)
        words = shlex.split(step)
        into = None
        if len(words) > 2 and words[-2] == ">":
            words, into = words[:-2], tmp_path / words[-1]
        assert words[0] == "ndfleet", f"{sample}: a sample runs ndfleet commands only"
        done = subprocess.run([sys.executable, "-m", "ndfleet.cli", *words[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=False)  # fmt: skip
        if into is not None:
            into.write_text(done.stdout)
            done.stdout = ""
    output = [line.rstrip() for line in (done.stdout + done.stderr).splitlines()]
    assert done.returncode == sample.exit_status, f"{sample}: exit {done.returncode}\n{done.stdout}{done.stderr}"
    missing = unmatched(sample.expected, output)
    assert missing is None, f"{sample}: the tool does not print\n  {missing}\nit printed:\n" + "\n".join(output)


def test_a_sample_line_the_tool_does_not_print_is_reported() -> None:
    out = ["a", "b", "c", "d"]
    assert unmatched(("a", "...", "d"), out) is None
    assert unmatched(("a", "c"), out) == "c"  # no `...`: lines must follow one another
    assert unmatched(("a", "...", "c", "...", "b"), out) == "b"  # order matters
    assert unmatched(("b",), out) == "b"  # the first line is the first printed, unless after `...`
