"""The alert table through the real promtool: `promtool check rules`, then `promtool test rules` with, for every
alert, series that must make it fire (with its labels and annotations) and series that must not.

The rule file is the one the stack deploys (ndfleet/monitoring/alerts.py renders both it and the
PrometheusRuleGroup resources from one table). The stack: islands a (4 nodes) and b (2 nodes), capacity alert
below 75 % (3 and 1.5 nodes), ND H100 v5 figures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from ndfleet.monitoring.alerts import alerts, island_capacity_floor, rule_file_yaml
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from tests.monitoring.conftest import monitoring_config, run_promtool

NODE = {"stack": "test", "island": "a", "node": "test-a-000001", "physical_host": "HOST01"}
GPU = {**NODE, "job": "dcgm", "instance": "127.0.0.1:9400", "gpu": "3", "UUID": "GPU-0003"}
PORT = {**NODE, "job": "node", "instance": "127.0.0.1:9100", "device": "mlx5_ib3", "port": "1"}
NODE_JOB = {**NODE, "job": "node", "instance": "127.0.0.1:9100"}
IB_RATE = "node_infiniband_rate_bytes_per_second"


def series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def gpu_temps(n: int) -> list[dict[str, str]]:
    return [series("DCGM_FI_DEV_GPU_TEMP", {**GPU, "gpu": str(g), "UUID": f"GPU-{g:04d}"}, "40x30") for g in range(n)]


def healthy(island: str, values: list[int]) -> list[dict[str, str]]:
    return [
        series("ndfleet_node_healthy", {**NODE, "island": island, "node": f"test-{island}-{i:06d}"}, f"{v}x90")
        for i, v in enumerate(values)
    ]


@dataclass(frozen=True)
class Case:
    alert: str
    why: str
    input_series: list[dict[str, str]]
    eval_minutes: int
    # None: must not fire. Otherwise the labels of the one alert that must fire (severity added from the table).
    fires_with: dict[str, str] | None
    value: str = ""  # what {{ $value }} renders to, where the summary uses it
    extra: list[dict[str, Any]] = field(default_factory=list)


CASES: list[Case] = [
    Case("GpuXidFatal", "fatal Xid 48 (DBE)", [series("DCGM_FI_DEV_XID_ERRORS", GPU, "0 0 48x10")], 5, GPU, "48"),
    Case("GpuXidFatal", "Xid 13 is an application error", [series("DCGM_FI_DEV_XID_ERRORS", GPU, "13x10")], 5, None),
    Case("GpuXidFatal", "Xid 79 is its own alert", [series("DCGM_FI_DEV_XID_ERRORS", GPU, "79x10")], 5, None),
    Case("GpuFellOffBus", "Xid 79", [series("DCGM_FI_DEV_XID_ERRORS", GPU, "79x10"), *gpu_temps(8)], 5, GPU),
    Case("GpuFellOffBus", "7 of 8 GPUs report", gpu_temps(7), 5, NODE),
    Case("GpuFellOffBus", "all 8 GPUs report", gpu_temps(8), 5, None),
    Case("GpuEccUncorrectable", "a volatile DBE", [series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, "0 0 1x10")], 5, GPU),
    Case(
        "GpuEccUncorrectable", "correctable errors only",
        [series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", GPU, "0x10"), series("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", GPU, "0+50x10")],
        5, None,
    ),
    Case("GpuRowRemapPending", "remap pending", [series("DCGM_FI_DEV_ROW_REMAP_PENDING", GPU, "0 1x10")], 5, GPU),
    Case("GpuRowRemapPending", "no remap pending", [series("DCGM_FI_DEV_ROW_REMAP_PENDING", GPU, "0x10")], 5, None),
    Case("GpuRowRemapFailed", "remap failed", [series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU, "0 1x10")], 5, GPU),
    Case("GpuRowRemapFailed", "no remap failure", [series("DCGM_FI_DEV_ROW_REMAP_FAILURE", GPU, "0x10")], 5, None),
    # Violation counters count microseconds: +30,000,000 per minute = throttled half of the time.
    Case("GpuThermalThrottle", "50 % for 40 min",
         [series("DCGM_FI_DEV_THERMAL_VIOLATION", GPU, "0+30000000x40")], 30, GPU),
    Case("GpuThermalThrottle", "5 % for 40 min",
         [series("DCGM_FI_DEV_THERMAL_VIOLATION", GPU, "0+3000000x40")], 30, None),
    Case("GpuThermalThrottle", "50 % for 8 min, then none",
         [series("DCGM_FI_DEV_THERMAL_VIOLATION", GPU, "0+30000000x8 240000000x32")], 30, None),
    Case("GpuPowerThrottle", "50 % for 40 min", [series("DCGM_FI_DEV_POWER_VIOLATION", GPU, "0+30000000x40")], 30, GPU),
    Case("GpuPowerThrottle", "5 % for 40 min", [series("DCGM_FI_DEV_POWER_VIOLATION", GPU, "0+3000000x40")], 30, None),
    Case("IbPortDown", "state DOWN (1) for 5 min", [series("node_infiniband_state_id", PORT, "4 1x10")], 6, PORT),
    Case("IbPortDown", "state ACTIVE (4)", [series("node_infiniband_state_id", PORT, "4x10")], 6, None),
    Case("IbPortDown", "a 1-minute retrain", [series("node_infiniband_state_id", PORT, "4 1 4x10")], 6, None),
    Case("IbPortDown", "the Ethernet (accelerated networking) HCA is not an IB port",
         [series("node_infiniband_state_id", {**PORT, "device": "mlx5_an0"}, "1x10")], 6, None),
    Case("IbPortFlapping", "10 link-downs in 2 h",
         [series("node_infiniband_link_downed_total", PORT, "0+1x10 10x110")], 120, PORT),
    Case("IbPortFlapping", "3 link-downs in 2 h",
         [series("node_infiniband_link_downed_total", PORT, "0+1x3 3x117")], 120, None),
    Case("IbLinkRateLow", "200 Gb/s", [series(IB_RATE, PORT, "25000000000x10")], 5, PORT),
    Case("IbLinkRateLow", "400 Gb/s", [series(IB_RATE, PORT, "50000000000x10")], 5, None),
    Case("NodeUnhealthy", "validated, unhealthy for 15 min",
         [series("ndfleet_node_validated", NODE_JOB, "1x20"), series("ndfleet_node_healthy", NODE_JOB, "0x20")],
         15, NODE_JOB),
    Case("NodeUnhealthy", "still initializing (no report yet)",
         [series("ndfleet_node_validated", NODE_JOB, "0x20"), series("ndfleet_node_healthy", NODE_JOB, "0x20")],
         15, None),
    Case("NodeUnhealthy", "healthy",
         [series("ndfleet_node_validated", NODE_JOB, "1x20"), series("ndfleet_node_healthy", NODE_JOB, "1x20")],
         15, None),
    Case("NodeDrained", "drained for 90 min", [series("ndfleet_node_drained", NODE_JOB, "1x100")], 90, NODE_JOB),
    Case("NodeDrained", "drained for 30 min", [series("ndfleet_node_drained", NODE_JOB, "0x60 1x40")], 90, None),
    Case("ExporterDown", "dcgm-exporter down 10 min",
         [series("up", {**NODE, "job": "dcgm", "instance": "127.0.0.1:9400"}, "1 0x12")], 10,
         {**NODE, "job": "dcgm", "instance": "127.0.0.1:9400"}),
    Case("ExporterDown", "both exporters up",
         [series("up", {**NODE, "job": "dcgm", "instance": "127.0.0.1:9400"}, "1x12"), series("up", NODE_JOB, "1x12")],
         10, None),
    Case("NodeMetricsSilent", "the agent went quiet 20 min ago", [series("up", NODE_JOB, "1x20 _x40")], 40, NODE_JOB),
    Case("NodeMetricsSilent", "the agent keeps sending", [series("up", NODE_JOB, "1x60")], 40, None),
    Case("IslandCapacityLow", "2 of 4 nodes healthy in island a",
         [*healthy("a", [1, 1, 0, 0]), *healthy("b", [1, 1])], 70, {"island": "a", "stack": "test"}),
    Case("IslandCapacityLow", "no node of island b reports",
         healthy("a", [1, 1, 1, 1]), 70, {"island": "b", "stack": "test"}),
    Case("IslandCapacityLow", "3 of 4 and 2 of 2 healthy",
         [*healthy("a", [1, 1, 1, 0]), *healthy("b", [1, 1])], 70, None),
    Case("IslandCapacityLow", "2 of 4 healthy for 40 min only (a deployment still validating)",
         [*healthy("a", [1, 1, 0, 0]), *healthy("b", [1, 1])], 40, None),
]


def _render(template: str, labels: dict[str, str], value: str) -> str:
    """Prometheus's annotation templating, for the two forms the table uses."""
    out = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)
    return out.replace("{{ $value }}", value)


def _test_entry(spec: ClusterSpec, case: Case) -> dict[str, Any]:
    expected: list[dict[str, Any]] = []
    if case.fires_with is not None:
        fires_with = case.fires_with
        # The rule with this name whose own labels (IslandCapacityLow: island, stack) the alert carries.
        (alert,) = [a for a in alerts(spec) if a.name == case.alert and dict(a.labels).items() <= fires_with.items()]
        labels = {**case.fires_with, **alert.all_labels}
        expected.append(
            {
                "exp_labels": labels,
                "exp_annotations": {k: _render(v, labels, case.value) for k, v in alert.annotations.items()},
            }
        )
    return {
        "name": f"{case.alert}: {case.why}",
        "interval": "1m",
        "input_series": case.input_series,
        "alert_rule_test": [{"eval_time": f"{case.eval_minutes}m", "alertname": case.alert, "exp_alerts": expected}],
    }


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory: pytest.TempPathFactory, mon_spec: ClusterSpec) -> Path:
    folder = tmp_path_factory.mktemp("rules")
    (folder / "rules.yml").write_text(rule_file_yaml(mon_spec))
    return folder


def test_every_alert_has_firing_and_silent_cases(mon_spec: ClusterSpec) -> None:
    names = {a.name for a in alerts(mon_spec)}
    assert {c.alert for c in CASES if c.fires_with is not None} == names
    assert {c.alert for c in CASES if c.fires_with is None} == names


def test_promtool_check_rules_accepts_the_rule_file(promtool: str, rules_dir: Path) -> None:
    rc, out = run_promtool(promtool, "check", "rules", str(rules_dir / "rules.yml"))
    assert rc == 0, out
    assert f"SUCCESS: {len(alerts(load_spec(monitoring_config(), 'test')))} rules found" in out


def test_promtool_rejects_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    """The check can fail: a rule with invalid PromQL is refused."""
    (tmp_path / "bad.yml").write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"alert": "Bad", "expr": "rate(up[5m]", "for": "1m"}]}]}))
    rc, out = run_promtool(promtool, "check", "rules", str(tmp_path / "bad.yml"))
    assert rc != 0 and ("Bad" in out or "parse error" in out), out


def test_promtool_unit_tests_pass_for_every_case(promtool: str, rules_dir: Path, mon_spec: ClusterSpec) -> None:
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [_test_entry(mon_spec, c) for c in CASES],
    }
    (rules_dir / "tests.yml").write_text(yaml.safe_dump(tests, sort_keys=False, width=1000))
    rc, out = run_promtool(promtool, "test", "rules", "tests.yml", cwd=rules_dir)
    assert rc == 0, out
    assert "SUCCESS" in out


def test_promtool_unit_tests_catch_a_wrong_expectation(promtool: str, rules_dir: Path, mon_spec: ClusterSpec) -> None:
    """The harness can fail: a must-fire case expected silent is reported as a failure."""
    case = next(c for c in CASES if c.fires_with is not None)
    wrong = Case(case.alert, case.why, case.input_series, case.eval_minutes, None)
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [_test_entry(mon_spec, wrong)]}
    (rules_dir / "wrong.yml").write_text(yaml.safe_dump(tests, sort_keys=False, width=1000))
    rc, out = run_promtool(promtool, "test", "rules", "wrong.yml", cwd=rules_dir)
    assert rc != 0, out
    assert case.alert in out


def test_every_alert_names_the_node_and_says_what_to_do(mon_spec: ClusterSpec) -> None:
    for alert in alerts(mon_spec):
        if alert.name == "IslandCapacityLow":
            assert "island" in alert.summary
        else:
            assert "{{ $labels.node }}" in alert.summary, alert.name
        assert len(alert.action) > 40, alert.name


def test_thresholds_come_from_the_profile(mon_spec: ClusterSpec) -> None:
    by_name = {a.name: a for a in alerts(mon_spec)}
    p = mon_spec.profile
    assert f"< {p.ib_rate_gbps * 10**9 // 8}" in by_name["IbLinkRateLow"].expr
    assert f"> {p.thresholds.ib_link_down_max}" in by_name["IbPortFlapping"].expr
    assert f"[{p.thresholds.ib_flap_window_hours}h]" in by_name["IbPortFlapping"].expr
    xids = {int(x) for x in re.findall(r"== (\d+)", by_name["GpuXidFatal"].expr)}
    assert xids == set(p.thresholds.xid_fail_codes) - {79}
    assert "|".join(p.ib_devices) in by_name["IbPortDown"].expr
    assert f"< {p.gpus_per_vm}" in by_name["GpuFellOffBus"].expr


def test_island_capacity_follows_the_stack_setting() -> None:
    spec = load_spec(monitoring_config(islandCapacityAlertFraction=0.5), "test")
    exprs = [a.expr for a in alerts(spec) if a.name == "IslandCapacityLow"]
    assert exprs == [
        '(sum(ndfleet_node_healthy{island="a"}) or vector(0)) < 2',
        '(sum(ndfleet_node_healthy{island="b"}) or vector(0)) < 1',
    ]


@pytest.mark.parametrize(
    ("nodes", "fraction", "floor"), [(64, 0.9, 58), (100, 0.9, 90), (10, 0.7, 7), (4, 0.5, 2), (3, 0.01, 1)]
)
def test_island_capacity_floor_is_a_whole_number_of_nodes(nodes: int, fraction: float, floor: int) -> None:
    assert island_capacity_floor(nodes, fraction) == floor


def test_island_capacity_alert_says_what_its_expression_tests() -> None:
    config = {**monitoring_config(islandCapacityAlertFraction=0.9), "islands": [{"name": "big", "nodes": 64}]}
    spec = load_spec(config, "test")
    (alert,) = [a for a in alerts(spec) if a.name == "IslandCapacityLow"]
    # healthy < 57.6 fires at 57 healthy and not at 58: the summary and the expression both say 58.
    assert alert.expr.endswith(") < 58")
    assert alert.summary == "island big: fewer than 58 of 64 nodes healthy"
