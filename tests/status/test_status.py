"""`ndfleet status` against recorded Resource Manager and workspace query answers (tests/data/status/README.md).

The real SDK clients and azure-core pipelines run (bearer tokens, retry with Retry-After, paging, error mapping);
only the last hop is replaced by preflight's `ReplayTransport`, and the socket guard fails any attempt to leave
the machine. Cases: a healthy stack, one unhealthy node under repair, a deallocated island, throttling, a caller
without rights, unreadable metric values, and the exit codes and --watch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from ndfleet.cli import build_parser
from ndfleet.commands import status as status_cmd
from ndfleet.preflight import RetrySettings
from tests.status.schema_check import problems
from tests.test_preflight import KEY, SUB, FakeCredential, ReplayTransport, Reply, no_network  # noqa: F401

DATA = Path(__file__).resolve().parent.parent / "data"
SCHEMA = json.loads((Path(status_cmd.__file__).parent.parent / "status" / "schema.json").read_text())
TINY_RETRY = RetrySettings(total=2, backoff_factor=0.001, backoff_max=0.01)
IB00 = "prod-ib00-vmss1a2b3c4d"
IB01 = "prod-ib01-vmss5e6f7a8b"
PATTERNS = {
    "vmss_list": r"/subscriptions/[^/]+/providers/Microsoft\.Compute/virtualMachineScaleSets\?",
    "vmss_list_rg": r"/resourceGroups/prod-net-rg7c1d2e3f/providers/Microsoft\.Compute/virtualMachineScaleSets\?",
    "view_ib00": rf"/virtualMachineScaleSets/{IB00}/instanceView\?",
    "view_ib01": rf"/virtualMachineScaleSets/{IB01}/instanceView\?",
    "vms_ib00": rf"/virtualMachineScaleSets/{IB00}/virtualMachines\?",
    "vms_ib01": rf"/virtualMachineScaleSets/{IB01}/virtualMachines\?",
    "accounts": r"/providers/Microsoft\.Monitor/accounts\?",
    "prom_nodes": r"/api/v1/query\?query=.*ndfleet_node_validated",
    "prom_checks": r"/api/v1/query\?query=.*ndfleet_validation_check_status",
    "prom_slurm": r"/api/v1/query\?query=.*ndfleet_slurm_node_state",
}


def ok(file: str) -> list[Reply]:
    return [Reply(200, f"status/{file}")]


def azure(**override: list[Reply]) -> ReplayTransport:
    """A healthy stack, with any route's replies replaced."""
    routes = {
        "vmss_list": ok("vmss-list.json"),
        "vmss_list_rg": ok("vmss-list.json"),
        "view_ib00": ok("vmss-instance-view-repairs-running.json"),
        "view_ib01": ok("vmss-instance-view-repairs-running.json"),
        "vms_ib00": ok("vms-ib00-healthy.json"),
        "vms_ib01": ok("vms-ib01-healthy.json"),
        "accounts": ok("monitor-accounts.json"),
        "prom_nodes": ok("prom-node-metrics-healthy.json"),
        "prom_checks": ok("prom-failed-checks-none.json"),
        "prom_slurm": ok("prom-slurm-healthy.json"),
    }
    routes.update(override)
    return ReplayTransport([(PATTERNS[k], v) for k, v in routes.items()], root=DATA)


def stack_file(tmp_path: Path, **config: Any) -> Path:
    values: dict[str, Any] = {
        "ndfleet:location": "eastus",
        "ndfleet:sshPublicKey": KEY,
        "ndfleet:subscriptionId": SUB,
        "ndfleet:namePrefix": "prod",
        "ndfleet:islands": [{"name": "ib00", "nodes": 2}, {"name": "ib01", "nodes": 2}],
        "ndfleet:scheduler": "slurm",
        "ndfleet:monitoring": {"enabled": True, "emails": ["oncall@example.com"]},
    }
    values.update({f"ndfleet:{k}": v for k, v in config.items()})
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(json.dumps({"config": {k: v for k, v in values.items() if v is not None}}))
    return path


@dataclass
class Run:
    code: int
    out: str
    err: str
    transport: ReplayTransport
    credential: FakeCredential

    def doc(self) -> dict[str, Any]:
        return json.loads(self.out)

    def island(self, name: str) -> dict[str, Any]:
        return next(i for i in self.doc()["islands"] if i["name"] == name)

    def node(self, name: str) -> dict[str, Any]:
        return next(n for n in self.doc()["nodes"] if n["name"] == name)


def status_run(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    transport: ReplayTransport,
    *argv: str,
    fmt: str = "json",
    sleep: Callable[[float], None] | None = None,
    **config: Any,
) -> Run:
    credential = FakeCredential()
    args = build_parser().parse_args(
        ["status", "--stack-file", str(stack_file(tmp_path, **config)), "--format", fmt, *argv]
    )
    code = status_cmd.run_cli(
        args, env={}, credential=credential, transport=transport, retry=TINY_RETRY, sleep=sleep or (lambda s: None)
    )
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err, transport, credential)


def summary(island: dict[str, Any]) -> dict[str, Any]:
    keys = ("wanted", "running", "validated", "inSlurm", "unhealthy", "repairing", "missing", "costPerHour")
    return {k: island[k] for k in keys}


def assert_valid(doc: dict[str, Any]) -> None:
    assert problems(doc, SCHEMA, SCHEMA) == []


# ----------------------------------------------------------------------------------------------------------
# A healthy stack (exit 0)


def test_healthy_stack_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure())
    assert run.code == 0
    assert run.doc()["exitCode"] == 0


def test_healthy_island_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure())
    assert summary(run.island("ib00")) == {
        "wanted": 2, "running": 2, "validated": 2, "inSlurm": 2, "unhealthy": 0, "repairing": 0, "missing": 0,
        "costPerHour": 196.64,  # 2 running x US$98.32 (ndfleet/cost/prices.py)
    }


def test_healthy_stack_needs_no_person(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure())
    nodes = run.doc()["nodes"]
    assert [(n["name"], n["health"], n["needsPerson"]) for n in nodes] == [
        ("prod-ib00-000000", "healthy", False),
        ("prod-ib00-000001", "healthy", False),
        ("prod-ib01-000000", "healthy", False),
        ("prod-ib01-000002", "healthy", False),
    ]


def test_other_stacks_and_foreign_scale_sets_are_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure())
    assert run.transport.calls("dev-ib00-vmss") == []
    assert run.transport.calls("web-vmss") == []
    assert [s["name"] for i in run.doc()["islands"] for s in i["scaleSets"]] == [IB00, IB01]


def test_reads_instances_with_their_instance_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure())
    (vms,) = run.transport.calls(f"{IB00}/virtualMachines")
    assert parse_qs(urlsplit(vms.url).query)["$expand"] == ["instanceView"]
    assert all(r.method == "GET" for r in run.transport.requests)


def test_queries_carry_the_stack_label_and_a_prometheus_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = status_run(capsys, tmp_path, azure())
    queries = run.transport.calls("/api/v1/query")
    assert len(queries) == 3
    assert all('stack="prod"' in parse_qs(urlsplit(q.url).query)["query"][0] for q in queries)
    assert ("https://prometheus.monitor.azure.com/.default",) in run.credential.scopes
    assert all(q.headers["Authorization"] == "Bearer fake-arm-token" for q in queries)


def test_healthy_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = status_run(capsys, tmp_path, azure(), fmt="table").out.splitlines()
    assert lines[1].split() == ["ISLAND", "WANTED", "RUNNING", "VALIDATED", "IN", "SLURM", "UNHEALTHY", "REPAIRING",
                                "COST/HOUR"]
    assert lines[2].split() == ["ib00", "2", "2", "2", "2", "0", "0", "US$196.64"]
    assert lines[-1] == "status: all 4 wanted nodes healthy (exit 0)"


# ----------------------------------------------------------------------------------------------------------
# One unhealthy node under repair (exit 1)


def unhealthy_node(**override: list[Reply]) -> ReplayTransport:
    return azure(
        vms_ib00=ok("vms-ib00-one-unhealthy.json"),
        prom_nodes=ok("prom-node-metrics-one-failed.json"),
        prom_checks=ok("prom-failed-checks-nvlink.json"),
        prom_slurm=ok("prom-slurm-one-drained.json"),
        **override,
    )


def test_unhealthy_node_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert status_run(capsys, tmp_path, unhealthy_node()).code == 1


def test_unhealthy_node_under_repair_is_left_to_azure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = status_run(capsys, tmp_path, unhealthy_node()).node("prod-ib00-000001")
    assert (node["health"], node["vmHealth"], node["repair"], node["needsPerson"]) == (
        "unhealthy", "unhealthy", "pending", False
    )
    assert node["validation"] == {
        "state": "failed", "failedChecks": ["gpu.nvlink"], "detail": "failed checks: gpu.nvlink"
    }
    assert node["slurm"] == {"state": "drained", "reason": "ndfleet:gpu.nvlink"}


def test_unhealthy_island_counts_the_repair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, unhealthy_node())
    assert summary(run.island("ib00")) == {
        "wanted": 2, "running": 2, "validated": 1, "inSlurm": 1, "unhealthy": 1, "repairing": 1, "missing": 0,
        "costPerHour": 196.64,
    }


def suspended_repairs() -> ReplayTransport:
    return unhealthy_node(view_ib00=ok("vmss-instance-view-repairs-suspended.json"))


def test_suspended_repairs_need_a_person(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, suspended_repairs())
    node = run.node("prod-ib00-000001")
    assert (node["repair"], node["needsPerson"]) == ("suspended", True)
    assert "--service-name AutomaticRepairs --action Resume" in node["actions"][0]
    assert f"--name {IB00}" in node["actions"][0]


def test_unhealthy_table_names_the_node_and_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = status_run(capsys, tmp_path, unhealthy_node(), fmt="table").out
    assert "  prod-ib00-000001 (island ib00): unhealthy, power running, provisioning Succeeded, Azure health " \
           "unhealthy, repair pending, validation failed (gpu.nvlink), Slurm drained (ndfleet:gpu.nvlink)" in out
    assert out.splitlines()[-1] == "status: 1 of 4 wanted nodes not healthy (exit 1)"


def test_node_on_an_old_model_gets_the_update_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(vms_ib00=ok("vms-ib00-old-model.json")))
    node = run.node("prod-ib00-000001")
    assert node["latestModel"] is False
    assert node["actions"][0].startswith(f"runs an older scale-set model: `az vmss update-instances --resource-group "
                                         f"prod-net-rg7c1d2e3f --name {IB00} --instance-ids 1`")


# ----------------------------------------------------------------------------------------------------------
# A deallocated island (exit 1)


def deallocated(**override: list[Reply]) -> ReplayTransport:
    routes = {
        "vms_ib01": ok("vms-ib01-deallocated.json"),
        "prom_nodes": ok("prom-node-metrics-ib01-silent.json"),
        "prom_slurm": ok("prom-slurm-ib01-down.json"),
    }
    return azure(**{**routes, **override})


def test_deallocated_island_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert status_run(capsys, tmp_path, deallocated()).code == 1


def test_deallocated_island_costs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, deallocated())
    assert summary(run.island("ib01")) == {
        "wanted": 2, "running": 0, "validated": 0, "inSlurm": 0, "unhealthy": 2, "repairing": 0, "missing": 0,
        "costPerHour": 0.0,
    }


def test_deallocated_node_gets_the_start_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = status_run(capsys, tmp_path, deallocated()).node("prod-ib01-000002")
    assert (node["powerState"], node["vmHealth"], node["health"]) == ("deallocated", "none", "unhealthy")
    assert node["actions"][0] == (
        f"deallocated: start it with `az vmss start --resource-group prod-net-rg7c1d2e3f --name {IB01} "
        "--instance-ids 2` if it should run"
    )


# ----------------------------------------------------------------------------------------------------------
# Throttling (Retry-After honoured; exit 2 when it lasts)

THROTTLED = Reply(429, "arm/error-429-throttled.json", {"Retry-After": "7"})


def test_throttled_listing_is_retried_after_retry_after(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(vmss_list=[THROTTLED, *ok("vmss-list.json")]))
    assert run.code == 0
    assert run.transport.sleeps == [7]  # the SDK's retry policy waited as asked (the fake does not sleep)


def test_lasting_throttling_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(vmss_list=[THROTTLED]), fmt="table")
    assert run.code == 2
    assert run.err.startswith("ndfleet status: error: could not read: throttled: Resource Manager still answered 429 "
                              "for the virtual "
                              f"machine scale sets of subscription {SUB} after 3 attempts")
    assert run.err.rstrip().endswith("wait a minute and run status again")


def test_throttled_query_is_retried(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    throttled = Reply(429, "arm/error-429-throttled.json", {"Retry-After": "3"})
    run = status_run(capsys, tmp_path, azure(prom_nodes=[throttled, *ok("prom-node-metrics-healthy.json")]))
    assert (run.code, run.transport.sleeps) == (0, [3])


# ----------------------------------------------------------------------------------------------------------
# A caller without rights (exit 2)


def test_caller_without_reader_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(vmss_list=[Reply(403, "status/error-403-vmss-read.json")]))
    assert run.code == 2
    assert run.doc()["error"].startswith(
        f"could not read: no permission to read the virtual machine scale sets of subscription {SUB} (HTTP 403 "
        "AuthorizationFailed"
    )


def test_caller_without_reader_json_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(vmss_list=[Reply(403, "status/error-403-vmss-read.json")]))
    assert_valid(run.doc())


def test_workspace_refusing_the_query_makes_validation_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = status_run(capsys, tmp_path, azure(prom_nodes=[Reply(403, "status/prom-403-forbidden.json")]))
    node = run.node("prod-ib00-000000")
    assert (node["validation"]["state"], node["health"]) == ("unknown", "unknown")
    assert "Monitoring Data Reader" in run.doc()["notes"][0]


def test_workspace_refusing_the_query_leaves_the_validated_count_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = status_run(capsys, tmp_path, azure(prom_nodes=[Reply(403, "status/prom-403-forbidden.json")]))
    assert run.island("ib00")["validated"] is None


def test_workspace_refusing_the_query_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(prom_nodes=[Reply(403, "status/prom-403-forbidden.json")]))
    assert run.code == 2


def test_known_unhealthy_node_wins_over_unknown_validation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, deallocated(prom_nodes=[Reply(403, "status/prom-403-forbidden.json")]))
    assert run.code == 1


# ----------------------------------------------------------------------------------------------------------
# Unreadable metric values: unknown, never healthy


@pytest.mark.parametrize("file", ["prom-node-metrics-nan.json", "prom-node-metrics-garbage.json"])
def test_unreadable_value_makes_the_node_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str], file: str) -> None:
    run = status_run(capsys, tmp_path, azure(prom_nodes=ok(file)))
    node = run.node("prod-ib00-000001")
    assert (node["validation"]["state"], node["health"], run.code) == ("unknown", "unknown", 2)
    assert node["validation"]["detail"].startswith("ndfleet_node_healthy = ")


def test_answer_that_is_not_json_makes_validation_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(prom_nodes=ok("../status/README.md")))
    assert run.node("prod-ib00-000000")["validation"]["state"] == "unknown"
    assert "not JSON" in run.doc()["notes"][0]


# ----------------------------------------------------------------------------------------------------------
# JSON schema, stacks that cannot be read, --watch


@pytest.mark.parametrize(
    "transport",
    [azure, unhealthy_node, deallocated, lambda: azure(prom_nodes=ok("prom-node-metrics-nan.json"))],
    ids=["healthy", "unhealthy", "deallocated", "nan"],
)
def test_json_matches_the_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], transport: Callable[[], ReplayTransport]
) -> None:
    assert_valid(status_run(capsys, tmp_path, transport()).doc())


def test_schema_checker_catches_a_wrong_document() -> None:
    assert problems({"schemaVersion": 2}, SCHEMA, SCHEMA)[:2] == ["$: missing 'stack'", "$: missing 'subscriptionId'"]


def test_stack_without_monitoring_does_not_query(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(), monitoring={"enabled": False}, scheduler="none")
    assert run.code == 0
    assert run.transport.calls("/api/v1/query") == [] and run.transport.calls("Microsoft.Monitor") == []
    assert run.node("prod-ib00-000000")["validation"]["state"] == "not-collected"


def test_bad_stack_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(), nodes=3)  # nodes and islands both set
    assert run.code == 2
    assert run.doc()["error"].startswith("could not read: ")


def test_island_without_scale_set_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    islands = [{"name": "ib00", "nodes": 2}, {"name": "ib01", "nodes": 2}, {"name": "ib02", "nodes": 2}]
    run = status_run(capsys, tmp_path, azure(), islands=islands)
    assert (run.code, run.island("ib02")["missing"]) == (1, 2)
    assert run.island("ib02")["actions"][0].startswith("no scale set found for island ib02")


def test_watch_reads_until_the_count_and_returns_the_last_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sleeps: list[float] = []
    reads = azure(vms_ib00=[*ok("vms-ib00-healthy.json"), *ok("vms-ib00-healthy.json"),
                            *ok("vms-ib00-one-unhealthy.json")])
    run = status_run(capsys, tmp_path, reads, "--watch", "5", "--watch-count", "3", sleep=sleeps.append)
    assert (run.code, sleeps) == (1, [5.0, 5.0])
    assert [json.loads(line)["exitCode"] for line in run.out.splitlines()] == [0, 0, 1]


def test_watch_stops_on_ctrl_c_with_the_last_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    run = status_run(capsys, tmp_path, unhealthy_node(), "--watch", sleep=interrupt)
    assert run.code == 1


def test_watch_below_5_seconds_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["status", "--stack", "prod", "--watch", "1"])
    assert "--watch = '1': a number of seconds, at least 5" in capsys.readouterr().err


def test_scale_set_listing_more_instances_than_azure_allows_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ndfleet.status import arm_read

    monkeypatch.setattr(arm_read, "MAX_INSTANCES", 1)
    run = status_run(capsys, tmp_path, azure())
    assert run.code == 2
    assert run.doc()["error"] == f"could not read: scale set {IB00} lists more than 1 instances"


def test_stack_with_a_resource_group_lists_only_that_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(), resourceGroupName="prod-net-rg7c1d2e3f")
    assert run.code == 0
    listings = run.transport.calls("/providers/Microsoft.Compute/virtualMachineScaleSets?")
    assert [urlsplit(r.url).path.split("/providers/")[0] for r in listings] == [
        f"/subscriptions/{SUB}/resourceGroups/prod-net-rg7c1d2e3f"
    ]


def test_token_goes_only_to_a_workspace_query_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = status_run(capsys, tmp_path, azure(accounts=ok("monitor-accounts-foreign-endpoint.json")))
    assert run.transport.calls("/api/v1/query") == []
    assert run.doc()["notes"][0] == (
        "validation unknown for every node: the workspace's query endpoint 'https://metrics.example.com' is not an "
        "https:// URL on *.prometheus.monitor.azure.com"
    )


class NoCredential:
    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.exceptions import ClientAuthenticationError

        said = "DefaultAzureCredential failed to retrieve a token.\nAzureCliCredential: az not found"
        raise ClientAuthenticationError(said)


def test_no_credentials_is_one_line_and_verbose_adds_what_azure_identity_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(
        ["status", "--stack-file", str(stack_file(tmp_path)), "--format", "table", "--verbose"]
    )
    code = status_cmd.run_cli(args, env={}, credential=NoCredential(), transport=azure(), retry=TINY_RETRY)
    err = capsys.readouterr().err
    assert code == 2
    assert "could not read: no usable Azure credentials for AzureCloud" in err
    assert "- AzureCliCredential: az not found" in err


# ----------------------------------------------------------------------------------------------------------
# The docs show what the command prints


def operations_sample() -> str:
    """The first fenced text block of docs/operations.md, without its `$ ndfleet status` line."""
    text = (DATA.parent.parent / "docs" / "operations.md").read_text(encoding="utf-8")
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    command, _, shown = block.partition("\n")
    assert command == "$ ndfleet status --stack prod"
    return shown


def test_operations_guide_shows_the_output_of_suspended_repairs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert operations_sample() == status_run(capsys, tmp_path, suspended_repairs(), fmt="table").out
