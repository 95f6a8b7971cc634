"""HPC-X for the hostfile burn-in: each test's mpirun runs with HPC-X loaded (`source hpcx-init.sh; hpcx_load`, as
on the Azure HPC image, where a bare `mpirun` is not on PATH); a missing or broken HPC-X is a named error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ndfleet_node.__main__ import main

from tests.fakes.fleet import FLEET_BIN, FakeFleet, host_names


def burnin(fleet: FakeFleet, monkeypatch: pytest.MonkeyPatch, **burnin_keys: str) -> int:
    doc = json.loads(fleet.node_json.read_text())
    doc["burnin"] |= burnin_keys
    fleet.node_json.write_text(json.dumps(doc))
    for name, value in fleet.env().items():
        monkeypatch.setenv(name, value)
    # The image's PATH before `module load mpi/hpcx`: no mpirun on it.
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(FLEET_BIN)))
    return main(["burnin", "--hostfile", str(fleet.hostfile), "--report", str(fleet.report),
                 "--config", str(fleet.node_json), "--test-timeout", "60"])  # fmt: skip


def test_bare_mpirun_is_found_through_hpcx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet = FakeFleet(tmp_path, host_names(4))
    log = tmp_path / "hpcx.log"
    monkeypatch.setenv("NDFLEET_FAKE_HPCX_LOG", str(log))
    assert burnin(fleet, monkeypatch, mpirun="mpirun") == 0
    report = json.loads(fleet.report.read_text())
    assert report["status"] == "healthy"
    tests = sum(len(r["tests"]) for r in report["rounds"])
    assert log.read_text().splitlines() == ["loaded here"] * tests  # each test's mpirun runs with HPC-X loaded


def test_without_hpcx_a_bare_mpirun_is_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(4))
    assert burnin(fleet, monkeypatch, mpirun="mpirun", hpcx_init="") == 2
    assert "cannot start 'mpirun' (not found or not executable on PATH)" in capsys.readouterr().err


def test_no_hpcx_on_this_machine_is_a_named_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(4))
    pattern = str(tmp_path / "opt" / "hpcx-*" / "hpcx-init.sh")
    assert burnin(fleet, monkeypatch, mpirun="mpirun", hpcx_init=pattern) == 2
    err = capsys.readouterr().err
    assert f"cannot find HPC-X: nothing matches burnin.hpcx_init = {pattern!r}" in err and not fleet.report.exists()


def test_a_failing_hpcx_load_is_a_named_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = FakeFleet(tmp_path, host_names(4))
    broken = tmp_path / "opt" / "hpcx-v2.18" / "hpcx-init.sh"
    broken.parent.mkdir(parents=True)
    broken.write_text("hpcx_load() { echo 'module file missing' >&2; return 3; }\n")
    assert burnin(fleet, monkeypatch, mpirun="mpirun", hpcx_init=str(tmp_path / "opt" / "hpcx-*" / "hpcx-init.sh")) == 2
    error = json.loads(fleet.report.read_text())["error"]
    assert error.startswith("no test could run") and "module file missing" in error and "no HPC-X" in error
    assert "no test could run" in capsys.readouterr().err
