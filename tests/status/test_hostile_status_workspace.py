"""`ndfleet status` against a hostile workspace query endpoint and its Resource Manager record (loopback HTTPS
stand-ins, tests/status/standin.py): an endpoint written to send the token elsewhere, labels that forge lines or
move the cursor, Retry-After it cannot honour, a dripped answer, answers of the wrong shape. Whatever comes back,
the column is "unknown" with one named line (exit 2) or the text is printed clean; never a traceback or a leak."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ndfleet.status import prometheus
from tests.impact.arm_server import Reply
from tests.status.standin import WORKSPACE, Tls, assert_clean, recorded, run_status, standin

FORGED = "status: all 9 wanted nodes healthy (exit 0)"


def accounts_with(endpoint: object = None, properties: object = None) -> list[Reply]:
    doc = json.loads(recorded("monitor-accounts.json"))
    if properties is not None:
        doc["value"][0]["properties"] = properties
    else:
        doc["value"][0]["properties"]["metrics"]["prometheusQueryEndpoint"] = endpoint
    return [Reply(200, raw=json.dumps(doc).encode())]


def notes(run: object) -> str:
    return " | ".join(run.doc()["notes"])  # type: ignore[attr-defined]


def test_an_endpoint_with_user_info_and_a_backslash_gets_no_token(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """urlsplit reads the host after the last @ (the workspace), urllib3 stops at the backslash (evil.example):
    such an endpoint is refused outright, so no parser is asked which host it is."""
    with standin(tls) as arm:
        port = arm.base.rsplit(":", 1)[1]
        arm.routes[list(arm.routes)[5]] = accounts_with(f"https://evil.example:{port}\\@{WORKSPACE}")
        run = run_status(capsys, tmp_path, arm, tls)
        queries = arm.calls("GET", "/api/v1/query")
    assert run.code == 2
    assert "is refused: user info, backslashes or control characters in it" in notes(run)
    assert queries == []


def test_labels_cannot_forge_a_line_or_send_control_sequences(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(recorded("prom-slurm-one-drained.json"))
    doc["data"]["result"][1]["metric"]["reason"] = f"gpu\x1b[2J\x1b[H\n\n{FORGED}\u2028{FORGED}\u0085{FORGED}\r{FORGED}"
    doc["data"]["result"][1]["metric"]["state"] = "drained\x9b31m"
    checks = json.loads(recorded("prom-failed-checks-nvlink.json"))
    checks["data"]["result"][0]["metric"]["check"] = f"nvlink\u2029{FORGED}\x1b]0;title\x07"
    unhealthy = {  # tests/status/test_status.py's node under repair, drained in Slurm
        "vms_ib00": [Reply(200, raw=recorded("vms-ib00-one-unhealthy.json"))],
        "nodes": [Reply(200, raw=recorded("prom-node-metrics-one-failed.json"))],
        "checks": [Reply(200, raw=json.dumps(checks).encode())],
        "slurm": [Reply(200, raw=json.dumps(doc).encode())],
    }
    with standin(tls, **unhealthy) as arm:
        run = run_status(capsys, tmp_path, arm, tls, fmt="table")
    assert_clean(run.out + run.err)
    assert not any(line.strip().startswith(FORGED) for line in run.out.split("\n")), run.out
    assert FORGED in run.out  # the text is there, inside the node's line


@pytest.mark.parametrize("wait", ["1000000000", "inf", "1e308", "Fri, 31 Dec 9999 23:59:59 GMT"])
def test_a_throttled_query_that_asks_for_too_long_a_wait_is_unknown_at_once(
    wait: str, tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    throttled = [Reply(429, raw=b'{"status": "error", "error": "slow"}', headers={"Retry-After": wait})]
    with standin(tls, nodes=throttled) as arm:
        run = run_status(capsys, tmp_path, arm, tls)
        tries = arm.calls("GET", "/api/v1/query?query=%7B__name__")
    assert run.code == 2
    assert "asked to wait longer than the 120 s a request may" in notes(run)
    assert len(tries) == 1


def test_a_dripped_answer_is_cut_at_the_deadline(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prometheus, "ANSWER_DEADLINE_S", 1.0)
    with standin(
        tls, nodes=[Reply(200, raw=recorded("prom-node-metrics-healthy.json"), drip="body", drip_s=0.2)]
    ) as arm:
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert "did not finish its answer within 1 s" in notes(run)
    assert arm.drips_outlasted == 0


def test_a_huge_answer_is_refused_at_the_byte_cap(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prometheus, "MAX_ANSWER_BYTES", 1 << 20)
    with standin(tls, nodes=[Reply(200, stream_bytes=64 << 20)]) as arm:
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert "answered more than 1,048,576 bytes" in notes(run)


SHAPES = {
    "not UTF-8": (b'{"status": "success", "data": "\xff"}', "not UTF-8"),
    "deeply nested": (b'{"status": "success", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    "result not a list": (b'{"status": "success", "data": {"resultType": "vector", "result": 5}}', "no vector result"),
    "a sample not an object": (
        b'{"status": "success", "data": {"resultType": "vector", "result": ["x"]}}', "without labels or value"),
}  # fmt: skip


@pytest.mark.parametrize("case", SHAPES)
def test_a_query_answer_of_the_wrong_shape_makes_the_column_unknown(
    case: str, tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body, named = SHAPES[case]
    with standin(tls, nodes=[Reply(200, raw=body)]) as arm:
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert named in notes(run)
    assert_clean(run.err)


@pytest.mark.parametrize("properties", ["text", 5, ["a"]])
def test_a_workspace_whose_properties_are_not_an_object_is_named(
    properties: object, tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with standin(tls, accounts=accounts_with(properties=properties)) as arm:
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert "'properties' is" in notes(run) and "not an object" in notes(run)
