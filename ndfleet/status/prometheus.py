"""Reading the nodes' validation metrics and the controller's Slurm states from the stack's Azure Monitor workspace.

The workspace answers the Prometheus HTTP API at its query endpoint (`properties.metrics.prometheusQueryEndpoint`):
`GET <endpoint>/api/v1/query?query=<PromQL>` with a Microsoft Entra bearer token for the audience
`https://prometheus.monitor.azure.com` and the `Monitoring Data Reader` role on the workspace (Microsoft Learn,
"Query Prometheus metrics using the API and PromQL"). Every request goes through azure-core's pipeline with the
retry settings preflight uses (Retry-After honoured), a connect and read timeout, and a bound on the body.

A query that fails, or an answer this module cannot understand, is a `QueryFailed` with one line saying why: the
caller shows the column as unknown. A value that is not 0 or 1 (NaN, garbage) makes that node's state unknown.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ndfleet.azure.arm import RetrySettings
from ndfleet.azure.clouds import CloudSettings

# The token audience of the workspace query API per cloud (Microsoft Learn, "Query Prometheus metrics using the API
# and PromQL": a token for https://prometheus.monitor.azure.com; the US Government and China audiences are the ones
# Grafana's and KEDA's Azure Monitor clients use for those clouds).
PROMETHEUS_SCOPES = {
    "AzureCloud": "https://prometheus.monitor.azure.com/.default",
    "AzureUSGovernment": "https://prometheus.monitor.azure.us/.default",
    "AzureChinaCloud": "https://prometheus.monitor.azure.cn/.default",
}
# An answer for a few thousand nodes is well under a megabyte; more than this is not an answer we read.
MAX_ANSWER_BYTES = 32 * 1024 * 1024
# Metric names (node/ndfleet_node/metrics.py, node/ndfleet_node/slurm_export.py).
NODE_METRICS = ("ndfleet_node_validated", "ndfleet_node_healthy")
CHECK_METRIC = "ndfleet_validation_check_status"
SLURM_METRIC = "ndfleet_slurm_node_state"


class QueryFailed(Exception):
    """The query could not be run or its answer not understood; str() is one line for the user."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: str  # as the API sent it: "1", "0", "NaN", ...


def prometheus_scope(cloud: CloudSettings) -> str:
    for name, scope in PROMETHEUS_SCOPES.items():
        if cloud.name == name or cloud.name.endswith(f"({name} sign-in)"):
            return scope
    return PROMETHEUS_SCOPES["AzureCloud"]


def _label_value(value: str) -> str:
    """A PromQL string literal's content: backslash and double quote escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def node_metrics_query(stack: str) -> str:
    names = "|".join(NODE_METRICS)
    return f'{{__name__=~"{names}",stack="{_label_value(stack)}"}}'


def failed_checks_query(stack: str) -> str:
    return f'{CHECK_METRIC}{{stack="{_label_value(stack)}",status="fail"}} == 1'


def slurm_query(stack: str) -> str:
    return f'{SLURM_METRIC}{{stack="{_label_value(stack)}"}} == 1'


def parse_vector(body: bytes) -> list[Sample]:
    """The samples of an instant-query answer (`resultType: vector`); QueryFailed for anything else."""
    try:
        doc = json.loads(body.decode("utf-8"), parse_constant=lambda name: name)
    except (UnicodeDecodeError, ValueError) as exc:
        raise QueryFailed(f"the query API answered something that is not JSON ({exc})") from None
    if not isinstance(doc, Mapping):
        raise QueryFailed("the query API answered JSON that is not an object")
    if doc.get("status") != "success":
        error = str(doc.get("error") or doc.get("errorType") or "no detail")[:200]
        raise QueryFailed(f"the query failed: {error}")
    data = doc.get("data")
    if not isinstance(data, Mapping) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise QueryFailed("the query API's answer has no vector result")
    samples = []
    for item in data["result"]:
        metric = item.get("metric") if isinstance(item, Mapping) else None
        value = item.get("value") if isinstance(item, Mapping) else None
        if not isinstance(metric, Mapping) or not isinstance(value, list) or len(value) != 2:
            raise QueryFailed("the query API's answer holds a sample without labels or value")
        labels = {str(k): str(v) for k, v in metric.items() if isinstance(v, str)}
        samples.append(Sample(labels, value[1] if isinstance(value[1], str) else repr(value[1])))
    return samples


def flag(value: str) -> int | None:
    """0 or 1 from a sample value; None for anything else (NaN, Inf, 0.5, garbage)."""
    try:
        number = float(value)
    except ValueError:
        return None
    if math.isfinite(number) and number in (0.0, 1.0):
        return int(number)
    return None


class PrometheusReader:
    """Instant queries against one workspace's query endpoint, with the caller's identity."""

    def __init__(
        self, endpoint: str, credential: Any, cloud: CloudSettings, retry: RetrySettings, transport: Any = None
    ):
        from urllib.parse import urlsplit

        from azure.core import PipelineClient
        from azure.core.pipeline import policies

        # The token goes only to a workspace query endpoint: https and a host under the audience's domain
        # (<workspace>.<region>.prometheus.monitor.azure.com and the sovereign equivalents).
        suffix = "." + prometheus_scope(cloud).removeprefix("https://").removesuffix("/.default")
        host = urlsplit(endpoint).hostname or ""
        if not endpoint.startswith("https://") or not host.endswith(suffix):
            raise QueryFailed(f"the workspace's query endpoint {endpoint!r} is not an https:// URL on *{suffix}")
        self.endpoint = endpoint.rstrip("/")
        self._client: Any = PipelineClient(
            base_url=self.endpoint,
            policies=[
                policies.RequestIdPolicy(),
                policies.HeadersPolicy(),
                policies.UserAgentPolicy(user_agent="ndfleet-status"),
                policies.RetryPolicy(
                    retry_total=retry.total,
                    retry_status=retry.total,
                    retry_connect=retry.total,
                    retry_read=retry.total,
                    retry_backoff_factor=retry.backoff_factor,
                    retry_backoff_max=retry.backoff_max,
                    timeout=retry.timeout_s,
                ),
                policies.BearerTokenCredentialPolicy(credential, prometheus_scope(cloud)),
                policies.HttpLoggingPolicy(),
            ],
            transport=transport,
            connection_timeout=retry.connection_timeout_s,
            read_timeout=retry.read_timeout_s,
        )

    def query(self, promql: str) -> list[Sample]:
        from azure.core.exceptions import AzureError
        from azure.core.rest import HttpRequest

        request = HttpRequest("GET", f"{self.endpoint}/api/v1/query", params={"query": promql})
        try:
            response = self._client.send_request(request, stream=True)
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    response.close()
                    raise QueryFailed(f"the query API answered more than {MAX_ANSWER_BYTES} bytes")
        except AzureError as exc:
            raise QueryFailed(f"could not reach the query endpoint {self.endpoint}: {_first_line(exc)}") from None
        if response.status_code != 200:
            hint = {
                401: "credentials rejected",
                403: "no permission: the Monitoring Data Reader role on the workspace is needed, and the workspace "
                "refuses queries from outside its private endpoint when its public network access is off",
                429: "throttled after retries",
            }.get(response.status_code, "")
            detail = _error_detail(bytes(body))
            said = "; ".join(x for x in (hint, detail) if x)
            raise QueryFailed(f"the query API answered HTTP {response.status_code}" + (f" ({said})" if said else ""))
        return parse_vector(bytes(body))

    def close(self) -> None:
        self._client.close()


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."


def _error_detail(body: bytes) -> str:
    try:
        doc = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        return ""
    if isinstance(doc, Mapping):
        error = doc.get("error")
        if isinstance(error, Mapping):
            error = f"{error.get('code', '')}: {error.get('message', '')}"
        return str(error or "")[:200]
    return ""
