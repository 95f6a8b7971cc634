"""`ndfleet diff` and the markdown / text renderers."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ndfleet import cli
from ndfleet.plans import plandiff
from tests.test_plandiff import encode_bootstrap, load, vmss_inputs


def write(path: Path, plan: Any) -> Path:
    path.write_text(json.dumps(plan) if not isinstance(plan, str) else plan)
    return path


def modified() -> dict[str, Any]:
    head = load()
    inputs = vmss_inputs(head)
    inputs["sku"]["capacity"] = 4
    inputs["virtualMachineProfile"]["osProfile"]["customData"] = encode_bootstrap("#cloud-config\nruncmd: []\n")
    head["summary"]["islands"][0].update(nodes=4, gpus=32)
    return head


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["diff", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- renderers


def test_markdown_starts_with_the_marker_and_summary() -> None:
    md = plandiff.render_markdown([plandiff.diff_plans(load(), modified())])
    lines = md.splitlines()
    assert lines[0] == plandiff.MARKDOWN_MARKER
    assert lines[3].startswith("**1 stack (dev: 0 to create, 1 to update, 0 to replace, 0 to delete)")


def test_markdown_puts_consequences_before_the_stack_table() -> None:
    md = plandiff.render_markdown([plandiff.diff_plans(load(), modified())])
    assert md.index("### Consequences") < md.index("### Capacity") < md.index("### Stack `dev`")
    assert "| dev | ib00 | 2 -> 4 (+2) | 16 -> 32 (+16) |" in md


def test_markdown_folds_details_with_bootstrap_diff() -> None:
    md = plandiff.render_markdown([plandiff.diff_plans(load(), modified())])
    details = md[md.index("<details>") : md.index("</details>")]
    assert "```diff" in details and "+runcmd: []" in details


def test_markdown_escapes_table_cells() -> None:
    base = {"schemaVersion": 1, "resources": [{"type": "t", "name": "a|b", "inputs": {"k": "x|y"}}]}
    head = copy.deepcopy(base)
    head["resources"][0]["inputs"]["k"] = "z"
    md = plandiff.render_markdown([plandiff.diff_plans(base, head, "s")])
    assert "`a\\|b`" in md and "`x\\|y`" in md


def test_markdown_leaves_details_out_when_too_long() -> None:
    diffs = [plandiff.diff_plans(load(), modified())]
    full = plandiff.render_markdown(diffs)
    md = plandiff.render_markdown(diffs, max_chars=len(full) - 1)
    assert "<details>" not in md and "Details left out" in md and "### Consequences" in md


def test_markdown_shows_every_stack() -> None:
    diffs = plandiff.diff_stacks({"dev": load(), "old": load()}, {"dev": modified(), "new": load()})
    md = plandiff.render_markdown(diffs)
    assert "### Stack `dev`: 0 to create, 1 to update" in md
    assert "### Stack `new`: new stack" in md and "### Stack `old`: stack removed" in md


def test_text_lists_property_changes_with_values() -> None:
    text = plandiff.render_text([plandiff.diff_plans(load(), modified())])
    assert "      sku.capacity: 2 -> 4" in text
    assert "WARNING [dev] dev-ib00" in text


# --- the command


def test_diff_of_two_files_prints_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(write(tmp_path / "a.json", load())), str(write(tmp_path / "b.json", modified())))
    assert code == 0 and "sku.capacity: 2 -> 4" in out


def test_diff_markdown_to_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = write(tmp_path / "a.json", load()), write(tmp_path / "b.json", modified())
    code, out, _ = run(capsys, str(a), str(b), "--format", "markdown", "--out", str(tmp_path / "c.md"))
    assert code == 0 and out == ""
    assert (tmp_path / "c.md").read_text().startswith(plandiff.MARKDOWN_MARKER)


def test_diff_of_folders_covers_stacks_on_either_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "head").mkdir()
    write(tmp_path / "base" / "dev.json", load())
    write(tmp_path / "base" / "gone.json", load())
    write(tmp_path / "head" / "dev.json", modified())
    write(tmp_path / "head" / "fresh.json", load())
    code, out, _ = run(capsys, "--base-dir", str(tmp_path / "base"), "--head-dir", str(tmp_path / "head"),
                       "--format", "markdown")
    assert code == 0
    assert "### Stack `fresh`: new stack" in out and "### Stack `gone`: stack removed" in out


def test_missing_base_folder_counts_as_no_stacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "head").mkdir()
    write(tmp_path / "head" / "dev.json", load())
    code, out, _ = run(capsys, "--base-dir", str(tmp_path / "none"), "--head-dir", str(tmp_path / "head"))
    assert code == 0 and "dev: new stack" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not JSON (line 1, column 2"),
        ('{"schemaVersion": 1}', "'resources' must be a list"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_plan_file_exits_2_with_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    good, bad = write(tmp_path / "a.json", load()), write(tmp_path / "b.json", content)
    code, out, err = run(capsys, str(good), str(bad))
    assert code == 2 and out == "" and message in err and "Traceback" not in err


def test_missing_plan_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(write(tmp_path / "a.json", load())), str(tmp_path / "nope.json"))
    assert code == 2 and "plan file not found" in err


def test_one_file_only_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, str(write(tmp_path / "a.json", load())))
    assert code == 64 and "give two plan files" in err


def test_files_and_folders_together_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = str(write(tmp_path / "a.json", load()))
    code, _, err = run(capsys, a, a, "--base-dir", str(tmp_path), "--head-dir", str(tmp_path))
    assert code == 64 and "not both" in err


def test_empty_folders_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--base-dir", str(tmp_path), "--head-dir", str(tmp_path))
    assert code == 2 and "no <stack>.json plans" in err
