"""The burn-in under hostile input: figures that are not figures, hostfiles that are not hostfiles, host names
that read as options, and a disk that is full when the report is written. Each case is a named failure (or a
refusal with exit 2), never a pass, never a traceback, and the run's result is never lost."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, NoReturn

import pytest
from ndfleet_node.__main__ import main
from ndfleet_node.burnin import report as report_module
from ndfleet_node.burnin.hosts import MAX_HOSTFILE_BYTES, MAX_HOSTFILE_LINES, HostfileError, read_hostfile
from ndfleet_node.burnin.notify import report_impacts
from ndfleet_node.burnin.planner import Planner, TestResult
from ndfleet_node.burnin.report import build_report, report_json
from ndfleet_node.burnin.runner import ProcessRun

from tests.fakes.fleet import FakeFleet, host_names

HOSTILE_BIN = Path(__file__).resolve().parent.parent / "fakes" / "burnin_hostile"
TIMEOUT_S = 60


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN / Infinity (Python's default accepts them; JSON does not)."""

    def refuse(name: str) -> NoReturn:
        raise AssertionError(f"report holds bare {name}: not JSON")

    return json.loads(text, parse_constant=refuse)


def burnin(fleet: FakeFleet, monkeypatch: pytest.MonkeyPatch, *extra: str) -> int:
    for name, value in fleet.env().items():
        monkeypatch.setenv(name, value)
    return main(["burnin", "--hostfile", str(fleet.hostfile), "--report", str(fleet.report),
                 "--config", str(fleet.node_json), "--test-timeout", str(TIMEOUT_S), *extra])  # fmt: skip


def hostile_fleet(tmp_path: Path, hosts: int = 4) -> FakeFleet:
    fleet = FakeFleet(tmp_path, host_names(hosts))
    doc = json.loads(fleet.node_json.read_text())
    doc["burnin"]["all_reduce_perf"] = str(HOSTILE_BIN / "all_reduce_perf")
    fleet.node_json.write_text(json.dumps(doc))
    return fleet


# ---------------------------------------------------------------------------------------------- figures


@pytest.mark.parametrize(
    "busbw",
    ["nan", "NaN", "inf", "-inf", "1.2.3", "1e999", "9" * 5000, "100000000000000000000", "38x.2"],
    ids=["nan", "NaN", "inf", "-inf", "1.2.3", "1e999", "5000-digits", "1e20", "garbage"],
)
def test_a_busbw_that_is_not_a_figure_fails_the_test_with_a_reason(
    busbw: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = hostile_fleet(tmp_path)
    monkeypatch.setenv("NDFLEET_FAKE_BUSBW", busbw)
    monkeypatch.setenv("NDFLEET_FAKE_AVG", "383.21")
    code = burnin(fleet, monkeypatch)
    report = strict_json(fleet.report.read_text())
    tests = [t for r in report["rounds"] for t in r["tests"]]
    assert code == 1 and report["status"] == "unhealthy"
    assert tests and {t["outcome"] for t in tests} == {"unreadable"}
    assert all("unreadable nccl-tests output" in t["message"] and t["busbw_gbps"] is None for t in tests)
    assert not any(h["status"] == "healthy" for h in report["hosts"])


@pytest.mark.parametrize("avg", ["1.2.3", "nan", "9" * 5000])
def test_an_unreadable_average_is_a_named_failure_not_a_crash(
    avg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = hostile_fleet(tmp_path)
    monkeypatch.setenv("NDFLEET_FAKE_BUSBW", "383.21")
    monkeypatch.setenv("NDFLEET_FAKE_AVG", avg)
    assert burnin(fleet, monkeypatch) == 1
    report = strict_json(fleet.report.read_text())
    first = report["rounds"][0]["tests"][0]
    assert first["outcome"] == "unreadable" and "average bus bandwidth" in first["message"]


def test_an_unreadable_host_is_pinned_with_reason_unreadable_result() -> None:
    """One host whose tests print nan: it fails with two known-good partners and is named for it."""
    hosts = host_names(6)
    planner = Planner(hosts, 340.0, 340.0)
    while tests := planner.next_round():
        planner.record(
            TestResult(t, "unreadable" if hosts[1] in t.hosts and t.phase != "island" else "pass", None)
            for t in tests
        )
    verdict = planner.verdicts()[hosts[1]]
    assert (verdict.status, verdict.reason) == ("unhealthy", "unreadable-result")


def test_the_report_never_holds_bare_nan_or_infinity() -> None:
    planner = Planner(host_names(2), 340.0, 340.0)
    (test,) = planner.next_round()
    planner.record([TestResult(test, "slow", float("nan"))])
    text = report_json(build_report(planner, "quick", "2026-12-03T08:00:00Z", 1.0))
    doc = strict_json(text)
    assert doc["rounds"][0]["tests"][0]["busbw_gbps"] is None
    with pytest.raises(ValueError):
        report_json({"busbw_gbps": float("inf")})  # the encoder itself refuses, should one ever slip through


# ---------------------------------------------------------------------------------------------- hostfiles


def refused(fleet: FakeFleet, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    code = burnin(fleet, monkeypatch)
    captured = capsys.readouterr()
    assert code == 2 and not fleet.report.exists()
    assert "Traceback" not in captured.err + captured.out
    return captured.err


def test_non_utf8_hostfile_is_a_named_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(2))
    fleet.hostfile.write_bytes(b"nd-ib00000000\nnd-\xff\xfe-01\n")
    assert "is not UTF-8 text (byte 0xff at offset 17)" in refused(fleet, monkeypatch, capsys)


@pytest.mark.parametrize("host", ["-Fmalicious.conf", "-oProxyCommand=touch", "--help"])
def test_a_host_named_like_an_option_is_refused(
    host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(2))
    fleet.hostfile.write_text(f"nd-ib00000000\n{host}\n")
    assert "starts with '-' (it would read as an option)" in refused(fleet, monkeypatch, capsys)


def test_dev_zero_as_hostfile_is_read_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(2))
    fleet.hostfile.unlink()
    fleet.hostfile.symlink_to("/dev/zero")
    assert f"is larger than {MAX_HOSTFILE_BYTES} bytes" in refused(fleet, monkeypatch, capsys)


def test_too_many_lines_is_a_named_error(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("\n" * (MAX_HOSTFILE_LINES + 1))
    with pytest.raises(HostfileError, match=f"has more than {MAX_HOSTFILE_LINES} lines"):
        read_hostfile(path)


def test_a_fifo_with_no_writer_does_not_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(2))
    fleet.hostfile.unlink()
    os.mkfifo(fleet.hostfile)
    assert "needs at least 2 hosts, found 0" in refused(fleet, monkeypatch, capsys)


def test_forty_thousand_hosts_are_read_and_a_late_duplicate_is_found(tmp_path: Path) -> None:
    """The duplicate check is a set (the list scan took 17 s here; tests/bench/bench_burnin.py --hostfile times it)."""
    names = [f"nd-{i:06d}" for i in range(40_000)]
    path = tmp_path / "hosts"
    path.write_text("\n".join(names) + "\n")
    assert read_hostfile(path) == names
    path.write_text("\n".join([*names, names[123]]) + "\n")
    with pytest.raises(HostfileError, match=f":40001: host {names[123]} listed twice"):
        read_hostfile(path)


def test_impact_request_never_passes_a_host_as_an_ssh_option() -> None:
    calls: list[list[str]] = []

    def run(cmd: Any, timeout: float) -> ProcessRun:
        calls.append(list(cmd))
        return ProcessRun(0, "", 0.0)

    report = {"hosts": [{"host": h, "status": "unhealthy", "reason": "hang", "partners_failed": ["x"],
                         "busbw_gbps": []} for h in ("nd-ib00000001", "-Fevil")]}  # fmt: skip
    logged: list[str] = []
    report_impacts(report, run, "/opt/ndfleet/bin/ndfleet-node", logged.append)
    assert [c[c.index("--") + 1] for c in calls] == ["nd-ib00000001"]  # the destination comes after `--`
    assert any("'-Fevil' starts with '-'" in line for line in logged)


# ---------------------------------------------------------------------------------------------- full disk


def test_a_full_disk_at_report_time_keeps_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    names = host_names(4)
    fleet = FakeFleet(tmp_path, names, bad_hca=[names[1]])

    def disk_full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(report_module, "_write_all", disk_full)
    code = burnin(fleet, monkeypatch)
    captured = capsys.readouterr()
    assert code == 3
    assert f"cannot write the report to {fleet.report}: No space left on device" in captured.err
    report, _ = json.JSONDecoder().raw_decode(captured.out)
    assert report["unhealthy"] == [names[1]] and report["status"] == "unhealthy"
    assert "burn-in unhealthy: 4 hosts" in captured.out  # the summary follows the report
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".report.json")) == []  # no temp left
