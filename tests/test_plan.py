"""`ndfleet plan`: every example stack plans, the JSON form is stable, bad config stops before any resource."""

from __future__ import annotations

import json
from pathlib import Path

import pulumi
import pytest
import yaml

from ndfleet.cli import main
from ndfleet.nodefiles import nodebundle
from ndfleet.plans.build import SCHEMA_VERSION, execute_program, run_plan
from ndfleet.stackconfig.settings import StackConfig
from ndfleet.stackconfig.stackfile import load_stack, project_defaults
from tests.conftest import EXAMPLE_STACKS, REPO, VMSS, base_config, of_type, stack_from

PROJECT_FILE = REPO / "Pulumi.yaml"


@pytest.mark.parametrize("stack", EXAMPLE_STACKS)
def test_every_example_stack_plans(stack: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", stack, "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    spec_nodes = plan["summary"]["nodes"]
    # An elastic island counts at its maximum; its scale set holds what Slurm asks for (docs/elastic.md), at most that.
    spec = run_plan(load_stack(stack)).spec
    elastic = {i.name: i.nodes for i in spec.islands if i.elastic is not None}
    capacities = {r["name"]: r["inputs"]["sku"]["capacity"] for r in plan["resources"] if r["type"] == VMSS}
    fixed = {name: c for name, c in capacities.items() if not any(f"-{e}-" in name for e in elastic)}
    assert sum(fixed.values()) == spec_nodes - sum(elastic.values())
    assert len(capacities) - len(fixed) == len(elastic)
    assert all(c <= max(elastic.values()) for name, c in capacities.items() if name not in fixed)


def test_example_stacks_are_the_documented_ones() -> None:
    assert {"dev", "elastic", "prod", "h200"} <= set(EXAMPLE_STACKS)
    elastic = run_plan(load_stack("elastic")).spec
    assert [(i.name, i.elastic is not None) for i in elastic.islands] == [("train", False), ("burst", True)]
    prod = run_plan(load_stack("prod"))
    assert prod.spec.total_nodes == 256 and max(i.nodes for i in prod.spec.islands) <= 100
    assert prod.spec.storage.lustre is not None
    h200 = run_plan(load_stack("h200"))
    assert (h200.spec.profile.name, h200.spec.total_nodes) == ("Standard_ND96isr_H200_v5", 16)


def test_dev_table_shows_resources_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "dev"]) == 0
    out = capsys.readouterr().out
    assert "azure-native:compute:VirtualMachineScaleSet" in out
    assert "islands: 1   nodes: 2   GPUs: 16" in out
    assert "vCPU quota needed: standardNDSH100v5Family 192" in out


def test_json_has_the_documented_shape(capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", "--stack", "dev", "--format", "json"])
    plan = json.loads(capsys.readouterr().out)
    assert set(plan) == {"schemaVersion", "stack", "resources", "outputs", "summary", "cost"}
    assert plan["schemaVersion"] == SCHEMA_VERSION
    base = {"type", "name", "parent", "protect", "dependsOn", "inputs"}
    assert all(set(r) in (base, base | {"retainOnDelete"}) for r in plan["resources"])
    # retain_on_delete, only where set: the compute bundle's Key Vault parts and their role assignments
    kept = {r["name"] for r in plan["resources"] if r.get("retainOnDelete")}
    assert kept and all("-ndfleet-bundle-" in name for name in kept), kept
    keys = [(r["type"], r["name"]) for r in plan["resources"]]
    assert keys == sorted(keys)
    vmss = next(r for r in plan["resources"] if r["type"] == VMSS)
    assert "singlePlacementGroup" in vmss["inputs"] and "single_placement_group" not in vmss["inputs"]


def test_two_plans_of_the_same_stack_are_byte_identical() -> None:
    assert run_plan(load_stack("prod")).to_json() == run_plan(load_stack("prod")).to_json()


def test_stack_file_option_reads_any_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(Path("stacks/Pulumi.dev.yaml").read_text())
    doc["config"]["ndfleet:nodes"] = 5
    path = tmp_path / "Pulumi.mine.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["plan", "--stack-file", str(path), "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["stack"] == "mine" and plan["summary"]["nodes"] == 5


def test_bad_config_exits_2_with_the_message_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "config": {
                    **{f"ndfleet:{k}": v for k, v in base_config().items()},
                    "ndfleet:vnetAddressSpace": "172.16.0.0/16",
                }
            }
        )
    )
    assert main(["plan", "--stack-file", str(path)]) == 2
    captured = capsys.readouterr()
    assert "ndfleet:vnetAddressSpace = '172.16.0.0/16': overlaps 172.16.0.0/16" in captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_unknown_stack_lists_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "nope"]) == 2
    assert "known stacks: " in capsys.readouterr().err


def test_the_program_registers_nothing_when_config_is_bad() -> None:
    stack = stack_from(base_config(nodes=None, islands=[{"name": "big", "nodes": 101}]))
    with pytest.raises(pulumi.RunError, match=r"ndfleet:islands\[0\].nodes = 101"):
        execute_program(stack)
    from pulumi.runtime.settings import get_monitor

    monitor = get_monitor()
    assert [entry for entry in monitor.order if entry[0] != "pulumi:pulumi:Stack"] == []  # type: ignore[attr-defined]


def test_the_program_registers_the_cluster_when_config_is_good() -> None:
    run = execute_program(stack_from(base_config(nodes=3)))
    assert [r.inputs["sku"]["capacity"] for r in run.resources if r.type == VMSS] == [3]


def test_project_defaults_match_the_spec_defaults() -> None:
    fields = {f.alias or n: f for n, f in StackConfig.model_fields.items()}
    defaults = project_defaults()
    assert defaults, "Pulumi.yaml declares no defaults"
    for key, value in defaults.items():
        field = fields[key.split(":", 1)[1]]
        assert field.default == value, key


def test_project_file_declares_runtime_and_stack_dir() -> None:
    project = yaml.safe_load(PROJECT_FILE.read_text())
    assert project["name"] == "ndfleet" and project["stackConfigDir"] == "stacks"
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"]["toolchain"] in ("uv", "pip", "poetry")
    declared = {k for k in project["config"]}
    assert declared <= {f.alias or n for n, f in StackConfig.model_fields.items()}


def test_large_plan_has_thirteen_scale_sets() -> None:
    plan = run_plan(stack_from(base_config(nodes=1280)))
    assert len(of_type(plan, VMSS)) == 13


@pytest.mark.parametrize("command", ["plan", "diff", "policy", "render", "preflight"])
def test_every_subcommand_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert f"usage: ndfleet {command}" in capsys.readouterr().out


def test_preflight_setting_never_calls_azure_under_the_mock_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    import ndfleet.preflight as preflight

    calls: list[object] = []
    monkeypatch.setattr(preflight, "enforce_preflight", lambda spec: calls.append(spec))
    plan = run_plan(stack_from(base_config(preflight=True)))
    assert plan.spec.preflight is True and calls == []


def test_preflight_runs_first_outside_the_mock_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    import ndfleet.preflight as preflight
    import ndfleet.program as program
    from ndfleet.stackconfig.config import load_spec

    def refuse(spec: object) -> None:
        raise preflight.PreflightFailed("quota: 192 vCPUs missing", 1)

    monkeypatch.setattr(preflight, "enforce_preflight", refuse)
    monkeypatch.setattr(program, "under_mocks", lambda: False)
    with pytest.raises(program.ProgramError, match="192 vCPUs missing"):
        program.run_preflight_if_enabled(load_spec(base_config(preflight=True), "test"))


def test_a_slurm_stacks_nodes_read_their_bundle_from_key_vault_parts_they_alone_may_read() -> None:
    """docs/bootstrap.md, "When the bundle outgrows userData": the scale set carries no userData; each part is a
    secret of the Slurm vault, kept when a later bundle replaces it; the nodes' identity gets Key Vault Secrets User
    on each part (nothing wider: not the database password), and the scale set waits for those role assignments."""
    plan = json.loads(run_plan(load_stack("dev")).to_json())
    resources = {r["name"]: r for r in plan["resources"]}
    (vmss,) = [r for r in plan["resources"] if r["type"] == VMSS]
    assert "userData" not in vmss["inputs"]["virtualMachineProfile"]
    parts = {r["name"]: r for r in plan["resources"] if r["type"] == "azure-native:keyvault:Secret"
             and r["inputs"]["secretName"].startswith("ndfleet-bundle-")}  # fmt: skip
    # The vault's fixed slots, every one of them whatever the bundles (docs/bootstrap.md, "Slots, not one secret per
    # bundle"); the ones no bundle fills hold the placeholder.
    assert sorted(r["inputs"]["secretName"] for r in parts.values()) == sorted(nodebundle.SLOT_NAMES)
    assert all(r.get("retainOnDelete") for r in parts.values())
    assert 0 < sum(r["inputs"]["properties"]["value"] != nodebundle.SLOT_PLACEHOLDER for r in parts.values()) < 8
    grants = [r for r in plan["resources"] if r["type"] == "azure-native:authorization:RoleAssignment"
              and "-ndfleet-bundle-" in r["name"]]  # fmt: skip
    assert len(grants) == len(parts)
    node_principal = next(r for r in plan["resources"] if r["name"] == "dev-slurm-nodes-munge")["inputs"]["principalId"]
    for grant in grants:
        assert grant["inputs"]["principalId"] == node_principal
        assert grant["inputs"]["roleDefinitionId"].endswith("/4633458b-17de-408a-b874-0445c86b69e6")
        assert grant["name"] in vmss["dependsOn"]
        secret_name = grant["name"].removeprefix("dev-slurm-nodes-")
        (part,) = [n for n in parts if n.removeprefix("dev-slurm-secrets-") == secret_name]
        assert part in grant["dependsOn"] and resources[part]["inputs"]["properties"]["value"]
