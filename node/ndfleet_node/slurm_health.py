"""`ndfleet-node slurm-health`: Slurm's HealthCheckProgram on a compute node.

slurmd runs it every HealthCheckInterval (and at start). It runs the node's quick validation (the cheap checks,
not the bandwidth tests), then:
- a failing node is drained: `scontrol update NodeName=<node> State=DRAIN Reason="ndfleet:<check-id>[,...]"`;
  the validator's report stays where the health endpoint reads it, so the endpoint answers Unhealthy and the
  scale set's automatic repairs act;
- a node with jobs that fails a check with a hardware category (impact_categories.category_for) is drained and
  then set DOWN, with the same reason: Slurm kills its jobs and requeues those that may be requeued, where a drain
  alone would let them hang on a broken GPU or link (the drain keeps the node out when ReturnToService=2 lifts the
  DOWN); and the impact report is started (`--impact-launch`, a transient unit of its own: slurmd does not wait for
  it), once, by the pass that takes the node out (docs/slurm.md, "When a node breaks under a job");
- a passing node that this program drained or set DOWN (reason "ndfleet:<check-id>[,...]") is resumed; a drain by an
  administrator or by the burn-in (any other reason) is left alone;
- a node drained by the burn-in's verdict against its host, or for its host's second failure, starts the impact
  report for that check at each pass until the report has run (the failure marker of the node JSON names it);
- a passing node that has never been put in line for burn-in on this OS disk (no `--burnin-marker` file) is
  drained `ndfleet:burnin:awaiting` (names.AWAITING_BURNIN_REASON), then the marker is written. A new VM
  registers drained with that reason already (slurmd --conf "State=DRAIN Reason=..."), so this catches the one
  case the registration cannot: a reimaged VM that comes back under its old name, which slurmctld still knows.

As the Epilog (`--epilog`) it calls no Slurm command (SchedMD's Prolog and Epilog Guide): its exit status is the
verdict (non-zero: slurmctld drains the node "Epilog error"), and the failed checks go to its marker, which the next
periodic pass reads into its own verdict and names in the drain (slurm_epilog, docs/slurm.md). A burn-in job's end
is not checked.

slurmd kills the program after 60 s (slurm.conf, HealthCheckProgram): `--validate-timeout` must stay below that.
The validator is a seam: any command that takes `--level quick --report PATH`, exits 0 healthy / 1 unhealthy /
2 could not run and writes the report format of docs/bootstrap.md. Every external call has a timeout and a bound
on its output; a report or an scontrol answer this program cannot understand is a failure with a named reason,
never a pass.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ndfleet_node.checks import level_ids
from ndfleet_node.impact import KVP_POOL_3, ImpactError, failed_marker_path, physical_host_name
from ndfleet_node.impact_categories import REPEAT_CHECK, category_for
from ndfleet_node.names import (
    AWAITING_BURNIN_REASON,
    BURNIN_REASON_PREFIX,
    DRAIN_MARKER,
    DRAIN_REASON_PREFIX,
    EPILOG_ERROR_REASON,
    HOST_COMMENT_PREFIX,
    REPEAT_HOST_REASON,
    ROLL_REASON_PREFIX,
)
from ndfleet_node.report import MAX_REPORT_BYTES, read_regular
from ndfleet_node.runner import run_tool
from ndfleet_node.scontrol import Scontrol, SlurmError, SlurmNode
from ndfleet_node.slurm_epilog import (
    CHECK_ID,
    EPILOG_MARKER,
    burnin_job,
    read_epilog_failure,
    take_lock,
    write_epilog_failure,
)

OWN_REASON = re.compile(r"ndfleet:[A-Za-z0-9_.+-]+(,[A-Za-z0-9_.+-]+)*")
DEFAULT_VALIDATOR = "/usr/local/sbin/validate-node"
DEFAULT_REPORT = "/run/ndfleet/report.json"
# Kept while this OS disk has been put in line for burn-in once (gone on reimage, kept across reboots).
BURNIN_MARKER = "/var/lib/ndfleet/slurm-burnin-queued"
# The level the periodic health check validates at (the Epilog may run a longer one: --level).
PERIODIC_LEVEL = "quick"
# A reason longer than this is cut (Slurm keeps reasons short in sinfo -R output).
MAX_REASON_CHECKS = 4
# systemd-run --no-block returns once the transient unit is queued; slurmd kills this program at 60 s.
IMPACT_LAUNCH_TIMEOUT_S = 10.0


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

    @property
    def hardware(self) -> bool:
        """A failed check files under a Guest Health Reporting category: the host, not the software, is at fault."""
        return any(category_for(c) is not None for c in self.failed_checks)


def _check_id(value: Any) -> str:
    """A check id as it may appear in a drain reason: the validator's id, or a named stand-in for garbage."""
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    return text if CHECK_ID.fullmatch(text) else "validate-bad-check-id"


def verdict_from_report(returncode: int, doc: Any) -> Verdict:
    """The verdict a report gives; any shape other than docs/bootstrap.md's is a failure named validate-bad-report."""
    if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list):
        return Verdict(False, ("validate-bad-report",))
    checks = doc["checks"]
    if not all(isinstance(c, dict) for c in checks):
        return Verdict(False, ("validate-bad-report",))
    # A check whose status is neither pass nor skip (fail, or one not understood) fails the node.
    failed = tuple(dict.fromkeys(_check_id(c.get("id")) for c in checks if c.get("status") not in ("pass", "skip")))
    if returncode == 0 and doc.get("status") == "healthy" and not failed:
        return Verdict(True, ())
    return Verdict(False, failed or ("validate-error",))


def run_validation(validator: Sequence[str], report: Path, timeout_s: float, level: str = "quick") -> Verdict:
    """Run the validation at `level` (quick; the Epilog's `epilog` adds the short measured floor); a hang, a crash
    or an unreadable report counts as a failure of the node."""
    result = run_tool([*validator, "--level", level, "--report", str(report)], timeout_s)
    if result.timed_out:
        return Verdict(False, ("validate-timeout",))
    if result.rc is None or result.rc == 127:
        return Verdict(False, ("validate-error",))
    try:
        raw = read_regular(str(report))
    except OSError:
        return Verdict(False, ("validate-error",))
    if len(raw) > MAX_REPORT_BYTES:
        return Verdict(False, ("validate-bad-report",))
    try:
        doc = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return Verdict(False, ("validate-bad-report",))
    return verdict_from_report(result.rc, doc)


def _no_constant(name: str) -> float:
    # NaN / Infinity are not JSON; a report holding one is not understood.
    raise ValueError(f"non-finite number {name} in the report")


def held_by_health_check(node: SlurmNode) -> bool:
    """Drained or set DOWN by this program: "ndfleet:" and check ids only. The burn-in's drains ("ndfleet:burnin:...",
    awaiting it or failed by it) and an administrator's are not ours to lift."""
    return ((node.drained or node.down) and not node.reason.startswith(BURNIN_REASON_PREFIX)
            and OWN_REASON.fullmatch(node.reason) is not None)


def queued_for_burnin(node: SlurmNode) -> bool:
    """Held for the burn-in (awaiting it, or failed by it): the node is in the burn-in's hands."""
    return node.drained and node.reason.startswith(BURNIN_REASON_PREFIX)


@dataclass(frozen=True)
class Outcome:
    message: str  # what was done, for the log
    drained: bool  # whether the node is out of service afterwards (drained, or DOWN by us), for whatever reason
    queued_for_burnin: bool = False  # the node is (now) in the burn-in's hands: write the burn-in marker
    took_out: bool = False  # this pass drained it or set it DOWN for the verdict's reason: the fault is new
    # The burn-in drained it for a host fault Azure takes reports for (burnin.<reason>), or the controller's host
    # ledger for its host's second failure (impact_categories.REPEAT_CHECK): the node files that report itself.
    burnin_check: str = ""


def burnin_failure(state: SlurmNode) -> str:
    """`burnin.<reason>` when the burn-in drained the node for a fault of its host (a bad cable, a slow link): the
    node reports that itself (it holds the identity and the KVP data), as the controller cannot reach it. Not for
    `awaiting`, nor for verdicts without a category (`unresolved`, `island-below-floor`: the fabric, not this host).
    A drain for the host's second failure (names.REPEAT_HOST_REASON, the controller's ledger) is reported alike."""
    if state.drained and state.reason == REPEAT_HOST_REASON:
        return REPEAT_CHECK
    if not state.drained or not state.reason.startswith(BURNIN_REASON_PREFIX):
        return ""
    check = "burnin." + state.reason.removeprefix(BURNIN_REASON_PREFIX).split()[0]
    return check if state.reason != AWAITING_BURNIN_REASON and category_for(check) is not None else ""


def unmeasured(reason: str, level: str) -> list[str]:
    """The host-fault checks a health-check drain `reason` names that a validation at `level` does not run: the
    Epilog's measured floor (level epilog), which the periodic check (quick) cannot see pass or fail."""
    if not reason.startswith(DRAIN_REASON_PREFIX):
        return []
    return unmeasured_checks(reason.removeprefix(DRAIN_REASON_PREFIX).split(","), level)


def unmeasured_checks(checks: Sequence[str], level: str) -> list[str]:
    ran = set(level_ids(level))
    return [c for c in checks if CHECK_ID.fullmatch(c) and c not in ran and category_for(c) is not None]


def act(
    scontrol: Scontrol, node: str, verdict: Verdict, burnin_queued: bool = True, host: str = "", level: str = "quick"
) -> Outcome:
    """Drain or resume the node as the verdict says. `burnin_queued` False: this OS disk has never been put in
    line for burn-in, so a healthy node is drained awaiting it instead of being resumed or left idle. `host`: the
    physical host Azure reports, published as the node's Comment for the controller's host ledger (once: only when
    the Comment differs). `level`: the validation level the verdict is of."""
    state = scontrol.node(node)
    # The roll's drain (ndfleet_node/roll) met on a disk never put in line for burn-in: the roll reimaged this VM
    # and slurmctld kept its drain across the new registration. Its new boot is this program's to judge, as a new
    # VM's is: a failure drains it with the checks' reason (the roll reads that), a pass hands it to the burn-in.
    rolled = state.drained and state.reason.startswith(ROLL_REASON_PREFIX) and not burnin_queued
    if host and state.comment != HOST_COMMENT_PREFIX + host:
        scontrol.update([node], f"Comment={HOST_COMMENT_PREFIX}{host}")
    if not verdict.healthy:
        # Drained by an earlier pass whose DOWN did not go through: jobs still run on the broken hardware.
        stuck = verdict.hardware and bool(state.flags & {"ALLOCATED", "MIXED"}) and not state.down
        if (state.drained or state.down) and state.reason == verdict.reason and not stuck:
            return Outcome(f"{node}: still failing ({verdict.reason}), already out", True)
        if state.drained and not held_by_health_check(state) and state.reason != EPILOG_ERROR_REASON and not rolled:
            # Keep the other drain's reason (burn-in, an administrator): it is theirs to lift; the report still
            # turns the health endpoint Unhealthy. Slurm's "Epilog error" is this program's own (the Epilog's exit
            # status): replaced by the checks' reason, which the repair loop, the ledger and the categories read.
            return Outcome(f"{node}: failing ({verdict.reason}), already drained for: {state.reason}", True,
                           burnin_check=burnin_failure(state))
        scontrol.drain(node, verdict.reason)
        if state.has_jobs and verdict.hardware:
            # A drain lets the jobs run on, hung or straggling on the broken GPU or link. DOWN: slurmctld kills them
            # and requeues each batch job that may be requeued (JobRequeue=1, Slurm's default; `--no-requeue` opts
            # out): https://slurm.schedmd.com/scontrol.html (State=DOWN), slurm.conf.html (JobRequeue). Drained
            # first: with ReturnToService=2 the node's next answer to slurmctld (within milliseconds: the job kill's)
            # lifts the DOWN, and only the drain keeps it out (tests/slurm/test_real_scheduler.py).
            scontrol.down(node, verdict.reason)
            return Outcome(f"{node}: down, its jobs killed or requeued: {verdict.reason}", True, took_out=True)
        return Outcome(f"{node}: drained: {verdict.reason}", True, took_out=True)
    if state.drained and not state.reason:
        # Registered drained (slurmd --conf State=DRAIN) by a Slurm older than 23.02.2, which drops the
        # registration's Reason (SchedMD commit 1696951860): scontrol refuses a drain without a reason, so
        # nobody else made this one. Give it the burn-in's reason, whether or not this disk is marked yet (it is
        # marked at slurmd's first start, before the node registers).
        scontrol.drain(node, AWAITING_BURNIN_REASON)
        return Outcome(f"{node}: registered drained: {AWAITING_BURNIN_REASON}", True, queued_for_burnin=True)
    if not burnin_queued:
        if queued_for_burnin(state):
            return Outcome(f"{node}: healthy, held for burn-in ({state.reason})", True, queued_for_burnin=True)
        if state.drained and not held_by_health_check(state) and not rolled:
            # An administrator's drain: theirs to lift. The burn-in still comes first once they do.
            return Outcome(f"{node}: healthy, drained for: {state.reason}; burn-in pending", True)
        scontrol.drain(node, AWAITING_BURNIN_REASON)
        return Outcome(f"{node}: healthy, new on this disk: drained {AWAITING_BURNIN_REASON}", True,
                       queued_for_burnin=True)
    if state.drained and state.reason == EPILOG_ERROR_REASON:
        # The Epilog failed and left no record of which check (its marker is read into the verdict): nothing here
        # says the node is fit, nor which host fault to report. Left for an administrator (docs/slurm.md).
        return Outcome(f"{node}: drained {EPILOG_ERROR_REASON!r}, no record of the Epilog's failed checks", True)
    if held_by_health_check(state):
        if unseen := unmeasured(state.reason, level):
            # Drained by the Epilog's measured floor, which this level does not run: its pass says nothing of
            # them. The node stays out for its repair, and files the report that keeps it Unhealthy (found by the
            # twin: the next quick pass resumed such a node, and its endpoint answered Healthy again).
            return Outcome(f"{node}: passes at level {level}, which does not measure {', '.join(unseen)}: left "
                           f"drained ({state.reason})", True, burnin_check=unseen[0])  # fmt: skip
        scontrol.resume(node)  # DRAIN or DOWN: RESUME returns it to service either way
        return Outcome(f"{node}: validation passes again: resumed (was {state.reason})", False)
    return Outcome(f"{node}: healthy", state.drained, burnin_check=burnin_failure(state))


def with_epilog_failure(verdict: Verdict, epilog: tuple[str, ...] | None) -> Verdict:
    """The periodic verdict and the Epilog's recorded checks: failing if either fails, the Epilog's checks first."""
    if epilog is None:
        return verdict
    return Verdict(False, tuple(dict.fromkeys(epilog + verdict.failed_checks)))


def handle_epilog(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """The Epilog: validate, no Slurm command; the exit status is the verdict (the module's docstring)."""
    if burnin_job(environ):
        print("ndfleet-slurm-health: a burn-in job: not checked")
        return 0
    if args.lock and not take_lock(Path(args.lock), args.lock_wait):
        # A periodic pass held it past the wait (slurmd kills one at 60 s): it has looked, and the next one will.
        print("ndfleet-slurm-health: Epilog: lock held, not checked")
        return 0
    verdict = run_validation(args.validator, Path(args.report), args.validate_timeout, args.level)
    if verdict.healthy:
        print("ndfleet-slurm-health: Epilog: healthy")
        return 0
    write_epilog_failure(Path(args.epilog_marker), verdict.failed_checks)
    print(f"ndfleet-slurm-health: Epilog: failing: {verdict.reason}", file=sys.stderr)
    return 1


def mark_burnin_queued(marker: Path) -> None:
    """Best effort, like the drain marker; the next pass retries (and finds the node already held for burn-in)."""
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("put in line for burn-in\n", encoding="utf-8")
    except OSError as error:
        print(f"ndfleet-slurm-health: burn-in marker {marker}: {error}", file=sys.stderr)


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


def launch_impact(argv: Sequence[str]) -> None:
    """Start the impact report without waiting for it (`argv`: systemd-run --no-block --unit=ndfleet-impact ..., the
    validate unit's command line, given by the node's files). Best effort: systemd-run refusing (the unit exists: a
    report is running or failed already), failing or hanging is logged, never a failure of the health check."""
    result = run_tool(argv, IMPACT_LAUNCH_TIMEOUT_S, max_output_bytes=4096)
    print(f"ndfleet-slurm-health: impact report {'started' if result.ok else 'not started: ' + result.error}",
          file=sys.stderr)


def default_node_name() -> str:
    # slurmd sets SLURMD_NODENAME for the programs it runs; a dynamic node is named after its host name.
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def handle(args: argparse.Namespace) -> int:
    if args.epilog:
        return handle_epilog(args, os.environ)
    epilog_marker = Path(args.epilog_marker)
    epilog_failure = read_epilog_failure(epilog_marker)
    verdict = with_epilog_failure(
        run_validation(args.validator, Path(args.report), args.validate_timeout, args.level), epilog_failure
    )
    node = args.node_name or default_node_name()
    code = 0 if verdict.healthy else 1
    burnin_marker = Path(args.burnin_marker)
    try:
        host = physical_host_name(Path(args.kvp_pool))
    except ImpactError:
        host = ""  # not on Azure (a test, the twin), or hv_kvp_daemon not running: the ledger does without it
    try:
        outcome = act(Scontrol(args.scontrol, args.scontrol_timeout), node, verdict, burnin_marker.exists(), host,
                      args.level)  # fmt: skip
    except SlurmError as error:
        # E.g. at slurmd's start, before the node has registered. The exit code still tells the truth: newer slurmd
        # run the program at start until it exits 0 and only then register, which keeps a failing node out.
        print(f"ndfleet-slurm-health: {node}: {verdict.reason if not verdict.healthy else 'healthy'}; {error}",
              file=sys.stderr)
        if f"Node {node} not found" in str(error):
            # slurmd's first start on this disk, before it registers: it registers as a new node, drained awaiting
            # burn-in (slurmd --conf State=DRAIN), so this disk is in line now. Marked here, not at a later pass: the
            # burn-in may run and resume the node before then, and a later pass must not drain it again (the twin
            # found that loop). A reimaged VM under an old name is found, not new, and is drained below next time.
            mark_burnin_queued(burnin_marker)
        return code
    mirror_drain(Path(args.drain_marker), outcome)
    if epilog_failure is not None and outcome.drained and not outcome.took_out:
        # The node is out for the Epilog's finding (its reason, now ours), or for another's drain that is theirs to
        # lift: done with. Kept after the pass that took it out: that pass's drain could still be overtaken by
        # slurmctld's own "Epilog error", which the next pass then replaces again.
        epilog_marker.unlink(missing_ok=True)
    if outcome.queued_for_burnin:
        mark_burnin_queued(burnin_marker)
    print(f"ndfleet-slurm-health: {outcome.message}")
    if outcome.took_out and verdict.hardware and args.impact_launch:
        # A check the periodic level does not run (the Epilog's measured floor) is named on the command line, so
        # that the report also writes the failure marker: the next quick pass rewrites the report it marks.
        held = unmeasured_checks(verdict.failed_checks, PERIODIC_LEVEL)
        launch_impact([*args.impact_launch, *(arg for c in held for arg in ("--check", c))])
    check = outcome.burnin_check
    failed = failed_marker_path(None)
    if check and args.impact_launch and failed and not _has_line(failed, f"impact: {check}:"):
        # Until the report has run: it names the check in the failure marker, which keeps the node Unhealthy so that
        # automatic repairs act. A start that failed (systemd could not spawn it, a report still loaded) is tried
        # again at the next pass, not taken for done: such a node stayed drained, Healthy to Azure, never repaired.
        # The marker is gone after a reboot (a Restart repair): reported again while the verdict holds the node.
        why = held_because(check)
        launch_impact([*args.impact_launch, "--check", check, "--detail", why])
    return code


def held_because(check: str) -> str:
    """What the report of a node held for `check` says of why (act's burnin_check)."""
    if check == REPEAT_CHECK:
        return "its host failed twice"
    if check.startswith("burnin."):
        return "drained by the burn-in"
    return "failed at a job's end (the Epilog's measured floor)"


def _has_line(path: Path, start: str) -> bool:
    """Whether a line of the file (its first 64 KiB) starts with `start`."""
    try:
        lines = read_regular(str(path), 65536).decode("utf-8", "replace").splitlines()
    except OSError:
        return False
    return any(line.startswith(start) for line in lines)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds between 0 and 86400")
    return value


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "slurm-health",
        help="Slurm HealthCheckProgram: quick validation, drain a failing node, resume one that recovered",
    )
    p.add_argument("--validator", nargs="+", default=[DEFAULT_VALIDATOR], help="validation command (seam)")
    p.add_argument("--report", default=DEFAULT_REPORT, help="where the validator writes its report")
    p.add_argument(
        "--validate-timeout", type=_seconds, default=600.0, help="seconds before the validation counts as failed"
    )
    p.add_argument("--level", choices=("quick", "epilog"), default="quick",
                   help="quick (the periodic check) or epilog (at a job's end: quick and the short measured floor)")
    p.add_argument("--epilog", action="store_true",
                   help="as Slurm's Epilog: no Slurm command, the exit status drains")
    p.add_argument("--lock", default="", help="with --epilog: the lock to take")
    p.add_argument("--lock-wait", type=_seconds, default=60.0, help="seconds to wait for --lock")
    p.add_argument("--epilog-marker", default=EPILOG_MARKER,
                   help="the Epilog's failed checks")
    p.add_argument("--scontrol", nargs="+", default=["scontrol"], help="scontrol command")
    p.add_argument("--scontrol-timeout", type=_seconds, default=30.0)
    p.add_argument(
        "--drain-marker", default=DRAIN_MARKER, help=f"kept present while the node is drained ({DRAIN_MARKER})"
    )
    p.add_argument(
        "--burnin-marker", default=BURNIN_MARKER,
        help=f"present once this OS disk was put in line for burn-in ({BURNIN_MARKER}); absent: drain awaiting it",
    )
    p.add_argument(
        "--impact-launch", type=shlex.split, default=[], help="command that starts the impact report, not waiting",
    )
    p.add_argument("--kvp-pool", default=str(KVP_POOL_3), help="Hyper-V KVP pool holding PhysicalHostName")
    p.add_argument("--node-name", default="", help="Slurm node name (default: SLURMD_NODENAME or the short host name)")
    p.set_defaults(handler=handle)
