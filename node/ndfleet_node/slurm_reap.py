"""`ndfleet-node slurm-reap`: on the Slurm controller, delete dynamic nodes that are gone.

A scale-set VM that automatic repairs (or a scale-in) deleted never says goodbye: its dynamic node stays DOWN and
NOT_RESPONDING in `sinfo` forever, while its replacement registers under a new name. A systemd timer on the
controller runs this every few minutes: a dynamic node that has not responded for `--after-seconds` is removed with
`scontrol delete nodename=...` (Slurm's way to remove a dynamic node; it refuses while the node has jobs). A node that
comes back later (slurmd restarted) registers again by itself.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

DEFAULT_AFTER_S = 1800


@dataclass(frozen=True)
class GoneCandidate:
    name: str
    dynamic: bool
    not_responding: bool
    down: bool
    since: datetime | None


def parse_nodes(text: str) -> list[GoneCandidate]:
    """Nodes from `scontrol show node --oneliner` (one node per line)."""
    out = []
    for line in text.splitlines():
        fields = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep and key not in fields:
                fields[key] = value
        name = fields.get("NodeName")
        if not name:
            continue
        states = fields.get("State", "").split("+")
        since = None
        # "Reason=Not responding [slurm@2026-12-03T08:00:00]"
        if " Reason=" in line and line.rstrip().endswith("]") and "@" in line:
            stamp = line.rstrip()[:-1].rsplit("@", 1)[1]
            try:
                since = datetime.fromisoformat(stamp)
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


def handle(args: argparse.Namespace) -> int:
    scontrol = list(args.scontrol)
    try:
        shown = subprocess.run([*scontrol, "show", "node", "--oneliner"], capture_output=True, text=True,
                               timeout=args.timeout, check=True)
    except (subprocess.SubprocessError, OSError) as error:
        print(f"ndfleet-slurm-reap: cannot list nodes: {error}", file=sys.stderr)
        return 2
    code = 0
    for name in gone(parse_nodes(shown.stdout), datetime.now(), args.after_seconds):
        proc = subprocess.run([*scontrol, "delete", f"nodename={name}"], capture_output=True, text=True,
                              timeout=args.timeout, check=False)
        if proc.returncode == 0:
            print(f"ndfleet-slurm-reap: deleted {name} (not responding for at least {args.after_seconds:.0f} s)")
        else:
            print(f"ndfleet-slurm-reap: could not delete {name}: {proc.stderr.strip()}", file=sys.stderr)
            code = 1
    return code


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("slurm-reap", help="on the controller: delete dynamic nodes that stopped responding")
    p.add_argument("--after-seconds", type=float, default=DEFAULT_AFTER_S,
                   help="delete a node only after it has not responded for this long")
    p.add_argument("--scontrol", nargs="+", default=["scontrol"])
    p.add_argument("--timeout", type=float, default=30.0)
    p.set_defaults(handler=handle)


def main(argv: Sequence[str] | None = None) -> int:
    """Run as a standalone script (shipped to the machines as one file until the node program is a zipapp)."""
    parser = argparse.ArgumentParser(prog="ndfleet-slurm-reap")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["slurm-reap", *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
