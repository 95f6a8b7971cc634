"""Ask each unhealthy host of a burn-in report to report itself: `ndfleet-node impact report` over ssh.

The impact must come from the node (its managed identity, its Hyper-V KVP data), so the burn-in, which runs
elsewhere, only asks it to: `ssh HOST sudo /opt/ndfleet/bin/ndfleet-node impact report --check burnin.<reason>
--detail ...`. The node files the Guest Health Report when its stack opted in (else logs it) and marks itself
Unhealthy. Each call is bounded in time; a host that cannot be reached is logged, not waited for.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import Any

from ndfleet_node.burnin.hosts import host_name_problem
from ndfleet_node.burnin.runner import ProcessRun

IMPACT_TIMEOUT_S = 180
NODE_PROGRAM = "/opt/ndfleet/bin/ndfleet-node"

Run = Callable[[Sequence[str], float], ProcessRun]


def report_impacts(report: dict[str, Any], run: Run, node_program: str, log: Callable[[str], None]) -> None:
    for host in report["hosts"]:
        if host["status"] != "unhealthy":
            continue
        if problem := host_name_problem(host["host"]):
            log(f"impact report not requested: {problem}")
            continue
        detail = f"failed with {', '.join(host['partners_failed'])}; busbw {host['busbw_gbps']} GB/s"
        remote = shlex.join(
            ["sudo", node_program, "impact", "report", "--check", f"burnin.{host['reason']}", "--detail", detail]
        )
        # `--` ends ssh's options: the host is the destination whatever it looks like (validated above as well).
        cmd = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20", "--", host["host"], remote]
        result = run(cmd, IMPACT_TIMEOUT_S)
        outcome = "timed out" if result.returncode is None else f"exit {result.returncode}"
        log(f"{host['host']}: impact report {outcome}")
