"""`ndfleet-node slurm-reap`: on the Slurm controller, delete dynamic nodes that are gone.

A scale-set VM that automatic repairs (or a scale-in) deleted never says goodbye: its dynamic node stays DOWN and
NOT_RESPONDING in `sinfo` forever, while its replacement registers under a new name. A systemd timer on the
controller runs this every few minutes: a dynamic node that has not responded for `--after-seconds` is removed with
`scontrol delete nodename=...` (Slurm's way to remove a dynamic node; it refuses while the node has jobs). A node that
comes back later (slurmd restarted) registers again by itself.

Every scontrol call has a timeout and a bound on its output (ndfleet_node.runner); output that is not UTF-8 is
decoded with replacement. One delete that fails, hangs or says something odd does not stop the others: each gone
node gets its own try, the failures are reported, and the exit status is 1 if any failed (2: nodes not listed).
On the controller the module runs from /usr/local/lib/ndfleet (`python3 -m ndfleet_node.slurm_reap`, with the
modules it needs next to it: ndfleet/slurm/machines.py REAP_MODULES).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ndfleet_node.runner import run_tool
from ndfleet_node.slurm_health import split_node_line
from ndfleet_node.text import clip, decode

DEFAULT_AFTER_S = 1800
# `scontrol show node` for MaxNodeCount nodes is a few KiB each; more than this is not an answer we understand.
MAX_LIST_BYTES = 64 * 1024 * 1024
MAX_DELETE_BYTES = 64 * 1024


@dataclass(frozen=True)
class GoneCandidate:
    name: str
    dynamic: bool
    not_responding: bool
    down: bool
    since: datetime | None


def parse_nodes(text: str) -> list[GoneCandidate]:
    """Nodes from `scontrol show node --oneliner` (one node per line), read field by field (slurm_health's
    split_node_line): the reason's "[user@time]" stamp is found wherever the reason ends, also when Slurm prints
    more fields after it (Comment=, ReservationName=, Topology=, ... in 24.x and later)."""
    out = []
    for line in text.splitlines():
        node = split_node_line(line)
        fields = node.fields
        name = fields.get("NodeName")
        if not name:
            continue
        states = fields.get("State", "").split("+")
        since = None
        # "Reason=Not responding [slurm@2026-12-03T08:00:00]": the time Slurm stopped hearing from the node.
        if node.reason_time:
            try:
                since = datetime.fromisoformat(node.reason_time)
            except ValueError:
                since = None
        out.append(
            GoneCandidate(
                name=name,
                dynamic=any(s.startswith("DYNAMIC") for s in states),
                not_responding=any(s.startswith("NOT_RESPONDING") for s in states) or states[0].endswith("*"),
                down=states[0].rstrip("*") == "DOWN",
                since=since,
            )
        )
    return out


def gone(nodes: Sequence[GoneCandidate], now: datetime, after_s: float) -> list[str]:
    return [
        n.name
        for n in nodes
        if n.dynamic and n.down and n.not_responding and n.since is not None
        and (now - n.since).total_seconds() >= after_s
    ]


def delete_node(scontrol: Sequence[str], name: str, timeout_s: float) -> str:
    """Delete one node; "" on success, else why not (one line)."""
    result = run_tool([*scontrol, "delete", f"nodename={name}"], timeout_s, max_output_bytes=MAX_DELETE_BYTES)
    return clip(result.error, 300)


def handle(args: argparse.Namespace) -> int:
    scontrol = list(args.scontrol)
    shown = run_tool([*scontrol, "show", "node", "--oneliner"], args.timeout, max_output_bytes=MAX_LIST_BYTES + 1)
    if not shown.ok or len(shown.stdout) > MAX_LIST_BYTES:
        why = shown.error or f"more than {MAX_LIST_BYTES} bytes of output"
        print(f"ndfleet-slurm-reap: cannot list nodes: {why}", file=sys.stderr)
        return 2
    failed: list[str] = []
    for name in gone(parse_nodes(decode(shown.stdout)), datetime.now(), args.after_seconds):
        error = delete_node(scontrol, name, args.timeout)
        if error:
            print(f"ndfleet-slurm-reap: could not delete {name}: {error}", file=sys.stderr)
            failed.append(name)
        else:
            print(f"ndfleet-slurm-reap: deleted {name} (not responding for at least {args.after_seconds:.0f} s)")
    if failed:
        print(f"ndfleet-slurm-reap: {len(failed)} gone node(s) not deleted: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 <= value <= 10 * 365 * 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more, finite)")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("slurm-reap", help="on the controller: delete dynamic nodes that stopped responding")
    p.add_argument("--after-seconds", type=_seconds, default=DEFAULT_AFTER_S,
                   help="delete a node only after it has not responded for this long")
    p.add_argument("--scontrol", nargs="+", default=["scontrol"])
    p.add_argument("--timeout", type=_seconds, default=30.0, help="seconds for each scontrol call")
    p.set_defaults(handler=handle)


def main(argv: Sequence[str] | None = None) -> int:
    """`python3 -m ndfleet_node.slurm_reap` on the controller, which has no node program (ndfleet/slurm/machines.py)."""
    parser = argparse.ArgumentParser(prog="ndfleet-slurm-reap")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["slurm-reap", *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
