"""The Slurm controller's metrics agent (docs/monitoring.md, "The Slurm controller"): the compute nodes' set-up,
Prometheus unit and configuration template, rendered for a machine without GPUs that publishes every node's Slurm
state (`ndfleet_node.slurm_export`, every minute) instead of validation results."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ndfleet.monitoring import agent, exporters
from ndfleet.slurm import machines
from ndfleet.slurm.userdata import decompose
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config
from tests.monitoring.conftest import run_promtool
from tests.monitoring.test_node_agent import BOOT_VALUES, SHELLCHECK
from tests.slurm.controller_library import library_modules, written_library

NODE_DIR = Path(__file__).resolve().parents[2] / "node" / "ndfleet_node"
TIMEOUT_S = 60


def slurm_spec(monitoring: bool) -> ClusterSpec:
    config = base_config(scheduler="slurm", monitoring={"enabled": monitoring, "emails": ["oncall@example.com"]})
    return load_spec(config, "test")


@pytest.fixture(scope="module")
def spec_on() -> ClusterSpec:
    return slurm_spec(monitoring=True)


@pytest.fixture(scope="module")
def controller(spec_on: ClusterSpec) -> dict[str, str]:
    """The controller's customData files by name."""
    return dict(machines.machine_bootstrap(spec_on, "controller").files)


def user_data_files(spec: ClusterSpec) -> dict[str, str]:
    doc = decompose(machines.machine_user_data(spec, "controller"))[1]
    files: dict[str, str] = doc["files"]
    return files


def boot_config(spec: ClusterSpec) -> dict[str, Any]:
    text = user_data_files(spec)[agent.PROMETHEUS_CONFIG_TEMPLATE]
    for placeholder, value in BOOT_VALUES.items():
        text = text.replace(placeholder, value)
    config: dict[str, Any] = yaml.safe_load(text)
    return config


def test_controller_config_arrives_in_user_data_only_when_monitoring_is_on(spec_on: ClusterSpec) -> None:
    assert agent.PROMETHEUS_CONFIG_TEMPLATE in user_data_files(spec_on)
    assert agent.PROMETHEUS_CONFIG_TEMPLATE not in user_data_files(slurm_spec(monitoring=False))


def test_controller_scrapes_node_exporter_only_and_keeps_the_slurm_states(spec_on: ClusterSpec) -> None:
    (job,) = boot_config(spec_on)["scrape_configs"]
    assert job["job_name"] == "node" and job["static_configs"][0]["targets"] == [exporters.NODE_EXPORTER_ADDRESS]
    keep = set(job["metric_relabel_configs"][0]["regex"].split("|"))
    assert keep == set(exporters.node_exporter_metric_names()) | set(exporters.SLURM_EXPORT_METRICS)


def test_controller_series_carry_the_stack_and_its_role_not_an_island(spec_on: ClusterSpec) -> None:
    labels = boot_config(spec_on)["global"]["external_labels"]
    # `ndfleet status` selects by stack and joins by the series' own `slurm_node`, never by the agent's `node`.
    assert labels["stack"] == "test" and labels["role"] == agent.CONTROLLER_ROLE_LABEL
    assert set(labels) == {"stack", "role", "node", "physical_host"}


def test_promtool_check_config_accepts_the_controller_config(
    promtool: str, spec_on: ClusterSpec, tmp_path: Path
) -> None:
    config = boot_config(spec_on)
    for rw in config["remote_write"]:
        rw.pop("azuread")  # Debian's promtool has no azuread (tests/monitoring/test_node_agent.py)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    rc, out = run_promtool(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
    assert rc == 0, out


def test_controller_receives_the_agent_and_the_exporter_timer(controller: dict[str, str]) -> None:
    for name in ("ndfleet-monitoring-setup", "ndfleet-monitoring-setup.service", "ndfleet-monitoring-setup.timer",
                 "ndfleet-prometheus.service", "ndfleet-slurm-export.service", "ndfleet-slurm-export.timer"):
        assert name in controller, name
    assert not any("dcgm" in name for name in controller)
    assert "systemctl enable --now ndfleet-monitoring-setup.timer" in controller["ndfleet-slurm-setup"]


def test_exporter_runs_every_minute_bounded_below_its_period(controller: dict[str, str]) -> None:
    timer, service = controller["ndfleet-slurm-export.timer"], controller["ndfleet-slurm-export.service"]
    assert f"OnUnitActiveSec={agent.SLURM_EXPORT_EVERY_S}\n" in timer and agent.SLURM_EXPORT_EVERY_S == 60
    assert "Type=oneshot" in service and "RemainAfterExit" not in service
    limit = int(re.search(r"^TimeoutStartSec=(\d+)$", service, re.M).group(1))  # type: ignore[union-attr]
    assert agent.SLURM_EXPORT_CALL_TIMEOUT_S < limit < agent.SLURM_EXPORT_EVERY_S
    assert f"--timeout {agent.SLURM_EXPORT_CALL_TIMEOUT_S}" in service


def test_exporter_writes_where_the_textfile_collector_reads(controller: dict[str, str]) -> None:
    from ndfleet_node import slurm_export

    out = f"{exporters.TEXTFILE_DIR}/{exporters.SLURM_TEXTFILE_NAME}"
    assert out == slurm_export.DEFAULT_OUT
    assert f"--out {out}" in controller["ndfleet-slurm-export.service"]
    assert f"--collector.textfile.directory={exporters.TEXTFILE_DIR}" in agent.node_exporter_args()


def test_slurm_export_metric_names_are_what_the_exporter_writes() -> None:
    from ndfleet_node import slurm_export
    from ndfleet_node.sacct import JobRecord

    ended, running = JobRecord("7", 1.0, 2.0, "NODE_FAIL"), JobRecord("7", 3.0, None, "RUNNING")
    text = slurm_export.render([("n1", "idle", "")], now=1.0, jobs=slurm_export.JobRuns(((0, ended), (1, running)), 0))
    written = {line.split("{")[0].split()[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert written == set(exporters.SLURM_EXPORT_METRICS)
    assert set(exporters.SLURM_EXPORT_METRICS) <= exporters.exported_metric_names()


def _imports(module: str) -> set[str]:
    tree = ast.parse((NODE_DIR / f"{module.replace('.', '/')}.py").read_text())
    return {
        n.module.removeprefix("ndfleet_node.") for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("ndfleet_node.")
    }  # fmt: skip


def test_controller_ships_every_module_the_exporter_imports(spec_on: ClusterSpec, tmp_path: Path) -> None:
    shipped = library_modules(spec_on, tmp_path)
    needed, todo = set(), ["slurm_export"]
    while todo:
        module = todo.pop()
        if module not in needed:
            needed.add(module)
            todo += _imports(module)
    assert {f"ndfleet_node/{m.replace('.', '/')}.py" for m in needed | {"__init__"}} <= shipped


def test_controller_setup_script_passes_shellcheck(controller: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "ndfleet-monitoring-setup"
    path.write_text(controller["ndfleet-monitoring-setup"])
    proc = subprocess.run([str(SHELLCHECK), "--shell=bash", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _fake(bin_dir: Path, name: str, body: str) -> None:
    (bin_dir / name).write_text("#!/usr/bin/env bash\n" + body)
    (bin_dir / name).chmod(0o755)


def test_without_the_metrics_tags_the_controller_stops_its_agent_and_installs_nothing(
    controller: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "ndfleet-monitoring-setup"
    script.write_text(controller["ndfleet-monitoring-setup"])
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    _fake(bin_dir, "curl", "echo '[{\"name\": \"ndfleet:slurm-role\", \"value\": \"controller\"}]'\n")
    _fake(bin_dir, "systemctl", f'echo "systemctl $*" >> {calls}\n')
    for tool in ("apt-get", "dpkg"):
        _fake(bin_dir, tool, f'echo "{tool} $*" >> {calls}; exit 99\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", 'source "$1"; main', "test-shell", str(script)],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "monitoring is off" in proc.stdout
    assert calls.read_text().splitlines() == [
        "systemctl disable --now ndfleet-prometheus.service ndfleet-slurm-export.timer"
    ]


def test_exporter_module_runs_as_the_controller_runs_it(tmp_path: Path) -> None:
    """`python3 -m ndfleet_node.slurm_export` from the shipped files alone (no node program installed)."""
    spec = slurm_spec(monitoring=True)
    lib = written_library(spec, tmp_path)
    scontrol = tmp_path / "scontrol"
    line = "NodeName=test-a-000001 Arch=x86_64 State=IDLE+DRAIN Reason=ndfleet:gpu.count"
    scontrol.write_text(f"#!/bin/sh\necho '{line}'\n")
    scontrol.chmod(0o755)
    sacct = tmp_path / "sacct"  # one job that ended by a node failure (sacct --parsable2: tests/data/slurm/README.md)
    sacct.write_text("#!/bin/sh\necho '7|2026-12-03T08:00:00|2026-12-03T09:00:00|NODE_FAIL'\n")
    sacct.chmod(0o755)
    out = tmp_path / "textfile" / exporters.SLURM_TEXTFILE_NAME
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "ndfleet_node.slurm_export", "--out", str(out), "--scontrol", str(scontrol),
         "--sacct", str(sacct)],
        capture_output=True, text=True, timeout=TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(lib)}, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert ('ndfleet_slurm_node_state{slurm_node="test-a-000001",state="drained",reason="ndfleet:gpu.count",'
            'boot_version=""} 1') in text
    assert 'ndfleet_slurm_job_run_end_seconds{slurm_job="7",run="0",state="node_fail"} 1796288400' in text
