"""`python3 -m ndfleet_node.elastic.programs {resume,suspend,resume-fail,reconcile} [HOSTLIST]` on the controller.

- resume HOSTLIST (Slurm's ResumeProgram): drain the nodes awaiting burn-in and hold the jobs Slurm gave them
  (SLURM_RESUME_FILE), so that no job lands on a node before its burn-in; raise the island's scale-set capacity by
  the VMs still missing; claim each new VM for a node (its host name becomes the node's NodeHostName, which is how
  the VM learns its Slurm name at boot) until all are claimed or the wait ends.
- suspend HOSTLIST (SuspendProgram): delete the nodes' VMs, never one that runs a job; a delete Azure refuses for
  now (409, 429, 5xx) is asked again within the suspend's time, and any delete not yet confirmed stays on record
  for the reconcile timer.
- resume-fail HOSTLIST (ResumeFailProgram): delete whatever VM the nodes got, report, and power them down into the
  pool again (idle_on_node_suspend makes them idle).
- reconcile (timer): release the held jobs whose nodes are burned in (or failed it); claim a repaired VM (automatic
  repairs replace a VM by a new one) for the node whose VM is gone; delete VMs nobody claimed for a while; ask again
  for every delete on record until the instance list confirms the VM is gone.

Only a VM in a usable provisioning state (Creating, Updating, Succeeded) is claimed; one Azure reports Failed is
given up at once: deleted, and the node it was for powered down into the pool (`ndfleet:elastic:vm-failed`), so the
job is scheduled again instead of waiting the whole ResumeTimeout for a VM that will not come.

Reports go to stderr and to the elastic log on the state disk (Slurm discards the programs' output).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ndfleet_node.elastic.arm import DELETING, ScaleSetApi, ScaleSetInstance
from ndfleet_node.elastic.context import (
    FAILURES,
    Context,
    IslandSettings,
    azure_scale_sets,
    by_island,
    load_settings,
)
from ndfleet_node.elastic.deletes import ask_failed, delete_nodes, finish_deletes
from ndfleet_node.elastic.state import DeleteEntry, IslandState, NodeEntry, island_and_index, island_state
from ndfleet_node.names import (
    AWAITING_BURNIN_REASON,
    RESUME_FAILED_REASON,
    VM_FAILED_REASON,
)
from ndfleet_node.scontrol import Scontrol, SlurmError, SlurmNode

MAX_RESUME_FILE_BYTES = 16 * 1024 * 1024


def resume_jobs(path: str | None) -> dict[str, str]:
    """job id -> the nodes resumed for it, from SLURM_RESUME_FILE (Slurm 22.05 and later); {} without it. Slurm
    22.05 names them `nodes` (seen by tests/slurm/test_real_elastic.py), later releases `nodes_resume`."""
    if not path:
        return {}
    with open(path, "rb") as f:
        data = f.read(MAX_RESUME_FILE_BYTES + 1)
    if len(data) > MAX_RESUME_FILE_BYTES:
        raise ValueError(f"SLURM_RESUME_FILE {path}: over {MAX_RESUME_FILE_BYTES} bytes")
    doc = json.loads(data)
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    return {
        str(j["job_id"]): str(j.get("nodes_resume") or j.get("nodes") or "")
        for j in jobs or []
        if isinstance(j, dict) and "job_id" in j
    }


def _present(state: IslandState, instances: list[ScaleSetInstance]) -> list[ScaleSetInstance]:
    """The instances that are not going away: neither Deleting nor a delete of ours on record."""
    return [i for i in instances if i.provisioning_state != DELETING and i.instance_id not in state.deleting]


def claim(ctx: Context, island: IslandSettings, state: IslandState, instances: list[ScaleSetInstance]) -> list[str]:
    """Give each pending node a usable VM nobody has claimed (oldest instance first); tell Slurm the VM's host name.
    A Failed VM is given up first (`give_up_failed`)."""
    give_up_failed(ctx, island, state, instances)
    taken = state.claimed()
    free = sorted((i for i in _present(state, instances) if i.instance_id not in taken and i.computer_name
                   and i.usable), key=lambda i: (len(i.instance_id), i.instance_id))  # fmt: skip
    done = []
    for node, vm in zip(state.pending(), free, strict=False):
        try:
            ctx.scontrol.update([node], f"NodeHostname={vm.computer_name}")
        except SlurmError as exc:
            ctx.log(f"{node}: could not record VM {vm.computer_name}: {exc}", problem=True)
            continue
        state.nodes[node] = NodeEntry(instance_id=vm.instance_id, computer_name=vm.computer_name)
        state.unclaimed_since.pop(vm.instance_id, None)
        done.append(node)
        ctx.log(f"{node} runs on VM {vm.computer_name} (instance {vm.instance_id} of {island.scale_set})")
    return done


def give_up_failed(
    ctx: Context, island: IslandSettings, state: IslandState, instances: list[ScaleSetInstance]
) -> list[str]:
    """Every VM Azure reports Failed (provisioningState; e.g. an allocation that failed) is deleted (on record), and
    the node it was for is given up at once: a node still waiting for a VM (a Failed VM nobody claimed stands for
    the scale-out one of them waited for) or whose claimed VM failed before it registered is powered down into the
    pool (`State=POWER_DOWN_FORCE`, reason VM_FAILED_REASON), so its job is scheduled again. A node that is up keeps
    its VM: a running VM is Failed also when only an extension or a model update failed."""
    owner = {e.instance_id: n for n, e in state.nodes.items() if e.instance_id}
    pending = state.pending()
    given_up: list[str] = []
    for vm in sorted((i for i in _present(state, instances) if i.failed), key=lambda i: (len(i.instance_id),
                                                                                           i.instance_id)):  # fmt: skip
        node = owner.get(vm.instance_id) or (pending.pop(0) if pending else "")
        if node and vm.instance_id in owner and not _coming_up(ctx, node):
            continue
        state.deleting[vm.instance_id] = DeleteEntry(node=node, why="its VM failed", since=ctx.now())
        state.unclaimed_since.pop(vm.instance_id, None)
        ctx.log(f"VM {vm.computer_name or vm.instance_id} (instance {vm.instance_id} of {island.scale_set}) is "
                f"Failed: deleted" + (f", and {node} given up" if node else ""), problem=True)  # fmt: skip
        if node:
            state.nodes.pop(node, None)
            given_up.append(node)
    if given_up:
        try:
            ctx.scontrol.update(given_up, "State=POWER_DOWN_FORCE", f"Reason={VM_FAILED_REASON}")
        except SlurmError as exc:
            ctx.log(f"could not return {','.join(given_up)} to the pool: {exc}", problem=True)
    return given_up


def _coming_up(ctx: Context, node: str) -> bool:
    """Whether Slurm still powers the node up (no registration yet); unknown counts as up (its VM is kept)."""
    try:
        found = ctx.scontrol.nodes().get(node)
    except SlurmError:
        return False
    return found is not None and "POWERING_UP" in found.flags


def hold(scontrol: Scontrol, job: str) -> None:
    """Keep the job off its new nodes until they are burned in. Draining a node that is being powered up for a job
    makes Slurm requeue the job itself (22.05: "DRAIN/FAIL request for node ... being powered up. Requeuing jobs"),
    so it is pending by now and a hold keeps it there (and keeps the scheduler from powering up other nodes for it);
    a job still running is requeued and held in one step."""
    try:
        scontrol.call("hold", job)
    except SlurmError:
        scontrol.call("requeuehold", job)


def resume(ctx: Context, nodes: Sequence[str], resume_file: str | None) -> int:
    groups = by_island(ctx, nodes)
    wanted = [n for names in groups.values() for n in names]
    if not wanted:
        return 1 if ctx.problems else 0
    # The burn-in gate first: no job may start on these nodes before the controller's burn-in resumed them.
    try:
        ctx.scontrol.update(wanted, "State=DRAIN", f"Reason={AWAITING_BURNIN_REASON}")
    except SlurmError as exc:
        ctx.log(f"could not drain {','.join(wanted)} awaiting burn-in: {exc}", problem=True)
    held: dict[str, list[str]] = {}
    try:
        jobs = resume_jobs(resume_file)
    except (OSError, ValueError) as exc:
        ctx.log(f"cannot read the jobs of this resume: {exc}", problem=True)
        jobs = {}
    for job, job_nodes in jobs.items():
        try:
            hold(ctx.scontrol, job)
        except SlurmError as exc:
            ctx.log(f"job {job} keeps its new nodes before their burn-in (not requeueable: {exc})", problem=True)
            _unhold(ctx, job, list(wanted), exc)  # a hold whose answer was lost (timed out) may still be in place
            continue
        try:
            held[job] = ctx.scontrol.hostnames(job_nodes) if job_nodes else list(wanted)
        except SlurmError as exc:
            _unhold(ctx, job, list(wanted), exc)
            continue
        ctx.log(f"job {job} held until its new nodes are burned in")
    unasked: set[str] = set()
    for name, names in groups.items():
        try:
            _ask(ctx, ctx.settings.islands[name], names, held)
        except FAILURES as exc:
            # Resource Manager busy or throttling: asked again while waiting for the VMs.
            ctx.log(f"resume of {','.join(names)}: {exc}; trying again", problem=True)
            unasked.add(name)
    return _wait_for_claims(ctx, groups, held, unasked)


def _unhold(ctx: Context, job: str, wanted: list[str], why: SlurmError) -> None:
    """The job may be held but is not on record (the hold's answer was lost, or the nodes it waits for cannot be
    read): release it now rather than hold it for ever; if the release fails too, keep the hold on record with this
    resume's nodes, so that reconcile releases it (or finds the job not held, and forgets it)."""
    try:
        ctx.scontrol.call("release", job)
        ctx.log(f"job {job} released again ({why})", problem=True)
    except SlurmError as exc:
        try:
            for name, names in by_island(ctx, wanted).items():
                with island_state(ctx.settings.state_dir, name) as state:
                    state.held_jobs[job] = names
        except FAILURES as lost:
            ctx.log(f"job {job}: its hold could not be recorded ({lost}); release it by hand", problem=True)
        ctx.log(f"job {job} held, its nodes unreadable ({why}), not released ({exc}): reconcile releases it",
                problem=True)


def _ask(ctx: Context, island: IslandSettings, names: list[str], held: dict[str, list[str]]) -> None:
    """Raise the island's capacity by the VMs its nodes still miss, and claim any VM already there."""
    api = ctx.scale_set(island)
    with island_state(ctx.settings.state_dir, island.name) as state:
        for job, held_nodes in held.items():
            if set(held_nodes) & set(names):
                state.held_jobs[job] = held_nodes
        instances = api.instances()
        alive = {i.instance_id for i in _present(state, instances)}
        for node in names:
            entry = state.nodes.get(node)
            if entry is None or entry.instance_id not in alive:
                state.nodes[node] = NodeEntry(pending_since=ctx.now())
        # Every node with a VM or waiting for one: the capacity already counts VMs asked for by another
        # resume that Azure has not listed yet, so two resumes at once never ask twice.
        target = len([e for e in state.nodes.values() if e.instance_id in alive]) + len(state.pending())
        # A VM whose delete Azure has not taken yet still counts in the capacity (it drops when Azure accepts).
        target += len([i for i in instances if i.instance_id in state.deleting and i.provisioning_state != DELETING])
        if target > island.max_nodes:
            ctx.log(f"{island.scale_set}: {target} VMs wanted, capped at maxNodes = {island.max_nodes}", problem=True)
            target = island.max_nodes
        capacity = api.capacity()
        if target > capacity:
            api.set_capacity(target)
            ctx.log(f"{island.scale_set}: capacity {capacity} -> {target} for {','.join(names)}")
        claim(ctx, island, state, instances)


def _wait_for_claims(ctx: Context, groups: dict[str, list[str]], held: dict[str, list[str]], unasked: set[str]) -> int:
    deadline = ctx.now() + ctx.settings.claim_wait_s
    waiting = {name: set(names) for name, names in groups.items()}
    while True:
        for name in list(waiting):
            island = ctx.settings.islands[name]
            if name in unasked:
                try:
                    _ask(ctx, island, groups[name], held)
                    unasked.discard(name)
                except FAILURES as exc:
                    ctx.log(f"resume of {','.join(groups[name])}: {exc}")
                    continue
            try:
                with island_state(ctx.settings.state_dir, name) as state:
                    instances = ctx.scale_set(island).instances()
                    claim(ctx, island, state, instances)
                    waiting[name] = {n for n in waiting[name] if n in state.nodes and not state.nodes[n].instance_id}
                ask_failed(ctx, island)
            except FAILURES as exc:
                ctx.log(f"waiting for VMs of {name}: {exc}")
            if not waiting[name]:
                del waiting[name]
        if not waiting:
            return 1 if ctx.problems else 0
        if ctx.now() >= deadline:
            left = sorted(n for names in waiting.values() for n in names)
            ctx.log(f"no VM for {','.join(left)} after {ctx.settings.claim_wait_s:g} s", problem=True)
            return 1
        ctx.sleep(ctx.settings.poll_s)


def suspend(ctx: Context, nodes: Sequence[str]) -> int:
    delete_nodes(ctx, nodes, "released after idling", skip_busy=True)
    return 1 if ctx.problems else 0


def resume_fail(ctx: Context, nodes: Sequence[str]) -> int:
    """Only the nodes of the elastic islands this program manages: Slurm's list may name others (a fixed island's,
    the controller, a login node), which are not ours to delete or power down; none of ours: nothing is done."""
    mine = [n for names in by_island(ctx, nodes).values() for n in names]
    if not mine:
        return 1
    ctx.log(f"resume of {','.join(mine)} failed (no registration within ResumeTimeout)", problem=True)
    delete_nodes(ctx, mine, "resume failed", skip_busy=False)
    try:
        # Back into the pool: powered down (the suspend program then finds nothing left to delete) and, with
        # idle_on_node_suspend, idle for the next job.
        ctx.scontrol.update(mine, "State=POWER_DOWN_FORCE", f"Reason={RESUME_FAILED_REASON}")
    except SlurmError as exc:
        ctx.log(f"could not return {','.join(mine)} to the pool: {exc}", problem=True)
    return 1


def reconcile(ctx: Context) -> int:
    try:
        slurm_nodes = ctx.scontrol.nodes()
    except SlurmError as exc:
        ctx.log(f"cannot read node states: {exc}", problem=True)
        return 1
    for island in ctx.settings.islands.values():
        try:
            with island_state(ctx.settings.state_dir, island.name) as state:
                _release_jobs(ctx, state, slurm_nodes)
                api = ctx.scale_set(island)
                instances = api.instances()
                alive = {i.instance_id for i in _present(state, instances)}
                for node, entry in state.nodes.items():
                    if entry.instance_id and entry.instance_id not in alive:
                        # Automatic repairs replaced its VM (or someone deleted it): the next new VM is its own,
                        # and it is burned in again before it takes a job.
                        ctx.log(f"{node}: VM {entry.computer_name} is gone; waiting for its replacement")
                        state.nodes[node] = NodeEntry(pending_since=ctx.now())
                        try:
                            ctx.scontrol.update([node], "State=DRAIN", f"Reason={AWAITING_BURNIN_REASON}")
                        except SlurmError as exc:
                            ctx.log(f"could not drain {node}: {exc}", problem=True)
                claim(ctx, island, state, instances)
                _sweep_unclaimed(ctx, island, state, instances)
                finish_deletes(ctx, island, state, instances, api)
            _keep_minimum(ctx, island, slurm_nodes)
        except FAILURES as exc:
            ctx.log(f"reconcile of {island.name}: {exc}", problem=True)
    return 1 if ctx.problems else 0


def _keep_minimum(ctx: Context, island: IslandSettings, slurm_nodes: dict[str, SlurmNode]) -> None:
    """Power up nodes until minNodes of the island are up or on their way (SuspendExcNodes keeps them up after)."""
    mine = sorted((n for n in slurm_nodes.values() if ctx.settings.island_of(n.name) is island),
                  key=lambda n: island_and_index(n.name) or (n.name, 0))  # fmt: skip
    up = [n for n in mine if not powered_down(n)]
    wanted = [n.name for n in mine if powered_down(n)][: max(0, island.min_nodes - len(up))]
    if wanted:
        ctx.scontrol.update(wanted, "State=POWER_UP")
        ctx.log(f"{island.name}: powering up {','.join(wanted)} to keep minNodes = {island.min_nodes}")


def powered_down(node: SlurmNode) -> bool:
    return bool(node.flags & {"POWERED_DOWN", "POWERING_DOWN"})


def _given_up(node: SlurmNode) -> bool:
    """Powered down again: its resume failed (resume-fail) or it idled out before its burn-in could pass."""
    return powered_down(node) and "POWERING_UP" not in node.flags


def _not_ready(node: SlurmNode) -> bool:
    return "POWERING_UP" in node.flags or node.reason.startswith(AWAITING_BURNIN_REASON)


def _release_jobs(ctx: Context, state: IslandState, slurm_nodes: dict[str, SlurmNode]) -> None:
    """Release a held job once its nodes are burned in, or as soon as one of them is given up: a job whose node did
    not come up is not kept held for ever; released, it is scheduled again (nodes resumed for it are held again until
    they are burned in)."""
    for job, nodes in list(state.held_jobs.items()):
        mine = [slurm_nodes[n] for n in nodes if n in slurm_nodes]
        gone = sorted(n.name for n in mine if _given_up(n))
        if not gone and any(_not_ready(n) for n in mine):
            continue
        why = f"{','.join(gone)} did not come up; Slurm schedules it again" if gone else "its nodes are burned in"
        try:
            ctx.scontrol.call("release", job)
            ctx.log(f"job {job} released: {why}")
        except SlurmError as exc:
            ctx.log(f"job {job} not released ({exc}); it may have ended")
        del state.held_jobs[job]


def _sweep_unclaimed(
    ctx: Context, island: IslandSettings, state: IslandState, instances: list[ScaleSetInstance]
) -> None:
    """A VM no node claimed for unclaimed_grace_s (the late VM of a failed resume) is put on record for deletion."""
    taken = state.claimed()
    now = ctx.now()
    free = {i.instance_id for i in _present(state, instances) if i.instance_id not in taken}
    state.unclaimed_since = {k: v for k, v in state.unclaimed_since.items() if k in free}
    for instance_id in free:
        state.unclaimed_since.setdefault(instance_id, now)
    stale = sorted(k for k, v in state.unclaimed_since.items() if now - v >= ctx.settings.unclaimed_grace_s)
    if stale and not state.pending():
        for k in stale:
            state.deleting[k] = DeleteEntry(why="no node claimed it", since=now)
            state.unclaimed_since.pop(k, None)
        ctx.log(f"{island.scale_set}: VM instance(s) {', '.join(stale)} that no node claimed: deleting", problem=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ndfleet-elastic")
    parser.add_argument("--config", type=Path, default=Path("/etc/ndfleet/elastic.json"))
    parser.add_argument("program", choices=("resume", "suspend", "resume-fail", "reconcile"))
    parser.add_argument("hostlist", nargs="?", default="")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"ndfleet-elastic: cannot read {args.config}: {exc}", file=sys.stderr)
        return 2
    scontrol = Scontrol(settings.scontrol, settings.scontrol_timeout_s)
    scale_sets: Callable[[IslandSettings], ScaleSetApi] | None = None

    def lazy(island: IslandSettings) -> ScaleSetApi:
        nonlocal scale_sets
        if scale_sets is None:
            scale_sets = azure_scale_sets(settings)
        return scale_sets(island)

    ctx = Context(settings, lazy, scontrol)
    if args.program == "reconcile":
        return reconcile(ctx)
    try:
        nodes = scontrol.hostnames(args.hostlist) if args.hostlist else []
    except SlurmError as exc:
        ctx.log(f"{args.program} {args.hostlist}: {exc}", problem=True)
        return 2
    if args.program == "resume":
        return resume(ctx, nodes, os.environ.get("SLURM_RESUME_FILE"))
    if args.program == "suspend":
        return suspend(ctx, nodes)
    return resume_fail(ctx, nodes)


if __name__ == "__main__":
    sys.exit(main())
