"""Dashboards: valid JSON Grafana models, and every query (and every alert expression) uses only metric names a node
exports: the dcgm-exporter counters file, the node_exporter collectors we enable, `ndfleet-node metrics` and the
agent's own `up`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from ndfleet_node import metrics as node_metrics

from ndfleet.monitoring import exporters
from ndfleet.monitoring.alerts import alerts
from ndfleet.monitoring.dashboards import dashboard_files, dashboards, queries
from ndfleet.stackconfig.clusterspec import ClusterSpec
from tests.monitoring.conftest import run_promtool

# PromQL words that are not metric names.
_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "inf", "nan",
}


def metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression: identifiers that are not functions, keywords, labels or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values, regexes)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    names = set()
    for match in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (island) (ndfleet_node_healthy{stack="x", island=~"$island"})', {"ndfleet_node_healthy"}),
        ("rate(node_infiniband_port_data_received_bytes_total{device=~\"a|b\"}[5m])",
         {"node_infiniband_port_data_received_bytes_total"}),
        ("count(A * on(node) group_left() (B == 1))", {"A", "B"}),
        ("max_over_time(up[1h]) unless max_over_time(up[5m])", {"up"}),
        ("1 - avg(rate(node_cpu_seconds_total{mode=\"idle\"}[5m])) / 1e6", {"node_cpu_seconds_total"}),
    ],
)
def test_metric_name_extraction(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_dcgm_counters_file_lists_exactly_the_exported_gpu_metrics() -> None:
    lines = [ln for ln in exporters.dcgm_counters_csv().splitlines() if ln and not ln.startswith("#")]
    fields = [ln.split(",")[0].strip() for ln in lines]
    assert fields == [c.field for c in exporters.DCGM_COUNTERS]
    assert all(len(ln.split(",")) == 3 for ln in lines)  # dcgm-exporter reads exactly: field, type, help
    assert all(ln.split(",")[1].strip() in ("gauge", "counter") for ln in lines)
    assert all(f.startswith("DCGM_FI_") for f in fields)


def test_counters_include_every_error_signal_the_issue_names() -> None:
    fields = {c.field for c in exporters.DCGM_COUNTERS}
    for wanted in (
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "DCGM_FI_DEV_POWER_VIOLATION",
    ):
        assert wanted in fields


def test_validation_metric_names_match_the_node_program() -> None:
    assert exporters.VALIDATION_METRICS == node_metrics.METRIC_NAMES


def test_dashboards_are_valid_json_with_unique_panel_ids(mon_spec: ClusterSpec) -> None:
    files = dashboard_files(mon_spec)
    assert set(files) == {"fleet-overview.json", "island-fabric.json", "node-drilldown.json"}
    uids = set()
    for name, text in files.items():
        model = json.loads(text)
        ids = [p["id"] for p in model["panels"]]
        assert len(ids) == len(set(ids)), name
        assert model["uid"] not in uids and len(model["uid"]) <= 40
        uids.add(model["uid"])
        assert all(p["targets"] for p in model["panels"]), name
        for p in model["panels"]:
            pos = p["gridPos"]
            assert pos["x"] + pos["w"] <= 24, (name, p["title"])


@pytest.mark.parametrize("name", ["fleet-overview.json", "island-fabric.json", "node-drilldown.json"])
def test_every_dashboard_query_uses_exported_metrics_only(mon_spec: ClusterSpec, name: str) -> None:
    exported = exporters.exported_metric_names()
    used: set[str] = set()
    for expr in queries(dashboards(mon_spec)[name]):
        names = metric_names(expr)
        assert names, f"{name}: no metric in {expr!r}"
        assert names <= exported, f"{name}: {sorted(names - exported)} not exported, in {expr!r}"
        used |= names
    assert used


def test_every_alert_expression_uses_exported_metrics_only(mon_spec: ClusterSpec) -> None:
    exported = exporters.exported_metric_names()
    for alert in alerts(mon_spec):
        names = metric_names(alert.expr)
        assert names and names <= exported, (alert.name, sorted(names - exported))


def test_a_query_with_an_unexported_metric_is_caught(mon_spec: ClusterSpec) -> None:
    model = dashboards(mon_spec)["fleet-overview.json"]
    model["panels"][0]["targets"][0]["expr"] = "sum(DCGM_FI_DEV_NOT_A_FIELD)"
    bad = [e for e in queries(model) if not metric_names(e) <= exporters.exported_metric_names()]
    assert bad == ["sum(DCGM_FI_DEV_NOT_A_FIELD)"]


def test_dashboards_cover_fleet_fabric_and_node(mon_spec: ClusterSpec) -> None:
    d = dashboards(mon_spec)
    fleet = " ".join(queries(d["fleet-overview.json"]))
    assert "ndfleet_node_healthy" in fleet and "DCGM_FI_DEV_GPU_TEMP" in fleet  # nodes per island, GPUs in service
    fabric = " ".join(queries(d["island-fabric.json"]))
    assert "node_infiniband_port_data_received_bytes_total" in fabric and "node_infiniband_symbol_error_total" in fabric
    node = d["node-drilldown.json"]
    assert [v["name"] for v in node["templating"]["list"]] == ["datasource", "island", "node"]
    assert all('node="$node"' in q for q in queries(node) if "label_values" not in q and "$node" in q)


def test_promtool_parses_every_dashboard_query(promtool: str, mon_spec: ClusterSpec, tmp_path: Path) -> None:
    """Each query, with Grafana's variables filled in, as a recording rule: `promtool check rules` parses its PromQL."""
    rules = []
    for model in dashboards(mon_spec).values():
        for expr in queries(model):
            filled = expr.replace("$island", "a").replace("$node", "test-a-000001")
            rules.append({"record": f"ndfleet:dashboard_query_{len(rules)}", "expr": filled})
    (tmp_path / "queries.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    rc, out = run_promtool(promtool, "check", "rules", str(tmp_path / "queries.yml"))
    assert rc == 0, out
    assert f"SUCCESS: {len(rules)} rules found" in out
