"""Elastic islands on the Slurm controller: the fixed scale-set names and the programs' settings file.

Everything here is derived from the stack spec alone, so it can be rendered before deployment: the controller reads
its subscription and resource group from the instance metadata service, and the scale sets of elastic islands get
names of ndfleet's choosing (an autonamed scale set's name is only known after `pulumi up`). docs/elastic.md.
"""

from __future__ import annotations

import json
import math

from ndfleet_node.burnin.planner import TestSpec
from ndfleet_node.burnin.runner import timeout_for
from ndfleet_node.burnin.settings import settings_from_section

from ndfleet.nodefiles.burnin_node_config import burnin_node_section
from ndfleet.slurm.conf import (
    BURNIN_EVERY_S,
    BURNIN_LEVEL,
    BURNIN_SETTLE_S,
    CONTROLLER_STATE_MOUNT,
    ELASTIC_SUSPEND_TIMEOUT_S,
)
from ndfleet.stackconfig.clusterspec import ClusterSpec, IslandSpec
from ndfleet.stackconfig.settings import NAMESPACE

ELASTIC_CONFIG = "/etc/ndfleet/elastic.json"
ELASTIC_STATE_DIR = f"{CONTROLLER_STATE_MOUNT}/elastic"
# The resume program claims new VMs for its nodes at most this long; past the ResumeTimeout Slurm gives up anyway.
CLAIM_WAIT_MARGIN_S = 60
# A VM no node claimed (a late VM of a failed resume) is deleted after this long.
UNCLAIMED_GRACE_S = 900
RECONCILE_EVERY_S = 60
# The suspend program retries a refused delete this long at most: within SuspendTimeout, with a minute to spare for
# reading Slurm's node states and the island's state, and for the last answer; what is still refused then stays on
# record for the reconcile timer (docs/elastic.md).
DELETE_BUDGET_S = ELASTIC_SUSPEND_TIMEOUT_S - 60


def elastic_scale_set_name(spec: ClusterSpec, island: IslandSpec) -> str:
    """`<namePrefix>-<island>-vmss`: unique in the resource group (island names are unique), at most 40 characters."""
    return f"{spec.name_prefix}-{island.name}-vmss"


def elastic_islands(spec: ClusterSpec) -> list[IslandSpec]:
    return [i for i in spec.islands if i.elastic is not None]


def elastic_config(spec: ClusterSpec) -> str:
    """The programs' settings (ndfleet_node.elastic.context.load_settings): one entry per elastic island."""
    islands = elastic_islands(spec)
    doc = {
        "islands": {
            i.name: {
                "scaleSet": elastic_scale_set_name(spec, i),
                "minNodes": i.elastic.min_nodes if i.elastic else 0,
                "maxNodes": i.nodes,
            }
            for i in islands
        },
        "state_dir": ELASTIC_STATE_DIR,
        "claim_wait_s": max(
            (i.elastic.resume_timeout_minutes * 60 - CLAIM_WAIT_MARGIN_S for i in islands if i.elastic), default=60
        ),
        "unclaimed_grace_s": UNCLAIMED_GRACE_S,
        "delete_budget_s": DELETE_BUDGET_S,
    }
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def burnin_s(spec: ClusterSpec, nodes: int) -> int:
    """The longest a healthy island's burn-in of `nodes` VMs takes at the controller's level: its pairwise round and
    its island-wide round, each at its test's derived timeout (ndfleet_node.burnin.runner.timeout_for, from the
    profile's burn-in figures; the island-wide test is the longer one of each round)."""

    settings = settings_from_section(burnin_node_section(spec.profile))
    hosts = tuple(f"n{i}" for i in range(max(nodes, 2)))
    return 2 * timeout_for(settings, TestSpec("", 0, "island", hosts, settings.island_floor_gbps), BURNIN_LEVEL)


def resume_to_burnin_s(spec: ClusterSpec, island: IslandSpec, registration_s: int) -> int:
    """The longest from a resume to the end of its nodes' burn-in: registration (the VM's allocation, boot, set-up
    and validation: `registration_s`, the worst case the health grace period is sized for, or resumeTimeoutMinutes
    when shorter, after which the node is given up), the controller's burn-in timer (every BURNIN_EVERY_S), the
    burn-in itself. Slurm counts a resumed node's idle time from the job's requeue at the resume (docs/elastic.md).
    The burn-in's settle (BURNIN_SETTLE_S) runs from the node's awaiting drain at its resume, beside registration:
    the node waits for the longer of the two."""

    assert island.elastic is not None
    registration = min(registration_s, island.elastic.resume_timeout_minutes * 60)
    return max(registration, BURNIN_SETTLE_S) + BURNIN_EVERY_S + burnin_s(spec, island.nodes)


def idle_problems(spec: ClusterSpec, registration_s: int) -> list[str]:
    """An elastic island whose idleMinutes is not longer than resume_to_burnin_s: Slurm would release its new nodes
    before their burn-in ended, and the resume start over, the job never run."""

    problems = []
    for island in elastic_islands(spec):
        assert island.elastic is not None
        bound_s = resume_to_burnin_s(spec, island, registration_s)
        least = math.ceil(bound_s / 60) + (1 if bound_s % 60 == 0 else 0)
        if island.elastic.idle_minutes < least:
            timeout_s = island.elastic.resume_timeout_minutes * 60
            if timeout_s < registration_s:
                limit = f"resumeTimeoutMinutes {island.elastic.resume_timeout_minutes}"
                other = "a shorter resumeTimeoutMinutes"
            else:
                limit = "the worst-case boot, set-up and validation"
                other = "validationLevel 'quick'" if spec.health.validation_level == "full" else "a smaller island"
            problems.append(
                f"{NAMESPACE}:islands[{island.index}].elastic.idleMinutes = {island.elastic.idle_minutes}: shorter "
                f"than a new node of '{island.name}' may take from its resume to the end of its burn-in ({bound_s} s: "
                f"registration {min(registration_s, timeout_s)} s ({limit}), up to {BURNIN_EVERY_S} s for the "
                f"burn-in timer, {burnin_s(spec, island.nodes)} s for a burn-in of {island.nodes} VMs); Slurm "
                f"would release the node before it took the job; set idleMinutes to {least} or more (or {other})"
            )
    return problems
