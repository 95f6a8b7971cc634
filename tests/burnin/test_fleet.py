"""The burn-in end to end against a simulated fleet (fake mpirun + all_reduce_perf): the report names exactly
the bad hosts in every scenario, a hung test never outlives its timeout, and a round's tests run in parallel."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node.__main__ import main

from tests.fakes.fleet import FakeFleet, host_names

HANG_TIMEOUT_S = 10  # a hung test is killed after this; healthy fake tests finish in well under a second
TIMEOUT_S = 180  # generous: a loaded 2-core machine (the suite beside the twin) took over 60 s to stop 4 fakes


@dataclass(frozen=True)
class Scenario:
    name: str
    hosts: int
    bad_hca: tuple[int, ...] = ()
    hang: tuple[int, ...] = ()
    wrong: tuple[int, ...] = ()
    down: tuple[int, ...] = ()
    reasons: dict[int, str] = field(default_factory=dict)


SCENARIOS = [
    Scenario("healthy", 8),
    Scenario("bad HCA: fine alone, slow with any partner", 8, bad_hca=(2,), reasons={2: "busbw-below-floor"}),
    Scenario("a host that hangs", 8, hang=(5,), reasons={5: "hang"}),
    Scenario("a host with wrong results", 8, wrong=(1,), reasons={1: "wrong-results"}),
    # With 8 hosts the first round pairs host i with host i + 4: hosts 0 and 4 share a pair.
    Scenario(
        "two bad hosts in the same pair", 8, bad_hca=(0, 4), reasons={0: "busbw-below-floor", 4: "busbw-below-floor"}
    ),
    Scenario("odd host out is the bad one", 9, bad_hca=(8,), reasons={8: "busbw-below-floor"}),
    Scenario("unreachable host", 6, down=(3,), reasons={3: "launch-error"}),
    Scenario(
        "one of each in 16 hosts",
        16,
        bad_hca=(3,),
        hang=(11,),
        wrong=(6,),
        reasons={3: "busbw-below-floor", 11: "hang", 6: "wrong-results"},
    ),
]


def run(fleet: FakeFleet, monkeypatch: pytest.MonkeyPatch, timeout_s: int, *extra: str) -> int:
    for name, value in fleet.env().items():
        monkeypatch.setenv(name, value)
    return main(
        [
            "burnin", "--hostfile", str(fleet.hostfile), "--report", str(fleet.report),
            "--config", str(fleet.node_json), "--test-timeout", str(timeout_s), *extra,
        ]
    )  # fmt: skip


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_report_names_exactly_the_bad_hosts(sc: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = host_names(sc.hosts)
    pick = lambda idx: [names[i] for i in idx]  # noqa: E731
    fleet = FakeFleet(tmp_path, names, bad_hca=pick(sc.bad_hca), hang=pick(sc.hang), wrong=pick(sc.wrong),
                      down=pick(sc.down))  # fmt: skip
    code = run(fleet, monkeypatch, HANG_TIMEOUT_S if sc.hang else TIMEOUT_S)
    report: dict[str, Any] = json.loads(fleet.report.read_text())

    assert set(report["unhealthy"]) == fleet.bad
    assert report["suspect"] == []
    by_host = {h["host"]: h for h in report["hosts"]}
    assert {names[i]: by_host[names[i]]["reason"] for i in sc.reasons} == {names[i]: r for i, r in sc.reasons.items()}
    assert all(by_host[h]["status"] == "healthy" for h in names if h not in fleet.bad)
    # Every unhealthy host failed with at least two different partners.
    assert all(len(set(by_host[h]["partners_failed"])) >= 2 for h in fleet.bad)
    if fleet.bad:
        assert code == 1 and report["status"] == "unhealthy"
        phases = [r["phase"] for r in report["rounds"]]
        # One re-pairing round pins every suspect of the first round; the odd host out, untested in round 1,
        # needs a second known-good partner before it counts as pinned.
        expected_repairs = 2 if set(fleet.bad) == {names[-1]} and sc.hosts % 2 else 1
        assert phases == ["pairwise"] + ["repair"] * expected_repairs + ["island"]
    else:
        assert code == 0 and report["status"] == "healthy"
        assert [r["phase"] for r in report["rounds"]] == ["pairwise", "island"]
    assert report["rounds_used"] == len(report["rounds"])
    assert report["island"]["hosts"] == sc.hosts - len(fleet.bad)
    assert report["island"]["outcome"] == "pass"
    # Nothing the fake mpirun started outlives the burn-in: a hung test is killed with its whole process group.
    pids = fleet.spawned_pids()
    assert pids and [p for p in pids if alive(p)] == []
    if sc.hang:
        hung = [t for r in report["rounds"] for t in r["tests"] if t["outcome"] == "hang"]
        assert len(hung) == 2 and all(names[sc.hang[0]] in t["hosts"] for t in hung)
        assert all(t["duration_s"] < HANG_TIMEOUT_S + 40 for t in hung)  # timeout plus kill grace, not the hour
        assert all("process group killed" in t["message"] for t in hung)
    # The first round pairs every host (but an odd one out) exactly once.
    first = [h for t in report["rounds"][0]["tests"] for h in t["hosts"]]
    assert sorted(first) == sorted(names[: sc.hosts - sc.hosts % 2])


def test_round_tests_run_in_parallel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each fake 2-host test waits until all 4 first-round tests have started: run serially, they would fail.
    names = host_names(8)
    fleet = FakeFleet(tmp_path, names, barrier=4)
    assert run(fleet, monkeypatch, TIMEOUT_S) == 0
    assert json.loads(fleet.report.read_text())["status"] == "healthy"


def test_report_carries_pairs_busbw_and_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = host_names(4)
    fleet = FakeFleet(tmp_path, names, bad_hca=[names[0]])
    run(fleet, monkeypatch, TIMEOUT_S)
    report = json.loads(fleet.report.read_text())
    first = report["rounds"][0]["tests"]
    assert [t["hosts"] for t in first] == [[names[0], names[2]], [names[1], names[3]]]
    assert [t["busbw_gbps"] for t in first] == [187.44, 383.21]
    assert [t["outcome"] for t in first] == ["slow", "pass"]
    assert report["floors_gbps"] == {"pair": 340.0, "island": 340.0}
    bad = next(h for h in report["hosts"] if h["host"] == names[0])
    assert bad["busbw_gbps"] == [187.44, 187.44] and bad["status"] == "unhealthy"
    assert report["duration_s"] >= 0 and report["started"].endswith("Z")


@pytest.mark.parametrize(
    ("hostfile", "message"),
    [
        ("", "at least 2 hosts"),
        ("nd-1\n", "at least 2 hosts"),
        ("nd-1\nnd-1\n", "listed twice"),
        ("nd-1\nnd 2;rm\n", "nd-1"),  # `nd 2;rm` -> first word `nd` is fine; this row checks comments/words
        ("nd-1\n$(reboot)\n", "is not a host name"),
    ],
)
def test_bad_hostfile_exits_2(
    hostfile: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(2))
    fleet.hostfile.write_text(hostfile)
    code = run(fleet, monkeypatch, TIMEOUT_S)
    err = capsys.readouterr().err
    if message == "nd-1":
        assert code == 0  # `nd 2;rm` is read as host `nd` (first word): a valid two-host island
    else:
        assert code == 2 and message in err and not fleet.report.exists()


def test_missing_node_json_and_launcher_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(2))
    fleet.node_json.unlink()
    assert run(fleet, monkeypatch, TIMEOUT_S) == 2
    assert "cannot read the node configuration" in capsys.readouterr().err
    fleet = FakeFleet(tmp_path / "b", host_names(2))
    doc = json.loads(fleet.node_json.read_text())
    doc["burnin"]["mpirun"] = str(tmp_path / "no-such-mpirun")
    fleet.node_json.write_text(json.dumps(doc))
    assert run(fleet, monkeypatch, TIMEOUT_S) == 2
    assert "no-such-mpirun" in capsys.readouterr().err


def test_invalid_settings_name_every_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(2))
    doc = json.loads(fleet.node_json.read_text())
    doc["burnin"]["pair_busbw_floor_gbps"] = "fast"
    doc["burnin"]["iters"] = {"quick": 0}
    fleet.node_json.write_text(json.dumps(doc))
    assert run(fleet, monkeypatch, TIMEOUT_S) == 2
    err = capsys.readouterr().err
    assert "burnin.pair_busbw_floor_gbps = 'fast'" in err and "burnin.iters" in err
    assert os.environ["NDFLEET_FAKE_FLEET"] == str(fleet.fleet_file)


def test_report_impact_asks_only_the_bad_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = host_names(6)
    fleet = FakeFleet(tmp_path, names, wrong=[names[4]])
    monkeypatch.setenv("NDFLEET_FAKE_SSH_LOG", str(tmp_path / "ssh.log"))
    assert run(fleet, monkeypatch, TIMEOUT_S, "--report-impact", "--node-program", "/usr/local/bin/ndfleet-node") == 1
    calls = [json.loads(line) for line in (tmp_path / "ssh.log").read_text().splitlines()]
    assert [c["host"] for c in calls] == [names[4]]
    remote = calls[0]["command"][0]
    assert remote.startswith("sudo /usr/local/bin/ndfleet-node impact report --check burnin.wrong-results --detail ")


def test_no_test_could_start_is_exit_2_not_bad_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(4))
    doc = json.loads(fleet.node_json.read_text())
    doc["burnin"]["all_reduce_perf"] = str(tmp_path / "nccl-tests-not-installed")
    fleet.node_json.write_text(json.dumps(doc))
    assert run(fleet, monkeypatch, TIMEOUT_S) == 2
    report = json.loads(fleet.report.read_text())
    assert report["status"] == "error" and report["error"].startswith("no test could run")
    assert "no test could run" in capsys.readouterr().err


def test_interrupt_stops_every_running_test(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    names = host_names(4)
    fleet = FakeFleet(tmp_path, names, hang=names)  # every test hangs: only the interrupt can end the round
    cmd = [sys.executable, "-m", "ndfleet_node", "burnin", "--hostfile", str(fleet.hostfile), "--report",
           str(fleet.report), "--config", str(fleet.node_json), "--test-timeout", "600"]  # fmt: skip
    # As from a terminal: SIGINT at its default, even where this suite was started with it ignored (a background
    # job of a script: the burn-in would then install no KeyboardInterrupt handler and never stop).
    proc = subprocess.Popen(cmd, env={**os.environ, **fleet.env()}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(fleet.spawned_pids()) < 4 and time.monotonic() < deadline:  # both first-round tests started
            time.sleep(0.1)
        assert len(fleet.spawned_pids()) == 4, "the first round never started"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=TIMEOUT_S) == 130
    finally:
        proc.kill()
        proc.wait()
        left = [p for p in fleet.spawned_pids() if alive(p)]
        for pid in left:  # never leave the fakes behind, even when the assertions below fail
            os.kill(pid, signal.SIGKILL)
    assert left == []
    assert not fleet.report.exists()
