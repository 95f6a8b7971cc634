"""`python3 -m ndfleet_node.spares`: on the Slurm controller, keep each island's warm spares, and the host ledger.

Each island with `spares: N` keeps N burned-in nodes in the Slurm reservation `ndfleet-spares-<island>`
(`Users=root Flags=MAINT`: no user job lands on a reserved node, SchedMD "Advanced Resource Reservation Guide"). The
controller's timer runs this every 30 s; each run, per island (`decide`, a pure function of Slurm's listing):

1. a reserved node that is no longer healthy (drained, down, not responding) leaves the reservation: it is not a
   spare any more, and its repair is the health check's and Azure's business;
2. when fewer healthy nodes than `nodes - spares` are in service (a node was drained for a failure, or is gone),
   healthy spares leave the reservation, one per missing node: the scheduler can start the requeued job on them at
   once, instead of waiting for a repair and a burn-in;
3. when more healthy nodes than `nodes - spares` are in service and the reservation holds fewer than N (a repaired
   node came back from burn-in), idle in-service nodes join it until it holds N again: the spares refill first,
   the island is at full strength when both are.

Only idle nodes join (no `IGNORE_JOBS`): a node that took a job between the listing and the update makes the update
fail ("Requested nodes are busy"), and the next run tries again. The reservation's node list is set whole
(`scontrol update ReservationName=... Nodes=a,b`), created when there is a first spare and deleted when none is left
(Slurm keeps no reservation without nodes).

Before the spares, the host ledger (ndfleet_node.host_ledger) records every hardware failure drain with its physical
host; a repeat is drained `ndfleet:host:repeat-failure`, and the node's own health check, seeing that drain, files
the impact report that takes the host out (ndfleet_node.slurm_health; the controller has neither the node's identity
nor its VM's facts, nor ssh trust to it). A repeat that does not answer cannot: its host is held, and the next VM
Azure places there is drained alike once its host shows (or refused by the burn-in) and files the report
(docs/operations.md). Then a batch job that ended FAILED on a node shortly before its hardware failure drain is
requeued (ndfleet_node.failed_jobs, with the spares JSON's
`requeue_failed_within_s`).

Exit status: 0 done; 1 some island's or node's call failed (the others were still handled); 2 Slurm could not be
listed, or the configuration or ledger could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ndfleet_node.failed_jobs import requeue_failed, squeue_state
from ndfleet_node.host_ledger import (
    DEFAULT_LEDGER,
    NOT_RESPONDING_REASON,
    LedgerError,
    failures,
    node_host,
    on_held_hosts,
    read_capped,
    read_ledger,
    record,
    write_ledger,
)
from ndfleet_node.names import REPEAT_HOST_REASON, SPARES_RESERVATION_PREFIX
from ndfleet_node.requeued_jobs import REQUEUED_JOBS
from ndfleet_node.sacct import Sacct
from ndfleet_node.scontrol import Reservation, Scontrol, SlurmError, SlurmNode
from ndfleet_node.text import clip

DEFAULT_CONFIG = "/etc/ndfleet/spares.json"
MAX_CONFIG_BYTES = 1024 * 1024
# What scontrol says about a reservation that does not exist (ESLURM_RESERVATION_INVALID, SchedMD
# src/common/slurm_errno.c).
GONE = "Requested reservation is invalid"
# States in which a node cannot take a job now (scontrol's state words, ndfleet_node.scontrol.SlurmNode.flags).
_UNFIT = frozenset({"DOWN", "FAIL", "FAILING", "POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "POWER_DOWN",
                    "REBOOT_REQUESTED", "REBOOT_ISSUED", "INVALID_REG", "FUTURE", "UNKNOWN"})  # fmt: skip
_TESTING = frozenset({"MAINT", "MAINTENANCE"})
_BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


def reservation_name(island: str) -> str:
    return SPARES_RESERVATION_PREFIX + island


@dataclass(frozen=True)
class IslandSpares:
    """One island's setting, from the controller's spares JSON (rendered by ndfleet/slurm/conf.py)."""

    island: str
    partition: str
    nodes: int  # the island's size, spares included
    spares: int

    @property
    def in_service(self) -> int:
        return self.nodes - self.spares


@dataclass(frozen=True)
class Decision:
    island: str
    before: tuple[str, ...]  # the reservation's nodes as found
    after: tuple[str, ...]  # as it should be
    dropped: tuple[str, ...]  # reserved nodes no longer healthy
    released: tuple[str, ...]  # healthy spares put into service
    added: tuple[str, ...]  # idle in-service nodes made spares
    in_service: int  # healthy nodes taking jobs afterwards

    @property
    def changed(self) -> bool:
        return set(self.before) != set(self.after)


def healthy(node: SlurmNode) -> bool:
    """Could take a job now: not drained, responding, not down, powered up."""
    return not node.drained and not node.not_responding and not (node.flags & _UNFIT)


def idle(node: SlurmNode) -> bool:
    """Healthy with no job, and in no reservation (a burn-in's, say) other than the spares'."""
    return healthy(node) and "IDLE" in node.flags and not (node.flags & (_BUSY | _TESTING | {"RESERVED"}))


def decide(island: IslandSpares, nodes: Sequence[SlurmNode], reserved: Sequence[str]) -> Decision:
    """The island's spares after this run (see the module docstring); `reserved`: the reservation's nodes now."""
    mine = sorted((n for n in nodes if island.partition in n.partitions), key=lambda n: n.name)
    by_name = {n.name: n for n in mine}
    before = tuple(sorted(reserved))
    kept = [name for name in before if name in by_name and healthy(by_name[name])]
    dropped = tuple(name for name in before if name not in kept)
    # A node in a maintenance reservation of its own (the burn-in's) is being tested, not serving.
    serving = [n for n in mine if n.name not in before and healthy(n) and not (n.flags & _TESTING)]
    missing = island.in_service - len(serving)
    released = tuple(kept[:max(missing, 0)])
    spares = [name for name in kept if name not in released]
    added: tuple[str, ...] = ()
    if missing < 0 and len(spares) < island.spares:
        room = min(-missing, island.spares - len(spares))
        added = tuple(n.name for n in serving if idle(n))[:room]
    after = tuple(sorted([*spares, *added]))
    return Decision(island.island, before, after, dropped, released, added,
                    len(serving) + len(released) - len(added))


def load_config(path: Path) -> tuple[list[IslandSpares], str, int | None]:
    """From the spares JSON, read once: the islands with spares, the ledger's path, and `requeue_failed_within_s`
    (None: absent, no requeue); ValueError naming what is wrong."""
    try:
        data = read_capped(path, MAX_CONFIG_BYTES)
    except OSError as error:
        raise ValueError(f"{path}: {error.strerror or error}") from None
    try:
        doc: Any = json.loads(data)
        islands = [IslandSpares(str(i["island"]), str(i["partition"]), int(i["nodes"]), int(i["spares"]))
                   for i in doc["islands"]]
        ledger = str(doc.get("ledger", DEFAULT_LEDGER))
    except (ValueError, KeyError, TypeError, RecursionError) as error:
        raise ValueError(f"{path}: not a spares configuration ({type(error).__name__}: {clip(str(error), 200)})") \
            from None
    if bad := [i.island for i in islands if not 0 <= i.spares < i.nodes]:
        raise ValueError(f"{path}: islands {', '.join(bad)}: spares must be between 0 and nodes - 1")
    within = doc.get("requeue_failed_within_s")
    if within is not None and (isinstance(within, bool) or not isinstance(within, int) or not 0 < within <= 86400):
        raise ValueError(f"{path}: requeue_failed_within_s {clip(repr(within), 40)} is not 1 to 86400 seconds")
    return islands, ledger, within


class SparesSlurm(Scontrol):
    def set_reservation(self, name: str, before: Sequence[str], after: Sequence[str]) -> None:
        """Create, update or delete the reservation so that it holds exactly `after`."""
        if not after:
            try:
                self.call("delete", f"ReservationName={name}")
            except SlurmError as error:
                if GONE not in str(error):
                    raise
            return
        nodes = f"Nodes={','.join(after)}"
        if not before:
            said = self.call("create", "reservation", f"ReservationName={name}", nodes, "StartTime=now",
                             "Duration=UNLIMITED", "Users=root", "Flags=MAINT")  # fmt: skip
            # "Reservation created: <name>" (SchedMD src/scontrol/create_res.c); without it the outcome is unknown
            # and the next run reads the reservation back.
            if f"Reservation created: {name}" not in said:
                raise SlurmError(f"scontrol create reservation {name}: not confirmed: {clip(said, 200)!r}")
            return
        self.call("update", f"ReservationName={name}", nodes)


def keep_ledger(slurm: Scontrol, nodes: dict[str, SlurmNode], path: Path, log: Callable[[str], None]) -> bool:
    """Record the hardware failures; drain each repeat, and each other node found on a held host. False: a drain
    failed."""
    known = read_ledger(path)
    ledger, repeats = record(known, failures(nodes.values()))
    if ledger != known:  # written only when a failure is new: the state disk is not rewritten every 30 s
        write_ledger(path, ledger)
    held: dict[str, str] = {}  # node -> what the log says of it
    for failure in repeats:
        held[failure.node] = f"physical host {failure.host} failed {len(ledger[failure.host])} times"
        if failure.reason == NOT_RESPONDING_REASON:
            log(f"{failure.node}: does not answer, so files no report for {failure.host}; the host is held, and "
                "the next VM on it is drained for it and files it")
    for node in on_held_hosts(nodes.values(), ledger):
        was = f"{node.state}, {node.reason}" if node.reason else node.state
        held.setdefault(node.name, f"on physical host {node_host(node)}, which failed "
                                   f"{len(ledger[node_host(node)])} times (was {was})")  # fmt: skip
    ok = True
    for name, why in held.items():
        log(f"{name}: {why}; drained {REPEAT_HOST_REASON}, never resumed")
        try:
            slurm.drain(name, REPEAT_HOST_REASON)
        except SlurmError as error:
            log(f"{name}: could not drain: {error}")
            ok = False
    return ok


def keep_spares(slurm: SparesSlurm, islands: Sequence[IslandSpares], nodes: dict[str, SlurmNode],
                reservations: dict[str, Reservation], log: Callable[[str], None]) -> bool:
    ok = True
    for island in islands:
        name = reservation_name(island.island)
        try:
            found = reservations.get(name)
            reserved = slurm.hostnames(found.nodes) if found is not None and found.nodes else []
            decision = decide(island, list(nodes.values()), reserved)
            if decision.changed:
                slurm.set_reservation(name, decision.before, decision.after)
        except SlurmError as error:
            log(f"{island.island}: spares not updated: {error}")
            ok = False
            continue
        for what, names in (("failed, left the spares", decision.dropped),
                            ("spare put into service", decision.released), ("became a spare", decision.added)):
            for node in names:
                log(f"{island.island}: {node}: {what}")
        short = island.spares - len(decision.after)
        log(f"{island.island}: {decision.in_service}/{island.in_service} in service, "
            f"{len(decision.after)}/{island.spares} spares" + (f" ({short} short)" if short > 0 else ""))
    return ok


def handle(args: argparse.Namespace) -> int:
    def log(line: str) -> None:
        print(f"ndfleet-spares: {line}", flush=True)

    try:
        islands, ledger, within_s = load_config(Path(args.config))
    except ValueError as error:
        log(str(error))
        return 2
    slurm = SparesSlurm(args.scontrol, args.timeout)
    try:
        nodes = slurm.nodes()
        reservations = slurm.reservations() if islands else {}
    except SlurmError as error:
        log(f"cannot list Slurm: {error}")
        return 2
    try:
        ok = keep_ledger(slurm, nodes, Path(args.ledger or ledger), log)
    except LedgerError as error:
        log(str(error))
        return 2
    if within_s is not None:
        sacct = Sacct(args.sacct, args.timeout)
        ok = requeue_failed(slurm, sacct, list(nodes.values()), within_s, log, requeued=Path(args.requeued_jobs),
                            state_of=lambda job: squeue_state(job, args.squeue, args.timeout)) and ok  # fmt: skip
    ok = keep_spares(slurm, islands, nodes, reservations, log) and ok
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ndfleet-spares", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"the spares JSON (default {DEFAULT_CONFIG})")
    p.add_argument("--ledger", default="", help="the host ledger (default: the spares JSON's)")
    p.add_argument("--scontrol", nargs="+", default=["scontrol"], help="scontrol command")
    p.add_argument("--sacct", nargs="+", default=["sacct"], help="sacct command")
    p.add_argument("--squeue", nargs="+", default=["squeue"], help="squeue command")
    p.add_argument("--requeued-jobs", default=REQUEUED_JOBS, help="where the jobs requeued here are noted")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds for each scontrol call")
    return handle(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
