"""Hostile answers to the node's impact report, from a 127.0.0.1 stand-in for Resource Manager: error bodies of
any shape, any Retry-After, a huge body, a body or head that drips a byte at a time, a damaged validator report.
Whatever comes back, the report never crashes, reads a bounded amount within a deadline, and the node ends
Unhealthy in a report file the health endpoint (another user) can still read."""

from __future__ import annotations

import argparse
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node import impact, net, report
from ndfleet_node.health import health_state

from tests.impact.arm_server import Reply, serve
from tests.impact.test_node_impact import IMDS_ROUTES, node_files, run

PUT = ("PUT", "/subscriptions/")
SHORT_DEADLINE_S = 2.0  # the drip tests' whole-request deadline; a drip without one runs for DRIP_LIMIT_S (60 s)


def put_routes(*replies: Reply) -> dict[tuple[str, str], list[Reply]]:
    return IMDS_ROUTES | {PUT: list(replies)}


def failed_ids(health_report: Path) -> list[str]:
    doc = json.loads(health_report.read_text())
    assert doc["status"] == "unhealthy"
    return [c["id"] for c in doc["checks"] if c["status"] == "fail"]


def run_against(replies: list[Reply], tmp_path: Path) -> tuple[int, argparse.Namespace]:
    with serve(put_routes(*replies)) as arm:
        args = node_files(tmp_path, arm.base)
        return run(args, []), args


def assert_logged_without_traceback(err: str, *needles: str) -> None:
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    for line in err.splitlines():
        assert line.isprintable(), line


# ------------------------------------------------------------------------------------------ error bodies

ERROR_BODIES = {
    "error a string": (b'{"error": "text"}', "HTTP 400 text"),
    "message a number": (b'{"message": 5}', "HTTP 400 5"),
    "error.message a number": (b'{"error": {"code": 5, "message": 7}}', "HTTP 400 5: 7"),
    "error null": (b'{"error": null}', "HTTP 400 no error details"),
    "a list": (b"[]", "HTTP 400 no error details"),
    "a string": (b'"denied"', "HTTP 400 no error details"),
    "control characters": (
        b'{"error": {"code": "Bad\\u001b[31m", "message": "a\\nb\\r\\nc"}}',
        "HTTP 400 Bad[31m: a b c",
    ),
    "not UTF-8": (b"\xff\xfe{", "HTTP 400 no error details"),
    "deeply nested": (b'{"error": ' + b"[" * 60_000, "HTTP 400 no error details"),  # under IMPACT_CAP
}


@pytest.mark.parametrize("case", ERROR_BODIES)
def test_an_error_body_of_any_shape_is_reported_and_the_node_goes_unhealthy(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body, shown = ERROR_BODIES[case]
    code, args = run_against([Reply(400, raw=body)], tmp_path)
    assert code == 1
    assert_logged_without_traceback(capsys.readouterr().err, f"not filed: refused ({shown})")
    assert failed_ids(args.health_report) == ["burnin.busbw-below-floor"]


def test_a_server_error_body_that_is_a_string_is_reported_after_the_retries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, args = run_against([Reply(503, raw=b'{"error": "overloaded"}')], tmp_path)
    assert code == 1
    assert_logged_without_traceback(capsys.readouterr().err, "still HTTP 503 after 4 attempts (overloaded)")
    assert failed_ids(args.health_report) == ["burnin.busbw-below-floor"]


# ------------------------------------------------------------------------------------------ Retry-After

RETRY_AFTER = {"nan": 2.0, "NaN": 2.0, "-5": 2.0, "inf": 120.0, "1e400": 120.0, "9" * 400: 120.0,
               "soon": 2.0, "Wed, 21 Oct 2015 07:28:00 GMT": 2.0, "17": 17.0}  # fmt: skip


@pytest.mark.parametrize("value", RETRY_AFTER)
def test_any_retry_after_gives_a_finite_bounded_wait(value: str, tmp_path: Path) -> None:
    throttled = Reply(429, "impact-429-throttled.json", {"Retry-After": value})
    waits: list[float] = []
    with serve(put_routes(throttled, Reply(200, "impact-accepted.json"))) as arm:
        args = node_files(tmp_path, arm.base)
        assert run(args, waits) == 0
    assert waits == [RETRY_AFTER[value]]  # attempt 1: 2**1 s when Retry-After is no usable number of seconds
    assert all(math.isfinite(w) and 0 <= w <= impact.MAX_RETRY_AFTER_S for w in waits)


def test_retry_after_nan_never_reaches_sleep_as_nan(tmp_path: Path) -> None:
    """With the real time.sleep's contract (ValueError on NaN) the report still completes."""
    throttled = Reply(429, "impact-429-throttled.json", {"Retry-After": "nan"})

    def strict_sleep(seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"sleep length {seconds} is not a finite, non-negative number")

    with serve(put_routes(throttled, Reply(200, "impact-accepted.json"))) as arm:
        args = node_files(tmp_path, arm.base)
        assert impact.run_report(args, sleep=strict_sleep) == 0


# ------------------------------------------------------------------------------------------ size and time


def test_a_huge_error_body_is_read_only_up_to_the_cap_and_refused_by_name() -> None:
    with serve({PUT: [Reply(500, stream_bytes=64 << 20)]}) as arm:
        resource_manager = net.Service("arm", arm.base, net.IMPACT_CAP)
        with pytest.raises(net.FetchError, match=f"over {net.IMPACT_CAP:,} bytes"):
            resource_manager.send("PUT", f"{arm.base}/subscriptions/x", {}, b"{}")


@pytest.mark.parametrize("where", ["body", "head"])
def test_an_answer_that_drips_hits_the_overall_deadline(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(net, "HTTP_DEADLINE_S", SHORT_DEADLINE_S)
    expected = f"no complete answer from 127.0.0.1:[0-9]+ within {SHORT_DEADLINE_S:g} s"
    dripping = Reply(500, raw=b"{}", drip=where, drip_s=0.1)
    with serve({PUT: [dripping]}) as arm:
        with pytest.raises(net.FetchError, match=expected):
            net.Service("arm", arm.base, net.IMPACT_CAP).send("PUT", f"{arm.base}/subscriptions/x", {}, b"{}")
        # The client hung up at its deadline; the server did not have to stop dripping on its own.
        arm_gave_up = arm.drips_outlasted
    assert arm_gave_up == 0


def test_a_dripping_resource_manager_still_leaves_the_node_unhealthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(net, "HTTP_DEADLINE_S", SHORT_DEADLINE_S)
    code, args = run_against([Reply(200, raw=b"{}", drip="body", drip_s=0.1)], tmp_path)
    assert code != 0
    assert_logged_without_traceback(capsys.readouterr().err, "no complete answer from", "marked Unhealthy")
    assert failed_ids(args.health_report) == ["burnin.busbw-below-floor"]


# ------------------------------------------------------------------------------------------ the report file


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o444], ids=oct)
def test_marking_unhealthy_keeps_the_report_files_mode(mode: int, tmp_path: Path) -> None:
    health = tmp_path / "report.json"
    health.write_text(json.dumps({"status": "healthy", "checks": []}))
    health.chmod(mode)
    impact.mark_unhealthy(health, "burnin.hang", "no result within 300 s")
    assert stat.S_IMODE(health.stat().st_mode) == mode
    assert health_state(str(health), str(tmp_path / "failed")) == ("Unhealthy", "validate-node failed: burnin.hang")


def test_a_new_report_file_is_readable_by_the_health_endpoint(tmp_path: Path) -> None:
    health = tmp_path / "run" / "report.json"
    impact.mark_unhealthy(health, "burnin.hang", "no result within 300 s")
    assert stat.S_IMODE(health.stat().st_mode) == 0o644


def test_marking_unhealthy_gives_the_report_back_to_its_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The health endpoint's report belongs to whoever wrote it first; root rewriting it must not take it over.
    (Tests run as one user, so the original owner is simulated: the file is seen as owned by uid/gid 4242.)"""
    health = tmp_path / "report.json"
    health.write_text(json.dumps({"status": "healthy", "checks": []}))
    real_stat, chowned = os.stat, []

    def stat_as_owned_by_4242(path: Any, *a: Any, **kw: Any) -> os.stat_result:
        result = real_stat(path, *a, **kw)
        if Path(path) == health:
            fields = list(result)
            fields[stat.ST_UID] = fields[stat.ST_GID] = 4242
            return os.stat_result(fields)
        return result

    monkeypatch.setattr(report.os, "stat", stat_as_owned_by_4242)
    monkeypatch.setattr(report.os, "chown", lambda path, uid, gid: chowned.append((uid, gid)))
    impact.mark_unhealthy(health, "burnin.hang", "no result within 300 s")
    assert chowned == [(4242, 4242)]


# ------------------------------------------------------------------------------------------ validator report

DAMAGED_REPORTS = {
    "checks a number": b'{"status": "unhealthy", "checks": 5}',
    "check entries not objects": b'{"status": "unhealthy", "checks": ["ib.ports", 3, null]}',
    "a list": b"[]",
    "not UTF-8": b"\xff\xfe",
    "deeply nested": b"[" * 100_000,
}


@pytest.mark.parametrize("case", DAMAGED_REPORTS)
def test_a_damaged_validator_report_is_a_named_failure_not_a_crash(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve(put_routes(Reply(200, "impact-accepted.json"))) as arm:
        args = node_files(tmp_path, arm.base)
        args.validator_report = tmp_path / "validator.json"
        args.validator_report.write_bytes(DAMAGED_REPORTS[case])
        args.check = None
        code = run(args, [])
    assert code in (0, 2)
    assert arm.calls("PUT", "/workloadImpacts/") == []
    assert_logged_without_traceback(capsys.readouterr().err)
