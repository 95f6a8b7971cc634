"""Hostile input to the files the CLI reads (plan files for `diff`/`policy`, stack files for every stack command):
each is refused with a named error, within bounded time and memory, never a traceback, never a pass.

- a number a plan cannot hold (NaN, Infinity, 1e999, a 5,000-digit integer): refused naming its JSON path;
- YAML anchors and aliases ("billion laughs": about 400 bytes, gigabytes once expanded): refused naming the file;
- a FIFO or a device given as a plan or stack file: refused before it is read, so it cannot block or never end.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ndfleet import cli
from ndfleet.plans import plandoc
from ndfleet.stackconfig.stackfile import StackFileError, load_stack, read_yaml
from tests.test_plandiff import load
from tests.test_plandiff import resource as plan_resource

REPO = Path(__file__).resolve().parents[1]
VMSS = "azure-native:compute:VirtualMachineScaleSet"
CHILD_TIMEOUT_S = 120  # a child CLI on a loaded 2-core machine; only a hang gets near it
CHILD_MEMORY_BYTES = 1_500_000_000  # the alias bomb without the fix passes this within seconds
PLACEHOLDER = '"@number@"'


def plan_text_with(number: str) -> str:
    """The recorded dev plan as JSON text, with `number` (literal JSON text) as the ND scale set's
    platformFaultDomainCount, a field the schema leaves untyped and the policy rules read."""
    plan = load()
    plan_resource(plan, VMSS)["inputs"]["platformFaultDomainCount"] = PLACEHOLDER.strip('"')
    return json.dumps(plan).replace(PLACEHOLDER, number)


def vmss_path() -> str:
    index = next(i for i, r in enumerate(load()["resources"]) if r["type"] == VMSS)
    return f"resources[{index}].inputs.platformFaultDomainCount"


def run_cli(argv: list[str], memory_bytes: int | None = None) -> subprocess.CompletedProcess[str]:
    """`ndfleet ARGV` in a child process, so a hang or a runaway allocation without the fix fails the test
    (timeout, memory limit) instead of taking the test run with it."""

    def limit_memory() -> None:
        if memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return subprocess.run([sys.executable, "-m", "ndfleet.cli", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S, preexec_fn=limit_memory, check=False)  # fmt: skip


def assert_refused(code: int, err: str, *needles: str) -> None:
    assert code != 0, err
    assert "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


# ---------------------------------------------------------------------------------------------- plan numbers


NON_FINITE = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity", "1e999": "Infinity"}


@pytest.mark.parametrize("literal", NON_FINITE)
def test_a_non_finite_number_in_a_plan_is_refused_by_diff_and_policy_naming_its_path(
    literal: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(load()))
    bad.write_text(plan_text_with(literal))
    for argv in (["policy", str(bad)], ["diff", str(good), str(bad)]):
        code = cli.main(argv)
        out, err = capsys.readouterr()
        assert code == 2, argv
        assert_refused(code, err, f"{vmss_path()}: {NON_FINITE[literal]} is not a number a plan holds")
        assert out == ""


@pytest.mark.parametrize("digits", ["9" * 5_000, "-" + "9" * 5_000, "1" * 21])
def test_an_integer_too_long_for_any_plan_is_a_named_error(
    digits: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(plan_text_with(digits))
    code = cli.main(["policy", str(bad)])
    assert code == 2
    assert_refused(code, capsys.readouterr().err, f"{vmss_path()}: an integer of {len(digits.lstrip('-'))} digits")


def test_a_64_bit_integer_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(plan_text_with(str(-(2**63))))
    plan = plandoc.read_plan(path)
    assert plan_resource(plan, VMSS)["inputs"]["platformFaultDomainCount"] == -(2**63)


def test_validate_plan_refuses_a_non_finite_number_given_in_memory() -> None:
    plan: dict[str, Any] = load()
    plan["outputs"] = {"speed": [1.0, float("nan")]}
    with pytest.raises(plandoc.PlanFormatError, match=r"outputs\.speed\[1\]: NaN is not a number a plan holds"):
        plandoc.validate_plan(plan, "p.json")


# ---------------------------------------------------------------------------------------------- YAML aliases


def billion_laughs(path: Path) -> Path:
    """Nine levels of nine aliases each: about 440 bytes, 9**9 strings once expanded."""
    lines = ["config:", '  ndfleet:a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"  ndfleet:{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_billion_laughs_stack_file_is_refused_within_bounded_memory(tmp_path: Path) -> None:
    bomb = billion_laughs(tmp_path / "Pulumi.bomb.yaml")
    done = run_cli(["plan", "--stack-file", str(bomb), "--format", "json"], memory_bytes=CHILD_MEMORY_BYTES)
    # --format json: the error is a JSON document on stdout (docs/cli.md), stderr stays clean.
    error = json.loads(done.stdout)
    assert_refused(done.returncode, error["error"], str(bomb), "YAML anchors and aliases are not accepted")
    assert (error["exitCode"], done.returncode, done.stderr) == (2, 2, "")


@pytest.mark.parametrize("text", [
    "config:\n  ndfleet:location: &where eastus\n",
    "base: &base {ndfleet:nodes: 2}\nconfig:\n  <<: *base\n",
    "config:\n  ndfleet:location: *where\n",
])  # fmt: skip
def test_any_anchor_or_alias_in_a_stack_file_is_refused_naming_the_file(text: str, tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.alias.yaml"
    path.write_text(text)
    with pytest.raises(StackFileError) as info:
        load_stack(path=path)
    message = str(info.value)
    assert message.startswith(f"{path}: YAML anchors and aliases are not accepted (")
    assert "at line " in message


def test_the_project_file_is_read_with_the_same_refusal(tmp_path: Path) -> None:
    project = tmp_path / "Pulumi.yaml"
    project.write_text("name: ndfleet\nconfig:\n  ndfleet:nodes: &n {default: 2}\n  ndfleet:other: *n\n")
    with pytest.raises(StackFileError, match="YAML anchors and aliases are not accepted"):
        read_yaml(project)


# ---------------------------------------------------------------------------------------------- FIFOs, devices


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "Pulumi.fifo.yaml"
    os.mkfifo(path)
    return path


def test_a_fifo_as_stack_file_is_refused_not_waited_on(fifo: Path) -> None:
    done = run_cli(["plan", "--stack-file", str(fifo)])
    assert_refused(done.returncode, done.stderr, f"{fifo} is a FIFO (named pipe), not a stack file")


def test_a_fifo_as_plan_file_is_refused_not_waited_on(fifo: Path) -> None:
    for argv in (["policy", str(fifo)], ["diff", str(fifo), str(fifo)]):
        done = run_cli(argv)
        assert done.returncode == 2, argv
        assert_refused(done.returncode, done.stderr, f"{fifo} is a FIFO (named pipe), not a plan file")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_character_device_is_neither_a_stack_nor_a_plan_file(device: str) -> None:
    with pytest.raises(StackFileError, match=f"^{device} is a character device, not a stack file"):
        load_stack(path=device)
    with pytest.raises(plandoc.PlanFormatError, match=f"^{device} is a character device, not a plan file"):
        plandoc.read_plan(Path(device))


def test_a_folder_is_named_as_one(tmp_path: Path) -> None:
    with pytest.raises(plandoc.PlanFormatError, match="is a folder, not a plan file"):
        plandoc.read_plan(tmp_path)
    with pytest.raises(StackFileError, match="is a folder, not a stack file"):
        read_yaml(tmp_path)
