"""One goodput read: credentials and the workspace found as `status` finds them (ndfleet.status.read,
ndfleet.status.arm_read), then one range query per island through the same bounded reader
(ndfleet.status.prometheus.PrometheusReader). Never raises for Azure trouble: GoodputRead.error says why."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ndfleet_node.names import JOB_RUN_END_METRIC, JOB_RUN_START_METRIC

from ndfleet.azure.arm import RetrySettings
from ndfleet.azure.auth import SharedTokenCredential, build_credential, first_token
from ndfleet.azure.clouds import resolve_cloud, resolve_subscription
from ndfleet.azure.errors import CannotCheck
from ndfleet.cost.prices import table_price
from ndfleet.goodput.compute import Report, StateSample, build_report
from ndfleet.goodput.jobs import build_jobs
from ndfleet.monitoring.series import island_query_selector, label_value
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.status.arm_read import computer_name_prefix, read_stack
from ndfleet.status.prometheus import PrometheusReader, QueryFailed, Series, flag

# Prometheus refuses a range query of more than 11,000 points a series ("exceeded maximum resolution of 11,000
# points per timeseries", web/api/v1/api.go). ndfleet asks for at most 1,000, one island at a time: an island of
# 1,000 nodes at about 22 bytes a point ([1796284800.123,"1"]) is about 22 MB, under MAX_ANSWER_BYTES (32 MiB).
MAX_POINTS = 1_000
# The job series hold constant values (a run's start or end) and each lives for days (a job is published for 7 days
# after its last failure), so a coarse step loses none of them: 100 points a series keeps the answer small however
# many jobs a week turns over (5,000 series x 100 points x ~30 bytes is 15 MB). The step only rounds when a running
# run that stopped being published was last seen.
MAX_JOB_POINTS = 100


def step_for(since: float, until: float, scrape_interval_s: int, max_points: int = MAX_POINTS) -> float:
    """The query step: the smallest whole multiple of the scrape interval that keeps the period within `max_points`
    points (finer than the scrape interval adds no information)."""
    return float(scrape_interval_s * max(1, math.ceil((until - since) / (max_points * scrape_interval_s))))


def island_query(spec: ClusterSpec, island: str) -> str:
    return f"{island_query_selector(spec, island)} == 1"


def job_queries(spec: ClusterSpec) -> tuple[str, str]:
    """The controller's job runs (ndfleet_node.slurm_export): their starts, then their ends."""
    stack = label_value(spec.stack)
    return f'{JOB_RUN_START_METRIC}{{stack="{stack}"}}', f'{JOB_RUN_END_METRIC}{{stack="{stack}"}}'


def state_samples(series: list[Series]) -> list[StateSample]:
    """The controller's state series as samples; a point whose value is not 1 (the query keeps only 1) is dropped."""
    out = []
    for s in series:
        node = s.labels.get("slurm_node", "").lower()
        if not node:
            continue
        for at, value in s.points:
            if flag(value) == 1:
                out.append(StateSample(node, at, s.labels.get("state", "other"), s.labels.get("reason", "")))
    return out


@dataclass
class GoodputRead:
    report: Report | None
    error: str | None = None


def read_goodput(
    spec: ClusterSpec,
    since: float,
    until: float,
    *,
    env: Mapping[str, str] | None = None,
    provider_config: Mapping[str, str] | None = None,
    credential: Any = None,
    transport: Any = None,
    retry: RetrySettings | None = None,
) -> GoodputRead:
    if not spec.monitoring.enabled or spec.scheduler != "slurm":
        return GoodputRead(None, "the report reads the Slurm states the controller publishes to the monitoring "
                                 "workspace: the stack needs ndfleet:scheduler slurm and ndfleet:monitoring.enabled")
    env = os.environ if env is None else env
    retry = retry or RetrySettings()
    step = step_for(since, until, spec.monitoring.scrape_interval_seconds)
    prefixes = {i.name: computer_name_prefix(spec, i.name) for i in spec.islands}
    owned = None
    samples: list[StateSample] = []
    job_answers: list[list[Series]] = []
    try:
        cloud = resolve_cloud(env, provider_config)
        subscription_id = resolve_subscription(spec, env, provider_config)
        if credential is None:
            credential = owned = build_credential(cloud, env)
        shared = SharedTokenCredential(credential)
        first_token(shared, cloud)
        arm = read_stack(spec, subscription_id, shared, cloud, retry=retry, transport=transport)
        if arm.query_endpoint is None:
            return GoodputRead(None, f"could not read: {arm.workspace_problem or 'no monitoring workspace found'}")
        reader = PrometheusReader(arm.query_endpoint, shared, cloud, retry, transport)
        try:
            for island in prefixes:
                samples += state_samples(reader.query_range(island_query(spec, island), since, until, step))
            job_step = step_for(since, until, spec.monitoring.scrape_interval_seconds, MAX_JOB_POINTS)
            job_answers = [reader.query_range(q, since, until, job_step) for q in job_queries(spec)]
            jobs = build_jobs(*job_answers, since=since, until=until, step_s=job_step)
        finally:
            reader.close()
    except CannotCheck as exc:
        return GoodputRead(None, str(exc).replace("could not check:", "could not read:", 1))
    except QueryFailed as exc:
        return GoodputRead(None, f"could not read the Slurm states and jobs: {exc}")
    finally:
        if owned is not None:
            owned.close()
    price = table_price(spec.profile.name, spec.location)
    report = build_report(spec.stack, samples, since=since, until=until, step_s=step, prefixes=prefixes,
                          usd_per_node_hour=None if price is None else price.usd_per_hour)
    report.jobs = jobs
    return GoodputRead(report)
