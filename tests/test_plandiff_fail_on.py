"""`ndfleet diff --fail-on danger|warning|policy`: exit 1 after the diff when the change has what it names (issue 44:
a diff of a plan that breaks mandatory policy rules exited 0, with no way for CI to stop on it)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from ndfleet.cliconvention import EXIT_FINDINGS, EXIT_OK
from ndfleet.plans import policy_rules
from tests.test_plandiff import load, vmss_inputs
from tests.test_plandiff_cli import modified, run, write


def test_nothing_found_is_0_and_each_kind_is_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, head = write(tmp_path / "a.json", load()), write(tmp_path / "b.json", modified())  # a warning, no danger
    plain = run(capsys, str(base), str(head))
    assert run(capsys, str(base), str(head), "--fail-on", "danger") == plain  # no danger: 0, the same diff
    code, out, err = run(capsys, str(base), str(head), "--fail-on", "warning")
    assert (code, out) == (EXIT_FINDINGS, plain[1])  # the diff all the same, then the reason on stderr
    assert err == "fail-on warning: dev: 1 danger or warning consequence (vmss-bootstrap)\n"


def test_a_danger_fails_the_danger_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = load()
    vmss_inputs(head)["sku"]["name"] = "Standard_ND96isr_H200_v5"  # the island is replaced: danger
    base, changed = write(tmp_path / "a.json", load()), write(tmp_path / "b.json", head)
    code, _, err = run(capsys, str(base), str(changed), "--fail-on", "danger")
    assert code == EXIT_FINDINGS and err.startswith("fail-on danger: dev: ") and "island-replaced" in err


def test_a_head_that_breaks_a_mandatory_rule_fails_the_policy_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = copy.deepcopy(load())
    vmss_inputs(head)["singlePlacementGroup"] = False  # nd-single-placement-group: mandatory
    assert any(v.mandatory for v in policy_rules.evaluate_plan(head))
    base, broken = write(tmp_path / "a.json", load()), write(tmp_path / "b.json", head)
    assert run(capsys, str(base), str(broken))[0] == EXIT_OK  # what issue 44 found: nothing stops it
    code, _, err = run(capsys, str(base), str(broken), "--fail-on", "policy", "--out", str(tmp_path / "d.txt"))
    assert code == EXIT_FINDINGS
    assert err.startswith("fail-on policy: dev: the head plan breaks 1 mandatory rule check (nd-single-placement-group")
    assert (tmp_path / "d.txt").read_text()  # the diff is written all the same
    # A base that breaks it and a head that does not: the change repairs it, nothing to stop.
    assert run(capsys, str(broken), str(base), "--fail-on", "policy")[0] == EXIT_OK


def test_fail_on_reads_every_stack_of_two_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "head").mkdir()
    write(tmp_path / "base" / "dev.json", load())
    write(tmp_path / "head" / "dev.json", modified())
    code, _, err = run(capsys, "--base-dir", str(tmp_path / "base"), "--head-dir", str(tmp_path / "head"),
                       "--fail-on", "danger", "--fail-on", "warning")  # fmt: skip
    assert code == EXIT_FINDINGS and err.startswith("fail-on warning: dev: 1 danger or warning consequence")


def test_an_unknown_kind_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        run(capsys, "a.json", "b.json", "--fail-on", "dangerous")
    assert stopped.value.code == 64
    assert "invalid choice: 'dangerous'" in capsys.readouterr().err
