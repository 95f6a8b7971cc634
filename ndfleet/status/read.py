"""One status read: credentials, Resource Manager, the workspace's metrics, then the join. Never raises for Azure
trouble: a StackStatus with `error` (exit 2) says what could not be read."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ndfleet.azure.arm import RetrySettings
from ndfleet.azure.auth import SharedTokenCredential, build_credential, first_token
from ndfleet.azure.clouds import resolve_cloud, resolve_subscription
from ndfleet.azure.errors import CannotCheck
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.status.arm_read import ArmView, read_stack
from ndfleet.status.classify import StackStatus, classify_island, wanted_nodes
from ndfleet.status.metrics_view import NOT_COLLECTED, MetricsView, slurm_by_node, validation_by_node
from ndfleet.status.prometheus import (
    PrometheusReader,
    QueryFailed,
    failed_checks_query,
    node_metrics_query,
    slurm_query,
)


def read_metrics(
    spec: ClusterSpec, arm: ArmView, credential: Any, cloud: Any, retry: RetrySettings, transport: Any
) -> MetricsView:
    """Validation and (with Slurm) Slurm states from the workspace; each failure is kept as that column's problem."""
    if not spec.monitoring.enabled:
        return NOT_COLLECTED
    slurm_on = spec.scheduler == "slurm"
    if arm.query_endpoint is None:
        problem = arm.workspace_problem or "no monitoring workspace found"
        return MetricsView(None, problem, None, problem if slurm_on else None)
    try:
        reader = PrometheusReader(arm.query_endpoint, credential, cloud, retry, transport)
    except QueryFailed as exc:
        return MetricsView(None, str(exc), None, str(exc) if slurm_on else None)
    try:
        try:
            validation: dict[str, Any] | None = validation_by_node(
                reader.query(node_metrics_query(spec.stack)), reader.query(failed_checks_query(spec.stack))
            )
            validation_problem = None
        except QueryFailed as exc:
            validation, validation_problem = None, str(exc)
        slurm, slurm_problem = None, None
        if slurm_on:
            try:
                slurm = slurm_by_node(reader.query(slurm_query(spec.stack)))
            except QueryFailed as exc:
                slurm_problem = str(exc)
    finally:
        reader.close()
    if slurm_on and slurm is not None and not slurm:
        # The controller publishes nothing (yet): say so rather than report every node as out of Slurm.
        slurm, slurm_problem = None, "the controller published no ndfleet_slurm_node_state series"
    return MetricsView(validation, validation_problem, slurm, slurm_problem)


def read_status(
    spec: ClusterSpec,
    *,
    env: Mapping[str, str] | None = None,
    provider_config: Mapping[str, str] | None = None,
    credential: Any = None,
    transport: Any = None,
    retry: RetrySettings | None = None,
) -> StackStatus:
    env = os.environ if env is None else env
    retry = retry or RetrySettings()
    status = StackStatus(
        stack=spec.stack,
        subscription_id=None,
        location=spec.location,
        vm_size=spec.profile.name,
        slurm=spec.scheduler == "slurm",
        monitoring=spec.monitoring.enabled,
    )
    owned = None
    try:
        cloud = resolve_cloud(env, provider_config)
        status.subscription_id = subscription_id = resolve_subscription(spec, env, provider_config)
        if credential is None:
            credential = owned = build_credential(cloud, env)
        shared = SharedTokenCredential(credential)
        first_token(shared, cloud)
        arm = read_stack(spec, subscription_id, shared, cloud, retry=retry, transport=transport)
        metrics = read_metrics(spec, arm, shared, cloud, retry, transport)
    except CannotCheck as exc:
        status.error = str(exc).replace("could not check:", "could not read:", 1)
        status.error_details = exc.details
        status.error_transient = exc.transient
        return status
    finally:
        if owned is not None:
            owned.close()
    status.validation_read = metrics.validation is not None
    if metrics.validation_problem:
        status.notes.append(f"validation unknown for every node: {metrics.validation_problem}")
    if metrics.slurm_problem:
        status.notes.append(f"Slurm states unknown (not counted against the exit code): {metrics.slurm_problem}")
    if not spec.monitoring.enabled:
        status.notes.append("validation not collected: the stack has monitoring off (ndfleet:monitoring.enabled); "
                            "Azure's health state reflects the node's validation")
    for island in spec.islands:
        scale_sets = arm.scale_sets.get(island.name, ())
        status.islands.append(classify_island(spec, island.name, wanted_nodes(island, scale_sets), scale_sets,
                                              metrics, elastic=island.elastic is not None))  # fmt: skip
    return status
