"""`ndfleet goodput` on recorded answers of the workspace's range query (tests/data/goodput, the Prometheus HTTP
API's documented matrix shape), against the table worked out by hand in docs/goodput.md."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from ndfleet.cli import build_parser
from ndfleet.commands import goodput as goodput_cmd
from ndfleet.goodput.compute import StateSample, as_json, build_report, category, cause, node_figures, percentile
from ndfleet.goodput.jobs import build_jobs
from ndfleet.status.prometheus import QueryFailed, Series, parse_matrix
from tests.status.test_status import DATA, PATTERNS, TINY_RETRY, ok, stack_file
from tests.test_preflight import FakeCredential, ReplayTransport, Reply, no_network  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
T0 = 1796284800  # 2026-12-03 08:00 UTC: the recordings' start
UNTIL = T0 + 12 * 3600
H = 3600
ROUTES = {
    **{k: v for k, v in PATTERNS.items() if not k.startswith("prom_")},
    "range_ib00": r"/api/v1/query_range\?.*prod-ib00-",
    "range_ib01": r"/api/v1/query_range\?.*prod-ib01-",
    "range_job_start": r"/api/v1/query_range\?query=ndfleet_slurm_job_run_start_seconds",
    "range_job_end": r"/api/v1/query_range\?query=ndfleet_slurm_job_run_end_seconds",
}


def azure(**override: list[Reply]) -> ReplayTransport:
    routes = {
        "vmss_list": ok("vmss-list.json"),
        "vmss_list_rg": ok("vmss-list.json"),
        "view_ib00": ok("vmss-instance-view-repairs-running.json"),
        "view_ib01": ok("vmss-instance-view-repairs-running.json"),
        "vms_ib00": ok("vms-ib00-healthy.json"),
        "vms_ib01": ok("vms-ib01-healthy.json"),
        "accounts": ok("monitor-accounts.json"),
        "range_ib00": [Reply(200, "goodput/prom-slurm-range-ib00.json")],
        "range_ib01": [Reply(200, "goodput/prom-slurm-range-ib01.json")],
        "range_job_start": [Reply(200, "goodput/prom-slurm-job-run-start.json")],
        "range_job_end": [Reply(200, "goodput/prom-slurm-job-run-end.json")],
    }
    routes.update(override)
    return ReplayTransport([(ROUTES[k], v) for k, v in routes.items()], root=DATA)


def run(capsys: pytest.CaptureFixture[str], tmp_path: Path, transport: ReplayTransport, *argv: str,
        **config: Any) -> tuple[int, str, str]:  # fmt: skip
    args = build_parser().parse_args(["goodput", "--stack-file", str(stack_file(tmp_path, **config)), *argv])
    code = goodput_cmd.run_cli(args, env={}, credential=FakeCredential(), transport=transport, retry=TINY_RETRY,
                               now=lambda: float(UNTIL))  # fmt: skip
    out, err = capsys.readouterr()
    return code, out, err


def period() -> list[str]:
    return ["--since", "2026-12-03T08:00Z", "--until", "2026-12-03T20:00Z"]


def hand_table(name: str = "goodput-hand-table") -> dict[str, dict[str, str]]:
    """A table worked out by hand in docs/goodput.md, row name -> column -> cell."""
    text = (REPO / "docs" / "goodput.md").read_text()
    block = re.search(rf"<!-- {name}.*?-->\n(.*?)<!-- /{name} -->", text, re.S)
    assert block, f"docs/goodput.md lost its table {name}"
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.group(1).strip().splitlines()]
    head = rows[0]
    return {r[0]: dict(zip(head, r, strict=True)) for r in rows[2:]}


def as_cells(figures: dict[str, Any]) -> dict[str, str]:
    """The report's JSON figures written as the hand table writes them."""
    per = figures["interruptionsPer1000NodeDays"]
    times = figures["drainToBackInServiceSeconds"]
    return {
        "node-h": f"{figures['nodeHours']:g}",
        **{c: f"{figures['hours'][c]:g}" for c in ("running", "idle", "drained", "repair", "burnin")},
        "in service": f"{figures['serviceShare']:.1%}".replace("%", " %"),
        "interruptions (per 1,000 node-days)": ", ".join(
            f"{c} {n} ({per[c]:.2f})" for c, n in figures["interruptions"].items()),
        "median": f"{times['median']:g}",
        "p95": f"{times['p95']:g}",
        "still out": str(times["stillOut"]),
        "badput US$": f"{figures['badputUsd']:.2f}",
    }


def test_the_report_on_the_recorded_answers_equals_the_hand_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, tmp_path, azure(), *period(), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    table = hand_table("goodput-hand-table")
    assert set(table) == {"ib00", "ib01", "cluster"}
    for name, row in table.items():
        figures = doc["cluster"] if name == "cluster" else doc["islands"][name]
        assert as_cells(figures) == {k: v for k, v in row.items() if k != ""}, name


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}".replace("%", " %")


def job_cells(job: dict[str, Any]) -> dict[str, str]:
    """One job of the report's JSON written as the jobs table writes it."""
    note = ("waiting to restart" if job["waitingToRestart"] else "") or (
        f"{job['runsNotSeen']} earlier run(s) not seen" if job["runsNotSeen"] else "")
    return {
        "runs": str(job["runs"]),
        "run s": f"{job['runSeconds']:g}",
        "wall s": f"{job['wallSeconds']:g}",
        "ETTR": _share(job["ettr"]),
        "restarts in the period": ", ".join(f"{r['cause']} {r['seconds']:g}" for r in job["restarts"]),
        "note": note,
    }


def test_the_job_figures_on_the_recorded_answers_equal_the_hand_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, tmp_path, azure(), *period(), "--format", "json")
    assert code == 0, err
    jobs = json.loads(out)["jobs"]
    table = hand_table("goodput-jobs-table")
    cells = {j["job"]: job_cells(j) for j in jobs["jobs"]}
    cells["all"] = {
        "runs": str(jobs["runs"]),
        "run s": f"{jobs['knownEttrRunSeconds']:g}",
        "wall s": f"{jobs['knownEttrWallSeconds']:g}",
        "ETTR": _share(jobs["ettrOverall"]),
        "restarts in the period": str(sum(r["count"] for r in jobs["restartSeconds"].values())),
        "note": f"{jobs['waitingToRestart']} waiting to restart",
    }
    assert cells == {row: {k: v for k, v in cols.items() if k != "job"} for row, cols in table.items()}
    restarts = {cause: {"restarts": str(r["count"]), "median s": f"{r['median']:g}", "p95 s": f"{r['p95']:g}"}
                for cause, r in jobs["restartSeconds"].items()}  # fmt: skip
    assert restarts == {row: {k: v for k, v in cols.items() if k != "cause"}
                        for row, cols in hand_table("goodput-restart-table").items()}  # fmt: skip


def test_the_table_names_the_jobs_and_their_restarts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, tmp_path, azure(), *period())
    assert code == 0
    assert ("jobs requeued or ended by a node failure: 5 (12 runs seen); ETTR of the 2 whose it is known: 92.4%; "
            "2 waiting to restart (ETTR not known yet)") in out
    assert "job restarts (run end to next run's start): node_fail 2 (median 0h30m, p95 1h00m), requeued 1" in out
    assert "lowest ETTR: 1002 91.1%, 1001 94.4%" in out


@pytest.mark.parametrize(("labels", "value", "named"), [
    ('"slurm_job":"1001.batch","run":"0"', "1796284800", "labels {'slurm_job': '1001.batch', 'run': '0', 'state': ''}"),
    ('"slurm_job":"1001","run":"first"', "1796284800", "not a job's run"),
    ('"slurm_job":"1001","run":"0"', "NaN", "ndfleet_slurm_job_run_start_seconds 'NaN', not a unix time"),
    ('"slurm_job":"1001","run":"0"', "-5", "'-5', not a unix time"),
])  # fmt: skip
def test_a_job_series_that_is_not_a_run_is_a_named_failure(
    labels: str, value: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "data" / "bad-start.json"
    bad.parent.mkdir()
    bad.write_text(f'{{"status":"success","data":{{"resultType":"matrix","result":[{{"metric":{{{labels}}},'
                   f'"values":[[{T0},"{value}"]]}}]}}}}')  # fmt: skip
    transport = azure(range_job_start=[Reply(200, str(bad))])
    code, out, err = run(capsys, tmp_path, transport, *period())
    assert code == 2 and out == ""
    assert err.startswith("ndfleet goodput: error: could not read the Slurm states and jobs: ") and named in err


def test_the_queries_ask_one_island_each_over_the_period(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = azure()
    code, _, err = run(capsys, tmp_path, transport, *period())
    assert code == 0, err
    calls = transport.calls("/api/v1/query_range")
    assert len(calls) == 4
    for call, metric in zip(calls[2:], ("start", "end"), strict=True):
        query = parse_qs(urlsplit(call.url).query)
        assert query["query"] == [f'ndfleet_slurm_job_run_{metric}_seconds{{stack="prod"}}']
        # 12 h in at most 100 points, a whole number of the 30 s scrape interval: 450 s
        assert (float(query["start"][0]), float(query["end"][0]), float(query["step"][0])) == (T0, UNTIL, 450)
    for call, island in zip(calls[:2], ("ib00", "ib01"), strict=True):
        query = parse_qs(urlsplit(call.url).query)
        assert query["query"] == [f'ndfleet_slurm_node_state{{stack="prod",slurm_node=~"(?i)prod-{island}-.*"}} == 1']
        assert (float(query["start"][0]), float(query["end"][0])) == (T0, UNTIL)
        assert float(query["step"][0]) == 60  # the stack's scrape interval: 12 h is under 1,000 points of it


def test_the_table_names_every_island_and_the_badput(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, tmp_path, azure(), *period())
    assert code == 0
    lines = out.splitlines()
    cluster = next(line for line in lines if line.startswith("cluster "))
    assert cluster.split()[1:3] == ["45.0", "18.0"]
    assert cluster.endswith("US$1,573.12")
    assert "not yet measured: detect time" in out


def test_a_refused_range_query_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused = [Reply(403, "status/prom-403-forbidden.json")]
    code, out, err = run(capsys, tmp_path, azure(range_ib01=refused), *period())
    assert code == 2 and out == ""
    assert err.startswith("ndfleet goodput: error: could not read the Slurm states and jobs: the query API answered "
                          "HTTP 403")
    assert "Monitoring Data Reader" in err
    assert len(err.splitlines()) == 1


def test_a_stack_without_monitoring_cannot_be_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, tmp_path, azure(), *period(), "--format", "json", monitoring={"enabled": False})
    assert code == 2
    assert "ndfleet:monitoring.enabled" in json.loads(out)["error"]


@pytest.mark.parametrize(("argv", "named"), [
    (["--since", "last tuesday"], "--since = 'last tuesday' is not an ISO 8601 time"),
    (["--since", "7d", "--until", "yesterday"], "--until = 'yesterday' is not"),
    (["--since", "2026-12-03T20:00Z", "--until", "2026-12-03T08:00Z"], "must come before --until"),
])  # fmt: skip
def test_a_bad_period_is_a_usage_error_before_anything_is_read(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transport = azure()
    code, _, err = run(capsys, tmp_path, transport, *argv)
    assert code == 64
    assert err.startswith("ndfleet goodput: error: ") and named in err
    assert transport.requests == []


def sample(hour: int, state: str, reason: str = "", node: str = "n") -> StateSample:
    return StateSample(node, T0 + hour * 3600, state, reason)


def test_categories_and_causes_follow_the_reason_prefixes() -> None:
    assert category("drained", "ndfleet:burnin:fabric") == "burnin"
    assert category("draining", "ndfleet:nvlink") == "repair"
    assert category("drained", "kernel update") == "drained"
    assert category("powered_down", "") is None
    assert cause("drained", "ndfleet:nvlink,gpu-count") == "check:nvlink"
    assert cause("drained", "ndfleet:elastic:vm-failed") == "elastic"
    assert cause("down", "Not responding") == "slurm-down"
    assert cause("drained", "swap DIMM") == "operator"
    assert cause("other", "") == "other"


def test_the_epilogs_drain_counts_under_the_check_the_next_pass_names() -> None:
    # Issue 47: the Epilog's verdict is its exit status, so slurmctld drains the node "Epilog error" and the health
    # check's next pass names the failed check (seen in the twin: goodput counted that drain as an operator's).
    assert category("drained", "Epilog error") == "repair" and cause("drained", "Epilog error") == "check:epilog"
    states = [("idle", ""), ("drained", "Epilog error"), ("drained", "ndfleet:gpu.ecc"), ("idle", "")]
    f = node_figures([sample(h, st, r) for h, (st, r) in enumerate(states)], 3600, T0 + 4 * 3600)
    assert f.interruptions == {"check:gpu.ecc": 1} and f.hours["repair"] == 2
    # Not renamed before the node came back (or the period ended): the Epilog's own cause.
    f = node_figures([sample(h, st, r) for h, (st, r) in enumerate([states[0], states[1], states[3]])], 3600,
                     T0 + 3 * 3600)  # fmt: skip
    assert f.interruptions == {"check:epilog": 1}


def test_a_node_back_only_after_the_period_is_still_out_and_has_no_time() -> None:
    f = node_figures([sample(0, "idle"), sample(1, "down"), sample(2, "down")], 3600, T0 + 3 * 3600)
    assert (f.interruptions, f.back_in_service_s, f.still_out) == ({"slurm-down": 1}, [], 1)
    assert f.hours["repair"] == 2


def test_a_warm_spare_is_its_own_category_and_joining_or_leaving_the_spares_is_no_interruption() -> None:
    # A spare (held out of scheduling: docs/operations.md, "Warm spares") takes a failed node's place and runs the
    # requeued job, goes back to the spares when the island is whole again, then fails its own health check.
    states = ["spare", "allocated", "idle", "spare", "drained", "spare"]
    reasons = {4: "ndfleet:gpu.ecc"}
    f = node_figures([sample(h, s, reasons.get(h, "")) for h, s in enumerate(states)], 3600, T0 + 6 * 3600)
    assert f.hours["spare"] == 3 and f.hours["running"] == 1 and f.hours["repair"] == 1
    assert (f.interruptions, f.back_in_service_s, f.still_out) == ({"check:gpu.ecc": 1}, [3600.0], 0)
    assert f.badput_hours == 1  # the spare's hours are paid for on purpose: not badput
    assert f.service_share == 2 / 3  # of the hours not held as a spare


def test_a_node_of_no_island_is_named_not_counted() -> None:
    report = build_report("prod", [sample(0, "idle", node="other-ib00-000000")], since=T0, until=T0 + 3600,
                          step_s=3600, prefixes={"ib00": "prod-ib00-"}, usd_per_node_hour=None)  # fmt: skip
    assert report.unplaced_nodes == ("other-ib00-000000",)
    assert report.cluster.node_hours == 0


def test_nearest_rank_percentiles() -> None:
    assert percentile([], 50) is None
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert percentile([float(x) for x in range(1, 21)], 95) == 19.0
    assert percentile([float(x) for x in range(1, 101)], 95) == 95.0


@pytest.mark.parametrize(("values", "named"), [
    ('{"resultType": "vector", "result": []}', "no matrix result"),
    ('{"resultType": "matrix", "result": [{"metric": {}, "values": [[true, "1"]]}]}', "not [time, value]"),
    ('{"resultType": "matrix", "result": [{"metric": {}, "values": [["soon", "1"]]}]}', "holds a time 'soon'"),
    ('{"resultType": "matrix", "result": [{"metric": {}, "values": [["NaN", "1"]]}]}', "holds a time 'NaN'"),
    ('{"resultType": "matrix", "result": [{"metric": {}}]}', "without labels or values"),
])  # fmt: skip
def test_a_range_answer_of_the_wrong_shape_is_a_named_failure(values: str, named: str) -> None:
    with pytest.raises(QueryFailed, match=re.escape(named)):
        parse_matrix(f'{{"status": "success", "data": {values}}}'.encode())


def job_series(metric: str, job: str, run: int, value: float, *at: float, state: str = "") -> Series:
    labels = {"slurm_job": job, "run": str(run), **({"state": state} if state else {})}
    return Series({"__name__": metric, **labels}, tuple((t, str(int(value))) for t in at))


def test_an_end_without_its_start_and_a_missing_run_tell_no_restart() -> None:
    start, end = "ndfleet_slurm_job_run_start_seconds", "ndfleet_slurm_job_run_end_seconds"
    report = build_jobs(
        [job_series(start, "7", 0, T0, T0), job_series(start, "7", 2, T0 + 3 * H, T0 + 3 * H)],
        [job_series(end, "7", 0, T0 + H, T0 + H, state="node_fail"),
         job_series(end, "8", 0, T0 + H, T0 + H, state="node_fail")],  # job 8's start never seen: no job 8
        since=T0, until=T0 + 4 * H, step_s=H,
    )  # fmt: skip
    (job,) = report.jobs
    assert job.job == "7" and job.restarts(T0, T0 + 4 * H) == []  # run 1 missing: 0 -> 2 is no restart time
    # run 2 runs until its last sample + the step (T0 + 4 h, the period's end): 1 h + 1 h over 4 h
    assert (job.run_s, job.wall_s, job.ettr) == (2 * H, 4 * H, 0.5)


def test_a_restart_counts_in_the_period_its_failure_falls_in() -> None:
    start, end = "ndfleet_slurm_job_run_start_seconds", "ndfleet_slurm_job_run_end_seconds"
    starts = [job_series(start, "7", 0, T0 - 2 * H, T0), job_series(start, "7", 1, T0 + H, T0 + H)]
    ends = [job_series(end, "7", 0, T0 - H, T0, state="node_fail")]
    assert build_jobs(starts, ends, since=T0, until=T0 + 2 * H, step_s=H).restart_s == {}
    assert build_jobs(starts, ends, since=T0 - H, until=T0 + 2 * H, step_s=H).restart_s == {"node_fail": [2 * H]}


def test_a_failed_run_is_no_restart_and_ends_its_job() -> None:
    # Job 8 failed and was never run again: its ETTR is known, it is not waiting. (A failed run the controller
    # requeued is published as requeued: tests/node/test_slurm_export_jobs.py.)
    start, end = "ndfleet_slurm_job_run_start_seconds", "ndfleet_slurm_job_run_end_seconds"
    starts = [job_series(start, "8", 0, T0, T0)]
    ends = [job_series(end, "8", 0, T0 + H, T0 + H, state="failed")]
    report = build_jobs(starts, ends, since=T0, until=T0 + 4 * H, step_s=H)
    job8 = report.jobs[0]
    assert report.restart_s == {} and job8.restarts(T0, T0 + 4 * H) == [] and not job8.waiting
    assert job8.ettr == 1.0


def test_a_node_that_left_slurm_while_out_is_not_still_out() -> None:
    # Automatic repairs replaced the drained node: its series ends at hour 2, while its replacement's goes on.
    old = [sample(0, "idle", node="prod-ib00-000000"), sample(1, "drained", "ndfleet:gpu.ecc", "prod-ib00-000000"),
           sample(2, "drained", "ndfleet:gpu.ecc", "prod-ib00-000000")]  # fmt: skip
    new = [sample(h, "idle", node="prod-ib00-000003") for h in range(3, 6)]
    report = build_report("prod", old + new, since=T0, until=T0 + 6 * 3600, step_s=3600,
                          prefixes={"ib00": "prod-ib00-"}, usd_per_node_hour=None)  # fmt: skip
    f = report.islands["ib00"]
    assert (f.interruptions, f.still_out, f.left_slurm) == ({"check:gpu.ecc": 1}, 0, 1)
    assert as_json(report)["islands"]["ib00"]["drainToBackInServiceSeconds"]["leftSlurm"] == 1  # type: ignore[index]


def test_a_node_out_when_every_series_ends_is_still_out() -> None:
    # The controller fell silent at hour 2 for every node: the drained node did not leave Slurm.
    out = [sample(0, "idle", node="prod-ib00-000000"), sample(1, "drained", "ndfleet:gpu.ecc", "prod-ib00-000000"),
           sample(2, "drained", "ndfleet:gpu.ecc", "prod-ib00-000000")]  # fmt: skip
    other = [sample(h, "idle", node="prod-ib00-000001") for h in range(3)]
    report = build_report("prod", out + other, since=T0, until=T0 + 6 * 3600, step_s=3600,
                          prefixes={"ib00": "prod-ib00-"}, usd_per_node_hour=None)  # fmt: skip
    assert (report.islands["ib00"].still_out, report.islands["ib00"].left_slurm) == (1, 0)
