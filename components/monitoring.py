"""Fleet monitoring: Azure Monitor managed Prometheus, Managed Grafana, the ingestion path and the alerts.

- An Azure Monitor workspace (managed Prometheus) stores every node's metrics; its public query endpoint is off,
  Managed Grafana reads it through a managed private endpoint (Microsoft Learn: azure-monitor-workspace-private-
  endpoint; managed-grafana/how-to-connect-to-data-source-privately).
- Nodes remote-write through a data collection endpoint + rule. The endpoint's public network access is off: it
  is in an Azure Monitor Private Link Scope (ingestion PrivateOnly) reached through a private endpoint in the
  cluster's private-endpoint subnet and the privatelink.monitor.azure.com zone (azure-monitor/logs/private-link-
  security, private-link-configure).
- Least privilege: the node identity gets `Monitoring Metrics Publisher` on the rule only; Grafana's system
  identity gets `Monitoring Data Reader` on the workspace only (not the portal's subscription-wide default).
- An Action Group (e-mail / webhook receivers from `ndfleet:monitoring`) and one `alertsmanagement`
  PrometheusRuleGroup per alert group, generated from the same table as the promtool-tested rule file (Azure
  rule groups take the open-source rule's name, expression, `for`, labels and templated annotations:
  azure-monitor/metrics/prometheus-rule-groups; the PrometheusRule REST reference).
- Managed Grafana's UI keeps public network access (Entra ID sign-in only, API keys off): operators open it in a
  browser from outside the VNet; docs/monitoring.md says how to make it private.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native.alertsmanagement as alertsmanagement
import pulumi_azure_native.authorization as authorization
import pulumi_azure_native.dashboard as dashboard
import pulumi_azure_native.monitor as monitor
import pulumi_azure_native.network as network
import pulumi_azure_native.privatedns as privatedns

from ndfleet.boot_contract import INGEST_STREAM
from ndfleet.components.identity import role_definition_id
from ndfleet.monitoring.alerts import AZURE_SEVERITY, EVALUATION_INTERVAL_MINUTES, Alert, rule_groups
from ndfleet.stackconfig.names import grafana_name
from ndfleet.stackconfig.profiles import MONITORING_DATA_READER_ROLE_ID, MONITORING_METRICS_PUBLISHER_ROLE_ID

MONITOR_PRIVATE_DNS_ZONE = "privatelink.monitor.azure.com"
# Alerts that stay true resolve on their own this long after the condition clears.
ALERT_AUTO_RESOLVE = "PT10M"


def action_group_short_name(stack: str) -> str:
    """Azure allows 12 characters for an action group's short name (it prefixes SMS and e-mail subjects)."""
    return f"nd-{stack}"[:12]


@dataclass(frozen=True)
class MonitoringArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    stack: str  # names descriptions and the action group's short name
    name_prefix: str  # the Grafana instance's name
    vnet_id: pulumi.Input[str]
    # Where the Azure Monitor private endpoint goes (the cluster's private-endpoint subnet).
    private_endpoint_subnet_id: pulumi.Input[str]
    # The node identity: publishes metrics through the data collection rule, nothing else.
    node_principal_id: pulumi.Input[str]
    subscription_id: pulumi.Input[str]
    # The alert table (ndfleet.monitoring.alerts.alerts), deployed as one rule group per Alert.group.
    alerts: Sequence[Alert]
    emails: Sequence[str] = ()
    webhooks: Sequence[str] = ()
    tags: Mapping[str, str] = field(default_factory=dict)


class Monitoring(pulumi.ComponentResource):
    workspace_id: pulumi.Output[str]
    ingest_endpoint: pulumi.Output[str]
    rule_immutable_id: pulumi.Output[str]
    rule_id: pulumi.Output[str]
    grafana_endpoint: pulumi.Output[str]
    grafana_name: pulumi.Output[str]

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:Monitoring", name, None, opts)
        # Named steps, registered in this order (each resource's name and parent as ever: the same URNs).
        workspace = self._workspace(name, args)
        dce, dcr, publish_grant = self._ingestion(name, args, workspace)
        # What a node needs before its agent first writes: the endpoint in the scope, the private path to it (the
        # endpoint, the zone's VNet link, the A records) and its Monitoring Metrics Publisher assignment.
        self.path_dependencies: list[pulumi.Resource] = self._private_path(name, args, dce)
        self.boot_dependencies: list[pulumi.Resource] = [*self.path_dependencies, publish_grant]
        grafana = self._grafana(name, args, workspace)
        self._alerts(name, args, workspace)
        self.workspace_id = workspace.id
        # The rule another identity (the Slurm controller's) is given Monitoring Metrics Publisher on.
        self.rule_id = dcr.id
        self.ingest_endpoint = dce.metrics_ingestion.apply(lambda m: (m.endpoint or "") if m else "")
        self.rule_immutable_id = dcr.immutable_id.apply(lambda i: i or "")
        self.grafana_endpoint = grafana.properties.apply(lambda p: (p.endpoint or "") if p else "")
        self.grafana_name = grafana.name
        self.register_outputs(
            {
                "workspaceId": self.workspace_id,
                "ingestEndpoint": self.ingest_endpoint,
                "ruleImmutableId": self.rule_immutable_id,
                "grafanaEndpoint": self.grafana_endpoint,
                "grafanaName": self.grafana_name,
            }
        )

    def _workspace(self, name: str, args: MonitoringArgs) -> monitor.AzureMonitorWorkspace:
        rg, location = args.resource_group_name, args.location
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        return monitor.AzureMonitorWorkspace(
            f"{name}-amw",
            resource_group_name=rg,
            location=location,
            public_network_access=monitor.PublicNetworkAccess.DISABLED,
            tags=tags,
            opts=child,
        )

    def _ingestion(
        self, name: str, args: MonitoringArgs, workspace: monitor.AzureMonitorWorkspace
    ) -> tuple[monitor.DataCollectionEndpoint, monitor.DataCollectionRule, authorization.RoleAssignment]:
        """The data collection endpoint and rule (reached privately from the VNet) and the nodes' grant on it."""
        rg, location, stack = args.resource_group_name, args.location, args.stack
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        dce = monitor.DataCollectionEndpoint(
            f"{name}-dce",
            resource_group_name=rg,
            location=location,
            description=f"ndfleet {stack}: Prometheus remote write from the cluster's nodes",
            network_acls=monitor.DataCollectionEndpointNetworkAclsArgs(
                public_network_access=monitor.KnownPublicNetworkAccessOptions.DISABLED
            ),
            tags=tags,
            opts=child,
        )
        dcr = monitor.DataCollectionRule(
            f"{name}-dcr",
            resource_group_name=rg,
            location=location,
            description=f"ndfleet {stack}: node metrics -> Azure Monitor workspace",
            data_collection_endpoint_id=dce.id,
            data_sources=monitor.DataCollectionRuleDataSourcesArgs(
                prometheus_forwarder=[
                    monitor.PrometheusForwarderDataSourceArgs(name="ndfleetNodes", streams=[INGEST_STREAM])
                ]
            ),
            destinations=monitor.DataCollectionRuleDestinationsArgs(
                monitoring_accounts=[
                    monitor.MonitoringAccountDestinationArgs(name="ndfleetWorkspace", account_resource_id=workspace.id)
                ]
            ),
            data_flows=[monitor.DataFlowArgs(streams=[INGEST_STREAM], destinations=["ndfleetWorkspace"])],
            tags=tags,
            opts=child,
        )
        # The node identity may publish metrics through this rule and nothing else.
        publish_grant = authorization.RoleAssignment(
            f"{name}-nodes-publish",
            scope=dcr.id,
            principal_id=args.node_principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=role_definition_id(args.subscription_id, MONITORING_METRICS_PUBLISHER_ROLE_ID),
            opts=child,
        )
        return dce, dcr, publish_grant

    def _private_path(
        self, name: str, args: MonitoringArgs, dce: monitor.DataCollectionEndpoint
    ) -> list[pulumi.Resource]:
        """The private link scope holding the endpoint, its private endpoint, DNS zone, VNet link and zone group."""
        rg, location = args.resource_group_name, args.location
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        scope = monitor.PrivateLinkScope(
            f"{name}-ampls",
            resource_group_name=rg,
            location="global",
            access_mode_settings=monitor.AccessModeSettingsArgs(
                ingestion_access_mode=monitor.AccessMode.PRIVATE_ONLY,
                query_access_mode=monitor.AccessMode.OPEN,
            ),
            tags=tags,
            opts=child,
        )
        scoped_dce = monitor.PrivateLinkScopedResource(
            f"{name}-ampls-dce",
            resource_group_name=rg,
            scope_name=scope.name,
            linked_resource_id=dce.id,
            opts=child,
        )
        endpoint = network.PrivateEndpoint(
            f"{name}-ampls-pe",
            resource_group_name=rg,
            location=location,
            subnet=network.SubnetArgs(id=args.private_endpoint_subnet_id),
            private_link_service_connections=[
                network.PrivateLinkServiceConnectionArgs(
                    name="azuremonitor", private_link_service_id=scope.id, group_ids=["azuremonitor"]
                )
            ],
            tags=tags,
            opts=child,
        )
        zone = privatedns.PrivateZone(
            f"{name}-monitor-dns",
            resource_group_name=rg,
            private_zone_name=MONITOR_PRIVATE_DNS_ZONE,
            location="Global",
            tags=tags,
            opts=child,
        )
        dns_link = privatedns.VirtualNetworkLink(
            f"{name}-monitor-dns-link",
            resource_group_name=rg,
            private_zone_name=zone.name,
            location="Global",
            registration_enabled=False,
            virtual_network=privatedns.SubResourceArgs(id=args.vnet_id),
            tags=tags,
            opts=child,
        )
        dns_group = network.PrivateDnsZoneGroup(
            f"{name}-ampls-dns-group",
            resource_group_name=rg,
            private_endpoint_name=endpoint.name,
            private_dns_zone_group_name="default",
            private_dns_zone_configs=[network.PrivateDnsZoneConfigArgs(name="monitor", private_dns_zone_id=zone.id)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[endpoint, dns_link]),
        )
        return [scoped_dce, endpoint, dns_link, dns_group]

    def _grafana(
        self, name: str, args: MonitoringArgs, workspace: monitor.AzureMonitorWorkspace
    ) -> dashboard.Grafana:
        """Managed Grafana: reads the workspace, nothing else."""
        rg, location, stack = args.resource_group_name, args.location, args.stack
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        grafana = dashboard.Grafana(
            f"{name}-grafana",
            workspace_name=grafana_name(args.name_prefix),
            resource_group_name=rg,
            location=location,
            sku=dashboard.ResourceSkuArgs(name="Standard"),
            identity=dashboard.ManagedServiceIdentityArgs(type=dashboard.ManagedServiceIdentityType.SYSTEM_ASSIGNED),
            properties=dashboard.ManagedGrafanaPropertiesArgs(
                api_key=dashboard.ApiKey.DISABLED,
                public_network_access=dashboard.PublicNetworkAccess.ENABLED,
                grafana_integrations=dashboard.GrafanaIntegrationsArgs(
                    azure_monitor_workspace_integrations=[
                        dashboard.AzureMonitorWorkspaceIntegrationArgs(azure_monitor_workspace_resource_id=workspace.id)
                    ]
                ),
            ),
            tags=tags,
            opts=child,
        )
        authorization.RoleAssignment(
            f"{name}-grafana-read",
            scope=workspace.id,
            principal_id=grafana.identity.apply(lambda i: i.principal_id if i else ""),
            principal_type="ServicePrincipal",
            role_definition_id=role_definition_id(args.subscription_id, MONITORING_DATA_READER_ROLE_ID),
            opts=child,
        )
        dashboard.ManagedPrivateEndpoint(
            f"{name}-grafana-amw-pe",
            resource_group_name=rg,
            workspace_name=grafana.name,
            managed_private_endpoint_name="amw-query",
            location=location,
            private_link_resource_id=workspace.id,
            private_link_resource_region=location,
            group_ids=["prometheusMetrics"],
            request_message=f"ndfleet {stack}: Managed Grafana reads the cluster's Azure Monitor workspace",
            opts=child,
        )
        return grafana

    def _alerts(self, name: str, args: MonitoringArgs, workspace: monitor.AzureMonitorWorkspace) -> None:
        """The action group and one Prometheus rule group per alert group of the table."""
        rg, location, stack = args.resource_group_name, args.location, args.stack
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        action_group = monitor.ActionGroup(
            f"{name}-alerts",
            resource_group_name=rg,
            location="Global",
            group_short_name=action_group_short_name(stack),
            enabled=True,
            email_receivers=[
                monitor.MicrosoftCommonEmailReceiverArgs(
                    name=f"email-{i}", email_address=e, use_common_alert_schema=True
                )
                for i, e in enumerate(args.emails)
            ],
            # A webhook URL often carries a token: sent as a Pulumi secret, so state and plans keep it encrypted.
            webhook_receivers=[
                monitor.WebhookReceiverArgs(
                    name=f"webhook-{i}", service_uri=pulumi.Output.secret(w), use_common_alert_schema=True
                )
                for i, w in enumerate(args.webhooks)
            ],
            tags=tags,
            opts=child,
        )
        # At most MAX_RULES_PER_GROUP rules per group: a larger table group becomes several (rule_groups).
        for group, rules in rule_groups(list(args.alerts)):
            alertsmanagement.PrometheusRuleGroup(
                f"{name}-rules-{group}",
                resource_group_name=rg,
                location=location,
                description=f"ndfleet {stack}: {group} alerts (ndfleet/monitoring/alerts.py)",
                scopes=[workspace.id],
                enabled=True,
                interval=f"PT{EVALUATION_INTERVAL_MINUTES}M",
                rules=[
                    alertsmanagement.PrometheusRuleArgs(
                        alert=a.name,
                        expression=a.expr,
                        # No `for` when the alert fires at once (Prometheus's default of 0).
                        for_=a.for_iso8601 if a.for_minutes else None,
                        severity=AZURE_SEVERITY[a.severity],
                        labels=a.all_labels,
                        annotations=a.annotations,
                        enabled=True,
                        actions=[alertsmanagement.PrometheusRuleGroupActionArgs(action_group_id=action_group.id)],
                        resolve_configuration=alertsmanagement.PrometheusRuleResolveConfigurationArgs(
                            auto_resolved=True, time_to_resolve=ALERT_AUTO_RESOLVE
                        ),
                    )
                    for a in rules
                ],
                tags=tags,
                opts=child,
            )
