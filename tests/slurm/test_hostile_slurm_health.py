"""slurm-health under hostile input: reasons that mimic fields, reports of the wrong shape, scontrol that says bytes
that are not UTF-8 or far too much. Nothing it does not understand may resume a node or leave a failing one idle."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ndfleet_node.names import AWAITING_BURNIN_REASON, ROLL_REASON_PREFIX
from ndfleet_node.scontrol import MAX_CALL_BYTES, Scontrol, SlurmError, SlurmNode, parse_line
from ndfleet_node.slurm_health import Verdict, act, held_by_health_check, run_validation

from tests.slurm.test_slurm_health_unit import FakeScontrol

PASS = Verdict(True, ())


def parse(line: str) -> SlurmNode:
    node = parse_line(line)
    assert node is not None
    return node
FAIL = Verdict(False, ("gpu.ecc",))
STAMP = "[root@2026-12-03T08:00:00]"


def _script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport sys, os, time\n{body}\n")
    path.chmod(0o755)
    return [str(path)]


# --- an administrator's reason that looks like fields


def test_a_reason_holding_state_idle_leaves_the_node_drained() -> None:
    node = parse(f"NodeName=n State=IDLE+DRAIN+DYNAMIC_NORM Reason=back at State=IDLE soon {STAMP}")
    assert node.drained
    assert node.reason == "back at State=IDLE soon"


def test_an_admin_drain_mentioning_state_idle_is_neither_overwritten_nor_resumed() -> None:
    fake = FakeScontrol(f"NodeName=n State=IDLE+DRAIN Reason=maintenance State=IDLE {STAMP}")
    assert act(fake, "n", FAIL).drained and act(fake, "n", PASS).drained  # type: ignore[arg-type]
    assert fake.calls == []


def test_a_reason_mimicking_ours_after_a_field_is_not_ours() -> None:
    node = parse(f"NodeName=n State=IDLE+DRAIN Reason=ops Reason=ndfleet:gpu.ecc {STAMP}")
    assert node.reason == "ops Reason=ndfleet:gpu.ecc" and not held_by_health_check(node)


def test_fields_after_the_reason_are_not_part_of_it() -> None:
    node = parse(f"NodeName=n State=IDLE+DRAIN Reason=ndfleet:gpu.ecc {STAMP} Comment=State=IDLE x Extra=y")
    assert node.reason == "ndfleet:gpu.ecc" and held_by_health_check(node)


def test_the_awaiting_burnin_drain_is_never_resumed_by_the_health_check() -> None:
    fake = FakeScontrol(f"NodeName=n State=IDLE+DRAIN Reason={AWAITING_BURNIN_REASON} {STAMP}")
    outcome = act(fake, "n", PASS)  # type: ignore[arg-type]
    assert fake.calls == [] and outcome.drained


def test_an_answer_without_a_state_field_is_not_understood() -> None:
    assert parse_line("Node n not found") is None


# --- first registration on a new OS disk


def test_a_healthy_node_new_on_this_disk_is_drained_awaiting_burnin() -> None:
    fake = FakeScontrol("NodeName=n State=IDLE+DYNAMIC_NORM")
    outcome = act(fake, "n", PASS, burnin_queued=False)  # type: ignore[arg-type]
    assert fake.calls == [f"drain {AWAITING_BURNIN_REASON}"] and outcome.queued_for_burnin


def test_a_node_registered_awaiting_burnin_is_only_marked() -> None:
    fake = FakeScontrol(f"NodeName=n State=IDLE+DRAIN Reason={AWAITING_BURNIN_REASON} {STAMP}")
    outcome = act(fake, "n", PASS, burnin_queued=False)  # type: ignore[arg-type]
    assert fake.calls == [] and outcome.queued_for_burnin


def test_a_drain_without_reason_from_an_older_slurms_registration_gets_the_burnin_reason() -> None:
    # Slurm < 23.02.2 honours State=DRAIN of slurmd --conf but drops its Reason.
    fake = FakeScontrol("NodeName=n State=IDLE+DRAIN+DYNAMIC_NORM ThreadsPerCore=1")
    outcome = act(fake, "n", PASS, burnin_queued=False)  # type: ignore[arg-type]
    assert fake.calls == [f"drain {AWAITING_BURNIN_REASON}"] and outcome.queued_for_burnin


def test_an_admin_drain_on_a_new_disk_is_left_and_burnin_stays_pending() -> None:
    fake = FakeScontrol(f"NodeName=n State=IDLE+DRAIN Reason=maintenance {STAMP}")
    outcome = act(fake, "n", PASS, burnin_queued=False)  # type: ignore[arg-type]
    assert fake.calls == [] and not outcome.queued_for_burnin


def test_our_own_drain_on_a_new_disk_becomes_awaiting_burnin_not_resume() -> None:
    fake = FakeScontrol(f"NodeName=n State=IDLE+DRAIN Reason=ndfleet:gpu.ecc {STAMP}")
    act(fake, "n", PASS, burnin_queued=False)  # type: ignore[arg-type]
    assert fake.calls == [f"drain {AWAITING_BURNIN_REASON}"]


def test_the_rolls_drain_on_a_new_disk_is_handed_to_the_burnin() -> None:
    # The roll reimaged this VM; slurmctld kept its drain across the new registration (branch roll-twin42).
    fake = FakeScontrol(f"NodeName=n State=IDLE+DRAIN+DYNAMIC_NORM Reason={ROLL_REASON_PREFIX}r1 {STAMP}")
    outcome = act(fake, "n", PASS, burnin_queued=False)  # type: ignore[arg-type]
    assert fake.calls == [f"drain {AWAITING_BURNIN_REASON}"] and outcome.queued_for_burnin


def test_the_rolls_drain_on_a_new_disk_that_fails_takes_the_checks_reason() -> None:
    fake = FakeScontrol(f"NodeName=n State=IDLE+DRAIN+DYNAMIC_NORM Reason={ROLL_REASON_PREFIX}r1 {STAMP}")
    act(fake, "n", FAIL, burnin_queued=False)  # type: ignore[arg-type]
    assert fake.calls == ["drain ndfleet:gpu.ecc"]  # what the roll reads as the node's failure


def test_the_rolls_drain_before_the_reimage_is_left_alone() -> None:
    # The old disk (burn-in marked): the roll is waiting for its jobs; passing or failing, the drain stays the roll's.
    for verdict in (PASS, FAIL):
        fake = FakeScontrol(f"NodeName=n State=MIXED+DRAIN+DYNAMIC_NORM Reason={ROLL_REASON_PREFIX}r1 {STAMP}")
        act(fake, "n", verdict, burnin_queued=True)  # type: ignore[arg-type]
        assert not [c for c in fake.calls if c.startswith(("drain", "resume", "down"))], fake.calls


# --- validator reports of the wrong shape


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ([], "ndfleet:validate-bad-report"),
        ({"status": "healthy", "checks": 5}, "ndfleet:validate-bad-report"),
        ({"status": "healthy", "checks": ["x"]}, "ndfleet:validate-bad-report"),
        ({"status": "healthy"}, "ndfleet:validate-bad-report"),
        ({"status": "healthy", "checks": [{"id": "gpu.count", "status": "weird"}]}, "ndfleet:gpu.count"),
        ({"status": "unhealthy", "checks": [{"id": "a b;rm", "status": "fail"}]}, "ndfleet:validate-bad-check-id"),
        ({"status": "unhealthy", "checks": [{"id": ["x"], "status": "fail"}]}, "ndfleet:validate-bad-check-id"),
    ],
    ids=["list", "checks-int", "checks-of-strings", "no-checks", "unknown-status", "id-with-spaces", "id-a-list"],
)
def test_a_report_of_the_wrong_shape_drains_the_node_with_a_named_reason(
    tmp_path: Path, doc: object, reason: str
) -> None:
    validator = _script(tmp_path, "validate", f"open(sys.argv[-1], 'w').write({json.dumps(json.dumps(doc))})")
    verdict = run_validation(validator, tmp_path / "report.json", timeout_s=30)
    assert not verdict.healthy and verdict.reason == reason
    fake = FakeScontrol("NodeName=n State=IDLE")
    act(fake, "n", verdict)  # type: ignore[arg-type]
    assert fake.calls == [f"drain {reason}"]


@pytest.mark.parametrize("body", ["NaN", "[1e999999]", "\xff\xfe", "[" * 100000])
def test_a_report_that_is_not_json_we_understand_is_a_named_failure(tmp_path: Path, body: str) -> None:
    validator = _script(tmp_path, "validate", f"open(sys.argv[-1], 'wb').write({body.encode('latin-1')!r})")
    verdict = run_validation(validator, tmp_path / "report.json", timeout_s=30)
    assert not verdict.healthy and verdict.failed_checks in (("validate-bad-report",), ("validate-error",))


def test_a_huge_report_is_not_read_whole(tmp_path: Path) -> None:
    validator = _script(tmp_path, "validate", "f = open(sys.argv[-1], 'wb'); f.seek(64 * 2**20); f.write(b'x')")
    assert run_validation(validator, tmp_path / "report.json", timeout_s=30) == Verdict(False, ("validate-bad-report",))


# --- scontrol that misbehaves


def test_non_utf8_from_scontrol_is_decoded_not_a_crash(tmp_path: Path) -> None:
    body = ("sys.stdout.buffer.write(b'NodeName=n State=IDLE+DRAIN Reason=caf\\xe9 ops [root@2026-12-03T08:00:00]')")
    node = Scontrol(_script(tmp_path, "scontrol", body), timeout_s=30).node("n")
    assert node.drained and node.reason.startswith("caf") and not held_by_health_check(node)


def test_a_flood_from_scontrol_is_refused(tmp_path: Path) -> None:
    body = f"sys.stdout.buffer.write(b'NodeName=n State=IDLE ' + b'x' * {MAX_CALL_BYTES + 10})"
    with pytest.raises(SlurmError, match="more than"):
        Scontrol(_script(tmp_path, "scontrol", body), timeout_s=30).node("n")


def test_a_hung_scontrol_is_a_named_error(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="timed out"):
        Scontrol(_script(tmp_path, "scontrol", "time.sleep(60)"), timeout_s=1).node("n")


def test_an_unparsable_answer_is_an_scontrol_error(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="NodeName=/State="):
        Scontrol(_script(tmp_path, "scontrol", "print('garbage')"), timeout_s=30).node("n")


# --- a drain that exits 0 but says it failed (issue 31), through the real entry point


def test_a_drain_that_says_it_timed_out_is_not_taken_for_a_drain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ndfleet_node.__main__ import main

    failing = ('json.dump({"status": "unhealthy", "checks": [{"id": "gpu.ecc", "status": "fail"}]}, '
               "open(sys.argv[-1], 'w')); sys.exit(1)")
    validator = _script(tmp_path, "validate", f"import json\n{failing}")
    # `show node` answers the node idle; `update` exits 0 but prints slurm_perror's words for a lost answer.
    scontrol = _script(tmp_path, "scontrol", "if sys.argv[1] == 'show': print('NodeName=n1 State=IDLE')\n"
                       "else: print('slurm_update error: Socket timed out on send/recv operation', file=sys.stderr)")
    marker = tmp_path / "drained"
    code = main(["slurm-health", "--validator", *validator, "--report", str(tmp_path / "r.json"),
                 "--scontrol", *scontrol, "--node-name", "n1", "--drain-marker", str(marker),
                 "--burnin-marker", str(tmp_path / "queued")])  # fmt: skip
    assert code == 1
    assert not marker.exists()  # the node is not known to be drained: no marker says so
    assert "Socket timed out" in capsys.readouterr().err
