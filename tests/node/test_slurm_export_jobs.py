"""The controller's job series (`ndfleet-node slurm-export`): the runs of requeued or node-failed jobs from Slurm
accounting (sacct), bounded, for `ndfleet goodput`'s per-job ETTR and job-restart times (docs/goodput.md)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from ndfleet_node import requeued_jobs, slurm_export
from ndfleet_node.names import (
    JOB_EXPORT_LEFT_OUT_METRIC,
    JOB_EXPORT_SUCCESS_METRIC,
    JOB_RUN_END_METRIC,
    JOB_RUN_START_METRIC,
)
from ndfleet_node.sacct import JobRecord, SacctError, parse_records

DATA = Path(__file__).resolve().parent.parent / "data" / "slurm"
T0 = 1796284800  # 2026-12-03T08:00:00 UTC
H = 3600


def fake_tool(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def fake_sacct(tmp_path: Path, restarted: str = "sacct-restarted.txt", runs: str = "sacct-runs.txt") -> Path:
    """Answers the export's two questions from tests/data/slurm (README there) and logs each call's arguments and
    the time zone it was asked in."""
    log = tmp_path / "sacct-calls"
    return fake_tool(tmp_path, "sacct", f"""echo "TZ=$TZ FORMAT=$SLURM_TIME_FORMAT $*" >> '{log}'
case "$*" in
  *--state=*) cat '{DATA / restarted}' ;;
  *--jobs=*) cat '{DATA / runs}' ;;
  *) echo "sacct: error: unexpected question" >&2; exit 1 ;;
esac""")


def export(tmp_path: Path, sacct: Path) -> tuple[int, str]:
    scontrol = fake_tool(tmp_path, "scontrol", f"cat '{DATA / 'scontrol-show-node-states.txt'}'")
    out = tmp_path / "textfile" / "ndfleet_slurm.prom"
    code = slurm_export.main(["--out", str(out), "--scontrol", str(scontrol), "--sacct", str(sacct), "--timeout", "20"])
    return code, out.read_text()


def series(text: str, metric: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(rf"^{metric}{{(.*)}} (\S+)$", text, re.M)}


def test_each_run_of_each_requeued_or_node_failed_job_is_published(tmp_path: Path) -> None:
    code, text = export(tmp_path, fake_sacct(tmp_path))
    assert code == 0
    assert series(text, JOB_RUN_START_METRIC) == {
        'slurm_job="1005",run="0"': T0 - 1 * H,
        'slurm_job="1004",run="1"': T0 - 10.5 * H,  # six runs: the first is left out (MAX_RUNS_PER_JOB = 5)
        'slurm_job="1004",run="2"': T0 - 8 * H,
        'slurm_job="1004",run="3"': T0 - 5 * H,
        'slurm_job="1004",run="4"': T0 - 2.5 * H,
        'slurm_job="1004",run="5"': T0 - 1 * H,
        'slurm_job="1003",run="0"': T0 + 1 * H,
        'slurm_job="1002",run="0"': T0 - 2 * H,
        'slurm_job="1002",run="1"': T0 + 7 * H,
        'slurm_job="1002",run="2"': T0 + 8.25 * H,
        'slurm_job="1001",run="0"': T0,
        'slurm_job="1001",run="1"': T0 + 3.5 * H,
    }
    assert series(text, JOB_RUN_END_METRIC) == {
        'slurm_job="1005",run="0",state="node_fail"': T0 + 4 * H,  # requeued, pending: its new record has no start
        'slurm_job="1004",run="1",state="node_fail"': T0 - 9 * H,
        'slurm_job="1004",run="2",state="node_fail"': T0 - 6 * H,
        'slurm_job="1004",run="3",state="preempted"': T0 - 3 * H,
        'slurm_job="1004",run="4",state="node_fail"': T0 - 1.5 * H,
        'slurm_job="1004",run="5",state="completed"': T0 + 10 * H,
        'slurm_job="1003",run="0",state="node_fail"': T0 + 5 * H,
        'slurm_job="1002",run="0",state="node_fail"': T0 + 6 * H,
        'slurm_job="1002",run="1",state="requeued"': T0 + 8 * H,  # run 2 still runs: no end
        'slurm_job="1001",run="0",state="node_fail"': T0 + 3 * H,
        'slurm_job="1001",run="1",state="completed"': T0 + 9 * H,
    }
    assert f"{JOB_EXPORT_SUCCESS_METRIC} 1" in text and f"{JOB_EXPORT_LEFT_OUT_METRIC} 0" in text
    assert "ndfleet_slurm_export_success 1" in text  # the node states are still there


def test_sacct_is_asked_for_every_run_in_utc(tmp_path: Path) -> None:
    export(tmp_path, fake_sacct(tmp_path))
    first, second = (tmp_path / "sacct-calls").read_text().splitlines()
    common = ("TZ=UTC FORMAT=standard --allusers --allocations --duplicates --parsable2 --noheader "
              "--format=JobIDRaw,Start,End,State")  # fmt: skip
    assert first == f"{common} --starttime=now-7days --endtime=now --state=NF,RQ,PR"
    assert second == f"{common} --jobs=1005,1004,1003,1002,1001"


def test_the_newest_jobs_are_kept_and_the_rest_counted(tmp_path: Path) -> None:
    many = tmp_path / "many.txt"
    many.write_text("".join(f"{j}|2026-12-03T08:00:00|2026-12-03T09:00:00|NODE_FAIL\n" for j in range(2000, 2060)))
    sacct = fake_tool(tmp_path, "sacct", f"""echo "$*" > '{tmp_path}/last'; cat '{many}'""")
    code, text = export(tmp_path, sacct)
    assert code == 0
    asked = (tmp_path / "last").read_text().split("--jobs=")[1].split()[0].split(",")
    assert asked == [str(j) for j in range(2059, 2009, -1)]  # MAX_JOBS = 50, newest first
    assert {k.split('"')[1] for k in series(text, JOB_RUN_START_METRIC)} == set(asked)
    assert f"{JOB_EXPORT_LEFT_OUT_METRIC} 10" in text


@pytest.mark.parametrize(("body", "named"), [
    ("sleep 30", "timed out"),
    ("echo 'sacct: error: Problem talking to the database: Connection refused' >&2; exit 1", "exit"),
    ("echo 'sacct: error: Problem talking to the database' >&2; exit 0", "exit 0 but says"),
    ("echo '1001|2026-12-03T08:00:00|NODE_FAIL'", "3 fields"),
    ("echo '1001|12/03-08:00:00|Unknown|RUNNING'", "Start '12/03-08:00:00' is not"),
    ("echo '1001.batch|2026-12-03T08:00:00|Unknown|RUNNING'", "JobIDRaw '1001.batch' is not a job number"),
    ("echo '1001|2026-12-03T08:00:00|Unknown|running fine'", "State 'running fine' is not"),
    ("head -c 1100000 /dev/zero | tr '\\0' 'x'", "more than 1048576 bytes"),
])  # fmt: skip
def test_a_sacct_that_fails_publishes_no_job_series_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, named: str
) -> None:
    code, text = export(tmp_path, fake_tool(tmp_path, "sacct", body))
    assert code == 1
    assert f"{JOB_RUN_START_METRIC}{{" not in text and f"{JOB_RUN_END_METRIC}{{" not in text
    assert f"{JOB_EXPORT_SUCCESS_METRIC} 0" in text
    assert "ndfleet_slurm_export_success 1" in text and 'ndfleet_slurm_node_state{slurm_node="prod-ib00-000000"' in text
    err = capsys.readouterr().err
    assert err.startswith("slurm-export: jobs not read: sacct ") and named in err


def test_a_failed_run_replaces_earlier_job_series(tmp_path: Path) -> None:
    export(tmp_path, fake_sacct(tmp_path))
    _, text = export(tmp_path, fake_tool(tmp_path, "sacct", "exit 1"))
    assert f"{JOB_RUN_START_METRIC}{{" not in text


def test_the_records_are_read_field_by_field() -> None:
    assert parse_records("7|2026-12-03T08:00:00|Unknown|RUNNING\n\n8|None|2026-12-03T09:00:00|CANCELLED by 1000\n") == [
        JobRecord("7", float(T0), None, "RUNNING"),
        JobRecord("8", None, float(T0 + H), "CANCELLED"),
    ]
    with pytest.raises(SacctError, match="line 2: 5 fields"):
        parse_records("7|2026-12-03T08:00:00|Unknown|RUNNING\n7|a|b|c|d\n")


def test_the_series_budget_counts_the_exports_bound_and_the_docs_quote_it() -> None:
    from ndfleet.monitoring import budget

    bound = slurm_export.MAX_JOBS * slurm_export.MAX_RUNS_PER_JOB * 2
    assert bound == budget.JOB_RUN_SERIES
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "goodput.md").read_text().split())
    assert f"At most {slurm_export.MAX_JOBS} x {slurm_export.MAX_RUNS_PER_JOB} x 2 = {bound} job series" in doc


def test_no_series_carries_a_label_the_scrape_gives_itself(tmp_path: Path) -> None:
    """`job` and `instance` are the labels Prometheus gives every scraped series; a target's own label of that name
    is renamed `exported_job`/`exported_instance` (Prometheus configuration, `honor_labels`), so a reader asking for
    `job` would find the scrape job's name. Reading goodput against the twin's workspace found the job id sent as
    `job`; it travels as `slurm_job`."""
    code, text = export(tmp_path, fake_sacct(tmp_path))
    assert code == 0
    labelled = [ln for ln in text.splitlines() if ln.startswith("ndfleet_slurm_") and "{" in ln]
    assert labelled
    for line in labelled:
        labels = {kv.split("=", 1)[0] for kv in line[line.index("{") + 1 : line.rindex("}")].split(",")}
        assert not labels & {"job", "instance"}, line


def test_the_jobs_the_controller_requeued_are_published_with_the_restarted_ones(tmp_path: Path) -> None:
    # Job 1010 failed on a broken node and the controller requeued it: accounting has no NODE_FAIL or REQUEUED run for
    # it (the first run stays FAILED), so the export follows it from the controller's note (failed_jobs.remember), and
    # publishes that run as what happened to it: requeued.
    runs = tmp_path / "runs.txt"
    runs.write_text((DATA / "sacct-runs.txt").read_text() + "1010|2026-12-03T06:00:00|2026-12-03T07:00:00|FAILED\n"
                    "1010|2026-12-03T07:10:00|Unknown|RUNNING\n")  # fmt: skip
    sacct = fake_tool(tmp_path, "sacct", f"""case "$*" in
  *--state=*) cat '{DATA / "sacct-restarted.txt"}' ;;
  *--jobs=*1010*) cat '{runs}' ;;
  *) echo "sacct: error: unexpected question" >&2; exit 1 ;;
esac""")
    noted = tmp_path / "requeued-jobs"
    requeued_jobs.remember(noted, "1010", time.time())
    out = tmp_path / "textfile" / "ndfleet_slurm.prom"
    scontrol = fake_tool(tmp_path, "scontrol", f"cat '{DATA / 'scontrol-show-node-states.txt'}'")
    code = slurm_export.main(["--out", str(out), "--scontrol", str(scontrol), "--sacct", str(sacct),
                              "--requeued-jobs", str(noted)])  # fmt: skip
    text = out.read_text()
    assert code == 0, text
    ends = series(text, JOB_RUN_END_METRIC)
    assert ends['slurm_job="1010",run="0",state="requeued"'] == T0 - 1 * H
    assert 'slurm_job="1010",run="1"' in series(text, JOB_RUN_START_METRIC)


class RecordedSacct:
    """sacct's two answers as records (the line format is tested above)."""

    def __init__(self, records: list[JobRecord]) -> None:
        self.records = records

    def restarted_jobs(self, since: str) -> list[str]:
        return []

    def runs(self, jobs: list[str]) -> list[JobRecord]:
        return [r for r in self.records if r.job in jobs]


def test_only_the_failed_runs_that_ended_by_the_controllers_requeue_read_requeued() -> None:
    # Job 7: run 0 failed on a broken node, the controller requeued it at T0 + 100; run 1 then failed on its own (a
    # bug in the script) and nobody requeued it: it stays failed. Job 8 was requeued and has not started again: its
    # last run reads requeued, so goodput sees it waiting, not ended.
    records = [JobRecord("7", T0 - H, T0 + 60, "FAILED"), JobRecord("7", T0 + 200, T0 + 900, "FAILED"),
               JobRecord("8", T0 - H, T0 + 30, "FAILED"), JobRecord("8", None, None, "PENDING")]
    runs = slurm_export.job_runs(RecordedSacct(records), {"7": T0 + 100, "8": T0 + 90})  # type: ignore[arg-type]
    states = {(r.job, index): r.state for index, r in runs.runs}
    assert states == {("7", 0): "REQUEUED", ("7", 1): "FAILED", ("8", 0): "REQUEUED"}


def test_a_job_noted_twice_keeps_its_latest_requeue(tmp_path: Path) -> None:
    noted = tmp_path / "requeued-jobs"
    for job, at in (("7", 1000), ("9", 1500), ("7", 2000)):
        requeued_jobs.remember(noted, job, at)
    assert requeued_jobs.remembered(noted, 0) == {"9": 1500.0, "7": 2000.0}
    assert list(requeued_jobs.remembered(noted, 0)) == ["9", "7"]  # newest job first
    assert requeued_jobs.remembered(noted, 1600) == {"7": 2000.0}
