"""The controller's Slurm state series as PromQL sees it: the metric's name, a label value as a string literal, and
the selector of one island's nodes, which the `IslandInServiceLow` alert and `ndfleet goodput` share."""

from __future__ import annotations

from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.names import computer_name_prefix

# node/ndfleet_node/slurm_export.py writes it.
SLURM_METRIC = "ndfleet_slurm_node_state"
# The accounting states (lower case, the job series' `state` label) of a run that ends in a restart of its job: the
# goodput report's job restart times and the fleet dashboard's restart panel count these.
RESTART_CAUSES = ("node_fail", "preempted", "requeued")
# A run that ended FAILED and was followed by another run of its job: the controller requeued the job after it failed
# on a node its health check then took out (node/ndfleet_node/failed_jobs.py), once slurmctld had completed it.
FAILED_THEN_REQUEUED = "failed"


def label_value(value: str) -> str:
    """A PromQL string literal's content: backslash and double quote escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _regex(text: str) -> str:
    return "".join("\\" + c if c in ".^$*+?()[]{}|\\" else c for c in text)


def island_query_selector(spec: ClusterSpec, island: str, extra: str = "") -> str:
    """The controller's state series of one island's nodes: those whose slurm_node has the island's host prefix
    (the series' own `island` label is the controller's). The report's query and IslandInServiceLow share it."""
    prefix = _regex(computer_name_prefix(spec.name_prefix, island))
    matchers = [f'stack="{label_value(spec.stack)}"', f'slurm_node=~"(?i){label_value(prefix)}.*"']
    if extra:
        matchers.append(extra)
    return f"{SLURM_METRIC}{{{','.join(matchers)}}}"
