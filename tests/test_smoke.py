"""Smoke stacks (`ndfleet:smoke: {of: BASE}`, docs/smoke.md): the base stack with one or two nodes per island, every
feature kept, priced for its stated run, and refused with a named reason when it cannot be derived."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

import ndfleet.program as program
from ndfleet.cli import main
from ndfleet.cost.prices import table_price
from ndfleet.nodefiles.bootstrap import validation_budget_s
from ndfleet.plans.build import Plan, run_plan
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.profiles import LUSTRE_SKUS
from ndfleet.stackconfig.smoke import PULUMI_REQUIRED
from ndfleet.stackconfig.stackfile import StackFileError, load_stack
from tests.conftest import REPO, STACKS_DIR, VMSS, dev_ssh_key


@pytest.fixture(scope="module")
def prod() -> Plan:
    return run_plan(load_stack("prod"))


@pytest.fixture(scope="module")
def smoke() -> Plan:
    return run_plan(load_stack("prod-smoke"))


def _shape(plan: Plan, prefix: str) -> list[tuple[str, str, bool]]:
    """Every resource as (type, name without the stack's prefix, protected): what a smoke run must share. The
    compute bundle's Key Vault parts are named after its sha256, which the node count (in its files) changes."""
    return sorted((r.type, _BUNDLE.sub("ndfleet-bundle-<sha256>-", r.name.removeprefix(prefix)), r.protect)
                  for r in plan.resources)  # fmt: skip


_BUNDLE = re.compile(r"ndfleet-bundle-[0-9a-f]{16}-")


def test_prod_smoke_creates_every_resource_prod_creates(prod: Plan, smoke: Plan) -> None:
    assert _shape(smoke, "prod-smoke") == _shape(prod, "prod")
    assert len(smoke.resources) == len(prod.resources) > 80


def test_prod_smoke_keeps_every_setting_of_prod_but_the_size(prod: Plan, smoke: Plan) -> None:
    base, run = prod.spec, smoke.spec
    assert [i.name for i in run.islands] == [i.name for i in base.islands] == ["ib00", "ib01", "ib02"]
    assert [i.nodes for i in run.islands] == [2, 2, 2]  # prod runs Slurm: its burn-in pairs an island's nodes
    same = ("location", "zone", "profile", "image", "admin_username", "bastion", "scheduler", "slurm", "monitoring",
            "priority", "proximity_placement_group", "os_disk_size_gb", "max_nodes_per_island")  # fmt: skip
    for field in same:
        assert getattr(run, field) == getattr(base, field), field
    assert run.storage.account_sku == base.storage.account_sku
    assert run.storage.soft_delete_days == base.storage.soft_delete_days
    assert run.storage.lustre is not None and base.storage.lustre is not None
    assert run.storage.lustre.sku == base.storage.lustre.sku
    assert run.storage.lustre.capacity_tib == LUSTRE_SKUS[base.storage.lustre.sku.name].min_tib
    keep = {"validation_level", "repair_action", "repair_grace_period_minutes", "probe_port", "impact_reporting"}
    assert run.health.model_dump(include=keep) == base.health.model_dump(include=keep)
    assert {k: v for k, v in run.tags.items() if k != "ndfleet:stack"} == {
        k: v for k, v in base.tags.items() if k != "ndfleet:stack"
    }
    assert run.smoke is not None and run.smoke.of == "prod" and base.smoke is None


def test_prod_smoke_validation_is_bounded(prod: Plan, smoke: Plan) -> None:
    assert prod.spec.health.dcgm_level == 2 and smoke.spec.health.dcgm_level == 1
    assert validation_budget_s(smoke.spec) < validation_budget_s(prod.spec)
    assert validation_budget_s(smoke.spec) == 1690  # the figure docs/deploying.md and docs/smoke.md quote


def test_prod_smoke_names_differ_from_prod(prod: Plan, smoke: Plan) -> None:
    assert smoke.spec.name_prefix == "prod-smoke" != prod.spec.name_prefix
    assert smoke.spec.resource_group_name is None  # its own group, created by Pulumi


def test_vmss_capacity_is_the_smoke_size(smoke: Plan) -> None:
    assert sorted(r.inputs["sku"]["capacity"] for r in smoke.resources if r.type == VMSS) == [2, 2, 2]


def test_plan_table_says_what_the_smoke_is(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "prod-smoke"]) == 0
    out = capsys.readouterr().out
    assert "smoke run of stack prod: 2 nodes per island; every other setting is prod's" in out
    assert "validation: each node within 1,690 s (about 28 minutes; validationLevel full, dcgmLevel 1)" in out
    gpu = table_price("Standard_ND96isr_H100_v5", "eastus")
    controller, login = table_price("Standard_D16s_v5", "eastus"), table_price("Standard_D8s_v5", "eastus")
    assert gpu and controller and login
    run = 2 * (6 * gpu.usd_per_hour + controller.usd_per_hour + 2 * login.usd_per_hour)
    assert f"smoke run of 2 h (ndfleet:smoke.hours, up to destroy): US${run:,.2f}" in out


def test_cost_prices_the_smoke_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--stack", "prod-smoke", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    gpu = table_price("Standard_ND96isr_H100_v5", "eastus")
    controller, login = table_price("Standard_D16s_v5", "eastus"), table_price("Standard_D8s_v5", "eastus")
    assert gpu and controller and login
    hourly = 6 * gpu.usd_per_hour + controller.usd_per_hour + 2 * login.usd_per_hour
    assert doc["usdPerHour"] == pytest.approx(hourly, abs=0.01)
    assert doc["runHours"] == 2
    assert doc["usdPerRun"] == pytest.approx(2 * hourly, abs=0.01)
    assert sum(i["count"] for i in doc["items"] if i["vmSize"] == "Standard_ND96isr_H100_v5") == 6


def test_plan_json_says_what_the_smoke_is(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "prod-smoke", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["smoke"] == {"of": "prod", "nodesPerIsland": 2, "dcgmLevel": 1, "hours": 2}
    cost = doc["cost"]
    assert (cost["runHours"], cost["usdPerRun"]) == (2, pytest.approx(2 * cost["usdPerHour"], abs=0.01))


def test_a_full_stack_has_no_run_price(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--stack", "prod", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "runHours" not in doc and "usdPerRun" not in doc


def test_the_settings_pulumi_requires_are_pulumi_yamls() -> None:
    """A smoke stack's file must repeat what Pulumi.yaml declares without a default (Pulumi refuses a stack file
    without it); the list the smoke check asks for is Pulumi.yaml's."""
    declared = yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"]
    required = {k for k, v in declared.items() if isinstance(v, dict) and "default" not in v and "value" not in v}
    assert required == set(PULUMI_REQUIRED)


def test_the_example_smoke_file_sets_only_its_own_settings() -> None:
    own = yaml.safe_load((STACKS_DIR / "Pulumi.prod-smoke.yaml").read_text())["config"]
    assert set(own) == {"ndfleet:smoke", "ndfleet:location", "ndfleet:sshPublicKey"}


# --- smoke stacks of other bases, in a scratch folder ---

def _write(folder: Path, name: str, config: dict[str, Any]) -> Path:
    path = folder / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def _smoke(**smoke: Any) -> dict[str, Any]:
    return {"ndfleet:smoke": smoke, "ndfleet:location": "eastus", "ndfleet:sshPublicKey": dev_ssh_key()}


ELASTIC_BASE = {
    "ndfleet:location": "eastus",
    "ndfleet:sshPublicKey": dev_ssh_key(),
    "ndfleet:scheduler": "slurm",
    "ndfleet:islands": [
        {"name": "fixed", "nodes": 40},
        {"name": "burst", "elastic": {"minNodes": 5, "maxNodes": 60, "idleMinutes": 30}},
        {"name": "cold", "elastic": {"maxNodes": 20}},
    ],
}


def test_two_nodes_per_island_and_elastic_islands(tmp_path: Path) -> None:
    _write(tmp_path, "big", ELASTIC_BASE)
    path = _write(tmp_path, "big-smoke", _smoke(of="big", nodesPerIsland=2))
    stack = load_stack(path=path)
    spec = load_spec(stack.ndfleet_config, stack.name)
    sizes = {i.name: (i.nodes, i.elastic) for i in spec.islands}
    assert sizes["fixed"] == (2, None)
    burst, cold = sizes["burst"][1], sizes["cold"][1]
    assert sizes["burst"][0] == sizes["cold"][0] == 2  # an elastic island's fewest: its nodes are burnt in in pairs
    assert burst is not None and (burst.min_nodes, burst.idle_minutes) == (2, 30)
    assert cold is not None and cold.min_nodes == 0
    assert spec.total_nodes == 6


def test_a_slurm_base_takes_two_nodes_per_island_and_refuses_one(tmp_path: Path) -> None:
    """With Slurm a node alone in its island never leaves the pair burn-in (derive.SLURM_MIN_ISLAND_NODES): the smoke
    run of a Slurm base defaults to 2 per island, and an explicit 1 is refused, naming smoke.nodesPerIsland."""
    _write(tmp_path, "big", ELASTIC_BASE)
    default = _write(tmp_path, "big-smoke", _smoke(of="big"))
    spec = load_spec(load_stack(path=default).ndfleet_config, "big-smoke")
    assert [i.nodes for i in spec.islands] == [2, 2, 2] and spec.smoke is not None
    assert spec.smoke.nodes_per_island == 2
    _write(tmp_path, "one", _smoke(of="big", nodesPerIsland=1))
    assert "ndfleet:smoke.nodesPerIsland = 1: the base stack 'big' runs Slurm" in _refusal(tmp_path, "one")


def test_a_base_without_slurm_takes_one_node_per_island(tmp_path: Path) -> None:
    _write(tmp_path, "plain", {"ndfleet:location": "eastus", "ndfleet:sshPublicKey": dev_ssh_key(), "ndfleet:nodes": 4})
    spec = load_spec(load_stack(path=_write(tmp_path, "plain-smoke", _smoke(of="plain"))).ndfleet_config, "plain-smoke")
    assert [i.nodes for i in spec.islands] == [1]


def _refusal(tmp_path: Path, name: str) -> str:
    with pytest.raises(StackFileError) as caught:
        load_stack(path=tmp_path / f"Pulumi.{name}.yaml")
    return str(caught.value)


def test_unknown_base_is_named(tmp_path: Path) -> None:
    _write(tmp_path, "s", _smoke(of="nope"))
    message = _refusal(tmp_path, "s")
    assert "ndfleet:smoke.of = 'nope': no such stack" in message and "known stacks: s" in message


def test_a_smoke_of_itself_is_a_cycle(tmp_path: Path) -> None:
    _write(tmp_path, "s", _smoke(of="s"))
    assert "ndfleet:smoke.of = 's': a stack cannot be a smoke run of itself (a cycle)" in _refusal(tmp_path, "s")


def test_two_smoke_stacks_naming_each_other_are_a_cycle(tmp_path: Path) -> None:
    _write(tmp_path, "a", _smoke(of="b"))
    _write(tmp_path, "b", _smoke(of="a"))
    message = _refusal(tmp_path, "a")
    assert "ndfleet:smoke.of = 'b': 'b' is itself a smoke stack" in message and "a cycle" in message


def test_a_smoke_of_a_smoke_names_the_full_stack(tmp_path: Path) -> None:
    _write(tmp_path, "big", ELASTIC_BASE)
    _write(tmp_path, "big-smoke", _smoke(of="big"))
    _write(tmp_path, "again", _smoke(of="big-smoke"))
    message = _refusal(tmp_path, "again")
    assert "ndfleet:smoke.of = 'big-smoke': 'big-smoke' is itself a smoke stack (of 'big')" in message
    assert "write of: big" in message


def test_every_problem_at_once(tmp_path: Path) -> None:
    _write(tmp_path, "big", ELASTIC_BASE)
    _write(tmp_path, "s", {"ndfleet:smoke": {"of": "big", "nodesPerIsland": 3}, "ndfleet:nodes": 2,
                           "ndfleet:bastion": True})  # fmt: skip
    message = _refusal(tmp_path, "s")
    assert "ndfleet:smoke.nodesPerIsland = 3: input should be less than or equal to 2" in message
    assert "ndfleet:nodes is set in smoke stack 's'" in message and "ndfleet:bastion is set" in message


def test_own_settings_are_checked_against_the_base(tmp_path: Path) -> None:
    _write(tmp_path, "big", {**ELASTIC_BASE, "ndfleet:resourceGroupName": "rg-big"})
    _write(tmp_path, "s", {"ndfleet:smoke": {"of": "big"}, "ndfleet:location": "westus",
                           "ndfleet:resourceGroupName": "rg-big"})  # fmt: skip
    message = _refusal(tmp_path, "s")
    assert "ndfleet:sshPublicKey is missing from smoke stack 's'" in message
    assert "ndfleet:location = 'westus': the base stack 'big' deploys to 'eastus'" in message
    assert "ndfleet:resourceGroupName = 'rg-big': the base stack 'big' deploys into it" in message


def test_a_base_resource_group_is_not_inherited(tmp_path: Path) -> None:
    _write(tmp_path, "big", {**ELASTIC_BASE, "ndfleet:resourceGroupName": "rg-big"})
    stack = load_stack(path=_write(tmp_path, "s", _smoke(of="big")))
    assert load_spec(stack.ndfleet_config, stack.name).resource_group_name is None


def test_name_prefixes_that_collide_are_refused(tmp_path: Path) -> None:
    _write(tmp_path, "big", {**ELASTIC_BASE, "ndfleet:namePrefix": "training-cluster"})
    _write(tmp_path, "s", {**_smoke(of="big"), "ndfleet:namePrefix": "training-cluster-s"})
    message = _refusal(tmp_path, "s")
    assert "ndfleet:namePrefix: the smoke stack's resource names would start like its base's" in message
    assert "'training-clust-grafana'" in message


def test_a_refused_base_is_named(tmp_path: Path) -> None:
    _write(tmp_path, "big", {**ELASTIC_BASE, "ndfleet:osDiskSizeGb": 1})
    _write(tmp_path, "s", _smoke(of="big"))
    message = _refusal(tmp_path, "s")
    assert "ndfleet:smoke.of = 'big': the base stack is refused; fix it first: ndfleet:osDiskSizeGb = 1" in message


def test_a_secret_of_the_base_is_named(tmp_path: Path) -> None:
    monitoring = {"enabled": True, "webhooks": [{"secure": "v1:abc"}]}
    _write(tmp_path, "big", {**ELASTIC_BASE, "ndfleet:monitoring": monitoring})
    _write(tmp_path, "s", _smoke(of="big"))
    message = _refusal(tmp_path, "s")
    assert "ndfleet:monitoring of the base stack 'big' holds a secret" in message
    assert "v1:abc" not in message


def test_cli_reports_a_refused_smoke_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "s", _smoke(of="nope"))
    assert main(["plan", "--stack-file", str(tmp_path / "Pulumi.s.yaml")]) == 2
    err = capsys.readouterr().err
    assert "ndfleet:smoke.of = 'nope': no such stack" in err and "Traceback" not in err


# --- pulumi up: the program derives the smoke stack as the commands do ---

def test_the_program_derives_the_smoke_stack_as_the_cli_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `pulumi up` the engine hands the program the smoke stack's own settings with Pulumi.yaml's defaults
    merged in; the program must derive the same spec as `ndfleet plan --stack prod-smoke`."""
    own = yaml.safe_load((STACKS_DIR / "Pulumi.prod-smoke.yaml").read_text())["config"]
    defaults = {"vmSize": "Standard_ND96isr_H100_v5", "scheduler": "none", "bastion": False}  # as Pulumi.yaml's
    running = {**defaults, **{k.removeprefix("ndfleet:"): v for k, v in own.items()}}
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(program, "read_pulumi_config", lambda: dict(running))
    monkeypatch.setattr(program, "under_mocks", lambda: False)
    monkeypatch.setattr(program.pulumi, "get_stack", lambda: "prod-smoke")
    prepared = program.prepare_from_stack()
    cli = load_stack("prod-smoke")
    assert prepared.spec == load_spec(cli.ndfleet_config, cli.name)
    assert prepared.spec.scheduler == "slurm" and prepared.spec.bastion and prepared.spec.total_nodes == 6


def test_the_program_takes_the_smoke_stack_secrets_from_the_engine(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    _write(stacks, "big", ELASTIC_BASE)
    _write(stacks, "s", {**_smoke(of="big"), "ndfleet:sshPublicKey": {"secure": "v1:ciphertext"}})
    monkeypatch.chdir(tmp_path)
    raw = program.smoke_settings("s", {"sshPublicKey": dev_ssh_key(), "smoke": {"of": "big"}})
    assert raw["sshPublicKey"] == dev_ssh_key()
    assert [i["name"] for i in raw["islands"]] == ["fixed", "burst", "cold"]
