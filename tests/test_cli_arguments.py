"""Every command's argument combinations, walked from the argparse parser itself: never a traceback, and an exit
code from the command's documented set (docs/cli.md, "The commands").

Nothing here lists commands or options: they come from `ndfleet.cli.build_parser()`, so a command or option added
later is walked too. For each command, with a stack (`--stack dev`, the repository's example) and the positional
arguments it needs: the command alone; each option alone, with each of its values (every choice; a flag; an optional
value bare and given); each pair of options, with every pair of values (so each pair of options that depend on each
other, `cost --write` with and without `--refresh`, is among them); and the stack options' own combinations (each
alone, `--stack-file` with `--stack-name`, both of the exclusive pair, none); positional arguments that may be left
out (`diff BASE HEAD` or `diff --base-dir A --head-dir B`) are walked given and left out. The exit codes allowed for
a command are read from docs/cli.md's table, so the documentation and the code cannot drift apart silently.

`python -m tests.test_cli_arguments` prints the list of combinations (issue 44 asked for it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import pytest

from ndfleet.cli import build_parser, main
from ndfleet.cliconvention import EXIT_USAGE, leaf_parsers

REPO = Path(__file__).resolve().parents[1]
STACK = "dev"
STACK_FILE = f"stacks/Pulumi.{STACK}.yaml"
SCRATCH = "<scratch>"  # replaced by the test's own folder when a combination runs
# A positional argument's value, by its dest: a plan where a plan file goes, the impact's GUID.
PLAN_FILE = f"{SCRATCH}/plans/{STACK}.json"
POSITIONAL_VALUES = {"plan": PLAN_FILE, "base": PLAN_FILE, "head": PLAN_FILE,
                     "name": "00000000-0000-0000-0000-000000000000"}  # fmt: skip
# An option's value, by the kind its metavar names (a folder, a file, a name, a time); a typed option gets a number.
METAVAR_VALUES = {"DIR": f"{SCRATCH}/dir", "FILE": f"{SCRATCH}/file.json", "PATH": STACK_FILE, "NAME": STACK,
                  "WHEN": "1d", "SECONDS": "5"}  # fmt: skip
SECONDS_PER_RUN = 120  # a command that does not come back (a watch that never stops) fails the test, not the suite


def documented_exit_codes() -> dict[str, set[int]]:
    """docs/cli.md's command table: each command's exit codes, from the second column, notes in brackets aside."""
    table = (REPO / "docs" / "cli.md").read_text().split("## The commands", 1)[1].split("\n## ", 1)[0]
    codes: dict[str, set[int]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        plain = cells[1]
        while "(" in plain:  # drop the notes, which may hold figures of their own
            plain = re.sub(r"\([^()]*\)", "", plain)
        found = {int(n) for n in re.findall(r"\d+", plain)}
        for command in re.findall(r"`([a-z ]+?)(?: [A-Z]+)?`", cells[0]):
            codes[command] = found
    return codes


def words(parser: argparse.ArgumentParser) -> list[str]:
    return parser.prog.split()[1:]


def option_values(action: argparse.Action) -> list[list[str]]:
    """Every way to give one option: each choice, the flag, an optional value bare and given."""
    option = action.option_strings[-1]
    if action.nargs == 0:
        return [[option]]
    if action.choices:
        return [[option, str(c)] for c in action.choices]
    if action.metavar in METAVAR_VALUES:
        value = METAVAR_VALUES[str(action.metavar)]
    elif action.dest.endswith("_dir"):  # a folder of plans (`diff --base-dir`)
        value = f"{SCRATCH}/plans"
    elif action.type is not None:
        value = "5"
    else:
        value = "x"
    return ([[option]] if action.nargs == "?" else []) + [[option, value]]


def required_group(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The members of the command's required either-or group (`--stack` | `--stack-file`), if it has one."""
    groups = [g for g in parser._mutually_exclusive_groups if g.required]  # noqa: SLF001 - no public walk
    return list(groups[0]._group_actions) if groups else []  # noqa: SLF001


@dataclass(frozen=True)
class Combination:
    command: str
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return "ndfleet " + " ".join(self.argv)


def combinations(parser: argparse.ArgumentParser) -> Iterator[Combination]:
    command = " ".join(words(parser))
    group = required_group(parser)
    positional: list[str] = []
    required: list[str] = []
    optional: list[argparse.Action] = []
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._HelpAction):  # noqa: SLF001
            continue
        if not action.option_strings:
            positional.append(POSITIONAL_VALUES[action.dest])
        elif action in group:
            continue
        elif action.required:
            required += option_values(action)[-1]
        else:
            optional.append(action)
    stack = option_values(group[0])[-1] if group else []  # `--stack dev`
    base = [*words(parser), *positional, *required]
    # Positional arguments that may be left out (`diff BASE HEAD` or `diff --base-dir ...`): the options are walked
    # with them and without them.
    optional_positionals = bool(positional) and all(
        a.nargs == "?" for a in parser._actions if not a.option_strings  # noqa: SLF001
    )
    bases = [base, [*words(parser), *required]] if optional_positionals else [base]

    def combo(*parts: list[str], start: list[str] = base) -> Combination:
        return Combination(command, tuple(start + [w for part in parts for w in part]))

    for start in bases:
        yield combo(stack, start=start)
        for action in optional:
            for value in option_values(action):
                yield combo(stack, value, start=start)
        for first, second in itertools.combinations(optional, 2):
            for a, b in itertools.product(option_values(first), option_values(second)):
                yield combo(stack, a, b, start=start)
    if group:
        for member in group[1:]:
            yield combo(option_values(member)[-1])
            for action in optional:  # `--stack-file PATH --stack-name NAME`
                for value in option_values(action):
                    if action.metavar == "NAME":
                        yield combo(option_values(member)[-1], value)
        yield combo(*(option_values(member)[-1] for member in group))  # both of an either-or: a usage error
        yield combo()  # neither: a usage error
    if positional and not optional_positionals:
        yield Combination(command, tuple(words(parser) + required + stack))  # the positional arguments left out


LEAVES = leaf_parsers(build_parser())
ALL = [c for p in LEAVES for c in combinations(p)]


def test_the_walk_covers_every_command_and_option() -> None:
    documented = documented_exit_codes()
    assert f"{len(ALL)} in all today" in (REPO / "docs" / "cli.md").read_text()  # the figure docs/cli.md states
    for parser in LEAVES:
        command = " ".join(words(parser))
        assert command in documented, f"docs/cli.md's command table has no row for `{command}`"
        assert {0, EXIT_USAGE} <= documented[command], command
        walked = {w for c in ALL if c.command == command for w in c.argv}
        for action in parser._actions:  # noqa: SLF001
            for option in action.option_strings[-1:]:
                assert option in walked or isinstance(action, argparse._HelpAction), (command, option)  # noqa: SLF001


class Hung(Exception):
    pass


def _hung(signum: int, frame: FrameType | None) -> None:
    raise Hung(f"no answer in {SECONDS_PER_RUN} s")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ndfleet.plans.build import run_plan
    from ndfleet.stackconfig.stackfile import load_stack

    folder = tmp_path_factory.mktemp("walk")
    (folder / "plans").mkdir()
    (folder / "plans" / f"{STACK}.json").write_text(run_plan(load_stack(path=REPO / STACK_FILE)).to_json())
    return folder


@pytest.mark.parametrize("combination", ALL, ids=[str(c) for c in ALL])
def test_no_traceback_and_a_documented_exit_code(
    combination: Combination, scratch: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ndfleet.cost.retail import ENDPOINT_ENV

    monkeypatch.chdir(REPO)
    for name in ("AZURE_SUBSCRIPTION_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(ENDPOINT_ENV, "http://127.0.0.1:9/api/retail/prices")  # refused at once, never the internet
    argv = [w.replace(SCRATCH, str(scratch)) for w in combination.argv]
    previous = signal.signal(signal.SIGALRM, _hung)
    signal.alarm(SECONDS_PER_RUN)
    try:
        code = main(argv)
    except SystemExit as stopped:  # argparse's own exits: a usage error, --version
        code = stopped.code if isinstance(stopped.code, int) else 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out, err
    allowed = documented_exit_codes()[combination.command]
    assert code in allowed, f"{combination}: exit {code}, docs/cli.md gives {sorted(allowed)}\n{err}"
    if code == EXIT_USAGE:  # said as the convention says: a prefixed line, or the JSON error under --format json
        said = re.search(r"^ndfleet[a-z ]*: error: ", err, re.MULTILINE) or (
            out.startswith("{") and json.loads(out)["exitCode"] == EXIT_USAGE
        )
        assert said, (out, err)


if __name__ == "__main__":
    for combination in ALL:
        sys.stdout.write(f"{combination}\n")
    sys.stdout.write(f"{len(ALL)} combinations of {len(LEAVES)} commands\n")
