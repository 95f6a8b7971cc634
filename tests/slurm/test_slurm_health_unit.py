"""slurm-health and slurm-reap decisions, table-driven, against recorded `scontrol show node --oneliner` lines."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from ndfleet_node.scontrol import SlurmNode, parse_line
from ndfleet_node.scontrol import parse_nodes as parse_listing
from ndfleet_node.slurm_health import (
    Verdict,
    act,
    held_by_health_check,
    mirror_drain,
    run_validation,
)
from ndfleet_node.slurm_reap import gone, since
from ndfleet_node.slurm_reap import main as reap_main

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


@pytest.mark.parametrize(
    ("line", "states", "reason", "drained", "ours"),
    [
        ("NodeName=a State=IDLE+DYNAMIC_NORM ThreadsPerCore=1", ("IDLE", "DYNAMIC_NORM"), "", False, False),
        ("NodeName=a State=IDLE+DRAIN+DYNAMIC_NORM Reason=ndfleet:gpu.ecc [daemon@2026-12-03T08:00:00]",
         ("IDLE", "DRAIN", "DYNAMIC_NORM"), "ndfleet:gpu.ecc", True, True),
        ("NodeName=a State=MIXED+DRAIN Reason=disk replacement by ops [root@2026-12-03T08:00:00]",
         ("MIXED", "DRAIN"), "disk replacement by ops", True, False),
        ("NodeName=a State=DOWN*+DYNAMIC_NORM Reason=Not responding [slurm@2026-12-03T08:00:00]",
         ("DOWN", "DYNAMIC_NORM"), "Not responding", False, False),
        # Burn-in's drains (ndfleet_node.burnin.slurm) are ndfleet's, but only the burn-in lifts them.
        ("NodeName=a State=IDLE+DRAIN Reason=ndfleet:burnin:busbw-below-floor [root@2026-12-03T08:00:00]",
         ("IDLE", "DRAIN"), "ndfleet:burnin:busbw-below-floor", True, False),
        ("NodeName=a State=IDLE+DRAIN Reason=ndfleet: awaiting burn-in [root@2026-12-03T08:00:00]",
         ("IDLE", "DRAIN"), "ndfleet: awaiting burn-in", True, False),
        ("NodeName=a State=IDLE+DRAIN Reason=ndfleet:gpu.ecc,ib.rate,+2 [root@2026-12-03T08:00:00]",
         ("IDLE", "DRAIN"), "ndfleet:gpu.ecc,ib.rate,+2", True, True),
    ],
)
def test_parse_node(line: str, states: tuple[str, ...], reason: str, drained: bool, ours: bool) -> None:
    node = parse_line(line)
    assert node is not None
    assert (node.flags, node.reason, node.drained, held_by_health_check(node)) == (set(states), reason, drained,
                                                                                       ours)


def test_drain_reason_names_the_failed_checks() -> None:
    assert Verdict(False, ("gpu.ecc",)).reason == "ndfleet:gpu.ecc"
    many = Verdict(False, ("a", "b", "c", "d", "e", "f"))
    assert many.reason == "ndfleet:a,b,c,d,+2"


def _validator(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "validate"
    script.write_text(f"#!{sys.executable}\nimport sys, json, time\nreport = sys.argv[-1]\n{body}\n")
    script.chmod(0o755)
    return [str(script)]


@pytest.mark.parametrize(
    ("body", "verdict"),
    [
        ('json.dump({"status": "healthy", "checks": [{"id": "gpu.count", "status": "pass"}]}, open(report, "w"))',
         Verdict(True, ())),
        ('json.dump({"status": "unhealthy", "checks": [{"id": "ib.rate", "status": "fail"}]}, open(report, "w"))\n'
         "sys.exit(1)", Verdict(False, ("ib.rate",))),
        ("sys.exit(2)", Verdict(False, ("validate-error",))),
        ('open(report, "w").write("not json")', Verdict(False, ("validate-bad-report",))),
        ("time.sleep(30)", Verdict(False, ("validate-timeout",))),
    ],
    ids=["healthy", "unhealthy", "could-not-run", "bad-report", "hung"],
)
def test_validation_outcomes(tmp_path: Path, body: str, verdict: Verdict) -> None:
    assert run_validation(_validator(tmp_path, body), tmp_path / "report.json", timeout_s=3) == verdict


def test_reap_picks_only_dynamic_nodes_down_and_silent_long_enough() -> None:
    nodes = parse_nodes((DATA / "scontrol-show-node-oneliner.txt").read_text())
    assert all(isinstance(n, SlurmNode) for n in nodes)
    assert [n.name for n in nodes] == ["prod-ib00-000000", "prod-ib00-000004", "prod-ib00-00000a", "static01"]
    now = datetime(2026, 12, 3, 9, 0, 0)
    assert gone(nodes, now, after_s=1800) == ["prod-ib00-000004"]
    assert gone(nodes, now, after_s=0) == ["prod-ib00-000004", "prod-ib00-00000a"]


# Slurm 24.x and later print optional fields after the reason (Comment=, Extra=, InstanceId= InstanceType=,
# ReservationName=, TLSCertTokenSet=, Topology=, Parameters=: SchedMD/slurm src/api/node_info.c, one-liner form).
# The lines of scontrol-show-node-oneliner-25.11.txt follow 25.11's field order; names, times and values are ours.
SHAPE_25_11 = DATA / "scontrol-show-node-oneliner-25.11.txt"


def test_reap_finds_the_reasons_time_when_slurm_prints_fields_after_it() -> None:
    nodes = parse_nodes(SHAPE_25_11.read_text())
    assert [(n.name, since(n)) for n in nodes] == [
        ("prod-ib00-00000c", datetime(2026, 12, 3, 8, 0, 0)),
        ("prod-ib00-00000d", datetime(2026, 12, 3, 8, 10, 0)),
        ("prod-ib00-00000e", datetime(2026, 12, 3, 8, 58, 30)),
        ("prod-ib00-00000f", datetime(2026, 12, 3, 7, 0, 0)),
    ]
    now = datetime(2026, 12, 3, 9, 0, 0)
    # 00000e has been silent for 90 s only; 00000f is drained by an administrator, not down (its reason's
    # "State=DOWN" is free text).
    assert gone(nodes, now, after_s=1800) == ["prod-ib00-00000c", "prod-ib00-00000d"]


def test_parse_node_reads_a_25_11_line_field_by_field() -> None:
    last = SHAPE_25_11.read_text().splitlines()[-1]
    node = parse_line(last)
    assert node is not None
    assert (node.flags, node.reason) == ({"IDLE", "DRAIN", "DYNAMIC_NORM"}, "swap DIMM, then State=DOWN")
    assert node.reason_time == "2026-12-03T07:00:00"
    assert node.partitions == ("ib00",)


def test_the_reaper_deletes_a_gone_node_whose_line_goes_on_after_the_reason(tmp_path: Path) -> None:
    # Issue 25: the old parser looked for the stamp only at the end of the line, so this node was never reaped.
    line = ("NodeName=prod-ib00-00000c Arch=x86_64 NodeAddr=10.50.0.16 Version=25.11.5 "
            "State=DOWN*+DYNAMIC_NORM+NOT_RESPONDING Partitions=ib00 CurrentWatts=0 AveWatts=0 "
            "Reason=Not responding [slurm@2026-12-03T08:00:00] Comment=(null) Extra=(null) InstanceId=(null) "
            "ReservationName=maint Topology=default:ib00")
    log = tmp_path / "deleted"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!/bin/sh\nif [ \"$1\" = show ]; then echo '{line}'; else echo \"$@\" >> {log}; fi\n")
    scontrol.chmod(0o755)
    assert reap_main(["--scontrol", str(scontrol), "--after-seconds", "1800"]) == 0
    assert log.read_text().splitlines() == ["delete nodename=prod-ib00-00000c"]


@pytest.mark.parametrize("module", ["slurm_reap", "slurm_export", "burnin.slurm", "elastic.programs"])
def test_each_controller_program_runs_from_the_files_the_controller_gets(tmp_path: Path, module: str) -> None:
    # On the controller (no node program there) each runs as `python3 -m ndfleet_node.<module>` from the archive
    # of node-program modules machines.py ships, alone on PYTHONPATH.
    from ndfleet.stackconfig.config import load_spec
    from tests.conftest import base_config
    from tests.slurm.controller_library import written_library

    lib = written_library(load_spec(base_config(scheduler="slurm"), "t"), tmp_path)
    proc = subprocess.run([sys.executable, "-S", "-m", f"ndfleet_node.{module}", "--help"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path, env={"PYTHONPATH": str(lib)}, check=False)
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr


def parse_nodes(text: str) -> list[SlurmNode]:
    return list(parse_listing(text).values())


class FakeScontrol:
    def __init__(self, line: str) -> None:
        self.line = line
        self.calls: list[str] = []

    def node(self, name: str) -> SlurmNode:
        node = parse_line(self.line)
        assert node is not None
        return node

    def drain(self, name: str, reason: str) -> None:
        self.calls.append(f"drain {reason}")

    def down(self, name: str, reason: str) -> None:
        self.calls.append(f"down {reason}")

    def resume(self, name: str) -> None:
        self.calls.append("resume")

    def update(self, nodes: list[str], *settings: str) -> None:
        self.calls.append(" ".join(settings))


FAIL = Verdict(False, ("gpu.ecc",))
PASS = Verdict(True, ())


@pytest.mark.parametrize(
    ("line", "verdict", "calls", "drained"),
    [
        ("State=IDLE+DYNAMIC_NORM", FAIL, ["drain ndfleet:gpu.ecc"], True),
        ("State=IDLE+DRAIN Reason=ndfleet:gpu.ecc [x@2026-12-03T08:00:00]", FAIL, [], True),
        ("State=IDLE+DRAIN Reason=ndfleet:ib.rate [x@2026-12-03T08:00:00]", FAIL, ["drain ndfleet:gpu.ecc"], True),
        ("State=IDLE+DRAIN Reason=maintenance [x@2026-12-03T08:00:00]", FAIL, [], True),
        ("State=IDLE+DRAIN Reason=ndfleet:burnin:hang [x@2026-12-03T08:00:00]", FAIL, [], True),
        ("State=IDLE+DRAIN Reason=ndfleet:gpu.ecc [x@2026-12-03T08:00:00]", PASS, ["resume"], False),
        ("State=IDLE+DRAIN Reason=ndfleet:burnin:hang [x@2026-12-03T08:00:00]", PASS, [], True),
        ("State=IDLE+DRAIN Reason=maintenance [x@2026-12-03T08:00:00]", PASS, [], True),
        ("State=IDLE+DYNAMIC_NORM", PASS, [], False),
    ],
)
def test_drain_and_resume_decisions(line: str, verdict: Verdict, calls: list[str], drained: bool) -> None:
    fake = FakeScontrol("NodeName=n " + line)
    outcome = act(fake, "n", verdict)  # type: ignore[arg-type]
    assert fake.calls == calls
    assert outcome.drained is drained


def test_the_physical_host_is_published_once_for_the_controllers_ledger() -> None:
    # The Comment as Slurm 25.11 prints it after the reason (tests/data/slurm/scontrol-show-node-oneliner-25.11.txt).
    fresh = FakeScontrol("NodeName=n State=IDLE+DYNAMIC_NORM")
    act(fresh, "n", FAIL, host="GGBB90904476")  # type: ignore[arg-type]
    assert fresh.calls == ["Comment=ndfleet-host:GGBB90904476", "drain ndfleet:gpu.ecc"]
    known = FakeScontrol("NodeName=n State=IDLE+DRAIN Reason=ndfleet:gpu.ecc [x@2026-12-03T08:00:00] "
                         "Comment=ndfleet-host:GGBB90904476 Topology=default:ib00")
    act(known, "n", FAIL, host="GGBB90904476")  # type: ignore[arg-type]
    assert known.calls == []
    act(fresh, "n", PASS)  # type: ignore[arg-type]  # no host read (not on Azure): nothing published
    assert fresh.calls[2:] == []


def test_drain_marker_follows_the_node(tmp_path: Path) -> None:
    """The marker the node's metrics read (alert NodeDrained) is present exactly while Slurm has the node drained."""
    marker = tmp_path / "var" / "drained"
    mirror_drain(marker, act(FakeScontrol("NodeName=n State=IDLE"), "n", FAIL))  # type: ignore[arg-type]
    assert "drained: ndfleet:gpu.ecc" in marker.read_text()
    resumed = FakeScontrol("NodeName=n State=IDLE+DRAIN Reason=ndfleet:gpu.ecc [x@2026-12-03T08:00:00]")
    mirror_drain(marker, act(resumed, "n", PASS))  # type: ignore[arg-type]
    assert not marker.exists()


HEALTHY = 'json.dump({"status": "healthy", "checks": [{"id": "gpu.count", "status": "pass"}]}, open(report, "w"))'


def _handle(tmp_path: Path, scontrol_body: str) -> Path:
    """slurm-health once, with a passing validator and `scontrol` as the given script; returns the burn-in marker."""
    import argparse

    from ndfleet_node.slurm_health import register

    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!{sys.executable}\nimport sys\n{scontrol_body}\n")
    scontrol.chmod(0o755)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    marker = tmp_path / "burnin-queued"
    args = parser.parse_args([
        "slurm-health", "--validator", *_validator(tmp_path, HEALTHY), "--report", str(tmp_path / "r.json"),
        "--scontrol", str(scontrol), "--node-name", "n1", "--burnin-marker", str(marker),
        "--drain-marker", str(tmp_path / "drained"),
    ])  # fmt: skip
    args.handler(args)
    return marker


def test_a_node_not_yet_registered_is_in_line_for_burn_in_from_its_first_start(tmp_path: Path) -> None:
    # slurmd's first start: the node registers new, drained awaiting burn-in. Marking the disk only at a later pass
    # let the burn-in resume the node first, and that pass then drained it again for ever (found by the twin).
    marker = _handle(tmp_path, "print('slurm_load_node error: Node n1 not found', file=sys.stderr); sys.exit(1)")
    assert marker.exists()


def test_a_controller_out_of_reach_marks_nothing(tmp_path: Path) -> None:
    marker = _handle(tmp_path, "print('Unable to contact slurm controller', file=sys.stderr); sys.exit(1)")
    assert not marker.exists()
