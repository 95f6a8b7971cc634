"""The Slurm wrapper against fake scontrol / sinfo / ssh over a simulated fleet: nodes awaiting burn-in that pass
are resumed, bad ones drained with `ndfleet:burnin:<reason>`, other drains left alone, impacts requested."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node.__main__ import main
from ndfleet_node.burnin.slurm import AWAITING_REASON, held_by_burnin

from tests.fakes.fleet import FakeFleet, host_names


def slurm_state(tmp_path: Path, nodes: list[dict[str, str]]) -> Path:
    path = tmp_path / "slurm.json"
    path.write_text(json.dumps({"nodes": nodes}))
    return path


def run(fleet: FakeFleet, state: Path, monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[int, dict[str, Any]]:
    for name, value in fleet.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NDFLEET_FAKE_SLURM", str(state))
    monkeypatch.setenv("NDFLEET_FAKE_SSH_LOG", str(fleet.root / "ssh.log"))
    code = main(["burnin-slurm", "--report", str(fleet.report), "--config", str(fleet.node_json),
                 "--test-timeout", "60", *argv])  # fmt: skip
    return code, json.loads(state.read_text())


def test_awaiting_nodes_resumed_or_drained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = host_names(8)
    fleet = FakeFleet(tmp_path, names, bad_hca=[names[2]], wrong=[names[5]])
    nodes = [{"name": n, "state": "drained", "reason": AWAITING_REASON} for n in names]
    nodes.append({"name": "nd-ib00009999", "state": "drained", "reason": "admin: fan replaced, do not touch"})
    nodes.append({"name": "nd-ib00009998", "state": "idle", "reason": "none"})
    code, after = run(fleet, slurm_state(tmp_path, nodes), monkeypatch, "--report-impact")
    assert code == 1
    by_name = {n["name"]: n for n in after["nodes"]}
    assert by_name[names[2]] == {"name": names[2], "state": "drained", "reason": "ndfleet:burnin:busbw-below-floor"}
    assert by_name[names[5]]["reason"] == "ndfleet:burnin:wrong-results"
    assert all(by_name[n]["state"] == "idle" for n in names if n not in (names[2], names[5]))
    assert by_name["nd-ib00009999"]["reason"] == "admin: fan replaced, do not touch"  # not ndfleet's: untouched
    assert by_name["nd-ib00009998"] == {"name": "nd-ib00009998", "state": "idle", "reason": "none"}
    report = json.loads(fleet.report.read_text())
    assert set(report["unhealthy"]) == {names[2], names[5]} and len(report["hosts"]) == 8
    ssh = [json.loads(line) for line in (fleet.root / "ssh.log").read_text().splitlines()]
    assert sorted(s["host"] for s in ssh) == sorted([names[2], names[5]])
    command = next(s["command"][0] for s in ssh if s["host"] == names[2])
    assert "/opt/ndfleet/bin/ndfleet-node impact report --check burnin.busbw-below-floor" in command


def test_explicit_hostlist_and_all_healthy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = host_names(4)
    fleet = FakeFleet(tmp_path, names)
    nodes = [{"name": n, "state": "drained", "reason": AWAITING_REASON} for n in names]
    code, after = run(fleet, slurm_state(tmp_path, nodes), monkeypatch, "--nodes", "nd-ib00[000000-000003]")
    assert code == 0
    assert {n["state"] for n in after["nodes"]} == {"idle"}
    assert not (fleet.root / "ssh.log").exists()


def test_a_health_check_drain_is_not_lifted_by_a_passing_burn_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node the Slurm health check drained (`ndfleet:<check-id>`) passes the fabric tests given `--nodes`: the
    fabric is fine, its GPU is not; only the health check may resume it."""
    names = host_names(4)
    fleet = FakeFleet(tmp_path, names)
    nodes = [{"name": n, "state": "drained", "reason": AWAITING_REASON} for n in names[1:]]
    nodes.insert(0, {"name": names[0], "state": "drained", "reason": "ndfleet:gpu.ecc"})
    code, after = run(fleet, slurm_state(tmp_path, nodes), monkeypatch, "--nodes", "nd-ib00[000000-000003]")
    assert code == 0
    by_name = {n["name"]: n for n in after["nodes"]}
    assert by_name[names[0]] == {"name": names[0], "state": "drained", "reason": "ndfleet:gpu.ecc"}
    assert all(by_name[n]["state"] == "idle" for n in names[1:])


def test_nothing_awaiting_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(2))
    state = slurm_state(tmp_path, [{"name": "a", "state": "idle", "reason": "none"}])
    code, after = run(fleet, state, monkeypatch)
    assert code == 2 and "0 node(s) to burn in" in capsys.readouterr().err
    assert "updates" not in after


@pytest.mark.parametrize(
    ("reason", "held"),
    [
        (AWAITING_REASON, True),
        ("ndfleet:burnin:hang", True),
        ("ndfleet:burnin:busbw-below-floor", True),
        ("ndfleet:gpu.xid,ib.ports", False),  # the Slurm health check's own drain: it may resume it
        ("admin: fan replaced", False),
        ("none", False),
    ],
)
def test_which_drains_only_the_burn_in_lifts(reason: str, held: bool) -> None:
    assert held_by_burnin(reason) is held


def test_idle_partners_join_but_stay_in_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = host_names(6)
    fleet = FakeFleet(tmp_path, names, bad_hca=[names[0]])
    nodes = [{"name": n, "state": "drained", "reason": AWAITING_REASON} for n in names[:3]]
    nodes += [{"name": n, "state": "idle", "reason": "none"} for n in names[3:]]
    code, after = run(fleet, slurm_state(tmp_path, nodes), monkeypatch, "--idle-partners", "2")
    assert code == 1
    report = json.loads(fleet.report.read_text())
    assert sorted(h["host"] for h in report["hosts"]) == sorted(names[:5])  # 3 awaiting + 2 of the 3 idle
    by_name = {n["name"]: n for n in after["nodes"]}
    assert by_name[names[0]]["reason"] == "ndfleet:burnin:busbw-below-floor"
    assert [by_name[n]["state"] for n in names[1:3]] == ["idle", "idle"]  # resumed
    assert all(by_name[n] == {"name": n, "state": "idle", "reason": "none"} for n in names[3:])  # untouched
    assert all(u[0] in (f"NodeName={names[i]}" for i in range(3)) for u in after["updates"])
