"""`--stack-name`: an edited copy of a stack file (Pulumi.mine2.yaml) planned under the original's name, so the
diff against the original shows only the edit (resource names derive from the stack name)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from ndfleet import cli
from tests.conftest import STACKS_DIR


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def edited_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """stacks/Pulumi.dev.yaml copied to Pulumi.mine2.yaml with one node more."""
    doc = yaml.safe_load((STACKS_DIR / "Pulumi.dev.yaml").read_text())
    assert doc["config"]["ndfleet:nodes"] == 2
    doc["config"]["ndfleet:nodes"] = 3
    path = tmp_path_factory.mktemp("copy") / "Pulumi.mine2.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def dev_plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    code, out, err = run_cli("plan", "--stack", "dev", "--format", "json")
    assert code == 0, err
    path = tmp_path_factory.mktemp("base") / "dev.json"
    path.write_text(out)
    return path


def diff_against_dev(dev_plan_file: Path, edited_copy: Path, *name: str, diff_args: tuple[str, ...] = ()
                     ) -> dict[str, int]:
    code, out, err = run_cli("plan", "--stack-file", str(edited_copy), *name, "--format", "json")
    assert code == 0, err
    head = dev_plan_file.with_name(f"head{len(name)}.json")
    head.write_text(out)
    code, text, err = run_cli("diff", str(dev_plan_file), str(head), "--format", "text", *diff_args)
    assert code == 0, err
    first = text.splitlines()[0]  # "1 stack (dev: 0 to create, 3 to update, 0 to delete, ...)"
    counts = {verb: int(first.split(f" to {verb}")[0].rsplit(" ", 1)[1]) for verb in ("create", "update", "delete")}
    counts["capacity 2 -> 3"] = text.count("sku.capacity: 2 -> 3")
    return counts


def test_copy_planned_under_the_original_name_diffs_as_the_edit_only(dev_plan_file: Path, edited_copy: Path) -> None:
    counts = diff_against_dev(dev_plan_file, edited_copy, "--stack-name", "dev")
    assert counts["create"] == 0 and counts["delete"] == 0
    assert counts["capacity 2 -> 3"] == 1


def test_copy_planned_under_its_file_name_replaces_everything(dev_plan_file: Path, edited_copy: Path) -> None:
    """What --stack-name is for: without it every resource is renamed (mine2-...), so all are deleted and created
    (what `ndfleet diff` shows only when told the two stacks differ on purpose)."""
    counts = diff_against_dev(dev_plan_file, edited_copy, diff_args=("--allow-different-stacks",))
    assert counts["delete"] > 50 and counts["create"] > 50


def test_a_copy_planned_under_its_file_name_is_another_stack_to_diff(dev_plan_file: Path, edited_copy: Path) -> None:
    code, out, err = run_cli("plan", "--stack-file", str(edited_copy), "--format", "json")
    assert code == 0, err
    head = dev_plan_file.with_name("other.json")
    head.write_text(out)
    code, _, err = run_cli("diff", str(dev_plan_file), str(head))
    stack = json.loads(out)["stack"]
    assert code == 2 and f"is a plan of stack 'dev' and {head} of stack {stack!r}" in err


def test_stack_name_is_the_plans_stack(edited_copy: Path) -> None:
    code, out, err = run_cli("plan", "--stack-file", str(edited_copy), "--stack-name", "dev", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["stack"] == "dev"


# Every command that takes --stack-name, with what else it needs: each must read the stack through it (a command
# that accepted the option and ignored it would plan or check the wrong stack name without a word).
STACK_NAME_COMMANDS = {
    "plan": (), "render": ("--out", "unused"), "monitoring": ("--out", "unused"), "cost": (), "preflight": (),
    "impact list": (), "status": (), "goodput": (),
}  # fmt: skip


@pytest.mark.parametrize("command", sorted(STACK_NAME_COMMANDS))
def test_stack_name_with_stack_is_refused(command: str) -> None:
    argv = (*command.split(), "--stack", "dev", "--stack-name", "other", *STACK_NAME_COMMANDS[command])
    code, _, err = run_cli(*argv)
    assert code != 0
    assert "--stack-name 'other' goes with --stack-file" in err


def _commands_taking_stack_name(parser: argparse.ArgumentParser, prefix: str = "") -> set[str]:
    found: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _commands_taking_stack_name(sub, f"{prefix}{name} ")
        elif "--stack-name" in action.option_strings:
            found.add(prefix.strip())
    return found


def test_every_command_that_reads_a_stack_is_listed() -> None:
    # diff reads plans, not stacks: its --stack-name only names the stack shown (docs/cli.md).
    assert _commands_taking_stack_name(cli.build_parser()) == set(STACK_NAME_COMMANDS) | {"impact show", "diff"}


def test_invalid_stack_name_is_named(edited_copy: Path) -> None:
    code, _, err = run_cli("render", "--stack-file", str(edited_copy), "--stack-name", "a b", "--out", "unused")
    assert code != 0
    assert "--stack-name: stack name 'a b' is not valid" in err
