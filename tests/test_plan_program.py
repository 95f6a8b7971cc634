"""`ndfleet plan --program DIR`: a program's plan is a plan document that `ndfleet diff` and `ndfleet policy` read,
with the summary, cost and warnings of the cluster the program prepared, and `--policies` checks it; a program that
prepared no ndfleet cluster gets a plain note of what its plan lacks (issue 29, item 3)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from ndfleet import cli
from ndfleet.plans import plandiff
from ndfleet.stackconfig.sshkeys import is_example_key

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "bring-your-own-network"
EXAMPLE_STACK = EXAMPLE / "Pulumi.example.yaml"


def plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@functools.lru_cache(maxsize=4)
def _example_json(stack_file: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["plan", "--program", str(EXAMPLE), "--stack-file", stack_file, "--format", "json"])
    return code, out.getvalue(), err.getvalue()


def example_plan(stack_file: Path = EXAMPLE_STACK) -> tuple[int, dict[str, Any], str]:
    code, out, err = _example_json(str(stack_file))
    return code, json.loads(out), err


def example_stack_with(tmp_path: Path, **config: Any) -> Path:
    """The example's stack file with some `byon:*` keys changed, under the same stack name."""
    doc = yaml.safe_load(EXAMPLE_STACK.read_text())
    doc["config"].update({f"byon:{k}": v for k, v in config.items()})
    folder = tmp_path / "edited"
    folder.mkdir()
    path = folder / EXAMPLE_STACK.name
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def tiny_program(tmp_path: Path) -> Path:
    """A Pulumi Python program that is not an ndfleet cluster: one resource group, one output."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text("name: tiny\nruntime: python\n")
    (folder / "Pulumi.s.yaml").write_text("config:\n  tiny:x: 1\n")
    (folder / "__main__.py").write_text(
        "import pulumi\nimport pulumi_azure_native.resources as resources\n\n"
        'resources.ResourceGroup("rg", location="eastus")\npulumi.export("answer", 42)\n'
    )
    return folder


def test_a_program_plan_is_a_plan_document() -> None:
    code, doc, _ = example_plan()
    assert code == 0 and doc["schemaVersion"] == plandiff.PLAN_SCHEMA_VERSION
    assert plandiff.validate_plan(doc) is doc


def test_a_program_plan_carries_the_prepared_clusters_summary() -> None:
    _, doc, _ = example_plan()
    assert doc["summary"]["islands"] == [{"name": "ib00", "nodes": 4, "gpus": 32}]


def test_a_program_plan_carries_the_cost_of_its_vms() -> None:
    _, doc, _ = example_plan()
    (item,) = doc["cost"]["items"]
    assert (item["vmSize"], item["count"]) == ("Standard_ND96isr_H100_v5", 4)
    assert doc["cost"]["usdPerHour"] == pytest.approx(4 * item["usdPerVmHour"])


def test_a_program_plan_warns_about_the_example_key() -> None:
    _, doc, err = example_plan()
    stack_key = yaml.safe_load(EXAMPLE_STACK.read_text())["config"]["byon:sshPublicKey"]
    assert is_example_key(stack_key)
    assert any("example key" in w for w in doc["summary"]["warnings"])
    assert "warning: ndfleet:sshPublicKey is the example key" in err


def test_policy_reads_a_program_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _example_json(str(EXAMPLE_STACK))
    (tmp_path / "plan.json").write_text(out)
    code = cli.main(["policy", str(tmp_path / "plan.json")])
    assert code == 0 and capsys.readouterr().out.startswith("policy: all")


def test_diff_of_two_program_plans_shows_the_cost_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, base, _ = _example_json(str(EXAMPLE_STACK))
    _, head, _ = _example_json(str(example_stack_with(tmp_path, nodes=5)))
    (tmp_path / "a.json").write_text(base)
    (tmp_path / "b.json").write_text(head)
    code = cli.main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    out = capsys.readouterr().out
    per_node = json.loads(base)["cost"]["items"][0]["usdPerVmHour"]
    assert code == 0 and f"(+US${per_node:,.2f})" in out.splitlines()[1]


def test_policies_go_with_program(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plan(capsys, "--program", str(EXAMPLE), "--stack-file", str(EXAMPLE_STACK), "--policies")
    assert code == 0 and "policy: all" in out


def test_policies_with_program_fail_on_a_mandatory_violation(
    tiny_program: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An ND scale set without a single placement group has no InfiniBand: the mandatory nd-single-placement-group.
    (tiny_program / "__main__.py").write_text(
        "import pulumi_azure_native.compute as compute\n\n"
        'compute.VirtualMachineScaleSet("vmss", resource_group_name="rg", single_placement_group=False,\n'
        '                               sku={"name": "Standard_ND96isr_H100_v5", "capacity": 2})\n'
    )
    code, out, _ = plan(capsys, "--program", str(tiny_program), "--stack", "s", "--policies")
    assert code == 1 and "ERROR [nd-single-placement-group]" in out


def test_a_program_without_a_cluster_says_what_its_plan_lacks(
    tiny_program: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = plan(capsys, "--program", str(tiny_program), "--stack", "s", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and "summary" not in doc and "cost" not in doc
    assert "note: the program prepared no ndfleet cluster" in err and "no summary, cost or warnings" in err


def test_the_cost_of_a_program_without_a_cluster_is_not_compared(tiny_program: Path, tmp_path: Path) -> None:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        cli.main(["plan", "--program", str(tiny_program), "--stack", "s", "--format", "json"])
    base = json.loads(out.getvalue())
    head = json.loads(out.getvalue())
    head["resources"][0]["inputs"]["tags"] = {"team": "ml"}
    text = plandiff.render_text([plandiff.diff_plans(base, head)])
    assert "cost: not compared: the base and head plans carry no cost" in text
