"""Elastic islands on the Slurm controller: the fixed scale-set names and the programs' settings file.

Everything here is derived from the stack spec alone, so it can be rendered before deployment: the controller reads
its subscription and resource group from the instance metadata service, and the scale sets of elastic islands get
names of ndfleet's choosing (an autonamed scale set's name is only known after `pulumi up`). docs/elastic.md.
"""

from __future__ import annotations

import json

from ndfleet.slurm.conf import CONTROLLER_STATE_MOUNT, ELASTIC_SUSPEND_TIMEOUT_S
from ndfleet.stackconfig.clusterspec import ClusterSpec, IslandSpec

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
    """The programs' settings (ndfleet_node.elastic.programs.load_settings): one entry per elastic island."""
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
