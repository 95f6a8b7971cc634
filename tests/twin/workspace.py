"""The twin's Azure Monitor workspace: a real Prometheus server fed by remote write, behind a stand-in for the
workspace's query endpoint that checks Azure Monitor tokens; `ndfleet status` and `ndfleet goodput` read it.

Why not the nodes' own agents: Debian's Prometheus (the only one the twin and CI can install) is built without
`remote_write.azuread`, so every node's agent refuses ndfleet's configuration and sends nothing
(tests/twin/test_monitoring.py). So the pipeline runs here, with ndfleet's own rules:

- **The receiver** is Debian's `prometheus` with `--web.enable-remote-write-receiver` (`POST /api/v1/write`, the
  remote-write protocol Azure Monitor's ingestion endpoint takes: https://prometheus.io/docs/specs/remote_write_spec/,
  and Microsoft Learn, "Send Prometheus data to Azure Monitor using remote-write").
- **One agent** (`prometheus --enable-feature=agent`, https://prometheus.io/docs/prometheus/latest/feature_flags/
  #prometheus-agent) stands for every machine's agent: for each kind of machine (an island's nodes, the Slurm
  controller) it runs that machine's scrape jobs exactly as the rendered `prometheus.yml.in` has them (scrape
  settings and `metric_relabel_configs`; the azuread block, the remote-write URL and the static target are left
  out), and gives each target the machine's `external_labels` as target labels, with `${NDFLEET_NODE}` and
  `${NDFLEET_PHYSICAL_HOST}` filled in as the node's set-up fills them. Targets come from a file_sd file the twin
  rewrites as machines come and go (https://prometheus.io/docs/prometheus/latest/configuration/configuration/
  #file_sd_config; `__metrics_path__` per target). The dcgm job is left out: the twin has no dcgm-exporter.
- **The query endpoint** (`https://<workspace>.<region>.prometheus.monitor.azure.com/api/v1/query[_range]`,
  Microsoft Learn, "Query Prometheus metrics using the API and PromQL"): TLS; 401 without a bearer token issued for
  the audience `https://prometheus.monitor.azure.com`, 403 for an identity without Monitoring Data Reader (when the
  stand-in is given the readers); a valid query is passed to the receiver's own query API (GET or form POST, as the
  page documents both), bounded in time and size, and its answer returned as it is.

What differs from Azure: the agent authenticates to nobody (Azure: the node's managed identity through azuread) and
runs outside the nodes, reaching each node's loopback-only node_exporter through a relay (MetricsRelay); the
workspace's own limits (series, query throttling) are not simulated.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

PROMETHEUS_AUDIENCE = "https://prometheus.monitor.azure.com"
START_TIMEOUT_S = 60  # Debian's Prometheus is ready in about a second; CI machines are small and busy
STOP_TIMEOUT_S = 20
QUERY_TIMEOUT_S = 30
MAX_QUERY_BYTES = 16 * 1024 * 1024
MAX_REQUEST_BYTES = 1 << 20
MAX_EXPOSITION_BYTES = 8 * 1024 * 1024
SKIPPED_JOBS = ("dcgm",)  # no dcgm-exporter in the twin (module doc)
NODE_PLACEHOLDER, HOST_PLACEHOLDER = "${NDFLEET_NODE}", "${NDFLEET_PHYSICAL_HOST}"


@dataclass(frozen=True)
class Target:
    """One machine the agent scrapes: which rendered configuration it runs (`kind`), where its exporter answers,
    and what its set-up would fill in."""

    kind: str  # a key of Workspace.configs: an island's name, or "controller"
    address: str  # host:port
    node: str
    physical_host: str = "unknown"
    metrics_path: str = "/metrics"


def agent_config(configs: Mapping[str, str], sd_dir: Path, receiver: str, scrape_interval_s: float | None) -> dict:
    """The one agent's configuration from each kind's rendered prometheus.yml.in (module doc)."""
    jobs: list[dict[str, Any]] = []
    for kind, text in sorted(configs.items()):
        rendered = yaml.safe_load(text)
        for job in rendered["scrape_configs"]:
            if job["job_name"] in SKIPPED_JOBS:
                continue
            ours = {k: v for k, v in job.items() if k not in ("static_configs", "job_name")}
            ours["job_name"] = f"{job['job_name']}-{kind}"
            # The series keep the job name the node's agent gives them.
            ours["relabel_configs"] = [{"target_label": "job", "replacement": job["job_name"]}]
            ours["file_sd_configs"] = [{"files": [str(sd_dir / f"{kind}.json")], "refresh_interval": "5s"}]
            if scrape_interval_s is not None:
                ours["scrape_interval"] = f"{scrape_interval_s:g}s"
                ours["scrape_timeout"] = f"{min(scrape_interval_s, 10):g}s"
            jobs.append(ours)
    first = yaml.safe_load(next(iter(configs.values())))
    return {
        "global": {k: v for k, v in first["global"].items() if k != "external_labels"},
        "scrape_configs": jobs,
        "remote_write": [{"url": f"http://{receiver}/api/v1/write", "queue_config": {"batch_send_deadline": "1s"}}],
    }


def target_labels(config_text: str, target: Target) -> dict[str, str]:
    """The kind's external labels, filled in for the target as ndfleet-monitoring-setup fills them (envsubst)."""
    labels = yaml.safe_load(config_text)["global"]["external_labels"]
    filled = {
        str(k): str(v).replace(NODE_PLACEHOLDER, target.node).replace(HOST_PLACEHOLDER, target.physical_host)
        for k, v in labels.items()
    }
    return {**filled, "__metrics_path__": target.metrics_path}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# Loopback calls never go through a proxy from the environment.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _ready(url: str) -> bool:
    try:
        with _LOCAL.open(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except (OSError, ValueError):
        return False


@dataclass
class Workspace:
    """The receiver, the agent and the query endpoint stand-in (module doc).

    `configs`: kind -> that kind's rendered prometheus.yml.in; `targets()`: the machines now, read every
    `refresh_s`; `tokens(token)`: (client id, audience) of a token the twin issued, or None; `readers`: the client
    ids holding Monitoring Data Reader (None: any valid token may read)."""

    folder: Path
    configs: Mapping[str, str]
    targets: Callable[[], Sequence[Target]]
    tokens: Callable[[str], tuple[str, str] | None]
    tls: ssl.SSLContext
    listen: tuple[str, int] = ("127.0.0.1", 0)
    readers: set[str] | None = None
    scrape_interval_s: float | None = None
    refresh_s: float = 2.0
    binary: str = "prometheus"
    receiver_port: int = 0
    endpoint_address: tuple[str, int] = ("", 0)
    queries: list[tuple[str, int]] = field(default_factory=list)  # (path, status) of every query request
    _procs: list[subprocess.Popen] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _written: str = ""

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        sd_dir = self.folder / "sd"
        sd_dir.mkdir(exist_ok=True)
        self.receiver_port = free_port()
        self.refresh_targets()
        (self.folder / "receiver.yml").write_text("global: {}\n")
        receiver = f"127.0.0.1:{self.receiver_port}"
        agent = agent_config(self.configs, sd_dir, receiver, self.scrape_interval_s)
        (self.folder / "agent.yml").write_text(yaml.safe_dump(agent))
        agent_port = free_port()
        try:
            self._spawn([f"--config.file={self.folder / 'receiver.yml'}", f"--storage.tsdb.path={self.folder / 'tsdb'}",
                         f"--web.listen-address={receiver}", "--web.enable-remote-write-receiver"],
                        f"http://{receiver}/-/ready", "receiver")  # fmt: skip
            self._spawn(["--enable-feature=agent", f"--config.file={self.folder / 'agent.yml'}",
                         f"--storage.agent.path={self.folder / 'wal'}", f"--web.listen-address=127.0.0.1:{agent_port}"],
                        f"http://127.0.0.1:{agent_port}/-/ready", "agent")  # fmt: skip
            handler = type("QueryEndpointBound", (_QueryEndpoint,), {"workspace": self})
            self._server = ThreadingHTTPServer(self.listen, handler)
            self._server.daemon_threads = True
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
            self.endpoint_address = (self.listen[0], int(self._server.server_address[1]))
            threading.Thread(target=self._server.serve_forever, name="twin-workspace-endpoint", daemon=True).start()
            threading.Thread(target=self._refresh_loop, name="twin-workspace-targets", daemon=True).start()
        except BaseException:
            self.close()
            raise

    def _spawn(self, args: list[str], ready: str, what: str) -> None:
        log = (self.folder / f"{what}.log").open("wb")
        proc = subprocess.Popen([self.binary, *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._procs.append(proc)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ready(ready):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.folder / f"{what}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the workspace's {what} did not start within {START_TIMEOUT_S} s:\n{tail}")
            time.sleep(0.2)

    def refresh_targets(self) -> None:
        """Write each kind's file_sd file from `targets()` (atomically: Prometheus re-reads it on change)."""
        by_kind: dict[str, list[dict[str, Any]]] = {kind: [] for kind in self.configs}
        for target in self.targets():
            if target.kind in self.configs:
                labels = target_labels(self.configs[target.kind], target)
                by_kind[target.kind].append({"targets": [target.address], "labels": labels})
        text = json.dumps(by_kind, sort_keys=True)
        if text == self._written:
            return
        for kind, groups in by_kind.items():
            path = self.folder / "sd" / f"{kind}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(groups))
            os.replace(tmp, path)
        self._written = text

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh_targets()
            except Exception as exc:  # noqa: BLE001 - a machine list read mid-change; the next round writes it
                print(f"twin workspace: targets not refreshed: {exc!r}")

    def query_local(self, promql: str) -> list[dict[str, Any]]:
        """The receiver's answer to an instant query, bypassing the endpoint (for waiting until data arrived)."""
        url = f"http://127.0.0.1:{self.receiver_port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with _LOCAL.open(url, timeout=QUERY_TIMEOUT_S) as resp:
            result: list[dict[str, Any]] = json.loads(resp.read(MAX_QUERY_BYTES))["data"]["result"]
        return result

    def close(self) -> None:
        """Stop everything, bounded: TERM, then KILL after STOP_TIMEOUT_S each."""
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        # The agent first: stopped after its receiver, it would keep retrying its queue until killed.
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT_S)
        self._procs.clear()


class _QueryEndpoint(BaseHTTPRequestHandler):
    """The workspace query endpoint (module doc)."""

    workspace: Workspace
    protocol_version = "HTTP/1.1"
    APIS = ("/api/v1/query", "/api/v1/query_range")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.workspace.queries.append((self.path.split("?")[0], status))

    def _error(self, status: int, code: str, message: str) -> None:
        self._send(status, json.dumps({"error": {"code": code, "message": message}}).encode())

    def _authorised(self) -> bool:
        auth = self.headers.get("Authorization", "")
        issued = self.workspace.tokens(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if issued is None or issued[1] != PROMETHEUS_AUDIENCE:
            self._error(401, "InvalidAuthenticationToken", f"a bearer token for {PROMETHEUS_AUDIENCE} is required")
            return False
        if self.workspace.readers is not None and issued[0] not in self.workspace.readers:
            self._error(403, "AuthorizationFailed", f"The client '{issued[0]}' does not have authorization to "
                        "perform action 'Microsoft.Monitor/accounts/data/metrics/read'")  # fmt: skip
            return False
        return True

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urllib.parse.urlsplit(self.path)
        if url.path not in self.APIS:
            self._error(404, "NotFound", "no such API")
            return
        if self._authorised():
            self._forward(url.path, url.query)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            self._error(413, "RequestTooLarge", f"at most {MAX_REQUEST_BYTES} bytes")
            return
        form = self.rfile.read(length).decode(errors="replace") if length else ""
        url = urllib.parse.urlsplit(self.path)
        if url.path not in self.APIS:
            self._error(404, "NotFound", "no such API")
            return
        if self._authorised():
            self._forward(url.path, "&".join(x for x in (url.query, form) if x))

    def _forward(self, path: str, query: str) -> None:
        url = f"http://127.0.0.1:{self.workspace.receiver_port}{path}?{query}"
        try:
            with _LOCAL.open(url, timeout=QUERY_TIMEOUT_S) as resp:
                status, body = resp.status, resp.read(MAX_QUERY_BYTES + 1)
        except urllib.error.HTTPError as exc:  # Prometheus's 400/422/503 carry its error document
            status, body = exc.code, exc.read(MAX_QUERY_BYTES + 1)
        except OSError as exc:
            self._error(503, "ServiceUnavailable", f"the workspace could not answer: {exc}")
            return
        if len(body) > MAX_QUERY_BYTES:
            self._error(422, "ResponseTooLarge", f"the answer is over {MAX_QUERY_BYTES} bytes")
            return
        self._send(status, body)


class OperatorCredential:
    """A person's Entra identity as `ndfleet status` uses it (azure-core's TokenCredential: get_token(*scopes)),
    minted by the twin: each token is recorded, with its audience, where the stand-ins look tokens up."""

    def __init__(self, record: Callable[[str, str, str], None], client_id: str = "twin-operator"):
        self.record = record
        self.client_id = client_id

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        audience = scopes[0].removesuffix("/.default").rstrip("/") if scopes else ""
        token = secrets.token_urlsafe(24)
        self.record(token, self.client_id, audience)
        return AccessToken(token, int(time.time()) + 3600)

    def close(self) -> None:
        pass


class MetricsRelay:
    """node_exporter listens on the node's loopback only (ndfleet.monitoring.exporters.NODE_EXPORTER_ADDRESS), so
    the agent outside the nodes reaches it through this relay. A loop reads every machine of `names()` with
    `fetch(machine)` (inside the machine, bounded by the caller) every `refresh_s`; `GET /metrics/<machine>` answers
    the last body read, at once, as node_exporter answers on the node (entering a machine takes seconds on a loaded
    2-core host, longer than a scrape may). 502 when nothing was read within `max_age_s`: the scrape fails and the
    node's series end. 300 s because on Azure a node that stops answering (hung) stops sending its own series, which
    then drop out of instant queries after Prometheus's 5-minute lookback (https://prometheus.io/docs/prometheus/
    latest/querying/basics/#staleness)."""

    def __init__(self, fetch: Callable[[str], bytes | None], names: Callable[[], Sequence[str]],
                 host: str = "127.0.0.1", refresh_s: float = 10.0, max_age_s: float = 300.0):  # fmt: skip
        relay = self
        self.fetch, self.names, self.refresh_s, self.max_age_s = fetch, names, refresh_s, max_age_s
        self.cache: dict[str, tuple[float, bytes]] = {}
        self._stop = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_GET(self) -> None:  # noqa: N802
                name = urllib.parse.unquote(self.path.split("?")[0].removeprefix("/metrics/"))
                at, body = relay.cache.get(name, (0.0, b""))
                fresh = time.monotonic() - at <= relay.max_age_s
                data = body if fresh else b"no answer from the node\n"
                self.send_response(200 if fresh else 502)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.address = f"{host}:{self.server.server_address[1]}"
        self.refresh()
        threading.Thread(target=self.server.serve_forever, name="twin-metrics-relay", daemon=True).start()
        threading.Thread(target=self._loop, name="twin-metrics-relay-reads", daemon=True).start()

    def refresh(self) -> None:
        for name in list(self.names()):
            try:
                body = self.fetch(name)
            except Exception:  # noqa: BLE001 - a machine that cannot be entered answers nothing
                body = None
            if body is not None and len(body) <= MAX_EXPOSITION_BYTES:
                self.cache[name] = (time.monotonic(), body)

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            self.refresh()

    def close(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def running(workspace: Workspace) -> Iterator[Workspace]:
    workspace.start()
    try:
        yield workspace
    finally:
        workspace.close()
