"""Rules of one island, fixed or elastic: its size and why `nodes` is split into several (one placement group per
scale set), the Slurm burn-in's least island, warm spares. derive.py applies them across the stack."""

from __future__ import annotations

from ndfleet.stackconfig.clusterspec import ElasticSpec
from ndfleet.stackconfig.settings import NAMESPACE, IslandConfig

# The Learn page that sets the size of one island: a scale set with singlePlacementGroup (which InfiniBand needs: its
# fabric joins only the VMs of one placement group) holds at most 100 VMs; a larger one is a scale set of several
# placement groups (singlePlacementGroup: false), whose VMs InfiniBand does not connect.
# ("By default, a scale set consists of a single placement group with a maximum size of 100 VMs").
PLACEMENT_GROUP_SOURCE = "Microsoft Learn, \"Virtual Machine Scale Sets and placement groups\""


def island_split_line(nodes: int, sizes: list[int], limit: int) -> str | None:
    """One line for the plan when `nodes` is split across several scale sets (islands), and why; None for one."""
    if len(sizes) < 2:
        return None
    split = " + ".join(f"ib{i:02d} {n}" for i, n in enumerate(sizes))
    return (
        f"{NAMESPACE}:nodes = {nodes:,} split into {len(sizes)} islands ({split}): an island is one scale set of one "
        f"placement group, as InfiniBand needs, of at most maxNodesPerIsland = {limit} VMs (100 by default: "
        f"{PLACEMENT_GROUP_SOURCE}); jobs do not cross islands; list {NAMESPACE}:islands to choose the split"
    )


def spare_problems(island: IslandConfig, index: int, scheduler: str) -> list[str]:
    """What is wrong with `islands[i].spares` (docs/operations.md, "Warm spares")."""
    if island.spares == 0:
        return []
    key = f"{NAMESPACE}:islands[{index}].spares = {island.spares}"
    problems = []
    if scheduler != "slurm":
        problems.append(f"{key}: spares are held in a Slurm reservation and swapped in by the Slurm controller, and "
                        f"{NAMESPACE}:scheduler = {scheduler!r}; set {NAMESPACE}:scheduler to 'slurm' or remove spares")
    if island.elastic is not None:
        # An elastic island already grows on demand, and Slurm's power saving would suspend (delete) an idle spare.
        problems.append(f"{key}: an elastic island gets new nodes on demand and suspends idle ones, so it keeps no "
                        "spares; remove spares or make the island fixed (nodes)")
    elif island.nodes is not None and island.spares >= island.nodes:
        problems.append(f"{key}: spares are part of the island's nodes = {island.nodes}, and at least one node must "
                        f"take jobs; set spares between 0 and {island.nodes - 1}")
    return problems


# With Slurm every node of an island enters service through the controller's fabric burn-in, which tests an island's
# nodes in pairs within the island (InfiniBand does not cross scale sets): `burnin-slurm --partition P` burns in the
# nodes of one island partition awaiting it, with idle in-service nodes of that partition as partners, and with fewer
# than 2 it exits "need at least 2" (node/ndfleet_node/burnin/slurm.py, main; hosts.py and planner.py refuse a single
# host too). A node alone in its island stays drained `ndfleet:burnin:awaiting` for good, fixed or elastic alike.
SLURM_MIN_ISLAND_NODES = 2


def lone_island_problem(setting: str, fix: str) -> str:
    """The refusal of an island that would hold one node under Slurm (SLURM_MIN_ISLAND_NODES): one rule for a fixed
    island, an elastic one and an island `nodes` splits off."""
    return (
        f"{setting}: with Slurm an island's nodes take jobs only once they pass the fabric burn-in, which tests them "
        "in pairs inside their island, so a node alone in its island would stay drained awaiting burn-in for good; "
        f"{fix} (or {NAMESPACE}:scheduler: none)"
    )


def island_size(island: IslandConfig, index: int, scheduler: str) -> tuple[int, ElasticSpec | None, list[str]]:
    """An island's size (its maximum when elastic), its elastic settings and the problems with them."""
    key = f"{NAMESPACE}:islands[{index}]"
    if island.elastic is None:
        if island.nodes is None:
            return 0, None, [f"{key}.nodes: missing; set the island's node count (or elastic.maxNodes when elastic)"]
        if island.nodes < SLURM_MIN_ISLAND_NODES and scheduler == "slurm":
            return island.nodes, None, [lone_island_problem(f"{key}.nodes = {island.nodes}", "set nodes to 2 or more")]
        return island.nodes, None, []
    elastic = island.elastic
    problems = []
    if island.nodes is not None:
        problems.append(
            f"{key}.nodes = {island.nodes}: an elastic island's size is elastic.maxNodes = {elastic.max_nodes}; "
            "remove nodes (Slurm decides how many run, between elastic.minNodes and elastic.maxNodes)"
        )
    if elastic.max_nodes < SLURM_MIN_ISLAND_NODES and scheduler == "slurm":
        setting = f"{key}.elastic.maxNodes = {elastic.max_nodes}"
        problems.append(lone_island_problem(setting, "set maxNodes to 2 or more"))
    if elastic.min_nodes > elastic.max_nodes:
        problems.append(
            f"{key}.elastic.minNodes = {elastic.min_nodes}: more than elastic.maxNodes = {elastic.max_nodes}; "
            "minNodes must be between 0 and maxNodes"
        )
    if scheduler != "slurm":
        problems.append(
            f"{key}.elastic: elastic islands are run by Slurm's power saving, and {NAMESPACE}:scheduler = "
            f"{scheduler!r}; set {NAMESPACE}:scheduler to 'slurm' or remove elastic"
        )
    spec = ElasticSpec(
        min_nodes=elastic.min_nodes,
        idle_minutes=elastic.idle_minutes,
        resume_timeout_minutes=elastic.resume_timeout_minutes,
    )
    return elastic.max_nodes, spec, problems
