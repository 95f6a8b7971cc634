"""The booted nodes' metrics pipeline: the Prometheus agent the monitoring set-up installs runs and remote-writes,
as the node's managed identity, to the ingestion endpoint the plan's tags name (the twin's receiver)."""

from __future__ import annotations

from tests.twin.test_boot import healthy_nodes
from tests.twin.twin import Twin


def test_every_healthy_node_runs_the_agent_and_remote_writes(twin: Twin) -> None:
    for tm in healthy_nodes(twin):
        tm.wait_for(
            "ndfleet-prometheus.service active",
            lambda tm=tm: tm.unit_state("ndfleet-prometheus.service") == "active", 600,
            ("ndfleet-monitoring-setup.service", "ndfleet-prometheus.service"),
        )  # fmt: skip
        tm.wait_for("a remote write accepted", lambda tm=tm: twin.state.remote_writes[tm.spec.ip] > 0, 300,
                    ("ndfleet-prometheus.service",))  # fmt: skip


def test_remote_writes_carry_a_token_the_metadata_service_issued_for_azure_monitor(twin: Twin) -> None:
    audiences = {aud for _, aud in twin.state.tokens.values()}
    assert "https://monitor.azure.com" in audiences, audiences
