"""`ndfleet plan` builds the stack's spec once, by the one route every command takes (ndfleet.prepare), and a stack
that route refuses is refused with its message, exit 2 and no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ndfleet.cli import main
from ndfleet.plans.build import run_plan
from ndfleet.prepare import recording_prepared
from ndfleet.stackconfig import config as stack_config
from tests.conftest import base_config, stack_from


def test_the_plans_spec_is_the_one_the_program_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = stack_config.check_settings

    def counted(raw, stack, *more, **named):  # type: ignore[no-untyped-def]
        calls.append(stack)
        return real(raw, stack, *more, **named)

    monkeypatch.setattr(stack_config, "check_settings", counted)
    monkeypatch.setattr("ndfleet.prepare.check_settings", counted)
    with recording_prepared() as prepared:
        plan = run_plan(stack_from(base_config(scheduler="slurm", bastion=True), "once"))
    assert len(prepared) == 1 and plan.spec is prepared[0].spec
    assert calls == ["once"]
    # ... with the monitoring series budget's warnings the prepare step adds (none are lost on the way).
    assert plan.spec.warnings == prepared[0].spec.warnings


def test_a_setting_the_spec_refuses_is_exit_2_with_its_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "Pulumi.bad.yaml"
    config = base_config(plannedNodes=1, nodes=4)
    path.write_text(yaml.safe_dump({"config": {f"ndfleet:{k}": v for k, v in config.items()}}))
    assert main(["plan", "--stack-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert "ndfleet:plannedNodes = 1: below the stack's 4 nodes" in err and "Traceback" not in err
