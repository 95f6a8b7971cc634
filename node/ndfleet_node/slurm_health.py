"""`ndfleet-node slurm-health`: Slurm's HealthCheckProgram on a compute node.

slurmd runs it every HealthCheckInterval (and at start). It runs the node's quick validation (the cheap checks,
not the bandwidth tests), then:
- a failing node is drained: `scontrol update NodeName=<node> State=DRAIN Reason="ndfleet:<check-id>[,...]"`;
  the validator's report stays where the health endpoint reads it, so the endpoint answers Unhealthy and the
  scale set's automatic repairs act;
- a passing node that ndfleet drained (reason starting "ndfleet:") is resumed; a drain by an administrator (any
  other reason) is left alone.

slurmd kills the program after 60 s (slurm.conf, HealthCheckProgram): `--validate-timeout` must stay below that.
The validator is a seam: any command that takes `--level quick --report PATH`, exits 0 healthy / 1 unhealthy /
2 could not run and writes the report format of docs/bootstrap.md. Every external call has a timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DRAIN_REASON_PREFIX = "ndfleet:"
OWN_REASON = re.compile(r"ndfleet:[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*")
DEFAULT_VALIDATOR = "/usr/local/sbin/validate-node"
DEFAULT_REPORT = "/run/ndfleet/report.json"
# The drain marker the node's metrics read (ndfleet_node.metrics.DEFAULT_DRAIN_FILE; this file also runs standalone,
# so it cannot import it: a test keeps the two equal).
DRAIN_MARKER = "/var/lib/ndfleet/drained"
# A reason longer than this is cut (Slurm keeps reasons short in sinfo -R output).
MAX_REASON_CHECKS = 4


@dataclass(frozen=True)
class Verdict:
    healthy: bool
    failed_checks: tuple[str, ...]  # check ids, or ("validate-error",) when the validator could not run

    @property
    def reason(self) -> str:
        ids = list(self.failed_checks[:MAX_REASON_CHECKS])
        if len(self.failed_checks) > MAX_REASON_CHECKS:
            ids.append(f"+{len(self.failed_checks) - MAX_REASON_CHECKS}")
        return DRAIN_REASON_PREFIX + ",".join(ids)


def run_validation(validator: Sequence[str], report: Path, timeout_s: float) -> Verdict:
    """Run the quick validation; a hang, a crash or an unreadable report counts as a failure of the node."""
    try:
        proc = subprocess.run(
            [*validator, "--level", "quick", "--report", str(report)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Verdict(False, ("validate-timeout",))
    except OSError:
        return Verdict(False, ("validate-error",))
    try:
        doc = json.loads(report.read_text())
    except (OSError, ValueError):
        return Verdict(False, ("validate-error",))
    failed = tuple(
        str(c.get("id")) for c in doc.get("checks", []) if isinstance(c, dict) and c.get("status") == "fail"
    )
    if proc.returncode == 0 and doc.get("status") == "healthy" and not failed:
        return Verdict(True, ())
    return Verdict(False, failed or ("validate-error",))


@dataclass(frozen=True)
class NodeState:
    states: tuple[str, ...]  # e.g. ("IDLE", "DRAIN")
    reason: str

    @property
    def drained(self) -> bool:
        return any(s in ("DRAIN", "DRAINED", "DRAINING") for s in self.states)

    @property
    def drained_by_health_check(self) -> bool:
        """Drained by this program: "ndfleet:" and check ids only. Other ndfleet drains ("ndfleet: awaiting
        burn-in", "ndfleet:burnin:<reason>") and an administrator's are not ours to lift."""
        return self.drained and OWN_REASON.fullmatch(self.reason) is not None


def parse_node(text: str) -> NodeState:
    """State and reason from `scontrol show node NAME --oneliner` (Reason is last and may hold spaces)."""
    state = ""
    reason = ""
    for token in text.split():
        if token.startswith("State="):
            state = token[len("State=") :]
    if " Reason=" in text:
        reason = text.split(" Reason=", 1)[1].strip()
        # "ndfleet:gpu.ecc [root@2026-12-03T08:00:00]": drop the who/when suffix
        if reason.endswith("]") and " [" in reason:
            reason = reason.rsplit(" [", 1)[0]
    return NodeState(tuple(s.rstrip("*~#!%$@^-") for s in state.split("+") if s), reason)


class Scontrol:
    def __init__(self, command: Sequence[str], timeout_s: float) -> None:
        self.command = list(command)
        self.timeout_s = timeout_s

    def _run(self, *args: str) -> str:
        proc = subprocess.run(
            [*self.command, *args], capture_output=True, text=True, timeout=self.timeout_s, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"scontrol {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def node(self, name: str) -> NodeState:
        return parse_node(self._run("show", "node", name, "--oneliner"))

    def drain(self, name: str, reason: str) -> None:
        self._run("update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")

    def resume(self, name: str) -> None:
        self._run("update", f"NodeName={name}", "State=RESUME")


@dataclass(frozen=True)
class Outcome:
    message: str  # what was done, for the log
    drained: bool  # whether the node is drained afterwards, for whatever reason


def act(scontrol: Scontrol, node: str, verdict: Verdict) -> Outcome:
    """Drain or resume the node as the verdict says."""
    state = scontrol.node(node)
    if not verdict.healthy:
        if state.drained and state.reason == verdict.reason:
            return Outcome(f"{node}: still failing ({verdict.reason}), already drained", True)
        if state.drained and not state.drained_by_health_check:
            # Keep the other drain's reason (burn-in, an administrator): it is theirs to lift; the report still
            # turns the health endpoint Unhealthy.
            return Outcome(f"{node}: failing ({verdict.reason}), already drained for: {state.reason}", True)
        scontrol.drain(node, verdict.reason)
        return Outcome(f"{node}: drained: {verdict.reason}", True)
    if state.drained_by_health_check:
        scontrol.resume(node)
        return Outcome(f"{node}: validation passes again: resumed (was {state.reason})", False)
    return Outcome(f"{node}: healthy", state.drained)


def mirror_drain(marker: Path, outcome: Outcome) -> None:
    """Keep the drain marker that the node's metrics read (`ndfleet_node_drained`, alert NodeDrained) equal to
    Slurm's view: present with the log line while the node is drained, absent otherwise. Best effort: a marker that
    cannot be written must not fail the health check."""
    try:
        if outcome.drained:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(outcome.message + "\n", encoding="utf-8")
        else:
            marker.unlink(missing_ok=True)
    except OSError as error:
        print(f"ndfleet-slurm-health: drain marker {marker}: {error}", file=sys.stderr)


def default_node_name() -> str:
    # slurmd sets SLURMD_NODENAME for the programs it runs; a dynamic node is named after its host name.
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def handle(args: argparse.Namespace) -> int:
    verdict = run_validation(args.validator, Path(args.report), args.validate_timeout)
    node = args.node_name or default_node_name()
    code = 0 if verdict.healthy else 1
    try:
        outcome = act(Scontrol(args.scontrol, args.scontrol_timeout), node, verdict)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as error:
        # E.g. at slurmd's start, before the node has registered. The exit code still tells the truth: newer slurmd
        # run the program at start until it exits 0 and only then register, which keeps a failing node out.
        print(f"ndfleet-slurm-health: {node}: {verdict.reason if not verdict.healthy else 'healthy'}; {error}",
              file=sys.stderr)
        return code
    mirror_drain(Path(args.drain_marker), outcome)
    print(f"ndfleet-slurm-health: {outcome.message}")
    return code


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "slurm-health",
        help="Slurm HealthCheckProgram: quick validation, drain a failing node, resume one that recovered",
    )
    p.add_argument("--validator", nargs="+", default=[DEFAULT_VALIDATOR], help="validation command (seam)")
    p.add_argument("--report", default=DEFAULT_REPORT, help="where the validator writes its report")
    p.add_argument(
        "--validate-timeout", type=float, default=600.0, help="seconds before the validation counts as failed"
    )
    p.add_argument("--scontrol", nargs="+", default=["scontrol"], help="scontrol command")
    p.add_argument("--scontrol-timeout", type=float, default=30.0)
    p.add_argument(
        "--drain-marker", default=DRAIN_MARKER, help=f"kept present while the node is drained ({DRAIN_MARKER})"
    )
    p.add_argument("--node-name", default="", help="Slurm node name (default: SLURMD_NODENAME or the short host name)")
    p.set_defaults(handler=handle)


def main(argv: Sequence[str] | None = None) -> int:
    """Run as a standalone script (shipped to the machines as one file until the node program is a zipapp)."""
    parser = argparse.ArgumentParser(prog="ndfleet-slurm-health")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["slurm-health", *(sys.argv[1:] if argv is None else argv)])
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
