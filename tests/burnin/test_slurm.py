"""`burnin-slurm` against fake scontrol / srun over a simulated fleet: nodes awaiting burn-in are found, reserved,
resumed and tested as Slurm job steps (srun --mpi=pmix, HPC-X loaded on the compute node, no ssh, no mpirun);
good ones stay resumed, bad ones are drained with `ndfleet:burnin:<reason>`, and the reservation is always
deleted: on success, on a Slurm error, on a hung srun killed at its timeout, on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node.__main__ import main
from ndfleet_node.burnin import slurm as slurm_module
from ndfleet_node.burnin.slurm import AWAITING_REASON, awaiting_burnin, held_by_burnin
from ndfleet_node.names import AWAITING_BURNIN_REASON
from ndfleet_node.scontrol import parse_line

from tests.burnin.test_fleet import alive
from tests.fakes.fleet import FakeFleet, host_names

SLURM_BIN = Path(__file__).resolve().parent.parent / "fakes" / "slurm_burnin" / "bin"
AWAITING = "IDLE+DRAIN"
TIMEOUT_S = 60


@dataclass
class SlurmFleet:
    fleet: FakeFleet
    state_file: Path

    @property
    def state(self) -> dict[str, Any]:
        return json.loads(self.state_file.read_text())

    def node(self, name: str) -> dict[str, str]:
        return next(n for n in self.state["nodes"] if n["name"] == name)

    @property
    def sruns(self) -> list[dict[str, Any]]:
        """The test steps: the sruns the first node started (each started by a plain step from the controller)."""
        return [s for s in self.srun_calls if s["on_node"]]

    @property
    def srun_calls(self) -> list[dict[str, Any]]:
        log = self.fleet.root / "srun.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def env(self) -> dict[str, str]:
        env = self.fleet.env()
        return env | {
            "PATH": f"{SLURM_BIN}{os.pathsep}{env['PATH']}",
            "NDFLEET_FAKE_SLURM": str(self.state_file),
            "NDFLEET_FAKE_SRUN_LOG": str(self.fleet.root / "srun.log"),
            "NDFLEET_FAKE_SSH_LOG": str(self.fleet.root / "ssh.log"),
            "NDFLEET_FAKE_HPCX_LOG": str(self.fleet.root / "hpcx.log"),
        }

    def argv(self, *extra: str) -> list[str]:
        return ["burnin-slurm", "--report", str(self.fleet.report), "--config", str(self.fleet.node_json), *extra]


def slurm_fleet(tmp_path: Path, nodes: list[dict[str, str]], **faults: list[str]) -> SlurmFleet:
    fleet = FakeFleet(tmp_path, [n["name"] for n in nodes], **faults)  # type: ignore[arg-type]
    state_file = tmp_path / "slurm.json"
    state_file.write_text(json.dumps({"nodes": nodes, "reservations": {}}))
    return SlurmFleet(fleet, state_file)


def awaiting(names: list[str]) -> list[dict[str, str]]:
    return [{"name": n, "state": AWAITING, "reason": AWAITING_REASON, "partition": "gpu"} for n in names]


def run(sf: SlurmFleet, monkeypatch: pytest.MonkeyPatch, *argv: str, timeout_s: int = TIMEOUT_S) -> int:
    for name, value in sf.env().items():
        monkeypatch.setenv(name, value)
    return main(sf.argv("--test-timeout", str(timeout_s), *argv))


def reservation_calls(sf: SlurmFleet) -> list[list[str]]:
    return [c for c in sf.state["calls"] if "reservation" in c or c[:1] == ["delete"]]


# ---------------------------------------------------------------------------------------------- whole runs


def test_awaiting_nodes_are_reserved_tested_and_resumed_or_drained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = host_names(8)
    nodes = awaiting(names) + [
        {"name": "nd-ib00009999", "state": AWAITING, "reason": "admin: fan replaced, do not touch"},
        {"name": "nd-ib00009998", "state": "IDLE", "reason": ""},
        {"name": "nd-ib00009997", "state": AWAITING, "reason": AWAITING_REASON, "partition": "other"},
    ]
    sf = slurm_fleet(tmp_path, nodes, bad_hca=[names[2]], wrong=[names[5]])
    code = run(sf, monkeypatch, "--partition", "gpu", "--report-impact")
    assert code == 1
    assert sf.node(names[2]) | {"partition": "gpu"} == {"name": names[2], "state": AWAITING,
                                                         "reason": "ndfleet:burnin:busbw-below-floor",
                                                         "partition": "gpu"}  # fmt: skip
    assert sf.node(names[5])["reason"] == "ndfleet:burnin:wrong-results"
    assert all(sf.node(n) == {"name": n, "state": "IDLE", "reason": "", "partition": "gpu"}
               for n in names if n not in (names[2], names[5]))  # fmt: skip
    assert sf.node("nd-ib00009999")["reason"] == "admin: fan replaced, do not touch"  # not ndfleet's: untouched
    assert sf.node("nd-ib00009998") == {"name": "nd-ib00009998", "state": "IDLE", "reason": ""}
    assert sf.node("nd-ib00009997")["reason"] == AWAITING_REASON  # another partition: not this run's
    create, delete = reservation_calls(sf)
    fields = dict(a.split("=", 1) for a in create[2:])
    assert fields["ReservationName"].startswith("ndfleet-burnin-") and fields["Nodes"].split(",") == names
    assert (fields["StartTime"], fields["Users"], fields["Flags"]) == ("now", "root", "MAINT,IGNORE_JOBS")
    assert int(fields["Duration"]) > 0
    assert delete == ["delete", f"ReservationName={fields['ReservationName']}"]
    assert sf.state["reservations"] == {}
    report = json.loads(sf.fleet.report.read_text())
    assert set(report["unhealthy"]) == {names[2], names[5]} and len(report["hosts"]) == 8
    ssh = [json.loads(line) for line in (sf.fleet.root / "ssh.log").read_text().splitlines()]
    assert sorted(s["host"] for s in ssh) == sorted([names[2], names[5]])


def test_nodes_are_resumed_inside_the_reservation_before_any_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = host_names(4)
    sf = slurm_fleet(tmp_path, awaiting(names))
    assert run(sf, monkeypatch) == 0
    calls = sf.state["calls"]
    verbs = [c[0] if c[0] != "-o" else "show" for c in calls]
    assert verbs == ["show", "create"] + ["update"] * 4 + ["delete"]
    assert [c[1:] for c in calls[2:6]] == [[f"NodeName={n}", "State=RESUME"] for n in names]
    assert {n["state"] for n in sf.state["nodes"]} == {"IDLE"}


def test_every_test_is_an_srun_step_in_the_reservation_with_hpcx_loaded_on_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = host_names(4)
    sf = slurm_fleet(tmp_path, awaiting(names))
    assert run(sf, monkeypatch) == 0
    sruns = sf.sruns
    reservation = dict(a.split("=", 1) for a in reservation_calls(sf)[0][2:])["ReservationName"]
    report = json.loads(sf.fleet.report.read_text())
    assert len(sruns) == sum(len(r["tests"]) for r in report["rounds"]) == 3  # 2 pairs, then the island
    first = next(s for s in sruns if s["opts"]["-w"] == f"{names[0]},{names[2]}")  # the round's runs: any order
    # From the controller: the allocation and one plain step on the first node (no PMIx there: docs/images.md)...
    starts = [s for s in sf.srun_calls if not s["on_node"]]
    assert len(starts) == len(sruns)
    start = next(s for s in starts if s["opts"]["-w"] == f"{names[0]},{names[2]}")
    assert start["opts"] | {"-w": "x", "--time": "x"} == {
        "--reservation": reservation, "--partition": "gpu", "-w": "x", "-N": "2", "--gpus-per-node": "8",
        "--time": "x", "--nodes": "1", "--ntasks": "1", "--nodelist": names[0], "--mpi": "none",
    }  # fmt: skip
    assert {"--exclusive", "--overlap"} <= set(start["flags"])  # whole nodes; the test's step shares the first
    # ... which starts the test's PMIx step in the same job, a task per GPU.
    assert first["on_node"] == names[0]
    assert {k: first["opts"][k] for k in ("--jobid", "-N", "--ntasks-per-node", "--mpi", "--kill-on-bad-exit")} == {
        "--jobid": "1", "-N": "2", "--ntasks-per-node": "8", "--mpi": "pmix", "--kill-on-bad-exit": "1",
    }  # fmt: skip
    assert {"--overlap", "--overcommit"} <= set(first["flags"])
    assert first["opts"]["-w"] == f"{names[0]},{names[2]}"
    assert first["command"][:2] == ["/bin/bash", "-c"]  # the task loads HPC-X first, on its node
    assert "all_reduce_perf" in " ".join(first["command"])
    loaded = (sf.fleet.root / "hpcx.log").read_text().splitlines()
    assert sorted(loaded) == sorted(f"loaded {s['opts']['-w']}" for s in sruns)
    assert not (sf.fleet.root / "ssh.log").exists()  # no ssh anywhere


def test_a_hung_srun_is_killed_at_its_timeout_and_its_node_drained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = host_names(6)
    sf = slurm_fleet(tmp_path, awaiting(names), hang=[names[4]])
    assert run(sf, monkeypatch, timeout_s=5) == 1
    report = json.loads(sf.fleet.report.read_text())
    hung = [t for r in report["rounds"] for t in r["tests"] if t["outcome"] == "hang"]
    assert len(hung) == 2 and all(names[4] in t["hosts"] and t["duration_s"] < 5 + 40 for t in hung)
    assert sf.node(names[4])["reason"] == "ndfleet:burnin:hang"
    assert all(sf.node(n)["state"] == "IDLE" for n in names if n != names[4])
    assert [p for p in sf.fleet.spawned_pids() if alive(p)] == []  # srun and its task: killed with the group
    assert sf.state["reservations"] == {}


def test_a_failed_reservation_delete_is_exit_2_with_the_command_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sf = slurm_fleet(tmp_path, awaiting(host_names(4)))
    sf.state_file.write_text(json.dumps(sf.state | {"fail_on": ["delete"]}))
    assert run(sf, monkeypatch) == 2
    err = capsys.readouterr().err
    assert "cannot delete reservation ndfleet-burnin-" in err and "scontrol delete ReservationName=" in err


def test_a_slurm_error_drains_the_resumed_nodes_again_and_still_deletes_the_reservation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurmctld refuses the verdict for the bad node: no verdict is half-applied to jobs; every node this run
    resumed goes back to its drain, then the reservation goes."""
    names = host_names(4)
    sf = slurm_fleet(tmp_path, awaiting(names), bad_hca=[names[1]])
    sf.state_file.write_text(json.dumps(sf.state | {"fail_on": ["Reason=ndfleet:burnin:busbw-below-floor"]}))
    assert run(sf, monkeypatch) == 2
    assert sf.state["reservations"] == {} and len(sf.state["deleted_reservations"]) == 1
    assert all((sf.node(n)["state"], sf.node(n)["reason"]) == (AWAITING, AWAITING_REASON) for n in names)


def test_sigterm_mid_burn_in_drains_back_and_deletes_the_reservation(tmp_path: Path) -> None:
    names = host_names(4)
    sf = slurm_fleet(tmp_path, awaiting(names), hang=names)  # every test hangs: only the signal ends the round
    cmd = [sys.executable, "-m", "ndfleet_node", *sf.argv("--test-timeout", "600")]
    proc = subprocess.Popen(cmd, env={**os.environ, **sf.env()}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(sf.fleet.spawned_pids()) < 4 and time.monotonic() < deadline:  # both first-round sruns started
            time.sleep(0.1)
        assert len(sf.fleet.spawned_pids()) == 4, "the first round never started"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=TIMEOUT_S)
    finally:
        proc.kill()
        proc.wait()
        left = [p for p in sf.fleet.spawned_pids() if alive(p)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert left == []
    assert sf.state["reservations"] == {} and len(sf.state["deleted_reservations"]) == 1
    assert all(sf.node(n)["state"] == AWAITING and sf.node(n)["reason"] == AWAITING_REASON for n in names)


def test_a_hung_scontrol_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sf = slurm_fleet(tmp_path, awaiting(host_names(2)))
    sf.state_file.write_text(json.dumps(sf.state | {"hang_on": ["show"]}))
    monkeypatch.setattr(slurm_module, "SLURM_TIMEOUT_S", 2)
    assert run(sf, monkeypatch) == 2
    assert "scontrol show node --oneliner: scontrol did not answer within 2 s (timed out)" in capsys.readouterr().err


def test_explicit_nodes_leave_out_a_foreign_drain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node the Slurm health check drained (`ndfleet:<check-id>`) cannot run a job and is not the burn-in's to
    resume: given in --nodes, it is left out, untouched."""
    names = host_names(4)
    nodes = [{"name": names[0], "state": AWAITING, "reason": "ndfleet:gpu.ecc"}, *awaiting(names[1:])]
    sf = slurm_fleet(tmp_path, nodes)
    assert run(sf, monkeypatch, "--nodes", "nd-ib00[000000-000003]") == 0
    assert sf.node(names[0]) == {"name": names[0], "state": AWAITING, "reason": "ndfleet:gpu.ecc"}
    assert all(sf.node(n)["state"] == "IDLE" for n in names[1:])
    assert names[0] not in {h["host"] for h in json.loads(sf.fleet.report.read_text())["hosts"]}


def test_an_elastic_node_still_powering_up_is_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = host_names(3)
    nodes = awaiting(names)
    nodes[0]["state"] = "IDLE+DRAIN+CLOUD+POWERING_UP"
    sf = slurm_fleet(tmp_path, nodes)
    assert run(sf, monkeypatch, "--partition", "gpu") == 0
    assert sf.node(names[0])["state"] == "IDLE+DRAIN+CLOUD+POWERING_UP"
    assert names[0] not in {h["host"] for h in json.loads(sf.fleet.report.read_text())["hosts"]}


def test_a_node_awaiting_for_less_than_the_settle_time_waits_for_a_later_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Azure's health extension holds a new VM Initializing until it has answered Healthy numberOfProbes times, and a
    failure before that waits out the extension's grace: a node drained awaiting burn-in 30 s ago is left out by a run
    with --settle 120, and with it nothing is reserved (exit 0: nothing to do yet); one stamped long ago is burned
    in."""
    names = host_names(2)
    just_now = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 30))
    sf = slurm_fleet(tmp_path, [n | {"reason_time": just_now} for n in awaiting(names)])
    assert run(sf, monkeypatch, "--settle", "120") == 0
    err = capsys.readouterr().err
    assert f"{names[0]}: left out, awaiting burn-in for " in err and "nothing to burn in yet" in err
    assert reservation_calls(sf) == [] and [sf.node(n)["state"] for n in names] == [AWAITING, AWAITING]
    (tmp_path / "settled").mkdir()
    settled = slurm_fleet(tmp_path / "settled", awaiting(names))  # stamped 2026-12-03T08:00:00
    assert run(settled, monkeypatch, "--settle", "120") == 0
    assert [settled.node(n)["state"] for n in names] == ["IDLE", "IDLE"]


def test_a_settling_node_does_not_hold_back_one_that_has_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    names = host_names(3)
    just_now = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 30))
    nodes = awaiting(names[:2]) + [n | {"reason_time": just_now} for n in awaiting(names[2:])]
    sf = slurm_fleet(tmp_path, nodes)
    assert run(sf, monkeypatch, "--settle", "120") == 0
    assert [sf.node(n)["state"] for n in names] == ["IDLE", "IDLE", AWAITING]
    assert names[2] not in {h["host"] for h in json.loads(sf.fleet.report.read_text())["hosts"]}


def test_nothing_awaiting_exits_2_and_reserves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lookalike = "ndfleet: awaiting burnin"  # not the reason registration sets
    sf = slurm_fleet(tmp_path, [{"name": "nd-ib00000000", "state": "IDLE", "reason": ""},
                                {"name": "nd-ib00000001", "state": AWAITING, "reason": lookalike}])  # fmt: skip
    assert run(sf, monkeypatch) == 2
    assert "0 node(s) to burn in" in capsys.readouterr().err
    assert reservation_calls(sf) == []


def test_nodes_of_two_islands_are_refused_not_paired_across(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """InfiniBand does not cross islands (one partition each): a pair across them would fail for no host's fault."""
    names = host_names(4)
    nodes = awaiting(names[:2]) + [n | {"partition": "ib01"} for n in awaiting(names[2:])]
    sf = slurm_fleet(tmp_path, nodes)
    assert run(sf, monkeypatch) == 2
    assert "nodes in partitions [('gpu',), ('ib01',)]: burn in one island at a time (--partition)" in (
        capsys.readouterr().err
    )
    assert reservation_calls(sf) == []
    assert run(sf, monkeypatch, "--partition", "ib01") == 0  # one island at a time
    assert [sf.node(n)["state"] for n in names] == [AWAITING, AWAITING, "IDLE", "IDLE"]


@pytest.mark.parametrize("idle", ["IDLE", "IDLE+DYNAMIC_NORM"])  # a dynamic node's idle state (scontrol(1))
def test_idle_partners_join_the_reservation_but_are_not_resumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, idle: str
) -> None:
    names = host_names(6)
    nodes = awaiting(names[:3]) + [{"name": n, "state": idle, "reason": "", "partition": "gpu"} for n in names[3:]]
    sf = slurm_fleet(tmp_path, nodes, bad_hca=[names[0]])
    assert run(sf, monkeypatch, "--idle-partners", "2") == 1
    report = json.loads(sf.fleet.report.read_text())
    assert sorted(h["host"] for h in report["hosts"]) == sorted(names[:5])
    assert sf.node(names[0])["reason"] == "ndfleet:burnin:busbw-below-floor"
    assert [sf.node(n)["state"] for n in names[1:3]] == ["IDLE"] * 2
    assert [sf.node(n)["state"] for n in names[3:]] == [idle] * 3
    resumed = [c[1] for c in sf.state["calls"] if c[:1] == ["update"] and c[-1] == "State=RESUME"]
    assert resumed == [f"NodeName={n}" for n in names[:3]]


# ---------------------------------------------------------------------------------------------- parsing




LINE = ("NodeName=nd-ib00000003 Arch=x86_64 OS=Linux 5.15.0-1056-azure #64-Ubuntu SMP Tue Feb 6 UTC 2024 "
        "RealMemory=1800000 State={state} ThreadsPerCore=1 Partitions=gpu,debug BootTime=None "
        "CurrentWatts=0{reason}")  # fmt: skip


@pytest.mark.parametrize(
    ("state", "reason", "expect_reason", "is_awaiting"),
    [
        ("IDLE+DRAIN", f" Reason={AWAITING_BURNIN_REASON} [root@2026-12-03T08:00:00]", AWAITING_BURNIN_REASON, True),
        ("DOWN+DRAIN", f" Reason={AWAITING_BURNIN_REASON} [slurm@2026-12-03T08:00:00]", AWAITING_BURNIN_REASON, True),
        ("IDLE", "", "", False),
        # An administrator's reason quoting scontrol's own fields: the node's real State is the first one.
        ("IDLE+DRAIN", " Reason=fan swap State=IDLE Partitions=x [admin@2026-12-03T08:00:00]",
         "fan swap State=IDLE Partitions=x", False),
        ("IDLE+DRAIN", f" Reason={AWAITING_BURNIN_REASON}-not-really [root@2026-12-03T08:00:00]",
         f"{AWAITING_BURNIN_REASON}-not-really", False),
        ("IDLE", f" Reason={AWAITING_BURNIN_REASON} [root@2026-12-03T08:00:00]", AWAITING_BURNIN_REASON, False),
    ],
    ids=["awaiting", "awaiting-down", "no-reason", "reason-quotes-fields", "lookalike", "not-drained"],
)
def test_node_lines_are_read_by_field(state: str, reason: str, expect_reason: str, is_awaiting: bool) -> None:
    node = parse_line(LINE.format(state=state, reason=reason))
    assert node is not None
    assert (node.name, node.state, node.reason, node.partitions) == ("nd-ib00000003", state, expect_reason,
                                                                     ("gpu", "debug"))  # fmt: skip
    assert awaiting_burnin(node) is is_awaiting


def test_the_shared_reason_is_the_one_registration_sets() -> None:
    assert AWAITING_REASON == AWAITING_BURNIN_REASON == "ndfleet:burnin:awaiting"


@pytest.mark.parametrize(
    ("reason", "held"),
    [
        (AWAITING_BURNIN_REASON, True),
        ("ndfleet: awaiting burn-in", True),  # registered by an earlier release
        ("ndfleet:burnin:hang", True),
        ("ndfleet:burnin:busbw-below-floor", True),
        ("ndfleet:gpu.xid,ib.ports", False),  # the Slurm health check's own drain: it may resume it
        ("admin: fan replaced", False),
        ("", False),
    ],
)
def test_which_drains_only_the_burn_in_lifts(reason: str, held: bool) -> None:
    assert held_by_burnin(reason) is held


@pytest.mark.parametrize("state", ["IDLE+MAINT+RESERVED", "IDLE+DRAIN+DYNAMIC_NORM", "IDLE+CLOUD+POWERED_DOWN",
                                   "MIXED+DYNAMIC_NORM", "IDLE+COMPLETING"])
def test_a_node_out_of_service_or_busy_is_no_idle_partner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], state: str
) -> None:
    """A spare (its MAINT reservation), a drained node, a powered-down elastic node, a busy one: none is an idle
    in-service partner, so a lone awaiting node is not burned in with it."""
    names = host_names(2)
    nodes = awaiting(names[:1]) + [{"name": names[1], "state": state, "reason": "", "partition": "gpu"}]
    sf = slurm_fleet(tmp_path, nodes)
    assert run(sf, monkeypatch, "--idle-partners", "1") == 1  # one node to burn in: nothing run, not healthy yet
    assert "1 node(s) to burn in; need at least 2" in capsys.readouterr().err
    assert reservation_calls(sf) == []
