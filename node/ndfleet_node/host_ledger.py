"""The controller's ledger of hardware failures by physical host: a host that fails twice is not taken back.

Azure's automatic repairs replace a failed VM, and the new VM may land on the same physical host unless that host was
reported (Guest Health Reporting). A host whose first failure was not reported (a check that maps to no impact
category), or whose report did not take, can hand the island the same fault again. The ledger remembers each
hardware failure drain with the physical host Azure reports for the node (Hyper-V KVP `PhysicalHostName`, which the
node's health check publishes as the Slurm node's Comment `ndfleet-host:<name>`), and:

- a second failure on the same host (another node, or the same node drained again later) is a *repeat*: the node is
  drained `ndfleet:host:repeat-failure`, which neither the health check nor the burn-in lifts, and its health check,
  seeing that drain, files its impact report with the category that takes the host out of service for diagnosis
  (`REPEAT_CATEGORY`);
- a node on a host the ledger holds is never resumed: the burn-in refuses it (`refusal`), and one that was resumed
  before its host was published is drained as soon as it is (`on_held_hosts`).

A node that stops answering files no report of its own (its kernel or its host is hung). slurmctld sets it DOWN with
`Reason=Not responding` after SlurmdTimeout. A node that already had a reason keeps it (SchedMD/slurm
src/slurmctld/node_mgr.c, `set_node_down`); Slurm 24.11 appends " : Not responding" to it with a new stamp
(GONE_SUFFIX), which is not a new failure: a VM that automatic repairs deleted after the health check drained it is
counted once. Such a hang counts as one failure of the node's host, but only when no
other node went silent within HANG_WINDOW_S of it: many nodes silent at once is the network, the controller or a scale
-in, not their hosts' hardware.

The ledger is one JSON file on the controller's state disk (next to slurmctld's StateSaveLocation, so it survives a
controller rebuild with that disk), written whole to a temporary file and renamed (atomic on one file system).
Standard library only: it runs on the controller from the node-program archive.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ndfleet_node.impact_categories import BURNIN_CATEGORIES, HOST_CATEGORIES, PREFIX, REPEAT_CHECK
from ndfleet_node.names import (
    AWAITING_BURNIN_REASON,
    BURNIN_REASON_PREFIX,
    DRAIN_REASON_PREFIX,
    HOST_COMMENT_PREFIX,
    REPEAT_HOST_REASON,
)
from ndfleet_node.scontrol import SlurmNode

DEFAULT_LEDGER = "/srv/slurm/ndfleet/host-ledger.json"
# A ledger larger than this is not ours (a host entry is ~200 bytes: 20,000 failures).
MAX_LEDGER_BYTES = 4 * 1024 * 1024
# How many failures make a host one that is not taken back.
REPEAT_AFTER = 2
# The check id a repeat is filed under (`ndfleet-node impact report --check host.repeat-failure` on the node): Azure's
# generic HPC hardware failure, which like every Resource.Hpc.Unhealthy.* category takes the host out of production
# for diagnosis and repair (Microsoft Learn, "Guest Health Reporting impact categories",
# https://learn.microsoft.com/azure/azure-impact-reporting/guest-health-impact-categories).
REPEAT_CATEGORY = PREFIX + str(HOST_CATEGORIES[REPEAT_CHECK])
# The health check's drain reason: "ndfleet:" and check ids (ndfleet_node.slurm_health.OWN_REASON).
_CHECK_REASON = re.compile(r"ndfleet:([A-Za-z0-9_.+-]+(?:,[A-Za-z0-9_.+-]+)*)")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# The reason slurmctld gives a node that missed SlurmdTimeout (src/slurmctld/ping_nodes.c, node_mgr.c).
NOT_RESPONDING_REASON = "Not responding"
# Slurm 24.11 keeps a drained node's reason when it sets the node DOWN for not answering and appends this, with a new
# stamp (seen in the twin: "ndfleet:burnin:busbw-below-floor : Not responding" once repairs deleted the VM).
GONE_SUFFIX = f" : {NOT_RESPONDING_REASON}"
# Nodes that went silent within this many seconds of each other are one event, not hardware (module doc).
HANG_WINDOW_S = 600
# Drains that say nothing about the hardware: waiting for burn-in, a test that could not start, the fabric at scale.
_NOT_HARDWARE = frozenset({"awaiting", "unresolved", "island-below-floor", "launch-error"})


class LedgerError(RuntimeError):
    """The ledger file cannot be read or written, or is not a ledger."""


@dataclass(frozen=True)
class Failure:
    host: str
    node: str
    reason: str
    time: str  # the drain's stamp ("2026-12-05T03:00:00"): with the node, what makes one failure one entry



def read_capped(path: Path, limit: int) -> bytes:
    """The file's bytes; ValueError naming the file when it holds more than `limit` (a state or settings file on the
    controller is never that large). OSError, FileNotFoundError included, is the caller's to name."""
    with path.open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path}: more than {limit} bytes")
    return data

def node_host(node: SlurmNode) -> str:
    """The physical host the node's health check published ("" when none, or not a host name)."""
    if not node.comment.startswith(HOST_COMMENT_PREFIX):
        return ""
    host = node.comment[len(HOST_COMMENT_PREFIX):]
    return host if _HOST.fullmatch(host) else ""


def hardware_failure(node: SlurmNode) -> bool:
    """Drained (or set DOWN, with jobs on it) by ndfleet for a fault of the machine: the health check's check ids, or
    a burn-in verdict against the host. Not: awaiting burn-in, a launch error or an island below its floor, an
    elastic VM Azure did not deliver, a repeat drain (already counted), an administrator's drain."""
    if not (node.drained or node.down) or node.reason == AWAITING_BURNIN_REASON or node.reason == REPEAT_HOST_REASON:
        return False
    if node.reason.endswith(GONE_SUFFIX):
        return False  # the drain was counted when it happened, under its own stamp
    if node.reason.startswith(BURNIN_REASON_PREFIX):
        verdict = node.reason[len(BURNIN_REASON_PREFIX):]
        return verdict not in _NOT_HARDWARE and BURNIN_CATEGORIES.get(f"burnin.{verdict}", "") is not None
    return node.reason.startswith(DRAIN_REASON_PREFIX) and _CHECK_REASON.fullmatch(node.reason) is not None


def hung(node: SlurmNode) -> bool:
    """Set DOWN by slurmctld because it stopped answering, with no reason of its own before (module doc)."""
    return node.down and node.reason == NOT_RESPONDING_REASON


def stamp_s(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def isolated_hangs(nodes: Iterable[SlurmNode]) -> list[SlurmNode]:
    """The hung nodes that went silent alone: a stamp that can be read, and no other hung node's within
    HANG_WINDOW_S of it."""
    silent = [(n, stamp_s(n.reason_time)) for n in nodes if hung(n)]
    return [n for n, at in silent if at is not None and not any(
        o is not n and (t is None or abs(t - at) <= HANG_WINDOW_S) for o, t in silent)]  # fmt: skip


def failures(nodes: Iterable[SlurmNode]) -> list[Failure]:
    """The hardware failures of a node listing whose host is known: its hardware failure drains, and the nodes that
    stopped answering on their own."""
    listed = list(nodes)
    out = []
    for node in [*filter(hardware_failure, listed), *isolated_hangs(listed)]:
        if host := node_host(node):
            out.append(Failure(host, node.name, node.reason, node.reason_time))
    return out


def read_ledger(path: Path) -> dict[str, list[Failure]]:
    """host -> its failures; an absent file is an empty ledger."""
    try:
        data = read_capped(path, MAX_LEDGER_BYTES)
    except FileNotFoundError:
        return {}
    except OSError as error:
        raise LedgerError(f"host ledger {path}: {error.strerror or error}") from None
    except ValueError as error:
        raise LedgerError(f"host ledger {error}") from None
    try:
        doc = json.loads(data)
        hosts = doc["hosts"]
        return {str(h): [Failure(str(h), str(e["node"]), str(e["reason"]), str(e["time"])) for e in entries]
                for h, entries in hosts.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise LedgerError(f"host ledger {path}: not a ledger ({type(error).__name__}: {error})") from None


def write_ledger(path: Path, ledger: dict[str, list[Failure]]) -> None:
    doc: dict[str, Any] = {"version": 1, "hosts": {
        h: [{"node": f.node, "reason": f.reason, "time": f.time} for f in entries]
        for h, entries in sorted(ledger.items())}}
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as error:
        raise LedgerError(f"host ledger {path}: {error.strerror or error}") from None


def record(ledger: dict[str, list[Failure]], seen: Iterable[Failure]) -> tuple[dict[str, list[Failure]], list[Failure]]:
    """The ledger with the failures not in it yet, and those of them that are repeats (the host's second or later
    failure). One drain is one failure however often it is seen: (node, reason, time) is its key."""
    out = {h: list(entries) for h, entries in ledger.items()}
    repeats = []
    for failure in seen:
        entries = out.setdefault(failure.host, [])
        if any((e.node, e.reason, e.time) == (failure.node, failure.reason, failure.time) for e in entries):
            continue
        if any(e.node == failure.node and grown_from(e.reason, failure.reason) for e in entries):
            continue  # the same drain, its reason since extended by the health check: counted when it began
        entries.append(failure)
        if len(entries) >= REPEAT_AFTER:
            repeats.append(failure)
    return out, repeats


def grown_from(first: str, later: str) -> bool:
    """`later` is the health check's drain reason `first` with more checks added (the periodic pass rewrites a drained
    node's reason to every check that fails now, with a new stamp: seen in the twin, "ndfleet:ib.ports" then
    "ndfleet:ib.ports,gpu.fabricmanager" on one drained node): one drain, not a second failure of the host."""
    was, now = _CHECK_REASON.fullmatch(first), _CHECK_REASON.fullmatch(later)
    if was is None or now is None:
        return False
    return set(was.group(1).split(",")) <= set(now.group(1).split(","))


def held_hosts(ledger: dict[str, list[Failure]]) -> set[str]:
    """Hosts that failed REPEAT_AFTER times or more: never taken back."""
    return {h for h, entries in ledger.items() if len(entries) >= REPEAT_AFTER}


def on_held_hosts(nodes: Iterable[SlurmNode], ledger: dict[str, list[Failure]]) -> list[SlurmNode]:
    """The answering nodes on a host the ledger holds that are not drained for it yet. The burn-in refuses such a
    node only when its host is published by then, and a node's health check publishes it at its first pass after
    registration, up to HealthCheckInterval later, while the burn-in looks every 2 minutes: a VM Azure placed on a held
    host (one whose repeat hung, so nothing reported the host) can be burned in and resumed first. The controller
    drains it when its host shows. A node that does not answer is left alone: it is the repeat itself, or a VM
    that is gone."""
    held = held_hosts(ledger)
    return [n for n in nodes if node_host(n) in held and n.reason != REPEAT_HOST_REASON and not n.not_responding]


def refusal(node: SlurmNode, ledger: dict[str, list[Failure]]) -> str:
    """Why `node` must not be resumed ("" when nothing in the ledger stands against it)."""
    host = node_host(node)
    if host and host in held_hosts(ledger):
        seen = ", ".join(f"{f.node} {f.reason} at {f.time or 'unknown time'}" for f in ledger[host])
        return f"its physical host {host} failed {len(ledger[host])} times ({seen})"
    return ""
