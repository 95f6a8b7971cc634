"""`ndfleet-node burnin-slurm`: burn in Slurm nodes as Slurm jobs; resume the ones that pass, drain the bad ones.

    ndfleet-node burnin-slurm --report PATH [--nodes HOSTLIST | --partition P] [--level quick|full]
                              [--idle-partners N] [--settle SECONDS] [--report-impact]

Run as root on the controller or the login node. Neither has HPC-X or nccl-tests, and none needs ssh trust: every
test is a Slurm job step (`srun --mpi=pmix`) on the compute nodes themselves, which load HPC-X before they start
all_reduce_perf (`hpcx.with_hpcx`).

1. Find the nodes: `scontrol show node --oneliner`, read by ndfleet_node.scontrol. A new node registers DRAINED
   with the reason `ndfleet:burnin:awaiting` (`ndfleet_node.names.AWAITING_BURNIN_REASON`); without
   `--nodes` every such node (of `--partition`, when given) is burnt in, with up to `--idle-partners N` idle
   in-service nodes as partners; with `--nodes`, exactly those (a node drained by anyone else is left out).
   With `--settle S`, a node that has awaited burn-in for less than S seconds (its drain's stamp) waits for a later
   run: Azure's Application Health extension holds a new VM `Initializing` until it has answered Healthy
   `numberOfProbes` times in a row, and ignores Unhealthy until then, for the extension's whole grace period
   (Microsoft Learn, "Application Health extension", rich health states). A node that fails a burn-in run before
   Azure saw it Healthy would wait out that grace (40 minutes at full validation) before automatic repairs act.
2. Reserve them: `scontrol create reservation ReservationName=ndfleet-burnin-<id> Nodes=... StartTime=now
   Duration=<bound> Users=root Flags=MAINT,IGNORE_JOBS`, then resume the drained ones: they can run the tests,
   and no user job lands on them, as only the reservation's user may use its nodes.
3. Run the rounds (`ndfleet_node.burnin.run_burnin`), each test `srun --reservation=... -w a,b -N 2
   --ntasks-per-node=<gpus> --mpi=pmix ... all_reduce_perf ...` under its timeout (`runner.timeout_for`; srun
   gets `--time` as well, so Slurm ends the step even if srun is killed).
4. Apply the verdicts while still reserved: an unhealthy node is drained with `ndfleet:burnin:<reason>`, an
   unresolved one with `ndfleet:burnin:unresolved`; when the island-wide test misses its floor every node the
   burn-in held is drained `ndfleet:burnin:island-below-floor` (the fault is the fabric at scale); healthy ones
   stay resumed. With `--report-impact`, each unhealthy node is asked over ssh to file its impact report.
5. Always delete the reservation, on success, error, timeout or interrupt. When the verdicts could not be
   applied, every node this run resumed is drained again with the reason it had first, so an untested node never
   takes jobs when the reservation goes.

Exit codes as `burnin`: 0 all healthy, 1 some not, 2 could not run (no Slurm tools, no nodes, bad settings, a Slurm
call failed), 3 the report could not be written (printed to stdout instead).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ndfleet_node.burnin import (
    EXIT_CANNOT_RUN,
    EXIT_HEALTHY,
    EXIT_REPORT_NOT_WRITTEN,
    EXIT_UNHEALTHY,
    add_common_args,
    bad_test_timeout,
    deliver_report,
    run_burnin,
)
from ndfleet_node.burnin.hosts import host_name_problem
from ndfleet_node.burnin.notify import report_impacts
from ndfleet_node.burnin.planner import TestSpec
from ndfleet_node.burnin.report import summary_lines
from ndfleet_node.burnin.runner import ProcessRun, run_bounded, srun_executor, timeout_for
from ndfleet_node.burnin.settings import BurninSettings, SettingsError, load_settings
from ndfleet_node.host_ledger import DEFAULT_LEDGER, Failure, LedgerError, read_ledger, refusal, stamp_s
from ndfleet_node.names import (
    AWAITING_BURNIN_REASON,
    BURNIN_REASON_PREFIX,
    BURNIN_RESERVATION_PREFIX,
    REPEAT_HOST_REASON,
)
from ndfleet_node.scontrol import Scontrol, SlurmError, SlurmNode
from ndfleet_node.text import clip

AWAITING_REASON = AWAITING_BURNIN_REASON
# The reason earlier releases documented (no release set it): still the burn-in's to lift, not to select.
LEGACY_AWAITING_REASON = "ndfleet: awaiting burn-in"
SLURM_TIMEOUT_S = 60  # each scontrol call: slurmctld answers in well under a second when it is up
# The reservation outlives the longest burn-in this run can be (every round at its longest test) by this much, so
# it never expires under a running test; the run deletes it as soon as it ends.
RESERVATION_SLACK_S = 600


def held_by_burnin(reason: str) -> bool:
    """A drain only the burn-in may lift: awaiting burn-in, or failed it. Other ndfleet tools that resume nodes
    they drained themselves (the Slurm health check resumes `ndfleet:<check-id>` drains) must leave these alone."""
    return reason.startswith(BURNIN_REASON_PREFIX) or reason.startswith(LEGACY_AWAITING_REASON)


# Power-saving states of a CLOUD node (slurm.conf power saving): no slurmd to test yet, or none any more.
NOT_UP_YET = frozenset({"POWERING_UP", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"})
# What an idle in-service node's state may carry besides IDLE: a dynamic node is "IDLE+DYNAMIC_NORM", a powered-up
# elastic one "IDLE+CLOUD" (scontrol(1), NODE STATE). Anything else (DRAIN, DOWN, MAINT/RESERVED: a spare, power
# saving, COMPLETING) keeps it out. The twin found `== {"IDLE"}` leaving every dynamic node out, so a repair's lone
# replacement was never burned in.
IDLE_PARTNER_FLAGS = frozenset({"IDLE", "DYNAMIC_NORM", "CLOUD"})


def idle_in_service(node: SlurmNode) -> bool:
    return "IDLE" in node.flags and node.flags <= IDLE_PARTNER_FLAGS and not node.not_responding
# What a deleted or never-made reservation's delete says (ESLURM_RESERVATION_INVALID, SchedMD src/common/slurm_errno.c).
GONE = "Requested reservation is invalid"


def awaiting_burnin(node: SlurmNode) -> bool:
    return node.drained and node.reason == AWAITING_REASON


class Slurm(Scontrol):
    """The burn-in's scontrol calls (ndfleet_node.scontrol: bounded in time and output, exit 0 with an error is one)."""

    def create_reservation(self, name: str, nodes: Sequence[str], minutes: int) -> None:
        said = self.call("create", "reservation", f"ReservationName={name}", f"Nodes={','.join(nodes)}",
                         "StartTime=now", f"Duration={minutes}", "Users=root", "Flags=MAINT,IGNORE_JOBS")  # fmt: skip
        # scontrol confirms with "Reservation created: <name>" (SchedMD src/scontrol/create_res.c); without it the
        # outcome is unknown.
        if f"Reservation created: {name}" not in said:
            raise SlurmError(f"scontrol create reservation {name}: not confirmed: {clip(said, 200)!r}")

    def delete_reservation(self, name: str) -> None:
        """Deleted, or confirmed gone (never made, or deleted already)."""
        try:
            self.call("delete", f"ReservationName={name}")
        except SlurmError as exc:
            if GONE not in str(exc):
                raise


def settle_left_s(node: SlurmNode, settle_s: float, now: float) -> float:
    """Seconds until a node awaiting burn-in has awaited `settle_s`, by its drain's stamp (0 without a readable one:
    nothing says it is young)."""
    since = stamp_s(node.reason_time) if settle_s > 0 and node.reason_time else None
    return 0.0 if since is None else max(0.0, since + settle_s - now)


def settling(nodes: Sequence[SlurmNode], partition: str | None, settle_s: float, now: float) -> list[SlurmNode]:
    """The nodes awaiting burn-in (of `partition`, when given) that have not awaited it for `settle_s` yet."""
    return [n for n in nodes if awaiting_burnin(n) and (partition is None or partition in n.partitions)
            and settle_left_s(n, settle_s, now) > 0]  # fmt: skip


def choose_hosts(
    known: Sequence[SlurmNode],
    explicit: Sequence[str] | None,
    partition: str | None,
    idle_partners: int,
    log: Callable[[str], None],
    settle_s: float = 0.0,
    now: float | None = None,
) -> list[SlurmNode]:
    """The nodes to burn in: none when every node awaiting it is still settling (`settle_s`)."""
    by_name = {n.name: n for n in known}
    if explicit is not None:
        if missing := [name for name in explicit if name not in by_name]:
            raise SlurmError(f"--nodes: not Slurm nodes: {', '.join(missing)}")
        chosen = [by_name[name] for name in explicit]
    else:
        pool = [n for n in known if partition is None or partition in n.partitions]
        at = time.time() if now is None else now
        waiting = settling(pool, None, settle_s, at)
        for node in waiting:
            log(f"{node.name}: left out, awaiting burn-in for {settle_left_s(node, settle_s, at):.0f} s more "
                f"(--settle {settle_s:g}: until Azure's health extension has seen it Healthy)")
        chosen = [n for n in pool if awaiting_burnin(n) and n not in waiting]
        if chosen:
            # In-service idle nodes as known-good partners only when asked: reserving them keeps jobs off them.
            chosen += [n for n in pool if idle_in_service(n)][:idle_partners]
    usable = []
    for node in chosen:
        if node.flags & NOT_UP_YET:
            # An elastic island's node drained awaiting burn-in as soon as it is resumed, before its VM exists: its
            # burn-in waits for its registration (docs/elastic.md).
            log(f"{node.name}: left out, not up yet ({node.state})")
        elif node.drained and not held_by_burnin(node.reason):
            log(f"{node.name}: left out, drained for another reason: {node.reason}")
        elif problem := host_name_problem(node.name):
            log(f"left out: {problem}")
        else:
            usable.append(node)
    # One island (one partition) per run: InfiniBand does not cross scale sets, so a pair across islands fails.
    if len(islands := {n.partitions for n in usable}) > 1:
        raise SlurmError(f"nodes in partitions {sorted(islands)}: burn in one island at a time (--partition)")
    return usable


def refuse_held_hosts(slurm: Slurm, chosen: Sequence[SlurmNode], ledger: dict[str, list[Failure]],
                      log: Callable[[str], None]) -> list[SlurmNode]:
    """The chosen nodes less those on a physical host the ledger holds (ndfleet_node.host_ledger): each of those is
    drained `ndfleet:host:repeat-failure`, which nothing in ndfleet lifts, and never resumed."""
    usable = []
    for node in chosen:
        if why := refusal(node, ledger):
            log(f"{node.name}: not resumed: {why}; drained {REPEAT_HOST_REASON}")
            slurm.drain(node.name, REPEAT_HOST_REASON)
        else:
            usable.append(node)
    return usable


def reservation_name() -> str:
    """This run's reservation: names.BURNIN_RESERVATION_PREFIX, by which the nodes' Epilog knows a burn-in test's
    job (and skips its check: slurm_health), then the time and this process."""
    return f"{BURNIN_RESERVATION_PREFIX}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}"


def reservation_minutes(settings: BurninSettings, hosts: Sequence[str], level: str) -> int:
    """Every round at the longest test there is (the island test), plus slack."""
    longest = timeout_for(settings, TestSpec("", 0, "island", tuple(hosts), settings.island_floor_gbps), level)
    return math.ceil(((settings.max_rounds + 1) * longest + RESERVATION_SLACK_S) / 60)


def apply_verdicts(
    slurm: Slurm, report: dict[str, Any], nodes: dict[str, SlurmNode], log: Callable[[str], None]
) -> None:
    """Drain the bad nodes (and, when the island missed its floor, every node the burn-in held); the good ones held
    by the burn-in were resumed before the tests and stay so."""
    island_ok = report["island"] is None or report["island"]["outcome"] == "pass"
    for host in report["hosts"]:
        name, status = host["host"], host["status"]
        node = nodes.get(name)
        held = node is not None and node.drained and held_by_burnin(node.reason)
        if status == "healthy":
            if held and island_ok:
                log(f"{name}: resumed")
            elif held:
                slurm.drain(name, BURNIN_REASON_PREFIX + "island-below-floor")
                log(f"{name}: drained, the island-wide test missed its floor")
        else:
            reason = host["reason"] if status == "unhealthy" else "unresolved"
            slurm.drain(name, BURNIN_REASON_PREFIX + reason)
            log(f"{name}: drained, {BURNIN_REASON_PREFIX}{reason}")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "burnin-slurm",
        help="burn in Slurm nodes awaiting it as Slurm jobs; resume the good, drain the bad",
        description=f"Run as root on the controller or login node; default: the nodes drained '{AWAITING_REASON}'.",
    )
    p.add_argument("--nodes", metavar="HOSTLIST", help="exactly these nodes")
    p.add_argument("--partition", help="only nodes of this partition")
    p.add_argument("--idle-partners", type=int, default=0, metavar="N", help="add N idle in-service nodes")
    p.add_argument("--settle", type=float, default=0.0, metavar="SECONDS",
                   help="leave out a node that has awaited burn-in for less than this (Azure's health extension "
                        "must have seen it Healthy before a failure counts)")
    p.add_argument("--host-ledger", default=DEFAULT_LEDGER,
                   help=f"the controller's ledger of failed physical hosts (default {DEFAULT_LEDGER}): a node on a "
                        "host that failed twice is never resumed")
    add_common_args(p)
    p.set_defaults(handler=_run)


def _unwind(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _run(args: argparse.Namespace) -> int:
    # SIGTERM (systemd stop, a scheduler's kill) unwinds like Ctrl-C, so the reservation is still deleted.
    previous = signal.signal(signal.SIGTERM, _unwind)
    try:
        return _run_unwinding(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_unwinding(args: argparse.Namespace) -> int:
    def log(line: str) -> None:
        print(f"burnin-slurm: {line}", file=sys.stderr, flush=True)

    if problem := bad_test_timeout(args.test_timeout):
        log(problem)
        return EXIT_CANNOT_RUN
    with tempfile.TemporaryDirectory(prefix="ndfleet-burnin-slurm-") as workdir:

        def run(cmd: Sequence[str], timeout: float) -> ProcessRun:
            return run_bounded(cmd, timeout, 5.0, Path(workdir))

        slurm = Slurm(timeout_s=SLURM_TIMEOUT_S)
        try:
            settings = load_settings(args.config)
            known = list(slurm.nodes().values())
            explicit = slurm.hostnames(args.nodes) if args.nodes else None
            now = time.time()
            chosen = choose_hosts(known, explicit, args.partition, max(0, args.idle_partners), log,
                                  max(0.0, args.settle), now)  # fmt: skip
            chosen = refuse_held_hosts(slurm, chosen, read_ledger(Path(args.host_ledger)), log)
        except (SettingsError, SlurmError, LedgerError) as exc:
            log(f"{exc}")
            return EXIT_CANNOT_RUN
        if not chosen and explicit is None and settling(known, args.partition, args.settle, now):
            log("nothing to burn in yet: every node awaiting it is settling")
            return EXIT_HEALTHY
        if len(chosen) < 2:
            log(f"{len(chosen)} node(s) to burn in; need at least 2")
            return EXIT_CANNOT_RUN if not chosen else EXIT_UNHEALTHY
        if args.test_timeout is not None:
            settings = replace(settings, timeout_override_s=args.test_timeout)
        outcome = _burn_in_reserved(slurm, settings, chosen, args, Path(workdir), log)
        if outcome is None:
            return EXIT_CANNOT_RUN
        report, written = outcome
        if args.report_impact:
            report_impacts(report, run, args.node_program, log)
    if not written:
        return EXIT_REPORT_NOT_WRITTEN
    if report["status"] == "error":
        log(f"{report['error']}")
        return EXIT_CANNOT_RUN
    return EXIT_HEALTHY if report["status"] == "healthy" else EXIT_UNHEALTHY


def _burn_in_reserved(
    slurm: Slurm,
    settings: BurninSettings,
    chosen: Sequence[SlurmNode],
    args: argparse.Namespace,
    workdir: Path,
    log: Callable[[str], None],
) -> tuple[dict[str, Any], bool] | None:
    """Reserve, resume, test, apply the verdicts; always delete the reservation. None: a Slurm call failed."""
    hosts = [n.name for n in chosen]
    nodes = {n.name: n for n in chosen}
    name = reservation_name()
    minutes = reservation_minutes(settings, hosts, args.level)
    try:
        slurm.create_reservation(name, hosts, minutes)
    except SlurmError as exc:
        log(str(exc))
        # Made or not, nobody knows: delete it, or confirm it is gone.
        _delete_reservation(slurm, name, log)
        return None
    log(f"reservation {name}: {', '.join(hosts)}")
    resumed: list[SlurmNode] = []
    result: tuple[dict[str, Any], bool] | None = None
    try:
        for node in chosen:
            if node.drained:
                resumed.append(node)  # before the call: a resume whose outcome is unknown is undone as well
                slurm.resume(node.name)
        executor = srun_executor(settings, args.level, workdir, name, chosen[0].partitions[0])
        report = run_burnin(hosts, settings, args.level, executor, log=log)
        written = deliver_report(args.report, report, log)
        for line in summary_lines(report):
            print(line, flush=True)
        apply_verdicts(slurm, report, nodes, log)
        result = (report, written)
    except SlurmError as exc:
        log(f"{exc}")
    finally:
        if result is None:
            # Interrupted, or a Slurm call failed: nothing this run resumed may take jobs once the reservation goes.
            for node in resumed:
                try:
                    slurm.drain(node.name, node.reason)
                    log(f"{node.name}: drained again, {node.reason}")
                except SlurmError as exc:
                    log(f"{exc}")
        if not _delete_reservation(slurm, name, log):
            result = None
    return result


def _delete_reservation(slurm: Slurm, name: str, log: Callable[[str], None]) -> bool:
    try:
        slurm.delete_reservation(name)
        log(f"reservation {name} deleted")
        return True
    except SlurmError as exc:
        log(f"cannot delete reservation {name}; delete it by hand "
            f"(scontrol delete ReservationName={name}): {exc}")  # fmt: skip
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """`python3 -m ndfleet_node.burnin.slurm [options]`: burnin-slurm where only the burn-in modules are shipped
    (the Slurm controller, which has no node program: ndfleet/slurm/machines.py)."""
    parser = argparse.ArgumentParser(prog="ndfleet-burnin-slurm")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["burnin-slurm", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
