"""The roll on the Slurm controller (ndfleet_node/roll, docs/upgrades.md): its settings file, its state folder on the
controller's state disk beside the elastic programs', and how often its timer makes a pass.

The settings name each island's scale set where the stack names it (an elastic island's, elastic_scale_set_name);
a fixed island's scale set is autonamed by Pulumi, its name known only after `pulumi up`, so `roll start` is given
it (`--scale-set`, from `pulumi stack output`). In userData, so a new island never rebuilds the controller.
"""

from __future__ import annotations

import json

from ndfleet.slurm.conf import CONTROLLER_STATE_MOUNT
from ndfleet.slurm.elastic import elastic_islands, elastic_scale_set_name
from ndfleet.stackconfig.clusterspec import ClusterSpec

ROLL_CONFIG = "/etc/ndfleet/roll.json"
ROLL_STATE_DIR = f"{CONTROLLER_STATE_MOUNT}/roll"
ROLL_PROGRAM = "/usr/local/sbin/ndfleet-roll"
ROLL_EVERY_S = 60


def roll_config(spec: ClusterSpec) -> str:
    """The roll's settings (ndfleet_node.roll.cli.load_config)."""
    islands = {i.name: {"scaleSet": elastic_scale_set_name(spec, i)} for i in elastic_islands(spec)}
    return json.dumps({"islands": islands, "state_dir": ROLL_STATE_DIR}, indent=1, sort_keys=True) + "\n"
