"""`ndfleet-node burnin-slurm`: burn in Slurm nodes, resume the ones that pass, drain the bad ones with the reason.

    ndfleet-node burnin-slurm --report PATH [--nodes HOSTLIST | --partition P] [--level quick|full]
                              [--report-impact]

Convention shared with the Slurm set-up: a new node registers DRAINED with the reason `ndfleet: awaiting
burn-in` (`AWAITING_REASON`), so no job lands on it before it has passed with known-good partners. Without
`--nodes`, the wrapper burns in every node of the partition (default: all) that carries that reason, together
with up to `--idle-partners N` idle in-service nodes as partners (off by default: Slurm could start a job on
them during the test); with `--nodes`, exactly those.

After the burn-in (`ndfleet_node.burnin`, run over ssh by mpirun, outside Slurm: drained nodes take no jobs):

- a healthy node held by burn-in (awaiting it, or `ndfleet:burnin:*`) is resumed (`scontrol update ... RESUME`);
  any other drain (the Slurm health check's `ndfleet:<check-id>`, an administrator's) is left alone;
- an unhealthy node is drained with `Reason="ndfleet:burnin:<reason>"` (busbw-below-floor, hang, wrong-results,
  launch-error), an unresolved one with `ndfleet:burnin:unresolved`;
- when the island-wide test misses its floor no node is resumed (the fault is the fabric at scale, not a host);
- with `--report-impact`, each unhealthy node is asked over ssh to run `ndfleet-node impact report --check
  burnin.<reason>`: it files the Guest Health Report (when the stack opted in) and marks itself Unhealthy, so
  the scale set's automatic repairs replace it on another host.

Exit codes as `burnin`: 0 all healthy, 1 some not, 2 could not run (no Slurm tools, no nodes, bad settings).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ndfleet_node.burnin import EXIT_CANNOT_RUN, EXIT_HEALTHY, EXIT_UNHEALTHY, run_burnin
from ndfleet_node.burnin.notify import NODE_PROGRAM, Run, report_impacts
from ndfleet_node.burnin.report import summary_lines, write_report
from ndfleet_node.burnin.runner import ProcessRun, mpirun_executor, run_bounded
from ndfleet_node.burnin.settings import LEVELS, SettingsError, load_settings

AWAITING_REASON = "ndfleet: awaiting burn-in"
BURNIN_REASON_PREFIX = "ndfleet:burnin:"


def held_by_burnin(reason: str) -> bool:
    """A drain only the burn-in may lift: awaiting burn-in, or failed it. Other ndfleet tools that resume nodes
    they drained themselves (the Slurm health check resumes `ndfleet:<check-id>` drains) must leave these alone."""
    return reason.startswith(AWAITING_REASON) or reason.startswith(BURNIN_REASON_PREFIX)
SLURM_TIMEOUT_S = 60


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # sinfo %T, e.g. idle, drained, draining, mixed
    reason: str  # sinfo %E ("none" when there is none)


class SlurmError(Exception):
    pass


class Slurm:
    """The few scontrol / sinfo calls the wrapper needs, each bounded in time."""

    def __init__(self, run: Run):
        self.run = run

    def _call(self, cmd: list[str]) -> str:
        result = self.run(cmd, SLURM_TIMEOUT_S)
        if result.returncode != 0:
            why = "timed out" if result.returncode is None else f"exit {result.returncode}"
            raise SlurmError(f"`{shlex.join(cmd)}` failed ({why}): {result.output.strip()[:300]}")
        return result.output

    def hostnames(self, hostlist: str) -> list[str]:
        return self._call(["scontrol", "show", "hostnames", hostlist]).split()

    def nodes(self, partition: str | None) -> list[SlurmNode]:
        cmd = ["sinfo", "--noheader", "--Node", "--format=%N|%T|%E"]
        if partition:
            cmd.append(f"--partition={partition}")
        seen: dict[str, SlurmNode] = {}
        for line in self._call(cmd).splitlines():
            parts = line.strip().split("|", 2)
            if len(parts) == 3 and parts[0]:
                seen.setdefault(parts[0], SlurmNode(parts[0], parts[1], parts[2]))
        return list(seen.values())

    def resume(self, node: str) -> None:
        self._call(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    def drain(self, node: str, reason: str) -> None:
        self._call(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])


def choose_hosts(
    slurm: Slurm, nodes: str | None, partition: str | None, idle_partners: int = 0
) -> tuple[list[str], dict[str, SlurmNode]]:
    """The hosts to burn in, and what Slurm says about every node of the partition."""
    known = {n.name: n for n in slurm.nodes(partition)}
    if nodes:
        return slurm.hostnames(nodes), known
    awaiting = [n.name for n in known.values() if n.reason.startswith(AWAITING_REASON)]
    if not awaiting:
        return [], known
    # In-service idle nodes as known-good partners only when asked: Slurm may start a job on them meanwhile.
    partners = [n.name for n in known.values() if n.state == "idle" and n.name not in awaiting][:idle_partners]
    return awaiting + partners, known


def apply_verdicts(
    slurm: Slurm, report: dict[str, Any], known: dict[str, SlurmNode], log: Callable[[str], None]
) -> None:
    island_ok = report["island"] is None or report["island"]["outcome"] == "pass"
    for host in report["hosts"]:
        name, status = host["host"], host["status"]
        if status == "healthy":
            current = known.get(name)
            # Only burn-in's own drains are lifted: a health-check drain (`ndfleet:<check-id>`) is the health
            # check's to lift, and an administrator's is the administrator's.
            if current is not None and held_by_burnin(current.reason) and island_ok:
                slurm.resume(name)
                log(f"{name}: resumed")
            elif current is not None and held_by_burnin(current.reason):
                slurm.drain(name, BURNIN_REASON_PREFIX + "island-below-floor")
                log(f"{name}: passed its pair tests, kept drained: the island-wide test missed its floor")
        else:
            reason = host["reason"] if status == "unhealthy" else "unresolved"
            slurm.drain(name, BURNIN_REASON_PREFIX + reason)
            log(f"{name}: drained, ndfleet:burnin:{reason}")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "burnin-slurm",
        help="burn in Slurm nodes awaiting it; resume the good, drain the bad with the reason",
        description="Runs `burnin` over Slurm nodes (default: those drained with reason "
        f"'{AWAITING_REASON}'), resumes the ones that pass, drains the others with Reason=ndfleet:burnin:<why>.",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument("--nodes", metavar="HOSTLIST", help="Slurm hostlist, e.g. nd-ib00-[000000-00000f]")
    p.add_argument("--partition", help="only nodes of this partition")
    p.add_argument("--idle-partners", type=int, default=0, metavar="N", help="add N idle in-service nodes")
    p.add_argument("--report", type=Path, required=True)
    p.add_argument("--level", choices=LEVELS, default="quick")
    p.add_argument("--config", type=Path, default=None, help="node JSON (default: /etc/ndfleet/node.json)")
    p.add_argument("--test-timeout", type=int, default=None, metavar="S")
    p.add_argument("--report-impact", action="store_true", help="ask each unhealthy node to file its impact report")
    p.add_argument("--node-program", default=NODE_PROGRAM, help="ndfleet-node's path on the nodes")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="ndfleet-burnin-slurm-") as workdir:

        def run(cmd: Sequence[str], timeout: float) -> ProcessRun:
            return run_bounded(cmd, timeout, 5.0, Path(workdir))

        slurm = Slurm(run)
        try:
            settings = load_settings(args.config)
            hosts, known = choose_hosts(slurm, args.nodes, args.partition, max(0, args.idle_partners))
        except (SettingsError, SlurmError) as exc:
            log(f"burnin-slurm: {exc}")
            return EXIT_CANNOT_RUN
        if len(hosts) < 2:
            log(f"burnin-slurm: {len(hosts)} node(s) to burn in (nodes drained with '{AWAITING_REASON}' plus idle "
                "partners); need at least 2")  # fmt: skip
            return EXIT_CANNOT_RUN if not hosts else EXIT_UNHEALTHY
        if args.test_timeout is not None:
            settings = replace(settings, timeout_override_s=args.test_timeout)
        log(f"burnin-slurm: {len(hosts)} node(s): {', '.join(hosts)}")
        report = run_burnin(hosts, settings, args.level, mpirun_executor(settings, args.level, Path(workdir)), log=log)
        write_report(args.report, report)
        for line in summary_lines(report):
            print(line)
        try:
            apply_verdicts(slurm, report, known, log)
        except SlurmError as exc:
            log(f"burnin-slurm: {exc}")
            return EXIT_CANNOT_RUN
        if args.report_impact:
            report_impacts(report, run, args.node_program, log)
    return EXIT_HEALTHY if report["status"] == "healthy" else EXIT_UNHEALTHY
