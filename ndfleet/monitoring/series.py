"""The controller's Slurm state series as PromQL sees it: the metric's name, a label value as a string literal, and
the selector of one island's nodes, which the `IslandInServiceLow` alert and `ndfleet goodput` share."""

from __future__ import annotations

from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.names import computer_name_prefix

# node/ndfleet_node/slurm_export.py writes it.
SLURM_METRIC = "ndfleet_slurm_node_state"
# The accounting states (lower case, the job series' `state` label) of a run that ends in a restart of its job: the
# goodput report's job restart times and the fleet dashboard's restart panel count these. A run that ended FAILED
# and that the controller then requeued (node/ndfleet_node/failed_jobs.py) is published as `requeued` by the
# exporter (node/ndfleet_node/slurm_export.py, `job_runs`), whatever accounting kept.
RESTART_CAUSES = ("node_fail", "preempted", "requeued")


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
