"""The prepare step: every command accepts and refuses the same stacks, before anything is registered."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from ndfleet.cli import main
from ndfleet.nodefiles.bootstrap import validation_budget_s
from ndfleet.nodefiles.nodebundle import MANIFEST_PATH
from ndfleet.plans.build import execute_program
from ndfleet.prepare import (
    MAX_PROBE_GRACE_PERIOD_S,
    PrepareError,
    default_probe_grace_period_s,
    prepare,
    prepare_config,
)
from ndfleet.stackconfig.config import load_spec
from tests.conftest import VMSS, base_config, dig, one, plan_of, stack_from


def _stack_file(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump({"config": {(k if ":" in k else f"ndfleet:{k}"): v for k, v in config.items()}}))
    return path


def _grace(config: dict[str, Any]) -> int:
    settings = dig(one(plan_of(config), VMSS).inputs, "virtualMachineProfile.extensionProfile.extensions.0.settings")
    return int(settings["gracePeriod"])


SHORT_GRACE = base_config(health={"dcgmLevel": 3, "probeGracePeriodSeconds": 600})
SHORT_GRACE_MESSAGE = "ndfleet:health.probeGracePeriodSeconds = 600: shorter than the node's worst-case set-up"


def test_short_explicit_grace_period_is_refused_alike_by_render_plan_preflight_and_the_program(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _stack_file(tmp_path, SHORT_GRACE)
    out = tmp_path / "out"

    assert main(["render", "--stack-file", str(path), "--out", str(out)]) == 2
    render_err = capsys.readouterr().err
    assert not out.exists()

    assert main(["plan", "--stack-file", str(path)]) == 2
    plan_err = capsys.readouterr().err

    # Preflight refuses before it asks Azure (the suite has no network: a call would fail differently).
    assert main(["preflight", "--stack-file", str(path)]) == 2  # could not check (docs/cli.md)
    preflight_err = capsys.readouterr().err

    with pytest.raises(pulumi.RunError) as program_error:
        execute_program(stack_from(SHORT_GRACE, "bad"))
    from pulumi.runtime.settings import get_monitor

    assert get_monitor().order == []  # type: ignore[attr-defined]

    for text in (render_err, plan_err, preflight_err, str(program_error.value)):
        assert SHORT_GRACE_MESSAGE in text
        assert "Traceback" not in text
    # The very same line everywhere.
    line = next(x for x in str(program_error.value).splitlines() if SHORT_GRACE_MESSAGE in x)
    assert all(line in text for text in (render_err, plan_err, preflight_err))


def test_a_good_stack_is_accepted_by_every_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _stack_file(tmp_path, base_config(health={"dcgmLevel": 3}))
    assert main(["render", "--stack-file", str(path), "--out", str(tmp_path / "out")]) == 0
    assert main(["plan", "--stack-file", str(path)]) == 0
    capsys.readouterr()
    execute_program(stack_from(base_config(health={"dcgmLevel": 3})))


@pytest.mark.parametrize(
    "health",
    [{"validationLevel": "quick"}, {}, {"dcgmLevel": 0}, {"dcgmLevel": 2}, {"dcgmLevel": 3}],
    ids=["quick", "full-dcgm1", "full-dcgm0", "full-dcgm2", "full-dcgm3"],
)
def test_unset_grace_period_follows_the_budget_with_margin(health: dict[str, Any]) -> None:
    config = base_config(health=health)
    budget = validation_budget_s(load_spec(config, "t"))
    grace = _grace(config)
    assert grace == default_probe_grace_period_s(budget)
    assert budget + 600 <= grace <= MAX_PROBE_GRACE_PERIOD_S
    assert grace % 300 == 0


@pytest.mark.parametrize(
    ("budget", "expected"),
    [(1100, 1800), (1670, 2400), (2450, 3300), (3350, 4200), (12_000, 14_400), (14_000, 14_400)],
)
def test_default_grace_period_rule(budget: int, expected: int) -> None:
    assert default_probe_grace_period_s(budget) == expected


def test_explicit_grace_period_is_used_as_given() -> None:
    assert _grace(base_config(health={"probeGracePeriodSeconds": 7200})) == 7200


def test_explicit_grace_period_equal_to_the_budget_is_accepted() -> None:
    budget = validation_budget_s(load_spec(base_config(health={"dcgmLevel": 3}), "t"))
    spec = load_spec(base_config(health={"dcgmLevel": 3, "probeGracePeriodSeconds": budget}), "t")
    prepared = prepare(spec)
    assert prepared.probe_grace_period_s == budget and prepared.probe_grace_period_explicit


def test_dcgm_level_3_without_a_grace_period_is_accepted() -> None:
    prepared = prepare(load_spec(base_config(health={"dcgmLevel": 3}), "t"))
    assert not prepared.probe_grace_period_explicit
    assert prepared.probe_grace_period_s > prepared.validation_budget_s


def test_every_island_gets_its_own_rendered_bootstrap() -> None:
    prepared = prepare(load_spec(base_config(nodes=250), "t"))
    assert [p.island.name for p in prepared.islands] == ["ib00", "ib01", "ib02"]
    assert len({p.bootstrap.custom_data for p in prepared.islands}) == 3


def test_too_large_bootstrap_is_a_prepare_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import ndfleet.nodefiles.bootstrap as bootstrap

    monkeypatch.setattr(bootstrap, "CUSTOM_DATA_MAX_BYTES", 100)
    with pytest.raises(PrepareError) as error:
        prepare(load_spec(base_config(nodes=250), "t"))
    assert len(error.value.problems) == 3  # every island, at once
    assert all("over Azure's customData limit" in p for p in error.value.problems)


def test_unknown_cloud_is_refused_naming_the_setting() -> None:
    with pytest.raises(PrepareError, match=r"azure-native:environment = 'mars': not a known Azure cloud"):
        prepare_config(base_config(), "t", {"azure-native:environment": "mars"}, env={})


# Features that hold Azure public host names are refused on the other clouds (ndfleet/stackconfig/clouds.py), issue 17.
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"scheduler": "slurm"}, "ndfleet:scheduler = 'slurm': Slurm supports Azure public cloud only"),
        ({"health": {"impactReporting": True}}, "ndfleet:health.impactReporting = true: impact reporting supports"),
    ],
)
@pytest.mark.parametrize("cloud_name", ["AzureUSGovernment", "AzureChinaCloud"])
def test_public_only_features_are_refused_on_a_sovereign_cloud(
    overrides: dict[str, Any], message: str, cloud_name: str
) -> None:
    from ndfleet.stackconfig.clouds import STORAGE_CLOUDS

    with pytest.raises(PrepareError) as err:
        prepare(load_spec(base_config(**overrides), "test"), STORAGE_CLOUDS[cloud_name])
    (problem,) = err.value.problems
    assert problem.startswith(message)
    assert f"deploys to {cloud_name}" in problem
    assert "set " in problem.split(";")[-1]  # says what is valid


@pytest.mark.parametrize("overrides", [{"scheduler": "slurm"}, {"health": {"impactReporting": True}}])
def test_public_only_features_are_accepted_on_azure_public(overrides: dict[str, Any]) -> None:
    from ndfleet.stackconfig.clouds import PUBLIC_CLOUD

    assert prepare(load_spec(base_config(**overrides), "test"), PUBLIC_CLOUD).cloud == PUBLIC_CLOUD


def test_a_sovereign_cloud_from_the_stack_config_refuses_slurm_at_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {**base_config(scheduler="slurm"), "azure-native:environment": "usgovernment"}
    code = main(["plan", "--stack-file", str(_stack_file(tmp_path, config))])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert "Slurm supports Azure public cloud only" in err and "AzureUSGovernment" in err


def test_the_plan_carries_each_islands_custom_data_and_user_data_on_its_scale_set() -> None:
    """The plan is the single source of what a node boots with: customData's manifest pins the plan's userData."""
    config = base_config()
    prepared = prepare(load_spec(config, "plan-user-data"))
    inputs = one(plan_of(config, "plan-user-data"), VMSS).inputs
    user_data = dig(inputs, "virtualMachineProfile.userData")
    assert user_data == prepared.islands[0].bootstrap.vm_user_data
    custom_data = dig(inputs, "virtualMachineProfile.osProfile.customData")
    cloud_config = yaml.safe_load(gzip.decompress(base64.b64decode(custom_data)))
    manifest = json.loads(next(f["content"] for f in cloud_config["write_files"] if f["path"] == MANIFEST_PATH))
    assert manifest["sha256"] == hashlib.sha256(base64.b64decode(user_data)).hexdigest()
