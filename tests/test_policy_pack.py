"""The CrossGuard pack in policy/: each rule is a ResourceValidationPolicy at its enforcement level, and the pack's
analyzer (the gRPC servicer `pulumi preview --policy-pack` talks to) reports a violation for a resource whose
camelCase inputs break a rule, and none for one that keeps them."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2
from pulumi_policy import EnforcementLevel
from pulumi_policy.policy import _PolicyAnalyzerServicer

from ndfleet.plans import policy_rules

REPO = Path(__file__).resolve().parent.parent
PACK = REPO / "policy"
PLAN = Path(__file__).parent / "data" / "plans" / "dev-small.json"
VMSS = policy_rules.VMSS_TYPE


@pytest.fixture(scope="module")
def pack() -> dict[str, Any]:
    return runpy.run_path(str(PACK / "__main__.py"), run_name="ndfleet_policy_pack")


@pytest.fixture(scope="module")
def analyzer(pack: dict[str, Any]) -> _PolicyAnalyzerServicer:
    return _PolicyAnalyzerServicer(
        "ndfleet", "0.1.0", pack["POLICIES"], EnforcementLevel.ADVISORY, None, None, None, None, None, None, None
    )


def analyze(analyzer: _PolicyAnalyzerServicer, rtype: str, props: dict[str, Any]) -> list[Any]:
    struct = struct_pb2.Struct()
    json_format.ParseDict(props, struct)
    request = analyzer_pb2.AnalyzeRequest(
        type=rtype, properties=struct, urn=f"urn:pulumi:dev::ndfleet::{rtype}::r", name="r"
    )
    return list(analyzer.Analyze(request, None).diagnostics)


def props_of(rtype: str) -> dict[str, Any]:
    plan = json.loads(PLAN.read_text())
    inputs: dict[str, Any] = next(r for r in plan["resources"] if r["type"] == rtype)["inputs"]
    return inputs


def test_pack_project_file_is_python() -> None:
    doc = yaml.safe_load((PACK / "PulumiPolicy.yaml").read_text())
    assert doc["runtime"]["name"] == "python" and doc["version"]


def test_pack_requirements_name_pulumi_policy() -> None:
    lines = [ln for ln in (PACK / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert any(ln.startswith("pulumi-policy") for ln in lines)


def test_pack_has_one_policy_per_rule_at_its_level(pack: dict[str, Any]) -> None:
    levels = {p.name: p.enforcement_level for p in pack["POLICIES"]}
    expected = {
        r.id: EnforcementLevel.MANDATORY if r.enforcement == policy_rules.MANDATORY else EnforcementLevel.ADVISORY
        for r in policy_rules.RULES
    }
    assert levels == expected


@pytest.mark.parametrize("rtype", [VMSS, policy_rules.STORAGE_ACCOUNT_TYPE, policy_rules.VNET_TYPE])
def test_analyzer_reports_nothing_for_good_resources(analyzer: _PolicyAnalyzerServicer, rtype: str) -> None:
    assert analyze(analyzer, rtype, props_of(rtype)) == []


def test_analyzer_reports_a_mandatory_violation(analyzer: _PolicyAnalyzerServicer) -> None:
    props = props_of(VMSS)
    props["singlePlacementGroup"] = False
    (diag,) = analyze(analyzer, VMSS, props)
    assert diag.policyName == "nd-single-placement-group"
    assert diag.enforcementLevel == analyzer_pb2.MANDATORY
    assert "singlePlacementGroup" in diag.message and "Fix:" in diag.message


def test_analyzer_reads_lists_through_crossguard_proxies(analyzer: _PolicyAnalyzerServicer) -> None:
    props = props_of(VMSS)
    props["virtualMachineProfile"]["extensionProfile"]["extensions"] = []
    assert [d.policyName for d in analyze(analyzer, VMSS, props)] == ["gpu-health-extension"]


def test_analyzer_reports_an_advisory_violation(analyzer: _PolicyAnalyzerServicer) -> None:
    props = props_of(policy_rules.STORAGE_ACCOUNT_TYPE)
    props["publicNetworkAccess"] = "Enabled"
    props["networkRuleSet"]["defaultAction"] = "Allow"
    (diag,) = analyze(analyzer, policy_rules.STORAGE_ACCOUNT_TYPE, props)
    assert (diag.policyName, diag.enforcementLevel) == ("storage-private-network", analyzer_pb2.ADVISORY)
