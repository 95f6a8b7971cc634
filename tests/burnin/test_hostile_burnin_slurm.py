"""`burnin-slurm` when Slurm's answers lie (issue 31): a call that exits 0 but says it failed ("Socket timed out on
send/recv operation") is a failure, and every side effect whose outcome is unknown is undone: a node resumed for the
tests is drained again with the reason it had, a reservation is deleted or confirmed gone; a test's output is never
read whole. Runs through the real entry point with the fake scontrol / srun of tests/fakes/slurm_burnin."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from ndfleet_node.burnin.runner import MAX_OUTPUT_BYTES, run_bounded

from tests.burnin.test_slurm import AWAITING, AWAITING_REASON, awaiting, reservation_calls, run, slurm_fleet
from tests.fakes.fleet import host_names


def quiet_failure(sf_state: Path, *words: str) -> None:
    """The fake scontrol does what it is asked, then says on stderr that the answer was lost, and exits 0."""
    state = json.loads(sf_state.read_text())
    sf_state.write_text(json.dumps(state | {"quiet_fail_on": list(words)}))


def test_a_resume_that_says_it_timed_out_is_undone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = host_names(4)
    sf = slurm_fleet(tmp_path, awaiting(names))
    quiet_failure(sf.state_file, "State=RESUME")
    assert run(sf, monkeypatch) == 2
    # The first resume did happen; it is drained again, untested, with the reason it had.
    assert all((sf.node(n)["state"], sf.node(n)["reason"]) == (AWAITING, AWAITING_REASON) for n in names)
    assert sf.state["reservations"] == {} and sf.sruns == []


def test_a_verdict_that_says_it_timed_out_drains_the_resumed_nodes_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = host_names(4)
    sf = slurm_fleet(tmp_path, awaiting(names), bad_hca=[names[1]])
    quiet_failure(sf.state_file, "Reason=ndfleet:burnin:busbw-below-floor")
    assert run(sf, monkeypatch) == 2
    assert all((sf.node(n)["state"], sf.node(n)["reason"]) == (AWAITING, AWAITING_REASON) for n in names)
    assert sf.state["reservations"] == {}


def test_a_reservation_whose_creation_says_it_failed_is_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    names = host_names(4)
    sf = slurm_fleet(tmp_path, awaiting(names))
    quiet_failure(sf.state_file, "create")
    assert run(sf, monkeypatch) == 2
    assert sf.state["reservations"] == {} and len(sf.state["deleted_reservations"]) == 1
    assert all(sf.node(n)["reason"] == AWAITING_REASON for n in names)  # nothing resumed
    assert "Socket timed out" in capsys.readouterr().err


def test_a_reservation_that_was_never_made_is_confirmed_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sf = slurm_fleet(tmp_path, awaiting(host_names(4)))
    sf.state_file.write_text(json.dumps(sf.state | {"fail_on": ["create"]}))
    assert run(sf, monkeypatch) == 2
    create, delete = reservation_calls(sf)
    assert create[:2] == ["create", "reservation"] and delete[0] == "delete"
    err = capsys.readouterr().err
    assert "deleted" in err and "delete it by hand" not in err


def test_a_node_listing_that_says_it_failed_is_no_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sf = slurm_fleet(tmp_path, awaiting(host_names(4)))
    quiet_failure(sf.state_file, "show")
    assert run(sf, monkeypatch) == 2
    assert reservation_calls(sf) == []
    assert "exit 0 but says" in capsys.readouterr().err


def test_a_test_output_of_300_mb_is_not_read_whole(tmp_path: Path) -> None:
    # The test's stdout is a file: skip 300 MB (a hole, so the disk is spared), then the result's last lines.
    body = ("import os, sys; os.lseek(1, 300 * 2**20, 0); "
            "sys.stdout.write('# Out of bounds values : 0 OK\\n# Avg bus bandwidth    : 480.5\\n')")
    got = run_bounded([sys.executable, "-c", body], 60, 5.0, tmp_path)
    assert got.returncode == 0 and len(got.output) <= MAX_OUTPUT_BYTES
    assert got.output.endswith("# Avg bus bandwidth    : 480.5\n")
    assert os.listdir(tmp_path) == []


def test_a_test_started_after_the_interrupt_looked_is_stopped_by_its_own_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C reached stop_all before this test's Popen returned (found with the unit suite niced beside the twin):
    # the test must not run to its 600 s timeout with nobody left to stop it.
    import threading

    from ndfleet_node.burnin import runner

    monkeypatch.setattr(runner, "_STOP", threading.Event())
    runner.stop_all()
    got = run_bounded([sys.executable, "-c", "import time; time.sleep(600)"], 600, 1.0, tmp_path)
    assert got.returncode is None and got.duration_s < 120
