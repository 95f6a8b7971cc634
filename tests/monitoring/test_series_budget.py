"""The series budget, measured: what one GPU node of the prod example remote-writes, held to the cost model and to
2,000 series per node.

The real node_exporter (Debian's) runs with the agent's exact flags on 127.0.0.1 over a fake ND H100 v5 node
(tests/monitoring/nd_node.py: the profile's 96 vCPUs, 8 InfiniBand HCAs and 8 NVMe disks, the image's mounts,
disks and interfaces, the stack's storage mounts) with the validation textfile `ndfleet-node metrics` writes for
every check of the stack's validation level; dcgm-exporter is its stand-in serving the counters file's fields for
8 GPUs (tests/monitoring/test_agent_pipeline.py). Both scrapes go through the agent's own metric_relabel_configs
(read from the rendered agent config) with `relabel`, a faithful implementation of Prometheus's keep and drop
actions; test_agent_pipeline.py checks it against the real Prometheus agent. Then every series is counted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ndfleet_node import metrics as node_metrics
from ndfleet_node.checks import level_ids

from ndfleet.monitoring import agent, budget, cost, exporters
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from tests.monitoring import nd_node
from tests.monitoring.conftest import free_port, http_get, running
from tests.monitoring.test_agent_pipeline import GPUS, SCRAPE_SERIES, dcgm_exposition
from tests.monitoring.test_monitoring_plan import prod_config
from tests.monitoring.test_node_agent import boot_config
from tests.system_tools import require_tool
from tests.test_health_endpoint import loopback_up

START_TIMEOUT_S = 60
Series = tuple[str, tuple[tuple[str, str], ...]]  # (metric name, sorted labels)

# --- Prometheus's exposition format and relabelling, as much of it as the agent config uses ------------------------

_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_exposition(body: str) -> list[Series]:
    """Every sample line of a text exposition (Prometheus text format 0.0.4) as (name, labels)."""
    series = []
    for line in body.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        labels: list[tuple[str, str]] = []
        if rest:
            inside = rest[: rest.rindex("}")]
            pos = 0
            while pos < len(inside):
                match = _LABEL.match(inside, pos)
                assert match, f"unparseable labels in {line!r}"
                labels.append((match[1], match[2]))
                pos = match.end()
        else:
            name = line.split()[0]
        series.append((name.strip(), tuple(sorted(labels))))
    return series


def relabel(series: list[Series], rules: list[dict[str, Any]]) -> list[Series]:
    """Prometheus's `keep` and `drop` relabel actions (prometheus/model/relabel/relabel.go): the values of
    `source_labels` (the name as `__name__`, a missing label as "") joined with `separator` (default ";"), matched
    against `regex` anchored at both ends (default "(.*)"). Any other action is refused, so a rule this does not
    implement fails the test instead of being ignored."""
    kept = []
    for name, labels in series:
        values = {"__name__": name, **dict(labels)}
        survives = True
        for rule in rules:
            action = rule.get("action", "replace")
            if action not in ("keep", "drop"):
                raise NotImplementedError(f"relabel action {action!r}: count the series with the real agent")
            joined = rule.get("separator", ";").join(values.get(label, "") for label in rule["source_labels"])
            matched = re.fullmatch(rule.get("regex", "(.*)"), joined) is not None
            if matched != (action == "keep"):
                survives = False
                break
        if survives:
            kept.append((name, labels))
    return kept


def agent_rules(spec: ClusterSpec) -> dict[str, list[dict[str, Any]]]:
    """Each scrape job's metric_relabel_configs, from the agent config a node of the stack boots with."""
    config = yaml.safe_load(boot_config(spec))
    return {job["job_name"]: job.get("metric_relabel_configs", []) for job in config["scrape_configs"]}


# --- the fake node's real node_exporter --------------------------------------------------------------------------


def validation_textfile(spec: ClusterSpec) -> str:
    """What `ndfleet-node metrics` writes after a validation run of the stack's level: one status per check."""
    checks = [{"id": check, "status": "pass"} for check in level_ids(spec.health.validation_level)]
    return node_metrics.render({"status": "healthy", "checks": checks}, 1_700_000_000.0, drained=False)


def scrape_node_exporter(folder: Path, spec: ClusterSpec) -> str:
    binary = require_tool("prometheus-node-exporter")
    loopback_up()
    procfs, sysfs, rootfs = nd_node.build(folder, spec)
    textfile_dir = folder / "textfile"
    node_metrics.write_atomically(textfile_dir / exporters.TEXTFILE_NAME, validation_textfile(spec))
    port = free_port()
    own = ("--web.listen-address", "--collector.textfile.directory")
    args = [a for a in agent.node_exporter_args().split() if not a.startswith(own)]
    argv = [binary, *args, f"--web.listen-address=127.0.0.1:{port}", f"--collector.textfile.directory={textfile_dir}",
            f"--path.procfs={procfs}", f"--path.sysfs={sysfs}", f"--path.rootfs={rootfs}",
            # node_exporter 1.5 reads interfaces over netlink by default; the nodes' 1.3.1 reads /proc/net/dev
            "--no-collector.netdev.netlink"]  # fmt: skip
    with running(argv, f"http://127.0.0.1:{port}/metrics", START_TIMEOUT_S):
        return http_get(f"http://127.0.0.1:{port}/metrics")


@pytest.fixture(scope="module")
def prod_spec() -> ClusterSpec:
    return load_spec(prod_config(), "prod")


@pytest.fixture(scope="module")
def node_body(tmp_path_factory: pytest.TempPathFactory, prod_spec: ClusterSpec) -> Iterator[str]:
    yield scrape_node_exporter(tmp_path_factory.mktemp("nd-node"), prod_spec)


def measure(spec: ClusterSpec, node_body: str) -> dict[str, int]:
    """Series per source that leave one node: the scrapes after the agent's rules, plus its report series."""
    rules = agent_rules(spec)
    node = relabel(parse_exposition(node_body), rules["node"])
    dcgm = relabel(parse_exposition(dcgm_exposition()), rules["dcgm"])
    assert len(set(node)) == len(node) and len(set(dcgm)) == len(dcgm), "a series counted twice"
    collector_of = {name: c for c, names in exporters.NODE_EXPORTER_COLLECTORS.items() for name in names}
    by_collector = Counter(collector_of[name] for name, _ in node if name in collector_of)
    validation = sum(1 for name, _ in node if name in exporters.VALIDATION_METRICS)
    assert by_collector.total() + validation == len(node), "a kept series that belongs to no source"
    return {
        "dcgm-exporter": len(dcgm),
        **{f"node_exporter {c}": by_collector[c] for c in exporters.NODE_EXPORTER_COLLECTORS},
        "validation (textfile)": validation,
        "agent (per scrape target)": len(SCRAPE_SERIES) * len(rules),
    }


def test_the_cost_model_counts_what_a_node_really_sends(prod_spec: ClusterSpec, node_body: str) -> None:
    assert prod_spec.profile.gpus_per_vm == GPUS
    assert measure(prod_spec, node_body) == cost.estimate(prod_spec).series_by_source


def test_a_node_stays_within_the_series_budget(prod_spec: ClusterSpec, node_body: str) -> None:
    measured = sum(measure(prod_spec, node_body).values())
    assert measured <= budget.SERIES_PER_NODE_BUDGET
    assert measured == budget.budget(prod_spec).series_per_node


def test_what_the_agent_drops_is_most_of_what_node_exporter_serves(prod_spec: ClusterSpec, node_body: str) -> None:
    """The rules do the cutting: node_exporter alone serves far more (CPU modes, every meminfo field, ...)."""
    served = parse_exposition(node_body)
    kept = relabel(served, agent_rules(prod_spec)["node"])
    assert sum(1 for name, _ in served if name == "node_cpu_seconds_total") == 8 * prod_spec.profile.vcpus
    assert sum(1 for name, _ in kept if name == "node_cpu_seconds_total") == prod_spec.profile.vcpus
    assert len(served) > 2 * len(kept)


def test_every_mount_the_dashboards_show_is_measured(node_body: str) -> None:
    """The NVMe scratch, blob and Lustre mounts are under /mnt, which the Debian/Ubuntu package's default leaves out
    (agent.FILESYSTEM_EXCLUDE puts them back); /run's tmpfs and Docker's mounts stay out."""
    mounts = {dict(labels)["mountpoint"] for name, labels in parse_exposition(node_body)
              if name == "node_filesystem_avail_bytes"}  # fmt: skip
    assert {"/", "/mnt", nd_node.NVME_MOUNT, nd_node.LUSTRE_MOUNT, f"{nd_node.BLOB_MOUNT_ROOT}/datasets"} <= mounts
    assert not {m for m in mounts if m.startswith(("/run", "/dev", "/var/lib/docker", "/sys", "/proc"))}


def test_relabel_refuses_an_action_it_does_not_implement() -> None:
    with pytest.raises(NotImplementedError):
        relabel([("up", ())], [{"source_labels": ["__name__"], "action": "labeldrop"}])


def test_relabel_keeps_and_drops_like_prometheus() -> None:
    cpu = "node_cpu_seconds_total"
    series = [(cpu, (("cpu", "0"), ("mode", "idle"))), (cpu, (("cpu", "0"), ("mode", "user"))), ("node_load1", ()),
              ("go_gc", ())]  # fmt: skip
    rules = [{"source_labels": ["__name__"], "regex": f"{cpu}|node_load1", "action": "keep"},
             {"source_labels": ["__name__", "mode"], "regex": f"{cpu};user", "action": "drop"}]  # fmt: skip
    assert relabel(series, rules) == [series[0], series[2]]
    # anchored: a name that only contains a kept one is dropped
    assert relabel([("xnode_load1", ())], rules) == []
