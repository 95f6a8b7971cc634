"""Deleting elastic VMs: each delete is put on record in the island's state before Azure is asked, asked again while
Azure refuses it for now (409, 429, 5xx) within a budget, and confirmed only once the scale set's instance list no
longer has the VM (the reconcile timer finishes what the suspend and resume-fail programs could not)."""

from __future__ import annotations

from collections.abc import Sequence

from ndfleet_node.elastic.arm import DELETING, ArmError, ScaleSetApi, ScaleSetInstance
from ndfleet_node.elastic.context import FAILURES, RECONCILE_DELETE_BUDGET_S, Context, IslandSettings, by_island
from ndfleet_node.elastic.state import DeleteEntry, IslandState, island_state
from ndfleet_node.scontrol import SlurmError, SlurmNode


def delete_nodes(ctx: Context, nodes: Sequence[str], why: str, skip_busy: bool) -> None:
    """Delete the nodes' VMs: each delete is put on record first (state.deleting), then asked for outside the
    island's lock (its retries may take minutes), then marked accepted or left for the reconcile timer."""
    try:
        slurm_nodes: dict[str, SlurmNode] = ctx.scontrol.nodes()
    except SlurmError as exc:
        ctx.log(f"cannot read node states: {exc}; nothing deleted", problem=True)
        return
    for name, names in by_island(ctx, nodes).items():
        island = ctx.settings.islands[name]
        try:
            with island_state(ctx.settings.state_dir, name) as state:
                doomed: dict[str, str] = {}
                for node in names:
                    entry = state.nodes.get(node)
                    if skip_busy and node in slurm_nodes and busy(slurm_nodes[node]):
                        ctx.log(f"{node} runs a job: its VM is kept", problem=True)
                        continue
                    if entry is not None and entry.instance_id:
                        doomed[node] = entry.instance_id
                        state.deleting[entry.instance_id] = DeleteEntry(node=node, why=why, since=ctx.now(),
                                                                        caller_asks=True)
                    state.nodes.pop(node, None)
            ask_delete(ctx, island, sorted(doomed.items()), ctx.settings.delete_budget_s)
        except FAILURES as exc:
            ctx.log(f"{why} of {','.join(names)}: {exc}", problem=True)



def ask_delete(ctx: Context, island: IslandSettings, doomed: list[tuple[str, str]], budget_s: float) -> None:
    """Ask Azure to delete the VMs on record ((node or "", instance id)), retrying within `budget_s`; note the
    outcome on record."""
    if not doomed:
        return
    ids = sorted({instance_id for _, instance_id in doomed})
    error = ""
    try:
        operation = ctx.scale_set(island).delete_instances(ids, budget_s, now=ctx.now, sleep=ctx.sleep)
    except ArmError as exc:
        error = str(exc)[:500]
    with island_state(ctx.settings.state_dir, island.name) as state:
        for instance_id in ids:
            entry = state.deleting.get(instance_id)
            if entry is None:
                continue
            entry.attempts += 1
            entry.accepted = entry.accepted or not error
            entry.error = error
    for node, instance_id in doomed:
        what = f"{node}: VM instance {instance_id} of {island.scale_set}" if node else f"VM instance {instance_id}"
        if error:
            ctx.log(f"{what} not deleted yet ({error}); on record, the reconcile timer asks again", problem=True)
        else:
            ctx.log(f"{what}: delete accepted ({operation or 'no operation URL'}); confirmed once it leaves the list")



def asking(ctx: Context, entry: DeleteEntry) -> bool:
    """The program that put the delete on record is still asking for it (its first answer not yet noted)."""
    asking_until = entry.since + ctx.settings.delete_budget_s + RECONCILE_DELETE_BUDGET_S
    return entry.caller_asks and entry.attempts == 0 and ctx.now() < asking_until



def ask_failed(ctx: Context, island: IslandSettings) -> None:
    """Ask at once for the deletes `give_up_failed` put on record (the reconcile timer would in a minute)."""
    with island_state(ctx.settings.state_dir, island.name) as state:
        todo = [(e.node, i) for i, e in sorted(state.deleting.items()) if not e.caller_asks and not e.attempts]
    ask_delete(ctx, island, todo, RECONCILE_DELETE_BUDGET_S)



def finish_deletes(
    ctx: Context, island: IslandSettings, state: IslandState, instances: list[ScaleSetInstance], api: ScaleSetApi
) -> None:
    """Each delete on record: confirmed (forgotten) once the instance list no longer has the VM; waited for while
    Azure shows it Deleting; asked again otherwise (refused before, its answer lost, or Azure's delete failed)."""
    listed = {i.instance_id: i for i in instances}
    again: list[str] = []
    for instance_id, entry in sorted(state.deleting.items()):
        vm = listed.get(instance_id)
        if vm is None:
            ctx.log(f"VM instance {instance_id} of {island.scale_set} is gone: delete confirmed"
                    + (f" ({entry.node}, {entry.why})" if entry.node else f" ({entry.why})"))  # fmt: skip
            del state.deleting[instance_id]
        elif vm.provisioning_state != DELETING and not asking(ctx, entry):
            again.append(instance_id)
    if not again:
        return
    budget = min(RECONCILE_DELETE_BUDGET_S, ctx.settings.delete_budget_s)
    try:
        api.delete_instances(again, budget, now=ctx.now, sleep=ctx.sleep)
        for instance_id in again:
            state.deleting[instance_id].attempts += 1
            state.deleting[instance_id].accepted = True
            state.deleting[instance_id].error = ""
        ctx.log(f"{island.scale_set}: delete of VM instance(s) {', '.join(again)} asked for and accepted")
    except ArmError as exc:
        for instance_id in again:
            state.deleting[instance_id].attempts += 1
            state.deleting[instance_id].error = str(exc)[:500]
        ctx.log(f"{island.scale_set}: VM instance(s) {', '.join(again)} still not deleted: {exc}", problem=True)



def busy(node: SlurmNode) -> bool:
    return bool(node.flags & {"ALLOCATED", "MIXED", "COMPLETING"})

