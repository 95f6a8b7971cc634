"""The real offline plan (Pulumi's mock runtime) through `ndfleet policy` and `ndfleet diff`: every example stack
passes the mandatory rules, plans are byte-identical across processes, and a diff of dev against an edited dev
stack file flags the right consequences."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ndfleet import cli
from ndfleet.plans import plandiff, policy_rules
from ndfleet.plans.build import run_plan
from ndfleet.stackconfig.profiles import PROFILES
from ndfleet.stackconfig.stackfile import load_stack
from tests.conftest import EXAMPLE_STACKS, STACKS_DIR

REPO = Path(__file__).resolve().parent.parent
H100, H200 = "Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5"


@functools.lru_cache(maxsize=8)
def example_plan_json(stack: str) -> str:
    return run_plan(load_stack(name=stack)).to_json()


def edited_dev_plan(tmp_path: Path, **config: Any) -> dict[str, Any]:
    """Plan stacks/Pulumi.dev.yaml with some `ndfleet:*` keys changed, through `ndfleet plan --stack-file`."""
    doc = yaml.safe_load((STACKS_DIR / "Pulumi.dev.yaml").read_text())
    doc["config"].update({f"ndfleet:{k}": v for k, v in config.items()})
    folder = tmp_path / "edited"
    folder.mkdir()
    path = folder / "Pulumi.dev.yaml"  # same stack name: same resource names
    path.write_text(yaml.safe_dump(doc))
    out = folder / "plan.json"
    code = subprocess_free_plan(path, out)
    assert code == 0
    plan: dict[str, Any] = json.loads(out.read_text())
    return plan


def subprocess_free_plan(stack_file: Path, out: Path) -> int:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = cli.main(["plan", "--stack-file", str(stack_file), "--format", "json"])
    out.write_text(buf.getvalue())
    return code


def dev_plan() -> dict[str, Any]:
    plan: dict[str, Any] = json.loads(example_plan_json("dev"))
    return plan


def test_there_are_example_stacks() -> None:
    assert {"dev", "prod", "h200"} <= set(EXAMPLE_STACKS)


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_example_stack_passes_every_mandatory_rule(
    stack: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{stack}.json"
    path.write_text(example_plan_json(stack))
    assert cli.main(["policy", str(path)]) == 0, capsys.readouterr().out
    violations = policy_rules.evaluate_plan(json.loads(path.read_text()))
    assert not policy_rules.has_mandatory(violations)


def test_example_plan_has_the_resources_the_rules_guard() -> None:
    types = {r["type"] for r in dev_plan()["resources"]}
    assert {policy_rules.VMSS_TYPE, policy_rules.VNET_TYPE, policy_rules.STORAGE_ACCOUNT_TYPE} <= types


def test_plan_is_byte_identical_in_another_process() -> None:
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    result = subprocess.run(
        [sys.executable, "-m", "ndfleet.cli", "plan", "--stack", "dev", "--format", "json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == example_plan_json("dev")


def test_plan_of_the_same_stack_has_no_diff() -> None:
    assert plandiff.diff_plans(dev_plan(), json.loads(example_plan_json("dev"))).empty


def test_more_nodes_is_a_scale_out_only(tmp_path: Path) -> None:
    diff = plandiff.diff_plans(dev_plan(), edited_dev_plan(tmp_path, nodes=4))
    gpus = PROFILES[H100].gpus_per_vm
    assert [(c.rule, c.severity) for c in diff.consequences] == [("island-scale-out", "info")]
    (cap,) = diff.capacity
    assert (cap.old_nodes, cap.new_nodes, cap.old_gpus, cap.new_gpus) == (2, 4, 2 * gpus, 4 * gpus)


def test_more_nodes_than_an_island_adds_an_island(tmp_path: Path) -> None:
    diff = plandiff.diff_plans(dev_plan(), edited_dev_plan(tmp_path, nodes=5, maxNodesPerIsland=3))
    fired = {(c.rule, c.resource_type) for c in diff.consequences}
    assert ("island-added", plandiff.VMSS_TYPE) in fired
    assert sum(c.new_nodes for c in diff.capacity) == 5


def test_vm_size_change_flags_replacement_bootstrap_and_gpus(tmp_path: Path) -> None:
    diff = plandiff.diff_plans(dev_plan(), edited_dev_plan(tmp_path, vmSize=H200))
    fired = {c.rule for c in diff.consequences}
    assert {"vmss-vm-size", "island-replaced"} <= fired
    (size,) = [c for c in diff.consequences if c.rule == "vmss-vm-size"]
    assert H100 in size.message and H200 in size.message and size.severity == "danger"


def test_vm_size_change_replaces_the_island_only(tmp_path: Path) -> None:
    """The real dev stack: the island is recreated; the Slurm controller gets the new GPU profile for its burn-in in
    userData (an update), so it is not (its customData holds nothing of the GPU nodes)."""
    diff = plandiff.diff_plans(dev_plan(), edited_dev_plan(tmp_path, vmSize=H200))
    assert {name for _, name in diff.replaced} == {"dev-ib00-vmss"}
    # The nodes' bundle changes (their node JSON names the size): its Key Vault slots are updated in place (a new
    # version of each), nothing is created, deleted or left behind (docs/bootstrap.md, "Slots, not one secret per
    # bundle").
    assert plandiff.render_text([diff]).startswith(
        "1 stack (dev: 0 to create, 5 to update, 1 to replace, 0 to delete")
    assert not [ch.name for ch in diff.changes if ch.op in ("create", "retain", "delete")]
    slots = [ch.name for ch in diff.changes if ch.op == "update" and "-ndfleet-bundle-" in ch.name]
    assert len(slots) == 3, slots


def test_markdown_of_a_real_diff_names_consequence_and_stack(tmp_path: Path) -> None:
    md = plandiff.render_markdown([plandiff.diff_plans(dev_plan(), edited_dev_plan(tmp_path, vmSize=H200))])
    assert md.startswith(plandiff.MARKDOWN_MARKER)
    assert "`vmss-vm-size`" in md and "### Stack `dev`" in md and len(md) < plandiff.MARKDOWN_MAX_CHARS


def test_image_version_change_is_flagged_as_a_rolling_replacement(tmp_path: Path) -> None:
    """Two real plans of dev that differ only in the image version (`latest` -> a pinned one)."""
    pinned = "microsoft-dsvm:ubuntu-hpc:2204:22.04.2024102301"
    diff = plandiff.diff_plans(dev_plan(), edited_dev_plan(tmp_path, image=pinned))
    (change,) = diff.changes
    image = plandiff.PropertyChange(f"{plandiff.IMAGE_REFERENCE_PATH}.version", "latest", "22.04.2024102301")
    # The image is one of the boot version's inputs (issue 42): the version in customData and the tag change with it.
    assert image in change.properties
    assert {p.path for p in change.properties} - {image.path} == {
        'tags["ndfleet:boot-version"]', "virtualMachineProfile.osProfile.customData"}
    assert [(c.rule, c.severity) for c in diff.consequences] == [
        ("vmss-image", "danger"), ("vmss-bootstrap", "warning")]
    assert all("ndfleet-roll start" in c.message for c in diff.consequences)  # the roll, not update-instances by hand
    md = plandiff.render_markdown([diff])
    consequences, stack_table = md.index("`vmss-image`"), md.index("### Stack `dev`")
    assert consequences < stack_table and "rolling replacement" in md  # flagged at the top


def test_a_bundle_in_key_vault_parts_diffs_file_by_file(tmp_path: Path) -> None:
    """dev runs Slurm: its nodes' bundle travels in Key Vault parts (docs/bootstrap.md). The diff reassembles each
    side's bundle from the parts its scale set's customData names and shows the files that change, not base64."""
    diff = plandiff.diff_plans(dev_plan(), edited_dev_plan(tmp_path, vmSize=H200))
    (model,) = [c for c in diff.consequences if c.path and c.path.endswith("nodeBundleFromKeyVault")]
    assert "node bundle:" in model.message and "/etc/ndfleet/node.json" in model.message
    text = plandiff.render_text([diff])
    assert "--- base/etc/ndfleet/node.json" in text and '+  "vm_size": "Standard_ND96isr_H200_v5",' in text


def test_an_island_neutral_bundle_in_user_data_diffs_file_by_file() -> None:
    """A stack without Slurm keeps its bundle in userData. Its island files hold the placeholder where each node writes
    its island's name; the diff decodes them as they are (before, such a bundle was shown as two hashes)."""
    from ndfleet.nodefiles import nodebundle
    from ndfleet.plans.plandiff import bundle

    plan = json.loads(example_plan_json("h200"))
    (vmss,) = [r for r in plan["resources"] if r["type"] == "azure-native:compute:VirtualMachineScaleSet"]
    files = bundle.decode_bundle(vmss["inputs"]["virtualMachineProfile"]["userData"])
    assert files is not None and nodebundle.ISLAND_PLACEHOLDER.encode() in files["/etc/ndfleet/node.json"]
