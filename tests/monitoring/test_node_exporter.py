"""The real node_exporter (Debian's prometheus-node-exporter) with the agent's exact collector flags, over a fake
sysfs holding two InfiniBand HCAs (one IB port, one Ethernet accelerated-networking port) and the textfile
`ndfleet-node metrics` writes: every node_exporter and validation metric name the dashboards and alerts rely on
is really exported, and the IB rate is parsed as the alerts expect.

Debian ships node_exporter 1.5.0, nodes run Ubuntu 22.04's 1.3.1: the collectors used here and their metric
names are the same in both (node_exporter collector/infiniband_linux.go, meminfo, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from ndfleet_node import metrics as node_metrics

from ndfleet.monitoring import agent, exporters
from tests.monitoring.conftest import free_port, http_get, running
from tests.monitoring.nd_node import write_hca
from tests.system_tools import require_tool
from tests.test_health_endpoint import loopback_up

START_TIMEOUT_S = 30
# node_exporter 1.5 reads interfaces over netlink by default; 1.3.1 (the nodes') reads /proc/net/dev, as this does.
NETDEV_FROM_PROC = ["--no-collector.netdev.netlink"]
# (device, link layer, sysfs rate line): what an ND H100 v5 shows for one of its 8 IB HCAs and the Ethernet one.
HCAS = (("mlx5_ib0", "InfiniBand", "400 Gb/sec (4X NDR)"), ("mlx5_an0", "Ethernet", "100 Gb/sec (2X HDR)"))


def fake_sysfs(root: Path) -> Path:
    for device, link_layer, rate in HCAS:
        write_hca(root, device, link_layer, rate)
    return root


# /proc/net/dev of a node: eth0 (accelerated networking) and one IPoIB interface.
NET_DEV = Path(__file__).resolve().parents[1] / "data" / "monitoring" / "proc-net-dev.txt"


def fake_procfs(root: Path) -> Path:
    """The machine's own /proc files, except net/dev: the suite's network namespace has only a loopback."""
    (root / "net").mkdir(parents=True)
    (root / "1").mkdir()
    for name in ("stat", "meminfo", "loadavg", "diskstats"):
        (root / name).symlink_to(f"/proc/{name}")
    (root / "1" / "mounts").symlink_to("/proc/self/mounts")
    (root / "net" / "dev").write_text(NET_DEV.read_text())
    return root


@contextmanager
def node_exporter_running(folder: Path) -> Iterator[int]:
    """The real node_exporter with the agent's collector flags over a fake node; yields its loopback port."""
    binary = require_tool("prometheus-node-exporter")
    loopback_up()
    sysfs = fake_sysfs(folder / "sys")
    procfs = fake_procfs(folder / "proc")
    textfile_dir = folder / "textfile"
    report = {"status": "healthy", "checks": [{"id": "gpu.count", "status": "pass"}]}
    node_metrics.write_atomically(
        textfile_dir / exporters.TEXTFILE_NAME, node_metrics.render(report, 1.0, drained=False)
    )
    port = free_port()
    own = ("--web.listen-address", "--collector.textfile.directory")
    args = [a for a in agent.node_exporter_args().split() if not a.startswith(own)]
    argv = [binary, *args, f"--web.listen-address=127.0.0.1:{port}", f"--collector.textfile.directory={textfile_dir}",
            f"--path.sysfs={sysfs}", f"--path.procfs={procfs}", *NETDEV_FROM_PROC]
    with running(argv, f"http://127.0.0.1:{port}/metrics", START_TIMEOUT_S):
        yield port


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with node_exporter_running(tmp_path_factory.mktemp("node-exporter")) as port:
        yield http_get(f"http://127.0.0.1:{port}/metrics")


def names(body: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in body.splitlines() if line and not line.startswith("#")}


def test_every_node_exporter_metric_we_rely_on_is_exported(scrape: str) -> None:
    missing = set(exporters.node_exporter_metric_names()) - names(scrape)
    assert not missing


def test_validation_metrics_pass_through_the_textfile_collector(scrape: str) -> None:
    assert set(exporters.VALIDATION_METRICS) - {"ndfleet_validation_last_run_timestamp_seconds"} <= names(scrape)
    assert 'ndfleet_validation_check_status{check="gpu.count",status="pass"} 1' in scrape
    assert "node_textfile_scrape_error 0" in scrape


def test_network_bytes_come_per_interface(scrape: str) -> None:
    assert 'node_network_receive_bytes_total{device="eth0"} 5e+06' in scrape


def test_ib_rate_is_bytes_per_second_and_both_hcas_show(scrape: str) -> None:
    assert 'node_infiniband_rate_bytes_per_second{device="mlx5_ib0",port="1"} 5e+10' in scrape
    assert 'node_infiniband_state_id{device="mlx5_ib0",port="1"} 4' in scrape
    # The Ethernet HCA shows up too: the alerts select the profile's IB devices by name.
    assert 'node_infiniband_rate_bytes_per_second{device="mlx5_an0",port="1"}' in scrape


def test_only_the_listed_collectors_run(scrape: str) -> None:
    collectors = {
        line.split('collector="')[1].split('"')[0]
        for line in scrape.splitlines()
        if line.startswith("node_scrape_collector_success{")
    }
    assert collectors == set(exporters.NODE_EXPORTER_COLLECTORS)
    assert 'node_scrape_collector_success{collector="infiniband"} 1' in scrape
