"""The one Slurm client and the one reader of `scontrol show node --oneliner` for every ndfleet program that talks
to Slurm: the health check, the reaper, the state exporter, the burn-in and the elastic programs.

Every call has a timeout and an output cap (ndfleet_node.runner); a call that exits 0 but says Slurm failed is a
failure too. Records are split on "\\n" only: a reason may hold U+2028 or U+0085, which `str.splitlines()` would
take for line ends and so read a forged `NodeName=ghost` as a node.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ndfleet_node.names import BOOT_VERSION_FEATURE_PREFIX
from ndfleet_node.runner import run_tool
from ndfleet_node.text import clip, decode, first_line

# A listing of every node: up to 16,384 lines (MaxNodeCount of the largest plan, 10,240 nodes, is 12,288 with
# ndfleet/slurm/conf.py's 20 % headroom) of 4 KiB each (a Slurm 23.11 / 24.11 line with an ordinary reason is about
# 1 KiB: tests/fakes/slurm_burnin/bin/scontrol). More is not an answer we understand.
MAX_LIST_BYTES = 16384 * 4096
# Any other call: one node's line, a reservation, or `show hostnames` of 16,384 names of up to 64 bytes.
MAX_CALL_BYTES = 1024 * 1024
# scontrol reports Slurm's failures with slurm_perror ("slurm_load_node error: Socket timed out on send/recv
# operation", SchedMD src/scontrol/scontrol.c) and error() ("scontrol: error: ..."), at times with exit status 0.
FAILED = re.compile(r"(?i)\berror\b|timed out|unable to contact")
# The fixed fields come before the free-text "Reason=<text> [<user>@<time>]"; optional fields (Comment=, Extra=,
# InstanceId=, ReservationName=, Topology=, ... in 24.x) may follow it (SchedMD src/api/node_info.c).
_FIELD = re.compile(r"(?:^|\s)([A-Za-z_]+)=(\S*)")
_REASON = re.compile(r"(?:^|\s)Reason=")
_STAMP = re.compile(r" \[([^\]\s@]*)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\](?=$|\s+[A-Za-z_]+=)")
_AFTER_REASON = re.compile(r"\s(?:Comment|Extra|InstanceId|InstanceType|ReservationName|TLSCertTokenSet|Topology"
                           r"|Parameters)=")

_COMMENT = re.compile(r"\sComment=(\S*)")


class SlurmError(RuntimeError):
    """A Slurm call failed, hung, said too much, or answered something that is not a node."""


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # scontrol's State as printed, e.g. "IDLE+DRAIN", "DOWN*+DYNAMIC_NORM"
    reason: str  # without its "[user@time]" stamp
    reason_time: str  # the stamp's time ("2026-12-03T08:00:00"); "" without a stamp
    partitions: tuple[str, ...]
    comment: str = ""  # the Comment= field's first word ("" without one): where ndfleet notes the physical host
    # AvailableFeatures= (scontrol show node; slurm.conf(5), Features), split at commas: island-<name>, boot-<version>
    features: tuple[str, ...] = ()

    @property
    def boot_version(self) -> str:
        """The boot version the node registered with (its `boot-<version>` feature, ndfleet/boot_version.py); ""
        when it has none or not one of 12 lower-case hex digits (an elastic CLOUD node, an older node)."""
        for feature in self.features:
            version = feature.removeprefix(BOOT_VERSION_FEATURE_PREFIX)
            if version != feature and len(version) == 12 and all(c in "0123456789abcdef" for c in version):
                return version
        return ""

    @property
    def flags(self) -> set[str]:
        """The state words without scontrol's suffixes (* not responding, ~ powered down, # powering up, ...)."""
        return {s.rstrip("*~#!%$@^-") for s in self.state.upper().split("+") if s}

    @property
    def drained(self) -> bool:
        return bool(self.flags & {"DRAIN", "DRAINED", "DRAINING"})

    @property
    def down(self) -> bool:
        return "DOWN" in self.flags  # POWERED_DOWN and POWERING_DOWN are other words

    @property
    def has_jobs(self) -> bool:
        """Jobs run (or are ending) on it: ALLOCATED, MIXED or COMPLETING (scontrol's node state words)."""
        return bool(self.flags & {"ALLOCATED", "MIXED", "COMPLETING"})

    @property
    def not_responding(self) -> bool:
        return "*" in self.state or "NOT_RESPONDING" in self.flags


def parse_line(line: str) -> SlurmNode | None:
    """One node line, field by field; None without NodeName= and State=. A "State=" inside the reason, or a field
    printed after it, never counts as a fixed field."""
    reason_at = _REASON.search(line)
    fields: dict[str, str] = {}
    for key, value in _FIELD.findall(line[: reason_at.start()] if reason_at else line):
        fields.setdefault(key, value)
    reason = when = ""
    comment = fields.get("Comment", "")
    if reason_at:
        rest = line[reason_at.end():]
        if found := _COMMENT.search(rest):
            comment = found.group(1)
        if stamp := _STAMP.search(rest):
            reason, when = rest[: stamp.start()], stamp.group(2)
        else:
            after = _AFTER_REASON.search(rest)
            reason = rest[: after.start()] if after else rest
    if not fields.get("NodeName") or "State" not in fields:
        return None
    parts = tuple(fields.get("Partitions", "").split(","))
    features = tuple(f for f in fields.get("AvailableFeatures", "").split(",") if f and f != "(null)")
    return SlurmNode(fields["NodeName"], fields["State"], reason.strip(), when, parts, comment, features)


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: str  # Slurm's host list expression as printed ("nd-ib00-[000001-000002]"); "" without nodes
    flags: frozenset[str]


def parse_reservations(text: str) -> dict[str, Reservation]:
    """`scontrol show reservation --oneliner`: one line per reservation ("No reservations in the system" when none:
    no line has ReservationName=). Split on "\\n" only, like the node listing."""
    out: dict[str, Reservation] = {}
    for line in text.split("\n"):
        fields: dict[str, str] = {}
        for key, value in _FIELD.findall(line):
            fields.setdefault(key, value)
        if name := fields.get("ReservationName"):
            nodes = "" if fields.get("Nodes", "(null)") == "(null)" else fields.get("Nodes", "")
            flags = frozenset(f for f in fields.get("Flags", "").split(",") if f)
            out.setdefault(name, Reservation(name, nodes, flags))
    return out


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """Every node of a listing (the first line of each name). Split on "\\n" only (see the module docstring)."""
    out: dict[str, SlurmNode] = {}
    for line in text.split("\n"):
        if (node := parse_line(line)) is not None:
            out.setdefault(node.name, node)
    return out


class Scontrol:
    def __init__(self, argv: Sequence[str] = ("scontrol",), timeout_s: float = 30) -> None:
        self.argv = tuple(argv)
        self.timeout_s = timeout_s

    def call(self, *args: str, max_bytes: int = MAX_CALL_BYTES) -> str:
        """stdout as text; SlurmError when scontrol fails, hangs, says more than `max_bytes` or says it failed (on
        stderr, or on stdout of a call that is not `show`, whose stdout is data)."""
        result = run_tool([*self.argv, *args], self.timeout_s, max_output_bytes=max_bytes + 1)
        what = f"scontrol {clip(' '.join(args), 120)}"
        if not result.ok:
            raise SlurmError(f"{what}: {clip(result.error, 300)}")
        if len(result.stdout) > max_bytes:
            raise SlurmError(f"{what}: more than {max_bytes} bytes of output")
        out, said = decode(result.stdout), decode(result.stderr)
        if args[:1] != ("show",):
            said += "\n" + out
        if m := FAILED.search(said):
            raise SlurmError(f"{what}: exit 0 but says {first_line(said[m.start():])}")
        return out

    def nodes(self) -> dict[str, SlurmNode]:
        return parse_nodes(self.call("show", "node", "--oneliner", max_bytes=MAX_LIST_BYTES))

    def node(self, name: str) -> SlurmNode:
        """This node's line (NodeName=<name>, with a State=); SlurmError without one."""
        if (node := parse_nodes(self.call("show", "node", name, "--oneliner")).get(name)) is None:
            raise SlurmError(f"scontrol show node {name}: no NodeName=/State= line for it")
        return node

    def reservations(self) -> dict[str, Reservation]:
        return parse_reservations(self.call("show", "reservation", "--oneliner", max_bytes=MAX_LIST_BYTES))

    def hostnames(self, hostlist: str) -> list[str]:
        return self.call("show", "hostnames", hostlist).split()

    def update(self, nodes: Sequence[str], *settings: str) -> None:
        if not nodes:
            raise SlurmError("scontrol update: no node")  # `NodeName=` alone would not name nothing safely
        self.call("update", f"NodeName={','.join(nodes)}", *settings)

    def drain(self, name: str, reason: str) -> None:
        self.update([name], "State=DRAIN", f"Reason={reason}")

    def down(self, name: str, reason: str) -> None:
        """Out at once: Slurm kills the node's jobs and requeues those that may be requeued (scontrol, "DOWN")."""
        self.update([name], "State=DOWN", f"Reason={reason}")

    def resume(self, name: str) -> None:
        self.update([name], "State=RESUME")
