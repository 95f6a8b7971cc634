"""What the workspace says per node: the validation result the node publishes (node/ndfleet_node/metrics.py) and
the Slurm state the controller publishes (node/ndfleet_node/slurm_export.py), keyed by host name (lower case)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ndfleet_node.names import SLURM_STATES as CONTROLLER_SLURM_STATES

from ndfleet.status.prometheus import Sample, flag

# Validation states, in the order the docs list them.
VALIDATION_STATES = ("passed", "failed", "pending", "unknown", "not-collected")
# Slurm states the controller publishes (ndfleet_node.names.SLURM_STATES) plus "absent": the node is not in Slurm.
SLURM_STATES = (*CONTROLLER_SLURM_STATES, "absent")
# States in which the node takes jobs (or runs them).
SLURM_SERVING = ("idle", "allocated", "mixed", "completing")


@dataclass(frozen=True)
class Validation:
    state: str  # one of VALIDATION_STATES
    failed_checks: tuple[str, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class SlurmNode:
    state: str  # one of SLURM_STATES
    reason: str = ""


@dataclass(frozen=True)
class MetricsView:
    validation: dict[str, Validation] | None  # None: not read (problem says why) or not collected
    validation_problem: str | None
    slurm: dict[str, SlurmNode] | None
    slurm_problem: str | None


NOT_COLLECTED = MetricsView(None, None, None, None)


def validation_by_node(node_samples: Sequence[Sample], failed_samples: Sequence[Sample]) -> dict[str, Validation]:
    """Per node: passed (validated and healthy), failed (validated, not healthy), pending (not validated yet), or
    unknown when a value is not 0/1 (NaN, garbage) or the two metrics disagree with each other."""
    values: dict[str, dict[str, list[str]]] = {}
    for sample in node_samples:
        node = sample.labels.get("node", "").lower()
        name = sample.labels.get("__name__", "")
        if node and name:
            values.setdefault(node, {}).setdefault(name, []).append(sample.value)
    failed: dict[str, set[str]] = {}
    for sample in failed_samples:
        node = sample.labels.get("node", "").lower()
        if node and sample.labels.get("check"):
            failed.setdefault(node, set()).add(sample.labels["check"])
    out: dict[str, Validation] = {}
    for node, metrics in values.items():
        checks = tuple(sorted(failed.get(node, ())))
        flags: dict[str, int] = {}
        problem = ""
        for name in ("ndfleet_node_validated", "ndfleet_node_healthy"):
            seen = metrics.get(name, [])
            parsed = {flag(v) for v in seen}
            if not seen:
                problem = problem or f"{name} missing"
            elif None in parsed or len(parsed) != 1:
                problem = problem or f"{name} = {', '.join(repr(v) for v in seen[:3])} (not 0 or 1)"
            else:
                value = next(iter(parsed))
                assert value is not None  # None is handled above
                flags[name] = value
        if problem:
            out[node] = Validation("unknown", checks, problem)
        elif flags["ndfleet_node_validated"] == 0:
            out[node] = Validation("pending", checks, "validation has not finished")
        elif flags["ndfleet_node_healthy"] == 1:
            out[node] = Validation("passed", checks)
        else:
            out[node] = Validation("failed", checks, ("failed checks: " + ", ".join(checks)) if checks else "")
    return out


def slurm_by_node(samples: Sequence[Sample]) -> dict[str, SlurmNode]:
    """The controller's `ndfleet_slurm_node_state{slurm_node, state, reason} 1` series, by node."""
    out: dict[str, SlurmNode] = {}
    for sample in samples:
        node = sample.labels.get("slurm_node", "").lower()
        if not node or flag(sample.value) != 1:
            continue
        state = sample.labels.get("state", "")
        state = state if state in SLURM_STATES else "other"
        previous = out.get(node)
        # Two series for one node (a publish in between two scrapes): keep the one that needs attention.
        if previous is None or previous.state in SLURM_SERVING:
            out[node] = SlurmNode(state, sample.labels.get("reason", ""))
    return out
