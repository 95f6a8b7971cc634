"""The node's metrics path end to end with the real tools, all on 127.0.0.1: Debian's Prometheus in agent mode
runs the rendered agent configuration (its scrape jobs, relabelling and external labels; only the targets, the
scrape interval and the remote-write URL changed), scrapes the real node_exporter over a fake node and a
dcgm-exporter stand-in serving the counters file's fields in dcgm-exporter's format, and remote-writes to a second
Prometheus acting as the receiver (Azure Monitor's ingestion endpoint speaks the same remote-write protocol). What
arrives is what Azure Monitor would store.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from ndfleet.monitoring import agent, exporters
from ndfleet.stackconfig.clusterspec import ClusterSpec
from tests.monitoring.conftest import free_port, http_get, running
from tests.monitoring.test_node_agent import boot_config
from tests.monitoring.test_node_exporter import node_exporter_running
from tests.system_tools import require_tool

ARRIVAL_TIMEOUT_S = 90
GPUS = 8
# A field dcgm-exporter could export but the counters file does not list: the agent must drop it.
NOT_KEPT = "DCGM_FI_DEV_DEC_UTIL"


def dcgm_exposition() -> str:
    """What dcgm-exporter serves for the counters file on an 8-GPU node (its labels and exposition format)."""
    lines = []
    for counter in (*exporters.DCGM_COUNTERS, exporters.DcgmCounter(NOT_KEPT, "gauge", "Decoder utilization.")):
        lines += [f"# HELP {counter.field} {counter.help}", f"# TYPE {counter.field} {counter.kind}"]
        for gpu in range(GPUS):
            labels = (
                f'gpu="{gpu}",UUID="GPU-{gpu:08d}",pci_bus_id="0000000{gpu}:00:00.0",device="nvidia{gpu}",'
                f'modelName="NVIDIA H100 80GB HBM3",Hostname="test-a-000001",DCGM_FI_DRIVER_VERSION="550.90.07"'
            )
            lines.append(f"{counter.field}{{{labels}}} 0")
    return "\n".join(lines) + "\n"


class _Dcgm(http.server.BaseHTTPRequestHandler):
    body = dcgm_exposition().encode()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


def prometheus() -> str:
    return require_tool("prometheus")


def agent_config(spec: ClusterSpec, node_port: int, dcgm_port: int, receiver_port: int) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(boot_config(spec))
    config["global"]["scrape_interval"] = "1s"
    config["global"]["scrape_timeout"] = "1s"
    (rw,) = config["remote_write"]
    rw.pop("azuread")  # Debian's build has no Azure AD support; the receiver takes plain remote write
    rw["url"] = f"http://127.0.0.1:{receiver_port}/api/v1/write"
    rw["queue_config"] = {"batch_send_deadline": "1s"}
    ports = {"dcgm": dcgm_port, "node": node_port}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [f"127.0.0.1:{ports[job['job_name']]}"]}]
    return config


def query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    result: list[dict[str, Any]] = json.loads(http_get(url))["data"]["result"]
    return result


@pytest.fixture(scope="module")
def pipeline(
    tmp_path_factory: pytest.TempPathFactory, mon_spec: ClusterSpec
) -> Iterator[tuple[list[dict[str, Any]], str]]:
    """Every series the receiver got ([{"metric": {labels}, "value": [...]}, ...]) and what node_exporter served."""
    folder = tmp_path_factory.mktemp("pipeline")
    binary = prometheus()
    dcgm = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dcgm)
    threading.Thread(target=dcgm.serve_forever, daemon=True).start()
    receiver_port, agent_port = free_port(), free_port()
    (folder / "receiver.yml").write_text("global: {}\n")
    try:
        with node_exporter_running(folder / "node") as node_port, running(
            [binary, f"--config.file={folder / 'receiver.yml'}", f"--storage.tsdb.path={folder / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{receiver_port}", "--web.enable-remote-write-receiver"],
            f"http://127.0.0.1:{receiver_port}/-/ready",
        ):
            config = agent_config(mon_spec, node_port, dcgm.server_address[1], receiver_port)
            (folder / "agent.yml").write_text(yaml.safe_dump(config))
            with running(
                [binary, "--enable-feature=agent", f"--config.file={folder / 'agent.yml'}",
                 f"--storage.agent.path={folder / 'wal'}", f"--web.listen-address=127.0.0.1:{agent_port}"],
                f"http://127.0.0.1:{agent_port}/-/ready",
            ):
                deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
                while True:
                    jobs = {s["metric"].get("job") for s in query(receiver_port, "up == 1")}
                    textfile = query(receiver_port, "ndfleet_node_healthy")
                    if {"dcgm", "node"} <= jobs and textfile:
                        break
                    assert time.monotonic() < deadline, f"nothing arrived in {ARRIVAL_TIMEOUT_S} s (up jobs: {jobs})"
                    time.sleep(0.5)
                time.sleep(2)  # one more scrape of each target lands
                node_body = http_get(f"http://127.0.0.1:{node_port}/metrics")
                yield query(receiver_port, '{__name__=~".+"}'), node_body
    finally:
        dcgm.shutdown()


@pytest.fixture(scope="module")
def received(pipeline: tuple[list[dict[str, Any]], str]) -> list[dict[str, Any]]:
    return pipeline[0]


SCRAPE_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
                 "scrape_series_added"}


def test_only_exported_names_leave_the_node(received: list[dict[str, Any]]) -> None:
    names = {s["metric"]["__name__"] for s in received}
    assert names - SCRAPE_SERIES <= exporters.exported_metric_names()
    assert NOT_KEPT not in names and not any(n.startswith(("go_", "process_", "promhttp_")) for n in names)


def test_every_gpu_metric_arrives_for_every_gpu(received: list[dict[str, Any]]) -> None:
    for counter in exporters.DCGM_COUNTERS:
        gpus = {s["metric"]["gpu"] for s in received if s["metric"]["__name__"] == counter.field}
        assert gpus == {str(g) for g in range(GPUS)}, counter.field


def test_node_and_validation_metrics_arrive(received: list[dict[str, Any]]) -> None:
    names = {s["metric"]["__name__"] for s in received}
    assert {"node_infiniband_state_id", "node_infiniband_rate_bytes_per_second", "ndfleet_node_healthy",
            "ndfleet_validation_check_status", "node_memory_MemAvailable_bytes"} <= names


def test_cpu_is_idle_time_only(received: list[dict[str, Any]]) -> None:
    modes = {s["metric"]["mode"] for s in received if s["metric"]["__name__"] == "node_cpu_seconds_total"}
    assert modes == {"idle"}


def test_every_series_names_stack_island_node_and_host(received: list[dict[str, Any]]) -> None:
    expected = {"stack": "test", "island": "a", "node": "test-a-000001", "physical_host": "HOST01"}
    for series in received:
        assert {k: series["metric"].get(k) for k in expected} == expected, series["metric"]


def test_the_dcgm_counters_file_is_what_the_stand_in_serves() -> None:
    served = {ln.split("{")[0] for ln in dcgm_exposition().splitlines() if not ln.startswith("#")}
    assert served - {NOT_KEPT} == {c.field for c in exporters.DCGM_COUNTERS}
    assert agent.DCGM_COUNTERS_PATH.endswith(".csv")


def test_the_series_budgets_relabelling_is_what_the_agent_does(
    pipeline: tuple[list[dict[str, Any]], str], mon_spec: ClusterSpec
) -> None:
    """tests/monitoring/test_series_budget.py counts series with its own implementation of the agent's rules; here
    the real agent's output is the reference: the same series, label for label, arrive."""
    from tests.monitoring.test_series_budget import agent_rules, parse_exposition, relabel

    received, node_body = pipeline
    added = {"job", "instance", *exporters.NODE_LABELS}  # the agent's target and external labels
    arrived = {
        (
            s["metric"]["__name__"],
            tuple(sorted((k, v) for k, v in s["metric"].items() if k not in added | {"__name__"})),
        )
        for s in received
        if s["metric"]["__name__"] not in SCRAPE_SERIES
    }
    rules = agent_rules(mon_spec)
    predicted = set(relabel(parse_exposition(node_body), rules["node"]))
    predicted |= set(relabel(parse_exposition(dcgm_exposition()), rules["dcgm"]))
    assert arrived == predicted
