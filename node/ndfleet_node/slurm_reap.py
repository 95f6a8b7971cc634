"""`ndfleet-node slurm-reap`: on the Slurm controller, delete dynamic nodes that are gone.

A scale-set VM that automatic repairs (or a scale-in) deleted never says goodbye: its dynamic node stays DOWN and
NOT_RESPONDING in `sinfo` forever, while its replacement registers under a new name. A systemd timer on the
controller runs this every few minutes: a dynamic node that has not responded for `--after-seconds` is removed with
`scontrol delete nodename=...` (Slurm's way to remove a dynamic node; it refuses while the node has jobs). A node that
comes back later (slurmd restarted) registers again by itself.

Every scontrol call goes through ndfleet_node.scontrol (timeout, output cap, failures said with exit 0). One
delete that fails, hangs or says something odd does not stop the others: each gone node gets its own try, the
failures are reported, and the exit status is 1 if any failed (2: nodes not listed).
On the controller the module runs from /usr/local/lib/ndfleet (`python3 -m ndfleet_node.slurm_reap`, with the
modules it needs next to it: ndfleet/slurm/machines.py REAP_MODULES).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from datetime import datetime

from ndfleet_node.scontrol import Scontrol, SlurmError, SlurmNode

DEFAULT_AFTER_S = 1800


def since(node: SlurmNode) -> datetime | None:
    """When Slurm stopped hearing from the node: the stamp of "Reason=Not responding [slurm@2026-12-03T08:00:00]"."""
    try:
        return datetime.fromisoformat(node.reason_time) if node.reason_time else None
    except ValueError:
        return None


def gone(nodes: Sequence[SlurmNode], now: datetime, after_s: float) -> list[str]:
    out = []
    for n in nodes:
        when = since(n)
        words = n.state.split("+")
        dynamic = any(w.startswith("DYNAMIC") for w in words)
        if dynamic and words[0].rstrip("*") == "DOWN" and n.not_responding and when is not None \
                and (now - when).total_seconds() >= after_s:
            out.append(n.name)
    return out


def handle(args: argparse.Namespace) -> int:
    scontrol = Scontrol(args.scontrol, args.timeout)
    try:
        nodes = scontrol.nodes()
    except SlurmError as error:
        print(f"ndfleet-slurm-reap: cannot list nodes: {error}", file=sys.stderr)
        return 2
    failed: list[str] = []
    for name in gone(list(nodes.values()), datetime.now(), args.after_seconds):
        try:
            # Slurm's way to remove a dynamic node; it refuses while the node has jobs.
            scontrol.call("delete", f"nodename={name}")
        except SlurmError as error:
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
