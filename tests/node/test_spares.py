"""Warm spares and the host ledger (node/ndfleet_node/spares.py, host_ledger.py) on recorded Slurm output.

Node lines are the recorded Slurm 24.05 line of tests/data/slurm/scontrol-show-node-oneliner.txt (an idle ib00 node)
with its name, State, Reason and Comment changed; the reservation line is Slurm 22.05's own answer to
`scontrol show reservation --oneliner` for the reservation ndfleet_node.spares creates (recorded from the real
slurmctld of tests/slurm/test_real_scheduler.py, names changed to the prod-* nodes).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ndfleet_node import host_ledger, spares
from ndfleet_node.burnin.slurm import refuse_held_hosts
from ndfleet_node.names import REPEAT_HOST_REASON
from ndfleet_node.scontrol import SlurmNode, parse_nodes, parse_reservations

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
RECORDED = (DATA / "scontrol-show-node-oneliner.txt").read_text().split("\n")[0]
RESERVATION = (DATA / "scontrol-show-reservation-oneliner.txt").read_text()


def line(name: str, state: str = "IDLE+DYNAMIC_NORM", reason: str = "", comment: str = "",
         partition: str = "ib00") -> str:
    out = RECORDED.replace("prod-ib00-000000", name).replace("State=IDLE+DYNAMIC_NORM", f"State={state}")
    out = out.replace("Partitions=ib00", f"Partitions={partition}")
    if reason:
        out += f" Reason={reason} [root@2026-12-05T03:00:00]"
    if comment:
        out += f" Comment={comment}"
    return out


def nodes(*lines: str) -> list[SlurmNode]:
    return list(parse_nodes("\n".join(lines)).values())


BUSY = "ALLOCATED+DYNAMIC_NORM"
ISLAND = spares.IslandSpares("ib00", "ib00", nodes=4, spares=1)


def test_the_reader_takes_the_recorded_reservation_and_the_host_comment() -> None:
    found = parse_reservations(RESERVATION)
    assert set(found) == {"ndfleet-spares-ib00"}
    assert found["ndfleet-spares-ib00"].nodes == "prod-ib00-000003"
    assert "MAINT" in found["ndfleet-spares-ib00"].flags
    assert parse_reservations("No reservations in the system\n") == {}
    [node] = nodes(line("prod-ib00-000001", "IDLE+DRAIN+DYNAMIC_NORM", "ndfleet:gpu.xid", "ndfleet-host:GGBB90904476"))
    assert (node.reason, node.comment) == ("ndfleet:gpu.xid", "ndfleet-host:GGBB90904476")
    assert host_ledger.node_host(node) == "GGBB90904476"


def test_an_island_at_full_strength_reserves_one_idle_node() -> None:
    listing = nodes(*(line(f"prod-ib00-00000{i}") for i in range(4)),
                    line("prod-ib01-000000", partition="ib01"))
    decision = spares.decide(ISLAND, listing, [])
    assert decision.after == ("prod-ib00-000000",) and decision.in_service == 3


def test_a_busy_node_is_not_taken_as_a_spare() -> None:
    listing = nodes(line("prod-ib00-000000", "ALLOCATED+DYNAMIC_NORM"), line("prod-ib00-000001", "MIXED+DYNAMIC_NORM"),
                    line("prod-ib00-000002"), line("prod-ib00-000003", "IDLE+DYNAMIC_NORM+MAINT+RESERVED"))
    # 000003 is in another maintenance reservation (a burn-in): neither serving nor free. Two must serve.
    decision = spares.decide(spares.IslandSpares("ib00", "ib00", nodes=3, spares=1), listing, [])
    assert decision.after == ("prod-ib00-000002",)


def test_a_failure_drain_puts_the_spare_into_service_at_once() -> None:
    listing = nodes(line("prod-ib00-000000", "ALLOCATED+DRAIN+DYNAMIC_NORM", "ndfleet:gpu.xid"),
                    line("prod-ib00-000001", BUSY), line("prod-ib00-000002", BUSY),
                    line("prod-ib00-000003", "IDLE+DYNAMIC_NORM+MAINT+RESERVED"))
    decision = spares.decide(ISLAND, listing, ["prod-ib00-000003"])
    assert decision.released == ("prod-ib00-000003",) and decision.after == () and decision.changed
    assert decision.in_service == 3


def test_a_gone_node_counts_as_missing_too() -> None:
    listing = nodes(line("prod-ib00-000000", "DOWN*+DYNAMIC_NORM+NOT_RESPONDING", "Not responding"),
                    line("prod-ib00-000001"), line("prod-ib00-000002"), line("prod-ib00-000003", "IDLE+MAINT+RESERVED"))
    assert spares.decide(ISLAND, listing, ["prod-ib00-000003"]).released == ("prod-ib00-000003",)


def test_a_failed_spare_leaves_the_reservation_and_an_idle_node_refills_it() -> None:
    listing = nodes(line("prod-ib00-000000"), line("prod-ib00-000001"), line("prod-ib00-000002"),
                    line("prod-ib00-000003", "IDLE+DRAIN+MAINT+RESERVED", "ndfleet:ib.ports"),
                    line("prod-ib00-000004"))
    # 000004 is the failed spare's replacement VM, burned in, while the failed VM still waits for the reaper.
    decision = spares.decide(ISLAND, listing, ["prod-ib00-000003"])
    assert decision.dropped == ("prod-ib00-000003",)
    assert decision.after == ("prod-ib00-000000",) and decision.in_service == 3


def test_a_repaired_node_refills_the_spares_first() -> None:
    # After a swap: 3 serving (one of them the old spare), none reserved; the repaired node comes back from burn-in.
    listing = nodes(line("prod-ib00-000000", BUSY), line("prod-ib00-000001", BUSY), line("prod-ib00-000002", BUSY),
                    line("prod-ib00-000004"))
    decision = spares.decide(ISLAND, listing, [])
    assert decision.added == ("prod-ib00-000004",) and decision.in_service == 3


def test_nothing_changes_at_full_strength() -> None:
    listing = nodes(*(line(f"prod-ib00-00000{i}") for i in range(3)), line("prod-ib00-000003", "IDLE+MAINT+RESERVED"))
    assert not spares.decide(ISLAND, listing, ["prod-ib00-000003"]).changed


class FakeScontrol(spares.SparesSlurm):
    """Answers as scontrol does (its words: SchedMD src/scontrol/create_res.c, slurm_errno.c); records calls."""

    def __init__(self, listing: str, reservations: str = "No reservations in the system\n") -> None:
        super().__init__()
        self.listing, self.reservation_text, self.calls = listing, reservations, []  # type: list[tuple[str, ...]]

    def call(self, *args: str, max_bytes: int = 0) -> str:
        self.calls.append(args)
        if args[:3] == ("show", "node", "--oneliner"):
            return self.listing
        if args[:2] == ("show", "reservation"):
            return self.reservation_text
        if args[:2] == ("show", "hostnames"):
            return args[2].replace(",", "\n") + "\n"
        if args[:2] == ("create", "reservation"):
            name = next(a for a in args if a.startswith("ReservationName=")).split("=", 1)[1]
            return f"Reservation created: {name}\n"
        return ""


def test_the_runner_creates_updates_and_deletes_the_reservation(capsys: pytest.CaptureFixture[str]) -> None:
    log: list[str] = []
    fresh = FakeScontrol("\n".join(line(f"prod-ib00-00000{i}") for i in range(4)))
    assert spares.keep_spares(fresh, [ISLAND], fresh.nodes(), fresh.reservations(), log.append)
    assert ("create", "reservation", "ReservationName=ndfleet-spares-ib00", "Nodes=prod-ib00-000000",
            "StartTime=now", "Duration=UNLIMITED", "Users=root", "Flags=MAINT") in fresh.calls
    failed = FakeScontrol("\n".join([line("prod-ib00-000000", "IDLE+DRAIN", "ndfleet:gpu.xid"),
                                     *(line(f"prod-ib00-00000{i}") for i in (1, 2)),
                                     line("prod-ib00-000003", "IDLE+MAINT+RESERVED")]), RESERVATION)
    assert spares.keep_spares(failed, [ISLAND], failed.nodes(), failed.reservations(), log.append)
    assert ("delete", "ReservationName=ndfleet-spares-ib00") in failed.calls
    assert "ib00: prod-ib00-000003: spare put into service" in log
    assert "ib00: 3/3 in service, 0/1 spares (1 short)" in log


def test_the_controller_config_is_checked(tmp_path: Path) -> None:
    bad = tmp_path / "spares.json"
    bad.write_text(json.dumps({"islands": [{"island": "ib00", "partition": "ib00", "nodes": 2, "spares": 2}]}))
    with pytest.raises(ValueError, match="ib00: spares must be between 0 and nodes - 1"):
        spares.load_config(bad)
    bad.write_text("[]")
    with pytest.raises(ValueError, match="not a spares configuration"):
        spares.load_config(bad)
    for within in ("300", 0, True, 86401):
        bad.write_text(json.dumps({"islands": [], "requeue_failed_within_s": within}))
        with pytest.raises(ValueError, match="requeue_failed_within_s .* is not 1 to 86400 seconds"):
            spares.load_config(bad)
    bad.write_text(json.dumps({"islands": []}))
    assert spares.load_config(bad) == ([], host_ledger.DEFAULT_LEDGER, None)


# --- the host ledger ---------------------------------------------------------------------------------------------

def failing(name: str, host: str, reason: str = "ndfleet:gpu.xid", at: str = "2026-12-05T03:00:00") -> str:
    return line(name, "IDLE+DRAIN+DYNAMIC_NORM", reason, f"ndfleet-host:{host}").replace("2026-12-05T03:00:00", at)


def test_only_hardware_drains_with_a_known_host_are_failures() -> None:
    listing = nodes(failing("prod-ib00-000000", "HOSTA"),
                    failing("prod-ib00-000001", "HOSTB", "ndfleet:burnin:busbw-below-floor"),
                    failing("prod-ib00-000002", "HOSTC", "ndfleet:burnin:awaiting"),
                    failing("prod-ib00-000003", "HOSTD", "ndfleet:burnin:launch-error"),
                    failing("prod-ib00-000004", "HOSTE", "maintenance by hand"),
                    line("prod-ib00-000005", "IDLE+DRAIN", "ndfleet:gpu.xid"),  # no host published
                    # Set DOWN by the health check (jobs on it, issue 27) counts like its drain.
                    line("prod-ib00-000006", "DOWN+DYNAMIC_NORM", "ndfleet:ib.ports", "ndfleet-host:HOSTF"),
                    # Slurm's DOWN of a node that stopped answering, alone: its host failed.
                    line("prod-ib00-000007", "DOWN*+DYNAMIC_NORM", "Not responding", "ndfleet-host:HOSTG"),
                    # Not responding but still ALLOCATED (SlurmdTimeout not reached yet): not yet.
                    line("prod-ib00-000008", "ALLOCATED*+DYNAMIC_NORM", "", "ndfleet-host:HOSTH"))
    assert [(f.node, f.host) for f in host_ledger.failures(listing)] == [
        ("prod-ib00-000000", "HOSTA"), ("prod-ib00-000001", "HOSTB"), ("prod-ib00-000006", "HOSTF"),
        ("prod-ib00-000007", "HOSTG")]


def hung_line(name: str, host: str, stamp: str) -> str:
    return line(name, "DOWN*+DYNAMIC_NORM", comment=f"ndfleet-host:{host}").replace(
        " Comment=", f" Reason=Not responding [slurm@{stamp}] Comment=")


def test_nodes_that_went_silent_together_are_not_their_hosts_failures() -> None:
    # Two nodes silent within ten minutes of each other: the network or the controller, not two hosts. One more,
    # alone an hour later, is its host's.
    listing = nodes(hung_line("prod-ib00-000001", "HOSTA", "2026-12-05T03:00:00"),
                    hung_line("prod-ib01-000004", "HOSTB", "2026-12-05T03:04:10"),
                    hung_line("prod-ib01-000007", "HOSTC", "2026-12-05T04:30:00"))
    assert [(f.node, f.host, f.reason) for f in host_ledger.failures(listing)] == [
        ("prod-ib01-000007", "HOSTC", "Not responding")]


@pytest.mark.parametrize("reason", ["ndfleet:gpu.ecc", "ndfleet:burnin:busbw-below-floor"])
def test_a_deleted_node_that_was_drained_counts_once(reason: str) -> None:
    # Automatic repairs deleted the drained VM; slurmctld sets it DOWN, keeps its reason and (Slurm 24.11, seen in
    # the twin) appends " : Not responding" with a new stamp.
    drained = failing("prod-ib00-000000", "HOSTA", reason)
    gone = failing("prod-ib00-000000", "HOSTA", f"{reason} : Not responding", "2026-12-05T03:21:33").replace(
        "State=IDLE+DRAIN", "State=DOWN*+DRAIN")
    ledger, _ = host_ledger.record({}, host_ledger.failures(nodes(drained)))
    ledger, repeats = host_ledger.record(ledger, host_ledger.failures(nodes(gone)))
    assert repeats == [] and [f.reason for f in ledger["HOSTA"]] == [reason]


def test_a_drain_whose_reason_grows_counts_once() -> None:
    # Issue 47 round (found by the twin): the periodic pass rewrote a drained node's reason to every check failing
    # now, with a new stamp; counting that as a second failure would hold a host that failed once.
    first = failing("prod-ib00-000000", "HOSTA", "ndfleet:ib.ports")
    grown = failing("prod-ib00-000000", "HOSTA", "ndfleet:ib.ports,gpu.fabricmanager", "2026-12-05T03:25:00")
    ledger, _ = host_ledger.record({}, host_ledger.failures(nodes(first)))
    ledger, repeats = host_ledger.record(ledger, host_ledger.failures(nodes(grown)))
    assert repeats == [] and [f.reason for f in ledger["HOSTA"]] == ["ndfleet:ib.ports"]
    # Another node on the host (the replacement) with the same checks is a second failure.
    other = failing("prod-ib00-000007", "HOSTA", "ndfleet:ib.ports,gpu.fabricmanager", "2026-12-05T05:00:00")
    ledger, repeats = host_ledger.record(ledger, host_ledger.failures(nodes(other)))
    assert [r.node for r in repeats] == ["prod-ib00-000007"]


def keep_ledger_after_one_failure(tmp_path: Path, node_line: str) -> tuple[bool, FakeScontrol, list[str], Path]:
    """keep_ledger over a ledger that holds one failure on HOSTA and a listing of `node_line`: (its result, the fake
    scontrol, its log, the ledger's path)."""
    path = tmp_path / "host-ledger.json"
    host_ledger.write_ledger(path, {"HOSTA": [host_ledger.Failure("HOSTA", "prod-ib00-000000", "ndfleet:gpu.xid",
                                                                  "2026-12-04T01:00:00")]})
    slurm = FakeScontrol(node_line)
    log: list[str] = []
    ok = spares.keep_ledger(slurm, slurm.nodes(), path, log.append)
    return ok, slurm, log, path


def test_a_hung_repeat_is_drained_and_its_host_held_for_the_next_vm_to_report(tmp_path: Path) -> None:
    ok, slurm, log, path = keep_ledger_after_one_failure(
        tmp_path, hung_line("prod-ib00-000007", "HOSTA", "2026-12-05T03:00:00"))
    assert ok
    assert ("update", "NodeName=prod-ib00-000007", "State=DRAIN", f"Reason={REPEAT_HOST_REASON}") in slurm.calls
    assert host_ledger.held_hosts(host_ledger.read_ledger(path)) == {"HOSTA"}
    assert any("does not answer" in entry and "next VM on it" in entry for entry in log), log


def test_a_second_failure_on_a_host_is_a_repeat_and_the_host_is_held(tmp_path: Path) -> None:
    path = tmp_path / "ledger" / "host-ledger.json"
    first = host_ledger.failures(nodes(failing("prod-ib00-000000", "HOSTA")))
    ledger, repeats = host_ledger.record(host_ledger.read_ledger(path), first)
    assert repeats == [] and host_ledger.held_hosts(ledger) == set()
    host_ledger.write_ledger(path, ledger)
    # Seen again on the next run: the same drain is the same failure.
    ledger, repeats = host_ledger.record(host_ledger.read_ledger(path), first)
    assert repeats == []
    # The replacement VM landed on the same host and failed too.
    again = failing("prod-ib00-000007", "HOSTA", "ndfleet:ib.ports", "2026-12-05T05:00:00")
    second = host_ledger.failures(nodes(again))
    ledger, repeats = host_ledger.record(ledger, second)
    assert [r.node for r in repeats] == ["prod-ib00-000007"] and host_ledger.held_hosts(ledger) == {"HOSTA"}
    host_ledger.write_ledger(path, ledger)
    assert host_ledger.held_hosts(host_ledger.read_ledger(path)) == {"HOSTA"}


def test_a_repeat_is_drained_with_the_reason_its_health_check_reports_under_the_category_that_removes_the_host(
    tmp_path: Path,
) -> None:
    again = failing("prod-ib00-000007", "HOSTA", "ndfleet:ib.ports")
    ok, slurm, log, _ = keep_ledger_after_one_failure(tmp_path, again)
    assert ok and not any("does not answer" in entry for entry in log), log
    assert ("update", "NodeName=prod-ib00-000007", "State=DRAIN", f"Reason={REPEAT_HOST_REASON}") in slurm.calls
    # The node's health check reads that drain as this check (tests/slurm/test_slurm_health_requeue.py files it).
    from ndfleet_node.impact_categories import category_for
    from ndfleet_node.slurm_health import burnin_failure
    [node] = nodes(line("prod-ib00-000007", "IDLE+DRAIN", REPEAT_HOST_REASON, "ndfleet-host:HOSTA"))
    assert burnin_failure(node) == host_ledger.REPEAT_CHECK
    assert category_for(host_ledger.REPEAT_CHECK) == "Resource.Hpc.Unhealthy.HpcGenericFailure"


def test_a_node_resumed_before_its_held_host_showed_is_drained_when_it_shows(tmp_path: Path) -> None:
    # HOSTA failed twice, the second time hung (prod-ib00-000002, its VM gone since). prod-ib00-000009 was burned in
    # before its health check published its host (the burn-in looks every 2 minutes, the check every
    # HealthCheckInterval) and is in service there; -000010 awaits burn-in there; -000011 on another host, the hung
    # -000002 and -000003, already drained for the host, are left alone.
    path = tmp_path / "host-ledger.json"
    host_ledger.write_ledger(path, {"HOSTA": [
        host_ledger.Failure("HOSTA", "prod-ib00-000000", "ndfleet:gpu.xid", "2026-12-04T01:00:00"),
        host_ledger.Failure("HOSTA", "prod-ib00-000002", "Not responding", "2026-12-04T05:00:00")]})
    listing = "\n".join([line("prod-ib00-000009", "ALLOCATED+DYNAMIC_NORM", "", "ndfleet-host:HOSTA"),
                         line("prod-ib00-000010", "IDLE+DRAIN+DYNAMIC_NORM", "ndfleet:burnin:awaiting",
                              "ndfleet-host:HOSTA"),
                         line("prod-ib00-000011", "IDLE+DYNAMIC_NORM", "", "ndfleet-host:HOSTB"),
                         hung_line("prod-ib00-000002", "HOSTA", "2026-12-04T05:00:00"),
                         line("prod-ib00-000003", "IDLE+DRAIN+DYNAMIC_NORM", REPEAT_HOST_REASON, "ndfleet-host:HOSTA")])
    slurm = FakeScontrol(listing)
    log: list[str] = []
    assert spares.keep_ledger(slurm, slurm.nodes(), path, log.append)
    drains = [c[1] for c in slurm.calls if c[0] == "update" and f"Reason={REPEAT_HOST_REASON}" in c]
    assert drains == ["NodeName=prod-ib00-000009", "NodeName=prod-ib00-000010"], slurm.calls
    assert any("prod-ib00-000009: on physical host HOSTA, which failed 2 times" in entry for entry in log), log


def test_the_burnin_never_resumes_a_node_on_a_held_host() -> None:
    ledger = {"HOSTA": [host_ledger.Failure("HOSTA", f"prod-ib00-00000{i}", "ndfleet:gpu.xid", f"t{i}")
                        for i in range(2)]}
    awaiting = nodes(line("prod-ib00-000008", "IDLE+DRAIN", "ndfleet:burnin:awaiting", "ndfleet-host:HOSTA"),
                     line("prod-ib00-000009", "IDLE+DRAIN", "ndfleet:burnin:awaiting", "ndfleet-host:HOSTB"))
    slurm = FakeScontrol("")
    log: list[str] = []
    kept = refuse_held_hosts(slurm, awaiting, ledger, log.append)
    assert [n.name for n in kept] == ["prod-ib00-000009"]
    assert ("update", "NodeName=prod-ib00-000008", "State=DRAIN", f"Reason={REPEAT_HOST_REASON}") in slurm.calls
    assert any(re.search(r"prod-ib00-000008: not resumed: its physical host HOSTA failed 2 times", m) for m in log)


def test_a_ledger_that_is_not_one_is_a_named_failure(tmp_path: Path) -> None:
    path = tmp_path / "host-ledger.json"
    path.write_text('{"hosts": [1]}')
    with pytest.raises(host_ledger.LedgerError, match="not a ledger"):
        host_ledger.read_ledger(path)
