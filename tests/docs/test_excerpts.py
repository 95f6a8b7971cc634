"""Samples the offline runner of test_samples.py cannot produce: `ndfleet preflight` against recorded Resource
Manager answers, and excerpts of a JSON document. Each is the tool's real output, checked here by running it.

A preflight sample follows a marker naming the command, its exit status and the recorded answers (files of
tests/data/arm/, by route of tests/test_preflight.py's `arm`; every route not named answers "everything available"):

    <!-- preflight sample: exit 1: ndfleet preflight --stack dev | usages=usages-eastus-family-short.json -->

The command runs through `preflight.run_cli` with the real Azure SDK clients, only their last hop replaced by the
recordings (ReplayTransport), the subscription tests/test_preflight.py's SUB. A table block is compared as
test_samples.py compares text (lines in order, `...` alone on a line for left-out lines) and a line may also leave
out part of itself with `...` (a long subscription id, a fix's command); the figures around it are compared.

A JSON excerpt follows `<!-- json excerpt: exit N: COMMAND -->` (COMMAND an offline `ndfleet plan` or a preflight
command with its recordings, as above). The block is JSON; every value it shows is the tool's: an object lists
all the document's keys unless it has the key `"..."`, a list its items in order, `"..."` standing for any number
left out, and a string with `...` in it leaves that part out. Measured values (KEYS_MEASURED) are checked by type.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ndfleet import preflight
from ndfleet.cli import build_parser
from tests.docs.test_samples import PAGES, REPO, TIMEOUT_S, marked_blocks, unmatched
from tests.test_preflight import SUB, TINY_RETRY, FakeCredential, arm, ok
from tests.test_preflight import no_network as no_network  # the autouse guard: recordings only, no socket

MARKER = re.compile(r"^<!-- (preflight sample|json excerpt): exit (\d+): (ndfleet .*?)(?: \| (.*?))? -->$")
KEYS_MEASURED = {"elapsedSeconds"}  # how long the run took: differs on every run


@dataclass(frozen=True)
class Excerpt:
    page: str
    line: int
    kind: str
    command: str
    exit_status: int
    recordings: tuple[tuple[str, str], ...]  # (route, file of tests/data/arm/)
    block: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.command}"


def excerpts_in(page: Path) -> list[Excerpt]:
    found = []
    for n, m, block in marked_blocks(page, MARKER):
        pairs = [pair.partition("=") for pair in (m.group(4) or "").split()]
        assert all(route and eq and file for route, eq, file in pairs), f"{page.name}:{n}: ROUTE=FILE"
        recordings = tuple((route, file) for route, _, file in pairs)
        found.append(Excerpt(page.relative_to(REPO).as_posix(), n, m.group(1), m.group(3), int(m.group(2)),
                             recordings, block))  # fmt: skip
    return found


ALL = [e for page in PAGES for e in excerpts_in(page)]


def run(excerpt: Excerpt, tmp_path: Path) -> tuple[int, str, str]:
    """The command's exit status, stdout and stderr."""
    words = shlex.split(excerpt.command)
    assert words[0] == "ndfleet", f"{excerpt}: an excerpt runs an ndfleet command"
    if words[1] == "preflight":
        transport = arm((), **{route: ok(file) for route, file in excerpt.recordings})
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = preflight.run_cli(build_parser().parse_args(words[1:]), env={"AZURE_SUBSCRIPTION_ID": SUB},
                                     credential=FakeCredential(), transport=transport, retry=TINY_RETRY)  # fmt: skip
        return code, out.getvalue(), err.getvalue()
    assert not excerpt.recordings, f"{excerpt}: recorded Azure answers are for preflight only"
    shutil.copytree(REPO / "stacks", tmp_path / "stacks")
    shutil.copy(REPO / "Pulumi.yaml", tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AZURE_", "ARM_"))}
    done = subprocess.run([sys.executable, "-m", "ndfleet.cli", *words[1:]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def same_line(want: str, got: str) -> bool:
    """A page's line is the printed line; `...` in it stands for a part left out."""
    return re.fullmatch(".*".join(re.escape(part) for part in want.split("...")), got) is not None


def differences(shown: Any, real: Any, at: str = "$") -> list[str]:
    """Where the page's JSON excerpt says something the document does not (empty when it is a faithful excerpt)."""
    if isinstance(shown, dict):
        if not isinstance(real, dict):
            return [f"{at}: the page shows an object, the tool wrote {json.dumps(real)[:80]}"]
        found = [f"{at}: the tool wrote no key {key!r}" for key in shown if key != "..." and key not in real]
        if "..." not in shown:
            found += [f"{at}: the page leaves out key {key!r} without a '...' key" for key in real if key not in shown]
        for key, value in shown.items():
            if key in KEYS_MEASURED and key in real:
                if type(value) is not type(real[key]):
                    found.append(f"{at}.{key}: the page shows a {type(value).__name__}, the tool wrote {real[key]!r}")
            elif key != "..." and key in real:
                found += differences(value, real[key], f"{at}.{key}")
        return found
    if isinstance(shown, list):
        if not isinstance(real, list):
            return [f"{at}: the page shows a list, the tool wrote {json.dumps(real)[:80]}"]
        return list_differences(shown, real, at)
    if isinstance(shown, str) and isinstance(real, str) and "..." in shown:
        return [] if same_line(shown, real) else [f"{at}: the page shows {shown!r}, the tool wrote {real!r}"]
    if shown != real or type(shown) is not type(real):
        return [f"{at}: the page shows {json.dumps(shown)}, the tool wrote {json.dumps(real)}"]
    return []


def list_differences(shown: list[Any], real: list[Any], at: str) -> list[str]:
    """Items in order; a `"..."` item stands for any number of the tool's items (the first that fits is taken)."""
    i = 0
    skipping = False
    for n, item in enumerate(shown):
        if item == "...":
            skipping = True
            continue
        start = i
        while skipping and i < len(real) and differences(item, real[i]):
            i += 1
        if i >= len(real):
            nearest = min((differences(item, r, f"{at}[{j}]") for j, r in enumerate(real[start:], start)), key=len,
                          default=[])  # fmt: skip
            return [f"{at}[{n}]: the tool wrote no item matching {json.dumps(item)[:120]}", *nearest]
        found = differences(item, real[i], f"{at}[{i}]")
        if found:
            return found
        i += 1
        skipping = False
    if not skipping and i < len(real):
        return [f"{at}: the page leaves out {len(real) - i} item(s) at the end without a '...' item"]
    return []


def test_the_pages_have_excerpts() -> None:
    kinds = {e.kind for e in ALL}
    assert kinds == {"preflight sample", "json excerpt"}, [str(e) for e in ALL]


@pytest.mark.parametrize("excerpt", ALL, ids=str)
def test_excerpt_is_what_the_tool_prints(excerpt: Excerpt, tmp_path: Path) -> None:
    code, stdout, stderr = run(excerpt, tmp_path)
    assert code == excerpt.exit_status, f"{excerpt}: exit {code}\n{stdout}{stderr}"
    if excerpt.kind == "json excerpt":
        found = differences(json.loads("\n".join(excerpt.block)), json.loads(stdout))
        assert not found, f"{excerpt}: the page's excerpt differs from the tool's document:\n  " + "\n  ".join(found)
        return
    printed = [line.rstrip() for line in (stdout + stderr).splitlines()]
    missing = unmatched(excerpt.block, printed, same_line)
    assert missing is None, f"{excerpt}: the tool does not print\n  {missing}\nit printed:\n" + "\n".join(printed)


def test_a_json_excerpt_that_differs_from_the_document_is_reported() -> None:
    real = {"a": 1, "b": [1, 2, 3], "c": "/subscriptions/8f3c/x"}
    assert differences({"a": 1, "b": [1, "..."], "c": "/subscriptions/..."}, real) == []
    assert differences({"a": 2, "...": "..."}, real) == ["$.a: the page shows 2, the tool wrote 1"]
    assert differences({"a": 1, "b": ["...", 3], "...": "..."}, real) == []
    assert differences({"a": 1, "b": ["...", 3, 2], "...": "..."}, real)  # order matters
    assert differences({"a": 1, "b": [1, 2], "...": "..."}, real)  # no "...": no items left out at the end
    assert differences({"a": 1, "b": [1, 2, 3]}, real) == ["$: the page leaves out key 'c' without a '...' key"]
    assert differences({"c": "/resourceGroups/...", "...": "..."}, real)
    assert differences({"a": True, "...": "..."}, {"a": 1})  # JSON true is not 1


def test_a_line_may_leave_out_part_of_itself() -> None:
    assert same_line("subscription 8f3c..., AzureCloud", "subscription 8f3c2a1e-5b7d, AzureCloud")
    assert not same_line("subscription 8f3c..., AzureCloud", "subscription 9f3c2a1e-5b7d, AzureCloud")
    assert not same_line("needed 24576)", "needed 24608)")
