"""ndfleet/plans/policy_rules.py: every rule fails on a resource that breaks it and passes on one that keeps it,
through direct calls and through `ndfleet policy` on a plan file."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ndfleet import cli
from ndfleet.plans import policy_rules
from ndfleet.plans.policy_rules import (
    KEY_VAULT_TYPE,
    MYSQL_SERVER_TYPE,
    NIC_TYPE,
    ROLE_ASSIGNMENT_TYPE,
    ROLE_DEFINITION_TYPE,
    RULES_BY_ID,
    STORAGE_ACCOUNT_TYPE,
    SUBNET_TYPE,
    VMSS_TYPE,
    VNET_TYPE,
)

PLAN = Path(__file__).parent / "data" / "plans" / "dev-small.json"

Mutation = Callable[[dict[str, Any]], None]


def good_plan() -> dict[str, Any]:
    return json.loads(PLAN.read_text())


# The Slurm cluster's services (NIC, MySQL, Key Vault, NFS FileStorage account) from a `scheduler: slurm` plan.
SLURM_PLAN = Path(__file__).parent / "data" / "plans" / "slurm-services.json"


def good_props(rtype: str) -> dict[str, Any]:
    if rtype == ROLE_DEFINITION_TYPE:
        return elastic_role()
    resources = good_plan()["resources"] + json.loads(SLURM_PLAN.read_text())["resources"]
    return copy.deepcopy(next(r for r in resources if r["type"] == rtype)["inputs"])


def elastic_role() -> dict[str, Any]:
    """The elastic scaler's role definition as components/elastic_scaling.py plans it."""
    from ndfleet.components.elastic_scaling import ELASTIC_ACTIONS

    return {"assignableScopes": [f"/subscriptions/{SUB}/resourceGroups/rg"], "permissions": [
        {"actions": list(ELASTIC_ACTIONS)}], "roleName": "ndfleet elastic scaler"}  # fmt: skip


SUB = "00000000-0000-0000-0000-000000000000"
ELASTIC_ROLE_ID = f"/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Authorization/roleDefinitions/scaler"


def elastic_assignment(scope: str) -> dict[str, Any]:
    return {"principalId": "p", "principalType": "ServicePrincipal", "roleDefinitionId": ELASTIC_ROLE_ID,
            "scope": f"/subscriptions/{SUB}/resourceGroups/rg{scope}"}  # fmt: skip


@pytest.mark.parametrize("scope", [
    "/providers/Microsoft.Compute/virtualMachineScaleSets/dev-burst-vmss",
    "/providers/Microsoft.Network/virtualNetworks/vnet/subnets/compute",
    "/providers/Microsoft.ManagedIdentity/userAssignedIdentities/dev-nodes-id",
])  # fmt: skip
def test_the_elastic_scalers_custom_role_passes_at_its_three_scopes(scope: str) -> None:
    assert RULES_BY_ID["identity-least-privilege"].check(ROLE_ASSIGNMENT_TYPE, elastic_assignment(scope)) == []


@pytest.mark.parametrize("scope", ["", "/providers/Microsoft.Storage/storageAccounts/data"])
def test_the_elastic_scalers_custom_role_anywhere_else_is_refused(scope: str) -> None:
    problems = RULES_BY_ID["identity-least-privilege"].check(ROLE_ASSIGNMENT_TYPE, elastic_assignment(scope))
    assert problems and "the custom role scaler is assigned at scope" in problems[0]


def test_a_built_in_role_at_a_scale_set_is_not_taken_for_the_custom_one() -> None:
    owner = elastic_assignment("/providers/Microsoft.Compute/virtualMachineScaleSets/dev-burst-vmss")
    owner["roleDefinitionId"] = f"/subscriptions/{SUB}/providers/Microsoft.Authorization/roleDefinitions/" + (
        "8e3af657-a8ff-443c-a75c-2fe8c4bcb635")  # fmt: skip
    assert RULES_BY_ID["identity-least-privilege"].check(ROLE_ASSIGNMENT_TYPE, owner) != []


def test_a_custom_role_granting_more_than_the_scaler_is_refused() -> None:
    role = elastic_role()
    role["permissions"][0]["dataActions"] = ["Microsoft.Storage/storageAccounts/blobServices/containers/blobs/read"]
    role["assignableScopes"] = [f"/subscriptions/{SUB}"]
    problems = RULES_BY_ID["custom-role-least-privilege"].check(ROLE_DEFINITION_TYPE, role)
    assert len(problems) == 2 and "dataActions is set" in problems[0] and "one resource group" in problems[1]


def _nfs_public(p: dict[str, Any]) -> None:
    p.update(kind="FileStorage", publicNetworkAccess="Enabled")


def _nic(p: dict[str, Any]) -> dict[str, Any]:
    nic: dict[str, Any] = p["virtualMachineProfile"]["networkProfile"]["networkInterfaceConfigurations"][0]
    return nic


def _linux(p: dict[str, Any]) -> dict[str, Any]:
    linux: dict[str, Any] = p["virtualMachineProfile"]["osProfile"]["linuxConfiguration"]
    return linux


def _set(key: str, value: Any) -> Mutation:
    def mutate(p: dict[str, Any]) -> None:
        p[key] = value

    return mutate


def _drop(key: str) -> Mutation:
    def mutate(p: dict[str, Any]) -> None:
        del p[key]

    return mutate


def _capacity(n: int) -> Mutation:
    def mutate(p: dict[str, Any]) -> None:
        p["sku"]["capacity"] = n

    return mutate


def _public_ip(p: dict[str, Any]) -> None:
    _nic(p)["ipConfigurations"][0]["publicIPAddressConfiguration"] = {"name": "pip"}


def _password_auth(p: dict[str, Any]) -> None:
    _linux(p)["disablePasswordAuthentication"] = False


def _admin_password(p: dict[str, Any]) -> None:
    p["virtualMachineProfile"]["osProfile"]["adminPassword"] = "hunter2hunter2!"


def _no_extensions(p: dict[str, Any]) -> None:
    p["virtualMachineProfile"]["extensionProfile"]["extensions"] = []


def _other_extension(p: dict[str, Any]) -> None:
    p["virtualMachineProfile"]["extensionProfile"]["extensions"][0]["type"] = "CustomScript"


def _repairs_off(p: dict[str, Any]) -> None:
    p["automaticRepairsPolicy"]["enabled"] = False


def _rolling(p: dict[str, Any]) -> None:
    p["upgradePolicy"]["mode"] = "Rolling"


def _no_accel(p: dict[str, Any]) -> None:
    _nic(p)["enableAcceleratedNetworking"] = False


def _vnet_prefix(prefix: str) -> Mutation:
    def mutate(p: dict[str, Any]) -> None:
        p["addressSpace"]["addressPrefixes"] = ["10.40.0.0/16", prefix]

    return mutate


def _storage_public(p: dict[str, Any]) -> None:
    p["publicNetworkAccess"] = "Enabled"
    p["networkRuleSet"]["defaultAction"] = "Allow"


def _owner_role(p: dict[str, Any]) -> None:
    # Owner (built-in role 8e3af657-...): far beyond what a node needs.
    p["roleDefinitionId"] = p["roleDefinitionId"].rsplit("/", 1)[0] + "/8e3af657-a8ff-443c-a75c-2fe8c4bcb635"


def _group_scope(p: dict[str, Any]) -> None:
    p["scope"] = p["scope"].split("/providers/")[0]


# (rule id, resource type, how to break it, the rules the broken resource violates)
CASES: list[tuple[str, str, Mutation, set[str]]] = [
    ("nd-single-placement-group", VMSS_TYPE, _set("singlePlacementGroup", False), {"nd-single-placement-group"}),
    ("nd-single-placement-group", VMSS_TYPE, _drop("singlePlacementGroup"), {"nd-single-placement-group"}),
    ("nd-fault-domain-count", VMSS_TYPE, _set("platformFaultDomainCount", 5), {"nd-fault-domain-count"}),
    ("nd-no-overprovision", VMSS_TYPE, _set("overprovision", True), {"nd-no-overprovision"}),
    ("nd-no-overprovision", VMSS_TYPE, _drop("overprovision"), {"nd-no-overprovision"}),
    ("nd-island-size", VMSS_TYPE, _capacity(301), {"nd-island-size", "nd-island-default-size"}),
    ("vnet-no-rdma-overlap", VNET_TYPE, _vnet_prefix("172.16.0.0/12"), {"vnet-no-rdma-overlap"}),
    ("vnet-no-rdma-overlap", VNET_TYPE, _vnet_prefix("172.16.8.0/24"), {"vnet-no-rdma-overlap"}),
    ("vnet-no-rdma-overlap", VNET_TYPE, _vnet_prefix("not-a-cidr"), {"vnet-no-rdma-overlap"}),
    ("vnet-no-rdma-overlap", SUBNET_TYPE, _set("addressPrefix", "172.16.1.0/24"), {"vnet-no-rdma-overlap"}),
    ("gpu-no-public-ip", VMSS_TYPE, _public_ip, {"gpu-no-public-ip"}),
    ("ssh-password-disabled", VMSS_TYPE, _password_auth, {"ssh-password-disabled"}),
    ("ssh-password-disabled", VMSS_TYPE, _admin_password, {"ssh-password-disabled"}),
    ("storage-no-public-blob", STORAGE_ACCOUNT_TYPE, _set("allowBlobPublicAccess", True), {"storage-no-public-blob"}),
    ("storage-no-shared-key", STORAGE_ACCOUNT_TYPE, _set("allowSharedKeyAccess", True), {"storage-no-shared-key"}),
    ("storage-no-shared-key", STORAGE_ACCOUNT_TYPE, _drop("allowSharedKeyAccess"), {"storage-no-shared-key"}),
    ("storage-tls12", STORAGE_ACCOUNT_TYPE, _set("minimumTlsVersion", "TLS1_0"), {"storage-tls12"}),
    ("gpu-health-extension", VMSS_TYPE, _no_extensions, {"gpu-health-extension"}),
    ("gpu-health-extension", VMSS_TYPE, _other_extension, {"gpu-health-extension"}),
    ("gpu-automatic-repairs", VMSS_TYPE, _repairs_off, {"gpu-automatic-repairs"}),
    ("nd-island-default-size", VMSS_TYPE, _capacity(101), {"nd-island-default-size"}),
    ("nd-proximity-placement-group", VMSS_TYPE, _drop("proximityPlacementGroup"), {"nd-proximity-placement-group"}),
    ("nd-manual-upgrade", VMSS_TYPE, _rolling, {"nd-manual-upgrade"}),
    ("nd-accelerated-networking", VMSS_TYPE, _no_accel, {"nd-accelerated-networking"}),
    ("storage-private-network", STORAGE_ACCOUNT_TYPE, _storage_public, {"storage-private-network"}),
    ("identity-least-privilege", ROLE_ASSIGNMENT_TYPE, _owner_role, {"identity-least-privilege"}),
    ("identity-least-privilege", ROLE_ASSIGNMENT_TYPE, _group_scope, {"identity-least-privilege"}),
    ("nic-no-public-ip", NIC_TYPE, lambda p: p["ipConfigurations"][0].update(publicIPAddress={"id": "pip"}),
     {"nic-no-public-ip"}),
    ("mysql-private", MYSQL_SERVER_TYPE, lambda p: p["network"].update(publicNetworkAccess="Enabled"),
     {"mysql-private"}),
    ("keyvault-rbac-private", KEY_VAULT_TYPE, lambda p: p["properties"].update(enableRbacAuthorization=False),
     {"keyvault-rbac-private"}),
    ("keyvault-rbac-private", KEY_VAULT_TYPE,
     lambda p: p["properties"].update(publicNetworkAccess="Enabled", networkAcls={"defaultAction": "Allow"}),
     {"keyvault-rbac-private"}),
    ("nfs-account-private", STORAGE_ACCOUNT_TYPE, _nfs_public, {"nfs-account-private"}),
    ("custom-role-least-privilege", ROLE_DEFINITION_TYPE,
     lambda p: p["permissions"][0]["actions"].append("Microsoft.Compute/virtualMachines/*"),
     {"custom-role-least-privilege"}),
]
CASE_IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


def test_every_rule_has_a_breaking_case() -> None:
    assert {c[0] for c in CASES} == set(RULES_BY_ID)


def test_every_rule_has_source_fix_and_a_valid_level() -> None:
    for rule in policy_rules.RULES:
        assert rule.source and rule.fix and rule.description, rule.id
        assert rule.enforcement in (policy_rules.MANDATORY, policy_rules.ADVISORY), rule.id


@pytest.mark.parametrize("rule_id", sorted(RULES_BY_ID))
def test_rule_passes_on_a_resource_that_keeps_it(rule_id: str) -> None:
    rule = RULES_BY_ID[rule_id]
    for rtype in rule.resource_types:
        if rtype in {r["type"] for r in good_plan()["resources"]}:
            assert rule.check(rtype, good_props(rtype)) == [], rtype


@pytest.mark.parametrize(("rule_id", "rtype", "mutate", "violated"), CASES, ids=CASE_IDS)
def test_rule_fails_on_a_resource_that_breaks_it(
    rule_id: str, rtype: str, mutate: Mutation, violated: set[str]
) -> None:
    props = good_props(rtype) if rtype != SUBNET_TYPE else {"addressPrefix": "10.40.0.0/20"}
    assert RULES_BY_ID[rule_id].check(rtype, props) == []
    mutate(props)
    assert RULES_BY_ID[rule_id].check(rtype, props) != []
    assert {v.rule_id for v in policy_rules.check_resource(rtype, props, "r")} == violated


def test_island_limit_is_inclusive() -> None:
    props = good_props(VMSS_TYPE)
    props["sku"]["capacity"] = 300
    assert RULES_BY_ID["nd-island-size"].check(VMSS_TYPE, props) == []


def test_numbers_from_protobuf_are_floats_and_still_pass() -> None:
    props = good_props(VMSS_TYPE)
    props["platformFaultDomainCount"] = 1.0
    props["sku"]["capacity"] = 2.0
    assert policy_rules.check_resource(VMSS_TYPE, props) == []


def test_nd_rules_leave_other_sizes_alone() -> None:
    props = good_props(VMSS_TYPE)
    props["sku"]["name"] = "Standard_D4s_v5"
    props.update(singlePlacementGroup=False, overprovision=True, platformFaultDomainCount=5)
    props.pop("automaticRepairsPolicy")
    assert policy_rules.check_resource(VMSS_TYPE, props) == []


def test_gpu_rules_cover_other_gpu_families() -> None:
    props = good_props(VMSS_TYPE)
    props["sku"]["name"] = "Standard_NC80adis_H100_v5"
    props.pop("automaticRepairsPolicy")
    assert {v.rule_id for v in policy_rules.check_resource(VMSS_TYPE, props)} == {"gpu-automatic-repairs"}


def test_password_rule_covers_every_linux_scale_set() -> None:
    props = good_props(VMSS_TYPE)
    props["sku"]["name"] = "Standard_D4s_v5"
    _password_auth(props)
    assert {v.rule_id for v in policy_rules.check_resource(VMSS_TYPE, props)} == {"ssh-password-disabled"}


def test_rules_ignore_other_resource_types() -> None:
    assert policy_rules.check_resource("azure-native:network:NatGateway", {"addressPrefix": "172.16.0.0/24"}) == []


# --- over a plan


def test_evaluate_plan_names_resource_rule_and_fix() -> None:
    plan = good_plan()
    next(r for r in plan["resources"] if r["type"] == VMSS_TYPE)["inputs"]["overprovision"] = True
    (v,) = policy_rules.evaluate_plan(plan)
    assert (v.rule_id, v.resource_name, v.mandatory) == ("nd-no-overprovision", "dev-ib00", True)
    assert "overprovision: false" in v.fix


def test_format_violations_marks_levels() -> None:
    plan = good_plan()
    vmss = next(r for r in plan["resources"] if r["type"] == VMSS_TYPE)["inputs"]
    vmss["overprovision"] = True
    _rolling(vmss)
    text = policy_rules.format_violations(policy_rules.evaluate_plan(plan))
    assert "ERROR [nd-no-overprovision]" in text and "WARNING [nd-manual-upgrade]" in text
    assert text.index("ERROR") < text.index("WARNING")


def test_has_mandatory_is_false_for_advisory_only() -> None:
    plan = good_plan()
    _rolling(next(r for r in plan["resources"] if r["type"] == VMSS_TYPE)["inputs"])
    violations = policy_rules.evaluate_plan(plan)
    assert violations and not policy_rules.has_mandatory(violations)


def _plan_file(tmp_path: Path, rtype: str, mutate: Mutation) -> Path:
    plan = good_plan()
    plan["resources"] += json.loads(SLURM_PLAN.read_text())["resources"]
    plan["resources"].append({"type": ROLE_DEFINITION_TYPE, "name": "dev-elastic-role", "inputs": elastic_role()})
    if rtype == SUBNET_TYPE:
        target = next(r for r in plan["resources"] if r["type"] == SUBNET_TYPE)["inputs"]
    else:
        target = next(r for r in plan["resources"] if r["type"] == rtype)["inputs"]
    mutate(target)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def test_policy_command_passes_a_good_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["policy", str(PLAN)]) == 0
    assert f"all {len(policy_rules.RULES)} rules pass" in capsys.readouterr().out


@pytest.mark.parametrize(("rule_id", "rtype", "mutate", "violated"), CASES, ids=CASE_IDS)
def test_policy_command_reports_each_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rule_id: str, rtype: str, mutate: Mutation, violated: set[str]
) -> None:
    code = cli.main(["policy", str(_plan_file(tmp_path, rtype, mutate))])
    out = capsys.readouterr().out
    rule = RULES_BY_ID[rule_id]
    assert code == (1 if any(RULES_BY_ID[v].enforcement == policy_rules.MANDATORY for v in violated) else 0)
    level = "ERROR" if rule.enforcement == policy_rules.MANDATORY else "WARNING"
    assert f"{level} [{rule_id}] {rtype}" in out and f"fix: {rule.fix}" in out


def test_policy_command_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("nope")
    assert cli.main(["policy", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "is not JSON" in err and "Traceback" not in err


def test_policy_command_lists_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["policy", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(f"{r.id} ({r.enforcement})" in out for r in policy_rules.RULES)


def test_docs_carry_the_rules_table() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "policies.md").read_text()
    assert policy_rules.rules_table_markdown() in doc
