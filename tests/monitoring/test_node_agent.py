"""The node side: the Prometheus agent configuration passes `promtool check config`, the set-up script passes
shellcheck, and the bootstrap carries the monitoring files only when the stack has monitoring on."""

from __future__ import annotations

import base64
import gzip
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ndfleet.monitoring import agent, exporters
from ndfleet.nodefiles import bootstrap
from ndfleet.nodefiles.machinefile import MachineFile
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config
from tests.monitoring.conftest import monitoring_config, run_promtool

SHELLCHECK = Path(sys.executable).with_name("shellcheck")

# What ndfleet-monitoring-setup fills in at boot (from the instance metadata), as a node would have it.
BOOT_VALUES = {
    "${NDFLEET_NODE}": "test-a-000001",
    "${NDFLEET_PHYSICAL_HOST}": "HOST01",
    "${NDFLEET_INGEST_URL}": (
        "https://test-mon-dce-abcd.eastus-1.metrics.ingest.monitor.azure.com/dataCollectionRules/"
        "dcr-00000000000000000000000000000000/streams/Microsoft-PrometheusMetrics/api/v1/write?api-version=2023-04-24"
    ),
    "${NDFLEET_CLIENT_ID}": "00000000-0000-0000-0000-0000000000c1",
}


def files_of(spec: ClusterSpec) -> dict[str, MachineFile]:
    return {f.name: f for f in agent.node_files(spec, spec.islands[0])}


def boot_config(spec: ClusterSpec) -> str:
    text = files_of(spec)["prometheus.yml.in"].content
    for placeholder, value in BOOT_VALUES.items():
        text = text.replace(placeholder, value)
    return text


def test_placeholders_are_exactly_what_the_setup_script_substitutes(mon_spec: ClusterSpec) -> None:
    template = files_of(mon_spec)["prometheus.yml.in"].content
    setup = files_of(mon_spec)["ndfleet-monitoring-setup"].content
    placeholders = set(re.findall(r"\$\{NDFLEET_[A-Z_]+\}", template))
    assert placeholders == set(BOOT_VALUES)
    envsubst_line = next(line for line in setup.splitlines() if line.strip().startswith("envsubst"))
    assert set(re.findall(r"\$\{NDFLEET_[A-Z_]+\}", envsubst_line)) == placeholders


def test_remote_write_authenticates_with_the_node_managed_identity(mon_spec: ClusterSpec) -> None:
    config = yaml.safe_load(boot_config(mon_spec))
    (rw,) = config["remote_write"]
    # Prometheus's remote_write azuread block (docs: configuration.md, <azuread>): cloud + managed_identity.client_id.
    client_id = BOOT_VALUES["${NDFLEET_CLIENT_ID}"]
    assert rw["azuread"] == {"cloud": "AzurePublic", "managed_identity": {"client_id": client_id}}
    assert rw["url"].endswith("/streams/Microsoft-PrometheusMetrics/api/v1/write?api-version=2023-04-24")
    assert set(config["global"]["external_labels"]) == set(exporters.NODE_LABELS)
    assert config["global"]["external_labels"]["island"] == "a"


def test_promtool_check_config_accepts_the_agent_config(promtool: str, mon_spec: ClusterSpec, tmp_path: Path) -> None:
    config: dict[str, Any] = yaml.safe_load(boot_config(mon_spec))
    # Debian's promtool is built without Prometheus's Azure AD remote-write support ("field azuread not found"),
    # so the block is checked for shape above and left out here; everything else is checked by the real tool.
    for rw in config["remote_write"]:
        rw.pop("azuread")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    rc, out = run_promtool(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
    assert rc == 0, out


def test_promtool_check_config_can_fail(promtool: str, mon_spec: ClusterSpec, tmp_path: Path) -> None:
    config: dict[str, Any] = yaml.safe_load(boot_config(mon_spec))
    for rw in config["remote_write"]:
        rw.pop("azuread")
    config["scrape_configs"][0]["metric_relabel_configs"][0]["regex"] = "(unclosed"
    (tmp_path / "bad.yml").write_text(yaml.safe_dump(config))
    rc, out = run_promtool(promtool, "check", "config", str(tmp_path / "bad.yml"))
    assert rc != 0, out


def test_scrapes_only_loopback_exporters_and_keeps_only_exported_names(mon_spec: ClusterSpec) -> None:
    config = yaml.safe_load(boot_config(mon_spec))
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"dcgm", "node"}
    for job in jobs.values():
        (target,) = job["static_configs"][0]["targets"]
        assert target.startswith("127.0.0.1:")
    keep_dcgm = set(jobs["dcgm"]["metric_relabel_configs"][0]["regex"].split("|"))
    keep_node = set(jobs["node"]["metric_relabel_configs"][0]["regex"].split("|"))
    assert keep_dcgm == {c.field for c in exporters.DCGM_COUNTERS}
    assert keep_node == set(exporters.node_exporter_metric_names()) | set(exporters.VALIDATION_METRICS)
    assert config["global"]["scrape_interval"] == f"{mon_spec.monitoring.scrape_interval_seconds}s"


def test_node_exporter_runs_only_the_listed_collectors_on_loopback() -> None:
    args = agent.node_exporter_args().split()
    assert f"--web.listen-address={exporters.NODE_EXPORTER_ADDRESS}" in args
    assert "--collector.disable-defaults" in args
    assert {a.removeprefix("--collector.") for a in args if a.startswith("--collector.") and "=" not in a} == (
        set(exporters.NODE_EXPORTER_COLLECTORS) | {"disable-defaults"}
    )
    assert f"--collector.textfile.directory={exporters.TEXTFILE_DIR}" in args


def test_setup_script_passes_shellcheck(mon_spec: ClusterSpec, tmp_path: Path) -> None:
    path = tmp_path / "ndfleet-monitoring-setup"
    path.write_text(files_of(mon_spec)["ndfleet-monitoring-setup"].content)
    proc = subprocess.run(
        [str(SHELLCHECK), "--shell=bash", str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_binaries_are_pinned(mon_spec: ClusterSpec) -> None:
    files = files_of(mon_spec)
    setup = files["ndfleet-monitoring-setup"].content
    assert f"PROM_VERSION={exporters.PROMETHEUS_VERSION}" in setup and "sha256sum" in setup
    assert "Pin: version" in setup and exporters.NODE_EXPORTER_VERSION_PIN in setup
    assert exporters.DCGM_EXPORTER_IMAGE in files["ndfleet-dcgm-exporter.service"].content
    assert ":latest" not in exporters.DCGM_EXPORTER_IMAGE
    assert files["dcgm-counters.csv"].content == exporters.dcgm_counters_csv()


def test_the_embedded_dcgm_exporter_asks_for_no_profiling_fields(mon_spec: ClusterSpec) -> None:
    # Issue 47: the exporter's own (embedded) DCGM beside the host's nv-hostengine; profiling counters are one
    # resource per GPU, which a job's profiler may need (ndfleet/monitoring/exporters.py says why and the sources).
    files = files_of(mon_spec)
    unit = files["ndfleet-dcgm-exporter.service"].content
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exporters.DCGM_EXPORTER_IMAGE in exec_start
    assert not {"-r", "--remote-hostengine-info"} & set(exec_start.split()), exec_start  # embedded, not remote
    counters = [ln for ln in files["dcgm-counters.csv"].content.splitlines() if ln and not ln.startswith("#")]
    assert counters and not [ln for ln in counters if ln.startswith("DCGM_FI_PROF_")], counters


def test_every_download_and_call_in_setup_has_a_timeout(mon_spec: ClusterSpec) -> None:
    setup = files_of(mon_spec)["ndfleet-monitoring-setup"].content
    for line in setup.splitlines():
        if "curl " in line:
            assert "--max-time" in line, line
        if "apt-get install" in line or "promtool\" check" in line:
            assert "timeout " in line, line


def _rendered(spec: ClusterSpec) -> bootstrap.RenderedBootstrap:
    from ndfleet.prepare import bootstrap_extensions

    island = spec.islands[0]
    return bootstrap.render_bootstrap(spec, island, bootstrap_extensions(spec, island))


def _user_data(spec: ClusterSpec) -> str:
    rendered = _rendered(spec)
    assert gzip.decompress(base64.b64decode(rendered.custom_data)).decode() == rendered.user_data
    return rendered.user_data


def test_bootstrap_carries_monitoring_when_on(mon_spec: ClusterSpec) -> None:
    rendered = _rendered(mon_spec)
    paths = set(rendered.node_files())  # customData and the node bundle (userData) together
    assert {f.path for f in agent.node_files(mon_spec, mon_spec.islands[0])} <= paths
    runcmd = [list(c) for c in rendered.activate]  # what the boot step runs once the bundle is on disk
    assert ["systemctl", "enable", "ndfleet-monitoring-setup.timer"] in runcmd  # again at every boot
    assert ["systemctl", "start", "--no-block", "ndfleet-monitoring-setup.timer"] in runcmd  # now, not waited for
    assert "[Install]" not in files_of(mon_spec)["ndfleet-monitoring-setup.service"].content  # boot never waits


def test_bootstrap_has_no_monitoring_when_off() -> None:
    spec = load_spec(base_config(), "test")
    user_data = _user_data(spec)
    assert "ndfleet-monitoring" not in user_data and "prometheus" not in user_data
    everything = b"".join(_rendered(spec).node_files().values())
    assert b"ndfleet-monitoring" not in everything and b"prometheus" not in everything


@pytest.mark.parametrize("fraction", [0.0, 1.5])
def test_bad_capacity_fraction_names_the_setting(fraction: float) -> None:
    from ndfleet.stackconfig.problems import SpecError

    with pytest.raises(SpecError) as err:
        load_spec(monitoring_config(islandCapacityAlertFraction=fraction), "test")
    assert "ndfleet:monitoring.islandCapacityAlertFraction" in str(err.value)


def test_timers_can_re_run_their_oneshot_services(mon_spec: ClusterSpec) -> None:
    """A oneshot unit with RemainAfterExit stays active, and a timer cannot start it again."""
    files = files_of(mon_spec)
    for service in ("ndfleet-monitoring-setup.service", "ndfleet-metrics.service"):
        text = files[service].content
        assert "Type=oneshot" in text and "RemainAfterExit" not in text, service
        assert service.replace(".service", ".timer") in files
