"""Reading the nodes' validation metrics and the controller's Slurm states from the stack's Azure Monitor workspace.

The workspace answers the Prometheus HTTP API at its query endpoint (`properties.metrics.prometheusQueryEndpoint`):
`GET <endpoint>/api/v1/query?query=<PromQL>` with a Microsoft Entra bearer token for the audience
`https://prometheus.monitor.azure.com` and the `Monitoring Data Reader` role on the workspace (Microsoft Learn,
"Query Prometheus metrics using the API and PromQL"). Every request goes through ndfleet.azure's bounded pipeline
(`bearer_client`): capped Retry-After, ANSWER_DEADLINE_S for one answer, MAX_ANSWER_BYTES of body, the token
only to the endpoint's own host as ndfleet.azure.http.endpoint_of reads it.

A query that fails, or an answer this module cannot understand, is a `QueryFailed` with one line saying why: the
caller shows the column as unknown. A value that is not 0 or 1 (NaN, garbage) makes that node's state unknown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ndfleet.azure.answers import AnswerShape, json_document, json_object
from ndfleet.azure.arm import RetrySettings, bearer_client
from ndfleet.azure.clouds import CloudSettings
from ndfleet.azure.http import MAX_RETRY_AFTER_S
from ndfleet.azure.text import one_line
from ndfleet.monitoring.series import SLURM_METRIC, label_value

# The token audience of the workspace query API per cloud (Microsoft Learn, "Query Prometheus metrics using the API
# and PromQL": a token for https://prometheus.monitor.azure.com; the US Government and China audiences are the ones
# Grafana's and KEDA's Azure Monitor clients use for those clouds).
PROMETHEUS_SCOPES = {
    "AzureCloud": "https://prometheus.monitor.azure.com/.default",
    "AzureUSGovernment": "https://prometheus.monitor.azure.us/.default",
    "AzureChinaCloud": "https://prometheus.monitor.azure.cn/.default",
}
# The largest answer is the node-metrics query: two series a node, about 375 bytes a series with its labels (the
# recorded answers of tests/data/status), so 1,000 nodes are about 750 KiB and the 10,240-node plan about 7.5 MiB;
# 32 MiB is four times that. 60 s an answer, headers and body together; the retries' 120 s bound the request.
MAX_ANSWER_BYTES = 32 * 1024 * 1024
ANSWER_DEADLINE_S = 60.0
# Metric names (node/ndfleet_node/metrics.py, node/ndfleet_node/slurm_export.py).
NODE_METRICS = ("ndfleet_node_validated", "ndfleet_node_healthy")
CHECK_METRIC = "ndfleet_validation_check_status"


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


def node_metrics_query(stack: str) -> str:
    names = "|".join(NODE_METRICS)
    return f'{{__name__=~"{names}",stack="{label_value(stack)}"}}'


def failed_checks_query(stack: str) -> str:
    return f'{CHECK_METRIC}{{stack="{label_value(stack)}",status="fail"}} == 1'


def slurm_query(stack: str) -> str:
    return f'{SLURM_METRIC}{{stack="{label_value(stack)}"}} == 1'


def _success_data(body: bytes) -> Mapping[str, Any]:
    """The `data` object of a successful answer (`{"status": "success", "data": {...}}`)."""
    try:
        doc = json_object(body, "the query API")
    except AnswerShape as exc:
        raise QueryFailed(str(exc)) from None
    if doc.get("status") != "success":
        error = one_line(doc.get("error") or doc.get("errorType") or "no detail", 200)
        raise QueryFailed(f"the query failed: {error}")
    data = doc.get("data")
    if not isinstance(data, Mapping):
        raise QueryFailed("the query API's answer has no data")
    return data


def parse_vector(body: bytes) -> list[Sample]:
    """The samples of an instant-query answer (`resultType: vector`); QueryFailed for anything else."""
    data = _success_data(body)
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
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


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: tuple[tuple[float, str], ...]  # (unix seconds, value as the API sent it)


def parse_matrix(body: bytes) -> list[Series]:
    """The series of a range-query answer (`resultType: matrix`, each `{"metric": {...}, "values": [[t, "v"],
    ...]}`: https://prometheus.io/docs/prometheus/latest/querying/api/#range-vectors); QueryFailed for anything
    else, a timestamp that is not a finite number included."""
    data = _success_data(body)
    if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise QueryFailed("the query API's answer has no matrix result")
    out = []
    for item in data["result"]:
        metric = item.get("metric") if isinstance(item, Mapping) else None
        values = item.get("values") if isinstance(item, Mapping) else None
        if not isinstance(metric, Mapping) or not isinstance(values, list):
            raise QueryFailed("the query API's answer holds a series without labels or values")
        points = []
        for pair in values:
            if not isinstance(pair, list) or len(pair) != 2 or isinstance(pair[0], bool):
                raise QueryFailed("the query API's answer holds a point that is not [time, value]")
            try:
                at = float(pair[0])
            except (TypeError, ValueError):
                raise QueryFailed(f"the query API's answer holds a time {one_line(repr(pair[0]), 40)}") from None
            if not math.isfinite(at):
                raise QueryFailed(f"the query API's answer holds a time {one_line(repr(pair[0]), 40)}")
            points.append((at, pair[1] if isinstance(pair[1], str) else repr(pair[1])))
        labels = {str(k): str(v) for k, v in metric.items() if isinstance(v, str)}
        out.append(Series(labels, tuple(points)))
    return out


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
        from ndfleet.azure.http import AnswerRefused, Bounds, endpoint_of

        # The token goes only to a workspace query endpoint: https and a host under the audience's domain
        # (<workspace>.<region>.prometheus.monitor.azure.com and the sovereign equivalents). endpoint_of is the
        # parser the transport connects with, so the host checked here is the host the token goes to.
        suffix = "." + prometheus_scope(cloud).removeprefix("https://").removesuffix("/.default")
        shown = one_line(repr(endpoint), 200)
        try:
            where = endpoint_of(endpoint)
        except AnswerRefused:
            raise QueryFailed(f"the workspace's query endpoint {shown} is refused: user info, backslashes or "
                              "control characters in it") from None  # fmt: skip
        if where.scheme != "https" or not where.host.endswith(suffix):
            raise QueryFailed(f"the workspace's query endpoint {shown} is not an https:// URL on *{suffix}")
        self.endpoint = endpoint.rstrip("/")
        bounds = Bounds(ANSWER_DEADLINE_S, MAX_ANSWER_BYTES, where.host)
        self._client: Any = bearer_client(self.endpoint, credential, prometheus_scope(cloud), bounds, retry,
                                          transport, "ndfleet-status")  # fmt: skip

    def query(self, promql: str) -> list[Sample]:
        return parse_vector(self._get("query", {"query": promql}))

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[Series]:
        """A range query (https://prometheus.io/docs/prometheus/latest/querying/api/#range-queries)."""
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"}
        return parse_matrix(self._get("query_range", params))

    def _get(self, api: str, params: dict[str, str]) -> bytes:
        from azure.core.exceptions import AzureError
        from azure.core.rest import HttpRequest

        request = HttpRequest("GET", f"{self.endpoint}/api/v1/{api}", params=params)
        from ndfleet.azure.http import AnswerRefused

        try:
            response = self._client.send_request(request)
            body = response.body()  # read by the transport within MAX_ANSWER_BYTES and ANSWER_DEADLINE_S
        except AnswerRefused as exc:
            raise QueryFailed(f"refused the query endpoint's answer: {one_line(exc, 200)}") from None
        except AzureError as exc:
            raise QueryFailed(f"could not reach the query endpoint {self.endpoint}: {one_line(exc, 200)}") from None
        if response.status_code != 200:
            hint = {
                401: "credentials rejected",
                403: "no permission: the Monitoring Data Reader role on the workspace is needed, and the workspace "
                "refuses queries from outside its private endpoint when its public network access is off",
                429: "throttled after retries",
            }.get(response.status_code, "")
            detail = _error_detail(bytes(body))
            refused = getattr(response, "ndfleet_refused_wait", None)
            if response.status_code == 429 and refused is not None:
                hint = f"throttled, and asked to wait longer than the {MAX_RETRY_AFTER_S:.0f} s a request may"
            said = "; ".join(x for x in (hint, detail) if x)
            raise QueryFailed(f"the query API answered HTTP {response.status_code}" + (f" ({said})" if said else ""))
        return bytes(body)

    def close(self) -> None:
        self._client.close()


def _error_detail(body: bytes) -> str:
    try:
        doc = json_document(body, "the query API")
    except AnswerShape:
        return ""
    if isinstance(doc, Mapping):
        error = doc.get("error")
        if isinstance(error, Mapping):
            error = f"{error.get('code', '')}: {error.get('message', '')}"
        return one_line(error or "", 200)
    return ""
