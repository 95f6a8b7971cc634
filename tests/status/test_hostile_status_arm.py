"""`ndfleet status` against a hostile Resource Manager (a loopback HTTPS stand-in, tests/status/standin.py): lists
that page for ever, Retry-After it cannot honour, answers dripped or huge, links to other hosts, answers of the
wrong shape. Each is one named line and exit 2, within the bounds of ndfleet.azure (never a hang, a traceback or a
token sent elsewhere)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ndfleet.azure import arm as arm_module
from tests.impact.arm_server import Reply
from tests.status.standin import VMSS_LIST, Tls, assert_clean, run_status, standin

PATH = VMSS_LIST[1]


def page(value: object, next_link: object = None) -> Reply:
    doc: dict[str, object] = {"value": value}
    if next_link is not None:
        doc["nextLink"] = next_link
    return Reply(200, raw=json.dumps(doc).encode())


def test_a_next_link_to_itself_is_a_cycle_refused_at_once(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with standin(tls) as arm:
        arm.routes[VMSS_LIST] = [page([], f"{arm.base}{PATH}api-version=2024-07-01&$skiptoken=same")]
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert "a cycle" in run.doc()["error"]
    assert len(arm.calls("GET", "virtualMachineScaleSets?")) == 2  # the first page, and the repeat it spotted


def test_two_pages_pointing_at_each_other_are_a_cycle(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with standin(tls) as arm:
        a, b = (f"{arm.base}{PATH}api-version=2024-07-01&$skiptoken={t}" for t in "ab")
        arm.routes[VMSS_LIST] = [page([], a), page([], b), page([], a), page([], b)]
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert "a cycle" in run.doc()["error"]
    assert len(arm.calls("GET", "virtualMachineScaleSets?")) <= 4


def test_pages_without_end_stop_at_the_page_bound(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arm_module, "MAX_PAGES", 5)
    monkeypatch.setattr(arm_module.bounded_pages, "__defaults__", (5,))
    with standin(tls) as arm:
        arm.routes[VMSS_LIST] = [page([], f"{arm.base}{PATH}api-version=2024-07-01&$skiptoken={i}") for i in range(9)]
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert "still had pages after 5" in run.doc()["error"]
    assert len(arm.calls("GET", "virtualMachineScaleSets?")) == 5


def test_a_next_link_to_another_host_gets_no_token(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with standin(tls) as arm:
        arm.routes[VMSS_LIST] = [page([], "https://evil.example/subscriptions/x?$skiptoken=1")]
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert "refused to send a bearer token to evil.example" in run.doc()["error"]


RETRY_AFTER = {
    "a billion seconds": "1000000000",
    "inf": "inf",
    "1e308": "1e308",
    "year 9999": "Fri, 31 Dec 9999 23:59:59 GMT",
}


@pytest.mark.parametrize("case", RETRY_AFTER)
def test_a_retry_after_past_120_s_ends_the_retries_with_a_named_429(
    case: str, tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with standin(tls) as arm:
        arm.routes[VMSS_LIST] = [Reply(429, raw=b'{"error": {"code": "TooManyRequests", "message": "slow down"}}',
                                       headers={"Retry-After": RETRY_AFTER[case]})]  # fmt: skip
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert "more than the 120 s a request may wait" in run.doc()["error"]
    assert len(arm.calls("GET", "virtualMachineScaleSets?")) == 1
    assert_clean(run.err)


def test_a_body_dripped_after_the_headers_is_cut_at_the_deadline(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arm_module, "ARM_ANSWER_DEADLINE_S", 1.5)
    with standin(tls) as arm:
        arm.routes[VMSS_LIST] = [Reply(200, raw=b'{"value": []}', drip="body", drip_s=0.2)]
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert "did not finish its answer within 1.5 s" in run.doc()["error"]
    assert arm.drips_outlasted == 0


def test_a_huge_list_is_refused_at_the_byte_cap(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arm_module, "ARM_MAX_ANSWER_BYTES", 1 << 20)
    with standin(tls) as arm:
        arm.routes[VMSS_LIST] = [Reply(200, stream_bytes=64 << 20)]
        run = run_status(capsys, tmp_path, arm, tls)
    assert run.code == 2
    assert "answered more than 1,048,576 bytes: refused" in run.doc()["error"]


SHAPES = {
    "value not a list": b'{"value": {"a": 1}}',
    "an item not an object": b'{"value": ["vmss"]}',
    "an integer nextLink": b'{"value": [], "nextLink": 7}',
    "not UTF-8": b'{"value": ["\xff\xfe"]}',
    "deeply nested": b'{"value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


@pytest.mark.parametrize("case", SHAPES)
def test_a_list_of_the_wrong_shape_is_a_named_failure(
    case: str, tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with standin(tls) as arm:
        arm.routes[VMSS_LIST] = [Reply(200, raw=SHAPES[case])]
        for fmt in ("json", "table"):
            run = run_status(capsys, tmp_path, arm, tls, fmt=fmt)
            assert run.code == 2, run
            assert_clean(run.err + run.out)
            error = run.doc()["error"] if fmt == "json" else run.err.removeprefix("ndfleet status: error: ")
            assert error.startswith("could not read: "), error
