"""The roll's passes: each `step` moves every node of the batch under way one phase on, gates the batch when all of
its nodes are done or failed, and starts the next batch; every decision is put on disk (roll/state.py) before the
next is taken, so a pass may stop anywhere and the next one (another process, after a controller restart) goes on.

A node's phases (docs/upgrades.md):
- draining: drained with ROLL_REASON_PREFIX + the roll's id; waited for while it runs a job (Slurm never starts a new
  one on a drained node; a running one is never killed). Past `--deadline`, with `--requeue`, the jobs on it that
  allow a requeue (`scontrol show job`: Requeue=1) are requeued (`scontrol requeue`); the others are waited for.
- upgrading, reimaging: once it runs no job, its VM is brought to the scale set's latest model (manualupgrade),
  then reimaged (a new OS disk: cloud-init and the set-up run again with the model's boot data); each an Azure
  async operation, polled by the next passes.
- returning: the reimaged VM registers under its old name; the health check drains it awaiting burn-in and the
  burn-in resumes it (slurm_health.py, burnin/slurm.py). It is done once Slurm shows it in service with the feature
  BOOT_VERSION_FEATURE_PREFIX + the target version; failed once it is drained again with another ndfleet reason
  (its checks named), or when it has not come back within `return_timeout_s`.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ndfleet_node.elastic.arm import ArmError, ScaleSetApi, ScaleSetInstance
from ndfleet_node.elastic.context import append_log
from ndfleet_node.names import (
    AWAITING_BURNIN_REASON,
    BOOT_VERSION_FEATURE_PREFIX,
    DRAIN_REASON_PREFIX,
    ROLL_REASON_PREFIX,
    SPARES_RESERVATION_PREFIX,
    TAG_BOOT_VERSION,
    TAG_SLURM_RELEASE,
)
from ndfleet_node.roll import state as rs
from ndfleet_node.scontrol import MAX_LIST_BYTES, Scontrol, SlurmError, SlurmNode, parse_line

# Azure's rolling upgrade policy's default for maxUnhealthyUpgradedInstancePercent (Microsoft Learn, "Rolling
# upgrade policy" / REST "Virtual Machine Scale Sets - Create Or Update", RollingUpgradePolicy): 20 %.
DEFAULT_MAX_FAILED_PCT = 20.0
# A reimaged node back in service within this: the reimage (minutes), the set-up (its unit's limit, 2400 s,
# ndfleet/slurm/machines.py SETUP_TIMEOUT_S), the settle before burn-in and the burn-in timer's round.
DEFAULT_RETURN_TIMEOUT_S = 5400.0
ARM_BUDGET_S = 60.0  # retries of one refused manualupgrade/reimage within a pass
FAILURES = (ArmError, SlurmError, TimeoutError, OSError, ValueError)
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_JOB_FIELD = re.compile(r"(?:^|\s)(JobId|JobState|Requeue|NodeList)=(\S*)")


class RollRefused(Exception):
    """The roll cannot start as asked; the message says why, with the figures."""


@dataclass(frozen=True)
class Node:
    """A Slurm node as the roll reads it: its state and the features it registered with."""

    slurm: SlurmNode
    features: frozenset[str]
    host: str  # NodeHostName: the VM's computer name (an elastic node's name is `<island>-<n>`, not its VM's)

    @property
    def in_service(self) -> bool:
        s = self.slurm
        return not (s.drained or s.down or s.not_responding or s.flags & {"POWERED_DOWN", "POWERING_DOWN", "FAIL"})

    def on(self, version: str) -> bool:
        return BOOT_VERSION_FEATURE_PREFIX + version in self.features


_FEATURES = re.compile(r"(?:^|\s)ActiveFeatures=(\S*)")
_HOST = re.compile(r"(?:^|\s)NodeHostName=(\S*)")
_REASON_AT = re.compile(r"(?:^|\s)Reason=")


def read_nodes(scontrol: Scontrol) -> dict[str, Node]:
    """Every Slurm node with its active features and host name (read before the free-text reason)."""
    out: dict[str, Node] = {}
    for line in scontrol.call("show", "node", "--oneliner", max_bytes=MAX_LIST_BYTES).split("\n"):
        node = parse_line(line)
        if node is None or node.name in out:
            continue
        head = line[: m.start()] if (m := _REASON_AT.search(line)) else line
        features = _FEATURES.search(head)
        host = _HOST.search(head)
        out[node.name] = Node(node, frozenset(features.group(1).split(",")) if features else frozenset(),
                              host.group(1) if host else node.name)  # fmt: skip
    return out


@dataclass
class Context:
    state_dir: Path
    scale_set: Callable[[str, str], ScaleSetApi]  # (island, scale-set name) -> its API
    scontrol: Scontrol
    slurmdbd_version: Callable[[], str]  # `slurmdbd -V`'s output
    now: Callable[[], float]
    return_timeout_s: float = DEFAULT_RETURN_TIMEOUT_S
    echo: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr))

    def log(self, roll: rs.RollState | str, line: str) -> None:
        island = roll if isinstance(roll, str) else roll.island
        self.echo(f"ndfleet-roll {island}: {line}")
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        append_log(self.state_dir / f"{island}.log", f"{stamp} {line}")


@dataclass(frozen=True)
class Options:
    batch: str = "1"
    max_failed_pct: float = DEFAULT_MAX_FAILED_PCT
    pause_s: float = 0.0
    min_available: int = 0
    deadline_s: float | None = None
    requeue: bool = False


def version_tuple(text: str) -> tuple[int, ...] | None:
    m = _VERSION.search(text)
    if m is None:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def check_slurm_order(target_release: str, slurmctld: str, slurmdbd: str) -> list[str]:
    """Why a roll to `target_release` would break Slurm's upgrade order, slurmdbd, then slurmctld, then slurmd
    (SchedMD, "Upgrade Guide", slurm.schedmd.com/upgrades.html): slurmd may not be newer than either daemon. An
    unreadable version is a refusal too, never a pass."""
    target = version_tuple(target_release)
    if target is None:
        return [f"the scale set's tag {TAG_SLURM_RELEASE} = {target_release!r} names no Slurm release"]
    problems = []
    for daemon, said in (("slurmctld (scontrol version)", slurmctld), ("slurmdbd (slurmdbd -V)", slurmdbd)):
        running = version_tuple(said)
        if running is None:
            problems.append(f"{daemon} said {said.strip()[:80]!r}: no version; the upgrade order cannot be checked")
        elif target > running[: len(target)]:
            problems.append(f"the target Slurm release {target_release} is newer than {daemon}'s "
                            f"{'.'.join(map(str, running))}: upgrade slurmdbd, then slurmctld, then roll the slurmd "
                            "nodes (SchedMD's upgrade guide)")  # fmt: skip
    return problems


def batch_size(spec: str, island_size: int) -> int:
    if spec.endswith("%"):
        return max(1, math.ceil(island_size * float(spec[:-1]) / 100))
    return int(spec)


def parse_batch(spec: str) -> str:
    """N (1 or more) or P% (0 < P <= 100); ValueError naming what is valid."""
    try:
        value = float(spec[:-1]) if spec.endswith("%") else int(spec)
    except ValueError:
        value = -1
    if (spec.endswith("%") and 0 < value <= 100) or (not spec.endswith("%") and value >= 1):
        return spec
    raise ValueError(f"--batch {spec!r}: a node count (1 or more) or a percentage of the island (1% to 100%)")


def parse_duration(text: str) -> float:
    """Seconds, or a number with s, m, h or d; ValueError naming what is valid."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if m is None:
        raise ValueError(f"{text!r}: a duration is seconds, or a number with s, m, h or d (e.g. 90m)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@dataclass
class Island:
    """What one pass reads: the scale set's model and instances, and the island's Slurm nodes."""

    tags: dict[str, str]
    vms: dict[str, ScaleSetInstance]  # Slurm node name -> its VM
    nodes: dict[str, Node]  # Slurm node name -> node, the island's only
    spares: set[str]


def read_island(ctx: Context, island: str, scale_set: str) -> Island:
    api = ctx.scale_set(island, scale_set)
    tags = api.tags()
    instances = api.instances()
    slurm = read_nodes(ctx.scontrol)
    by_host = {n.host: n for n in slurm.values()} | {n.slurm.name: n for n in slurm.values()}
    vms: dict[str, ScaleSetInstance] = {}
    nodes: dict[str, Node] = {}
    for vm in instances:
        node = by_host.get(vm.computer_name)
        if node is not None and vm.usable:
            vms[node.slurm.name] = vm
            nodes[node.slurm.name] = node
    spares: set[str] = set()
    reservation = ctx.scontrol.reservations().get(SPARES_RESERVATION_PREFIX + island)
    if reservation is not None and reservation.nodes:
        spares = set(ctx.scontrol.hostnames(reservation.nodes))
    return Island(tags, vms, nodes, spares)


def _natural(name: str) -> tuple[str, int, str]:
    m = re.fullmatch(r"(.*?)(\d+)", name)
    return (m.group(1), int(m.group(2)), name) if m else (name, -1, name)


def candidates(roll: rs.RollState, isl: Island) -> list[str]:
    """The island's nodes not on the target yet, in the order they are taken: those that failed on an earlier
    target first (a revert rolls them back before anything else), then the warm spares, then the others. A node that
    failed on this very target is not taken again."""
    todo = [n for n, node in isl.nodes.items() if n not in roll.current
            and (not node.on(roll.target) or isl.vms[n].latest_model_applied is False)
            and roll.failed_target.get(n) != roll.target]  # fmt: skip
    return sorted(todo, key=lambda n: (n not in roll.failed, n not in isl.spares, _natural(n)))


def cost(name: str, isl: Island) -> int:
    """What taking the node out costs the island's capacity: 1 for a node in service for jobs, 0 for a warm spare
    (held out of scheduling already) or a node out of service already."""
    return 1 if isl.nodes[name].in_service and name not in isl.spares else 0


def available(isl: Island) -> int:
    return sum(cost(n, isl) for n in isl.nodes)


def choose_batch(roll: rs.RollState, isl: Island) -> list[str]:
    size = batch_size(roll.batch, len(isl.nodes))
    left = available(isl) - roll.min_available
    chosen: list[str] = []
    for name in candidates(roll, isl):
        if len(chosen) >= size:
            break
        c = cost(name, isl)
        if c and c > left:  # a costless node (a spare, one out of service already) may always go
            continue
        left -= c
        chosen.append(name)
    return chosen


def start(ctx: Context, island: str, scale_set: str, options: Options, dry_run: bool = False) -> rs.RollState:
    """Check the roll can be done as asked, then put it on disk (RollRefused otherwise, every reason at once)."""
    with rs.locked(ctx.state_dir, island) as path:
        old = rs.load(path)
        if old is not None and old.status in ("running", "paused"):
            raise RollRefused(f"roll {old.roll_id} of island {island} is {old.status}; abort it first")
        isl = read_island(ctx, island, scale_set)
        problems = []
        target = isl.tags.get(TAG_BOOT_VERSION, "")
        if not target:
            problems.append(f"scale set {scale_set} has no tag {TAG_BOOT_VERSION}: its model names no boot version")
        release = isl.tags.get(TAG_SLURM_RELEASE, "")
        if not release:
            problems.append(f"scale set {scale_set} has no tag {TAG_SLURM_RELEASE}: Slurm's upgrade order cannot be "
                            "checked")  # fmt: skip
        else:
            problems += check_slurm_order(release, ctx.scontrol.call("version"), ctx.slurmdbd_version())
        now = ctx.now()
        roll = rs.RollState(
            roll_id=f"{island}-{datetime.fromtimestamp(now, timezone.utc).strftime('%Y%m%dT%H%M%S')}",
            island=island, scale_set=scale_set, target=target, batch=options.batch,
            max_failed_pct=options.max_failed_pct, pause_s=options.pause_s, min_available=options.min_available,
            deadline_s=options.deadline_s, requeue=options.requeue, started=now,
        )  # fmt: skip
        if old is not None:  # what failed before stays known: a revert rolls those nodes first
            roll.failed, roll.failed_target = old.failed, old.failed_target
        todo = candidates(roll, isl)
        if options.min_available > len(isl.nodes):
            problems.append(f"--min-available {options.min_available}: island {island} has {len(isl.nodes)} nodes")
        elif todo and not choose_batch(roll, isl):
            problems.append(f"--min-available {options.min_available}: island {island} has {available(isl)} nodes "
                            "in service for jobs and no warm spare or out-of-service node to roll, so not one node "
                            f"can be taken out (--min-available {max(available(isl) - 1, 0)} at most lets one go at a "
                            "time)")  # fmt: skip
        if problems:
            raise RollRefused("; ".join(problems))
        if not todo:
            roll.status, roll.why = "done", f"every node of {island} already runs boot version {target}"
        if not dry_run:
            rs.save(path, roll)
            ctx.log(roll, f"roll {roll.roll_id} started: to boot version {target} (Slurm {release}), "
                          f"{len(todo)} of {len(isl.nodes)} nodes to roll, batch {roll.batch}, "
                          f"max failed {roll.max_failed_pct:g} %, min available {roll.min_available}")  # fmt: skip
        return roll


def plan(roll: rs.RollState, isl: Island) -> list[str]:
    """The nodes to roll, in order (for --dry-run and status)."""
    return candidates(roll, isl)


def step(ctx: Context, island: str) -> rs.RollState | None:
    """One pass; idempotent: a pass that finds nothing to do changes nothing."""
    with rs.locked(ctx.state_dir, island) as path:
        roll = rs.load(path)
        if roll is None or roll.status in ("done", "aborted"):
            return roll
        isl = read_island(ctx, island, roll.scale_set)
        model = isl.tags.get(TAG_BOOT_VERSION, "")
        if model and model != roll.target:
            # The operator changed the model (a revert and `pulumi up` after a stopped roll): roll to it, the nodes
            # that failed first.
            ctx.log(roll, f"the scale set's model is now boot version {model} (was {roll.target}): rolling to it")
            roll.target = model
            if roll.status == "stopped":
                roll.status, roll.why = "running", ""
        try:
            for name, node in sorted(roll.current.items()):
                _advance(ctx, roll, isl, name, node)
                rs.save(path, roll)
            _gate(ctx, roll)
            if roll.status == "running" and not roll.current and ctx.now() >= roll.next_batch_at:
                _next_batch(ctx, roll, isl)
        finally:
            rs.save(path, roll)
        return roll


def _advance(ctx: Context, roll: rs.RollState, isl: Island, name: str, node: rs.NodeRoll) -> None:
    now = ctx.now()
    slurm = isl.nodes.get(name)
    api = ctx.scale_set(roll.island, roll.scale_set)
    if node.phase == rs.DRAINING:
        if slurm is None:
            return _timeout(ctx, roll, name, node, "its VM is not in the scale set's list, or Slurm lost it")
        if slurm.slurm.has_jobs:
            if roll.deadline_s is not None and now - node.drained_at >= roll.deadline_s and roll.requeue:
                _requeue(ctx, roll, name, node)
            return
        if not slurm.slurm.drained:  # resumed by someone while it waited: drained again, its jobs waited for
            ctx.scontrol.drain(name, ROLL_REASON_PREFIX + roll.roll_id)
            ctx.log(roll, f"{name}: was resumed while waiting for the roll; drained again")
            return
        node.operation = api.manual_upgrade([node.instance_id], ARM_BUDGET_S)
        node.phase, node.since = rs.UPGRADING, now
        ctx.log(roll, f"{name}: no job; VM instance {node.instance_id} brought to the latest model")
    elif node.phase in (rs.UPGRADING, rs.REIMAGING):
        status = api.operation_status(node.operation) if node.operation else "Succeeded"
        what = "manualupgrade" if node.phase == rs.UPGRADING else "reimage"
        if status in ("Failed", "Canceled"):
            return _fail(ctx, roll, name, node, [f"azure.{what}"], f"Azure's {what} {status.lower()}")
        if status != "Succeeded":
            return _timeout(ctx, roll, name, node, f"Azure's {what} still in progress") if now - node.since > \
                ctx.return_timeout_s else None  # fmt: skip
        if node.phase == rs.UPGRADING:
            node.operation = api.reimage([node.instance_id], ARM_BUDGET_S)
            node.phase, node.since = rs.REIMAGING, now
            # Its reason before the new boot: a failure of the new boot is a reason set after this.
            node.reason_before = slurm.slurm.reason if slurm is not None else ""
            ctx.log(roll, f"{name}: VM instance {node.instance_id} reimaged")
        else:
            node.phase, node.since, node.operation = rs.RETURNING, now, ""
    elif node.phase == rs.RETURNING:
        if slurm is not None and slurm.in_service and slurm.on(node.target):
            node.phase, node.since, node.checks = rs.DONE, now, []
            ctx.log(roll, f"{name}: back on boot version {node.target}, validated and burned in")
            return
        reason = slurm.slurm.reason if slurm is not None and slurm.slurm.drained else ""
        if (reason.startswith(DRAIN_REASON_PREFIX) and reason != node.reason_before
                and not reason.startswith(ROLL_REASON_PREFIX) and reason != AWAITING_BURNIN_REASON):  # fmt: skip
            checks = [c for c in reason.removeprefix(DRAIN_REASON_PREFIX).split(",") if c]
            return _fail(ctx, roll, name, node, checks, f"drained {reason}")
        if now - node.since > ctx.return_timeout_s:
            state = f"{slurm.slurm.state} {slurm.slurm.reason}".strip() if slurm is not None else "not in Slurm"
            _fail(ctx, roll, name, node, ["roll.no-return"], f"not back in service within "
                  f"{ctx.return_timeout_s:g} s ({state})")  # fmt: skip


def _timeout(ctx: Context, roll: rs.RollState, name: str, node: rs.NodeRoll, why: str) -> None:
    if ctx.now() - node.since > ctx.return_timeout_s:
        _fail(ctx, roll, name, node, ["roll.no-return"], why)


def _fail(ctx: Context, roll: rs.RollState, name: str, node: rs.NodeRoll, checks: list[str], why: str) -> None:
    node.phase, node.since, node.checks = rs.FAILED, ctx.now(), checks
    ctx.log(roll, f"{name}: failed ({why}; checks {', '.join(checks)})")


def _requeue(ctx: Context, roll: rs.RollState, name: str, node: rs.NodeRoll) -> None:
    """Past the deadline: requeue the jobs on the node that allow it; the others are waited for."""
    text = ctx.scontrol.call("show", "job", "--oneliner", max_bytes=MAX_LIST_BYTES)
    for line in text.split("\n"):
        fields = dict(_JOB_FIELD.findall(line))
        job = fields.get("JobId", "")
        if not job or fields.get("JobState") != "RUNNING" or job in node.requeued:
            continue
        hosts = fields.get("NodeList", "")
        if hosts in ("", "(null)") or name not in ctx.scontrol.hostnames(hosts):
            continue
        if fields.get("Requeue") != "1":
            ctx.log(roll, f"{name}: job {job} runs past the deadline and does not allow a requeue: waited for")
            node.requeued.append(job)  # said once
            continue
        ctx.scontrol.call("requeue", job)
        node.requeued.append(job)
        ctx.log(roll, f"{name}: job {job} requeued (past the roll's deadline, --requeue)")


def _gate(ctx: Context, roll: rs.RollState) -> None:
    """Once every node of the batch is done or failed: stop the roll when more than max_failed_pct of it failed."""
    if not roll.current or any(n.phase not in (rs.DONE, rs.FAILED) for n in roll.current.values()):
        return
    failed = {n: e.checks for n, e in sorted(roll.current.items()) if e.phase == rs.FAILED}
    for name, entry in roll.current.items():
        if entry.phase == rs.DONE:
            roll.failed.pop(name, None)
            roll.failed_target.pop(name, None)
            roll.rolled = sorted({*roll.rolled, name})
        else:
            roll.failed[name], roll.failed_target[name] = entry.checks, entry.target
    roll.batches.append({"nodes": sorted(roll.current), "failed": failed, "target": roll.target})
    share = 100.0 * len(failed) / len(roll.current)
    roll.current = {}
    roll.next_batch_at = ctx.now() + roll.pause_s
    named = "; ".join(f"{n}: {', '.join(c)}" for n, c in failed.items())
    if share > roll.max_failed_pct:
        roll.status = "stopped"
        roll.why = (f"{len(failed)} of {len(roll.batches[-1]['nodes'])} nodes of batch {len(roll.batches)} failed "
                    f"({share:.0f} % > {roll.max_failed_pct:g} %): {named}. Nothing else is touched: revert the "
                    "change (git revert, pulumi up) and `roll step` rolls them back, failed nodes first")  # fmt: skip
        ctx.log(roll, f"stopped: {roll.why}")
    else:
        ctx.log(roll, f"batch {len(roll.batches)} passed the gate" + (f" (failed: {named})" if failed else ""))


def _next_batch(ctx: Context, roll: rs.RollState, isl: Island) -> None:
    todo = candidates(roll, isl)
    if not todo:
        roll.status = "done"
        roll.why = f"every node is on boot version {roll.target}" + (
            f" but {', '.join(sorted(roll.failed))}, which failed" if roll.failed else "")
        ctx.log(roll, f"done: {roll.why}")
        return
    chosen = choose_batch(roll, isl)
    if not chosen:
        ctx.log(roll, f"{len(todo)} nodes to roll, none can be taken now: {available(isl)} in service for jobs, "
                      f"--min-available {roll.min_available}")  # fmt: skip
        return
    now = ctx.now()
    for name in chosen:
        roll.current[name] = rs.NodeRoll(instance_id=isl.vms[name].instance_id, since=now, drained_at=now,
                                         target=roll.target)  # fmt: skip
    for name in chosen:
        ctx.scontrol.drain(name, ROLL_REASON_PREFIX + roll.roll_id)
    ctx.log(roll, f"batch {len(roll.batches) + 1}: drained {', '.join(chosen)} (to boot version {roll.target})")


def set_status(ctx: Context, island: str, status: str) -> rs.RollState:
    """pause, resume or abort. An abort resumes the nodes the roll drained and has not reimaged yet (their drain
    reason still the roll's); a node under reimage comes back by itself, through its health check and burn-in."""
    with rs.locked(ctx.state_dir, island) as path:
        roll = rs.load(path)
        if roll is None:
            raise RollRefused(f"no roll of island {island}")
        allowed = {"paused": ("running",), "running": ("paused", "stopped"), "aborted": ("running", "paused",
                                                                                       "stopped")}[status]  # fmt: skip
        if roll.status not in allowed:
            raise RollRefused(f"roll {roll.roll_id} is {roll.status}: cannot be made {status}")
        if status == "aborted":
            nodes = read_nodes(ctx.scontrol)
            for name, entry in sorted(roll.current.items()):
                slurm = nodes.get(name)
                if entry.phase == rs.DRAINING and slurm is not None and slurm.slurm.reason.startswith(
                        ROLL_REASON_PREFIX + roll.roll_id):  # fmt: skip
                    ctx.scontrol.resume(name)
                    ctx.log(roll, f"{name}: resumed (roll aborted before its reimage)")
            roll.current = {n: e for n, e in roll.current.items() if e.phase != rs.DRAINING}
        roll.status = status
        rs.save(path, roll)
        ctx.log(roll, f"roll {roll.roll_id} {status}")
        return roll


def describe(roll: rs.RollState) -> Iterable[str]:
    yield (f"roll {roll.roll_id}: {roll.status}, island {roll.island} ({roll.scale_set}) to boot version "
           f"{roll.target}; {len(roll.rolled)} rolled, {len(roll.batches)} batches done")  # fmt: skip
    if roll.why:
        yield f"  {roll.why}"
    for name, entry in sorted(roll.current.items()):
        yield f"  {name}: {entry.phase}" + (f" ({', '.join(entry.checks)})" if entry.phase == rs.FAILED else "")
    for name, checks in sorted(roll.failed.items()):
        yield f"  failed: {name} on {roll.failed_target.get(name, '?')}: {', '.join(checks)}"
