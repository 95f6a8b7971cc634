"""The prod example stack's plan (Pulumi mock runtime) holds the monitoring resources with the properties that
make them private and least-privilege; a stack with monitoring off has none of them."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from ndfleet_node.names import TAG_METRICS_DCR, TAG_METRICS_ENDPOINT

from ndfleet.monitoring.alerts import AZURE_SEVERITY, alerts
from ndfleet.plans.build import Plan
from ndfleet.plans.policy_rules import evaluate_plan
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.profiles import (
    KEY_VAULT_SECRETS_USER_ROLE_ID,
    MONITORING_DATA_READER_ROLE_ID,
    MONITORING_METRICS_PUBLISHER_ROLE_ID,
    STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID,
)
from tests.conftest import IDENTITY, ROLE, STACKS_DIR, VMSS, base_config, dig, of_type, one, plan_of

AMW = "azure-native:monitor:AzureMonitorWorkspace"
DCE = "azure-native:monitor:DataCollectionEndpoint"
DCR = "azure-native:monitor:DataCollectionRule"
AMPLS = "azure-native:monitor:PrivateLinkScope"
AMPLS_RESOURCE = "azure-native:monitor:PrivateLinkScopedResource"
ACTION_GROUP = "azure-native:monitor:ActionGroup"
RULE_GROUP = "azure-native:alertsmanagement:PrometheusRuleGroup"
GRAFANA = "azure-native:dashboard:Grafana"
GRAFANA_PE = "azure-native:dashboard:ManagedPrivateEndpoint"
PRIVATE_ENDPOINT = "azure-native:network:PrivateEndpoint"
ZONE = "azure-native:privatedns:PrivateZone"
MONITORING_TYPES = (AMW, DCE, DCR, AMPLS, AMPLS_RESOURCE, ACTION_GROUP, RULE_GROUP, GRAFANA, GRAFANA_PE)


def prod_config() -> dict[str, Any]:
    doc = yaml.safe_load((STACKS_DIR / "Pulumi.prod.yaml").read_text())
    return {k.split(":", 1)[1]: v for k, v in doc["config"].items()}


@pytest.fixture(scope="module")
def prod_plan() -> Plan:
    return plan_of(prod_config(), "prod")


def _role(plan: Plan, role_id: str) -> list[Any]:
    return [r for r in of_type(plan, ROLE) if r.inputs["roleDefinitionId"].endswith("/" + role_id)]


def test_prod_example_has_monitoring_on() -> None:
    spec = load_spec(prod_config(), "prod")
    assert spec.monitoring.enabled and spec.monitoring.emails


def test_workspace_has_no_public_query_endpoint(prod_plan: Plan) -> None:
    assert one(prod_plan, AMW).inputs["publicNetworkAccess"] == "Disabled"


def test_nodes_write_through_a_private_endpoint_and_rule_to_the_workspace(prod_plan: Plan) -> None:
    dce, dcr, amw = one(prod_plan, DCE), one(prod_plan, DCR), one(prod_plan, AMW)
    assert dig(dce.inputs, "networkAcls.publicNetworkAccess") == "Disabled"
    assert dcr.inputs["dataCollectionEndpointId"].endswith("/" + dce.name)
    (source,) = dig(dcr.inputs, "dataSources.prometheusForwarder")
    assert source["streams"] == ["Microsoft-PrometheusMetrics"]
    (dest,) = dig(dcr.inputs, "destinations.monitoringAccounts")
    assert dest["accountResourceId"].endswith(f"/Microsoft.Monitor/accounts/{amw.name}")
    assert dcr.inputs["dataFlows"] == [{"streams": ["Microsoft-PrometheusMetrics"], "destinations": [dest["name"]]}]
    scope = one(prod_plan, AMPLS)
    assert scope.inputs["accessModeSettings"] == {"ingestionAccessMode": "PrivateOnly", "queryAccessMode": "Open"}
    assert one(prod_plan, AMPLS_RESOURCE).inputs["linkedResourceId"].endswith("/" + dce.name)
    pe = one(prod_plan, PRIVATE_ENDPOINT, "ampls")
    (conn,) = pe.inputs["privateLinkServiceConnections"]
    assert conn["groupIds"] == ["azuremonitor"] and conn["privateLinkServiceId"].endswith("/" + scope.name)
    assert pe.inputs["subnet"]["id"].endswith("storage")
    assert one(prod_plan, ZONE, "monitor").inputs["privateZoneName"] == "privatelink.monitor.azure.com"




def test_node_identity_only_publishes_metrics_on_the_rule(prod_plan: Plan) -> None:
    identity = one(prod_plan, IDENTITY, "nodes-id")
    principal = _principal(prod_plan, identity.name)
    node_roles = [r for r in of_type(prod_plan, ROLE) if r.inputs["principalId"] == principal]
    # (prod runs Slurm: each Key Vault part of the nodes' bundle, read at boot, docs/bootstrap.md)
    parts = [r for r in node_roles if "/secrets/ndfleet-bundle-" in r.inputs["scope"]]
    assert parts and all(r.inputs["roleDefinitionId"].endswith(KEY_VAULT_SECRETS_USER_ROLE_ID) for r in parts)
    node_roles = [r for r in node_roles if r not in parts]
    # Blob data on its account, metrics through the rule, and (prod runs Slurm) the munge key: nothing else.
    assert sorted(r.inputs["roleDefinitionId"].rsplit("/", 1)[-1] for r in node_roles) == sorted(
        [STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID, MONITORING_METRICS_PUBLISHER_ROLE_ID, KEY_VAULT_SECRETS_USER_ROLE_ID]
    )
    (publish,) = [r for r in node_roles if r.inputs["roleDefinitionId"].endswith(MONITORING_METRICS_PUBLISHER_ROLE_ID)]
    assert publish.inputs["scope"].endswith("/dataCollectionRules/" + one(prod_plan, DCR).name)
    assert publish.inputs["principalType"] == "ServicePrincipal"


def _principal(plan: Plan, identity_name: str) -> str:
    from ndfleet.plans.build import _fake_uuid

    return _fake_uuid(identity_name, "principal")


def test_grafana_reads_the_workspace_only(prod_plan: Plan) -> None:
    grafana, amw = one(prod_plan, GRAFANA), one(prod_plan, AMW)
    (read,) = _role(prod_plan, MONITORING_DATA_READER_ROLE_ID)
    assert read.inputs["scope"].endswith(f"/Microsoft.Monitor/accounts/{amw.name}")
    assert read.inputs["principalId"] != _principal(prod_plan, one(prod_plan, IDENTITY, "nodes-id").name)
    grafana_roles = [r for r in of_type(prod_plan, ROLE) if r.inputs["principalId"] == read.inputs["principalId"]]
    assert grafana_roles == [read]
    props = grafana.inputs["properties"]
    assert props["apiKey"] == "Disabled"
    integration = dig(props, "grafanaIntegrations.azureMonitorWorkspaceIntegrations.0")
    assert integration["azureMonitorWorkspaceResourceId"].endswith("/" + amw.name)
    assert grafana.inputs["identity"]["type"] == "SystemAssigned"
    pe = one(prod_plan, GRAFANA_PE)
    assert pe.inputs["groupIds"] == ["prometheusMetrics"]
    assert pe.inputs["privateLinkResourceId"].endswith("/" + amw.name)


def test_action_group_notifies_the_stack_receivers(prod_plan: Plan) -> None:
    group = one(prod_plan, ACTION_GROUP)
    assert [r["emailAddress"] for r in group.inputs["emailReceivers"]] == prod_config()["monitoring"]["emails"]
    assert len(group.inputs["groupShortName"]) <= 12 and group.inputs["enabled"] is True


def test_rule_groups_deploy_the_alert_table(prod_plan: Plan) -> None:
    spec = load_spec(prod_config(), "prod")
    groups = of_type(prod_plan, RULE_GROUP)
    deployed = [rule for g in groups for rule in g.inputs["rules"]]
    assert sorted(r["alert"] for r in deployed) == sorted(a.name for a in alerts(spec))
    amw, action_group = one(prod_plan, AMW), one(prod_plan, ACTION_GROUP)
    by_expr = {a.expr: a for a in alerts(spec)}
    for group in groups:
        (scope,) = group.inputs["scopes"]
        assert scope.endswith(f"/Microsoft.Monitor/accounts/{amw.name}") and group.inputs["interval"] == "PT1M"
        for rule in group.inputs["rules"]:
            table = by_expr[rule["expression"]]
            assert rule.get("for") == (table.for_iso8601 if table.for_minutes else None)
            assert rule["severity"] == AZURE_SEVERITY[table.severity]
            assert rule["annotations"]["action"] == table.action
            assert rule["actions"][0]["actionGroupId"].endswith("/" + action_group.name)
    # 3 islands of the prod stack: one capacity alert each.
    assert sum(r["alert"] == "IslandCapacityLow" for r in deployed) == 3


def test_scale_sets_tell_nodes_where_to_write(prod_plan: Plan) -> None:
    for vmss in of_type(prod_plan, VMSS):
        tags = vmss.inputs["tags"]
        assert tags[TAG_METRICS_ENDPOINT].startswith("https://") and ".metrics.ingest.monitor.azure.com" in tags[
            TAG_METRICS_ENDPOINT]
        assert tags[TAG_METRICS_DCR].startswith("dcr-")


def test_prod_plan_keeps_every_policy(prod_plan: Plan) -> None:
    plan = {"resources": [{"type": r.type, "name": r.name, "inputs": r.inputs} for r in prod_plan.resources]}
    assert [v for v in evaluate_plan(plan) if v.mandatory] == []


def test_monitoring_off_creates_none_of_it() -> None:
    plan = plan_of(base_config())
    assert [r.type for r in plan.resources if r.type in MONITORING_TYPES] == []
    assert TAG_METRICS_ENDPOINT not in one(plan, VMSS).inputs["tags"]
    assert "monitoring" not in plan.outputs


def test_outputs_name_grafana(prod_plan: Plan) -> None:
    assert prod_plan.outputs["monitoring"]["grafanaEndpoint"].startswith("https://")
    grafana = one(prod_plan, GRAFANA)
    assert prod_plan.outputs["monitoring"]["grafanaName"] == grafana.inputs["workspaceName"] == "prod-grafana"


def test_a_webhook_url_stays_out_of_the_plan() -> None:
    token = "https://hooks.example.com/services/T000/B000/SECRETTOKEN"
    plan = plan_of(base_config(monitoring={"enabled": True, "webhooks": [token]}))
    receivers = one(plan, ACTION_GROUP).inputs["webhookReceivers"]
    assert receivers == "[secret]"
    assert "SECRETTOKEN" not in str([r.inputs for r in plan.resources])


def test_turning_monitoring_off_is_flagged_as_losing_the_metrics_history(prod_plan: Plan) -> None:
    from ndfleet.plans import plandiff

    config = prod_config()
    config["monitoring"] = {**config["monitoring"], "enabled": False}
    off = plan_of(config, "prod")

    def as_json(plan: Plan) -> dict[str, Any]:
        return {"resources": [{"type": r.type, "name": r.name, "parent": r.parent, "protect": r.protect,
                               "inputs": r.inputs} for r in plan.resources]}

    diff = plandiff.diff_plans(as_json(prod_plan), as_json(off), "prod")
    flagged = {(c.rule, c.resource_type) for c in diff.consequences}
    assert ("data-deleted", AMW) in flagged


@pytest.mark.parametrize("prefix", ["prod", "a" * 20, "abcdefghijklmn-xyz"])
def test_grafana_name_fits_azure(prefix: str) -> None:
    import re

    from ndfleet.components.monitoring import grafana_name

    name = grafana_name(prefix)
    assert re.fullmatch(r"[a-z][a-z0-9-]{0,21}[a-z0-9]", name), name


@pytest.mark.parametrize(
    ("role_id", "scope", "ok"),
    [
        (MONITORING_METRICS_PUBLISHER_ROLE_ID, "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Insights/"
         "dataCollectionRules/dcr", True),
        (MONITORING_METRICS_PUBLISHER_ROLE_ID, "/subscriptions/s/resourceGroups/rg", False),
        (MONITORING_DATA_READER_ROLE_ID, "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Monitor/accounts/a",
         True),
        (MONITORING_DATA_READER_ROLE_ID, "/subscriptions/s", False),
        ("36e80216-a7e8-4f42-a7e1-f12c98cbaf8a", "/subscriptions/s", True),  # Impact Reporter: subscription-level
        ("36e80216-a7e8-4f42-a7e1-f12c98cbaf8a", "/subscriptions/s/resourceGroups/rg", False),
        ("4633458b-17de-408a-b874-0445c86b69e6", "/subscriptions/s/resourceGroups/rg/providers/Microsoft.KeyVault/"
         "vaults/v/secrets/munge", True),  # Key Vault Secrets User: one secret
        ("4633458b-17de-408a-b874-0445c86b69e6", "/subscriptions/s/resourceGroups/rg/providers/Microsoft.KeyVault/"
         "vaults/v", False),  # not the whole vault
        ("b24988ac-6180-42a0-ab88-20f7382dd24c", "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Monitor/"
         "accounts/a", False),  # Contributor: never
    ],
)
def test_least_privilege_rule_pairs_each_role_with_its_scope(role_id: str, scope: str, ok: bool) -> None:
    from ndfleet.plans.policy_rules import ROLE_ASSIGNMENT_TYPE, RULES_BY_ID

    props = {"roleDefinitionId": f"/subscriptions/s/providers/Microsoft.Authorization/roleDefinitions/{role_id}",
             "scope": scope}
    assert (RULES_BY_ID["identity-least-privilege"].check(ROLE_ASSIGNMENT_TYPE, props) == []) is ok


def test_impact_reporting_and_monitoring_together_keep_every_policy() -> None:
    config = prod_config()
    config["health"] = {**config["health"], "impactReporting": True}
    plan = plan_of(config, "prod")
    assert len(_role(plan, "36e80216-a7e8-4f42-a7e1-f12c98cbaf8a")) == 1  # Impact Reporter
    resources = [{"type": r.type, "name": r.name, "inputs": r.inputs} for r in plan.resources]
    assert [v for v in evaluate_plan({"resources": resources}) if v.mandatory] == []
