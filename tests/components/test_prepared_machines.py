"""Every machine's boot data is prepared once (ndfleet.prepare): the components and `ndfleet render` read that one
value, and a Slurm machine's boot data over one of Azure's limits is a configuration problem like any other."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from ndfleet.cli import main
from ndfleet.machine_files import SLURM_ROLES, machine_files
from ndfleet.plans.build import execute_program
from ndfleet.prepare import SLURM_MACHINE_ROLES, PrepareError, prepare
from ndfleet.slurm import machines
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config, of_type, plan_of, stack_from

VM = "azure-native:compute:VirtualMachine"
SLURM = base_config(scheduler="slurm", bastion=True, slurm={"loginCount": 2})


def _stack_file(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "Pulumi.big.yaml"
    path.write_text(yaml.safe_dump({"config": {f"ndfleet:{k}": v for k, v in config.items()}}))
    return path


def _decoded_size(value: str) -> int:
    return len(base64.b64decode(value))


def test_each_slurm_machine_boots_the_prepared_value_that_render_writes() -> None:
    """The controller's and each login node's VM inputs are the prepared customData and userData, and `ndfleet
    render` writes those same values: nothing renders a Slurm machine a second time."""
    prepared = prepare(load_spec(SLURM, "test"))
    assert [m.role for m in prepared.slurm_machines] == list(SLURM_MACHINE_ROLES)
    vms = of_type(plan_of(SLURM), VM)
    by_role: dict[str, list[dict[str, Any]]] = {}
    for vm in vms:
        by_role.setdefault(vm.inputs["tags"]["ndfleet:slurm-role"], []).append(vm.inputs)
    assert sorted(by_role) == ["controller", "login"] and len(by_role["login"]) == 2
    rendered = {m.kind: m.files for m in machine_files(prepared)}
    for role, inputs in by_role.items():
        machine = prepared.slurm_machine(role)
        for vm_inputs in inputs:
            assert vm_inputs["osProfile"]["customData"] == machine.custom_data
            assert vm_inputs["userData"] == machine.user_data
        files = rendered[SLURM_ROLES[role]]
        assert files["custom-data.b64"][0] == (machine.custom_data + "\n").encode()
        assert files["vm-user-data.b64"][0] == (machine.user_data + "\n").encode()
        assert files["user-data"][0] == machine.bootstrap.user_data.encode()


def test_a_stack_without_slurm_prepares_no_slurm_machine() -> None:
    prepared = prepare(load_spec(base_config(), "test"))
    assert prepared.slurm_machines == ()
    assert [m.kind for m in machine_files(prepared)] == ["compute"]


def test_a_controller_over_the_user_data_limit_is_a_configuration_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Azure's userData limit set just under the controller's userData (the login nodes' is far smaller): plan,
    render and the program (`pulumi up`) each refuse the stack with exit 2 and the one message, no traceback, and
    the program registers nothing."""
    prepared = prepare(load_spec(SLURM, "big"))
    controller = _decoded_size(prepared.slurm_machine("controller").user_data)
    assert _decoded_size(prepared.slurm_machine("login").user_data) < controller - 1
    monkeypatch.setattr(machines, "USER_DATA_MAX_BYTES", controller - 1)
    message = f"the Slurm controller's userData is {controller:,} bytes"
    path = _stack_file(tmp_path, SLURM)
    out = tmp_path / "out"

    assert main(["render", "--stack-file", str(path), "--out", str(out)]) == 2
    render_err = capsys.readouterr().err
    assert not out.exists()
    assert main(["plan", "--stack-file", str(path)]) == 2
    plan = capsys.readouterr()
    assert "resources to create" not in plan.out
    with pytest.raises(pulumi.RunError) as program_error:
        execute_program(stack_from(SLURM, "big"))
    from pulumi.runtime.settings import get_monitor

    assert get_monitor().order == []  # type: ignore[attr-defined]
    for text in (render_err, plan.err, str(program_error.value)):
        assert message in text and "Traceback" not in text
    assert "login" not in str(program_error.value)


def test_every_slurm_machine_over_the_custom_data_limit_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both Slurm machines over the customData limit, and an island's bad grace period: three problems, one error."""
    monkeypatch.setattr(machines, "CUSTOM_DATA_MAX_BYTES", 100)
    spec = load_spec({**SLURM, "health": {"dcgmLevel": 3, "probeGracePeriodSeconds": 600}}, "big")
    with pytest.raises(PrepareError) as error:
        prepare(spec)
    problems = error.value.problems
    assert any("probeGracePeriodSeconds = 600" in p for p in problems)
    for role in SLURM_MACHINE_ROLES:
        assert any(p.startswith(f"the Slurm {role}'s customData is ") and "limit of 100 bytes" in p for p in problems)
