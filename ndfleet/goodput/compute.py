"""The goodput report's figures, as pure functions over the controller's Slurm node states read back as a
Prometheus range query (`ndfleet_slurm_node_state{stack} == 1` at a fixed step; docs/goodput.md).

A sample at time t stands for the interval [t, t + step) (cut at the period's end): the node was in that state
for that long. Each node has one state a timestamp; when a publish lands between two scrapes and a node shows two
series at one timestamp, the one that is not in service wins (as `status` does: ndfleet.status.metrics_view).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ndfleet_node.names import BURNIN_REASON_PREFIX, DRAIN_REASON_PREFIX, EPILOG_ERROR_REASON

from ndfleet.goodput.jobs import JobReport, jobs_json
from ndfleet.goodput.stats import percentile

# What each hour of a node counts as. "powered_down" (an elastic node Slurm has deallocated) is not paid for and is
# left out of node-hours; "other" is a Slurm state ndfleet does not map; "spare" is a warm spare the controller holds
# out of scheduling (islands[].spares, docs/operations.md): paid for on purpose, neither in service nor badput.
CATEGORIES = ("running", "idle", "spare", "drained", "repair", "burnin", "other")
SERVICE = ("running", "idle")
# In the fleet's service for interruptions: a node that joins or leaves the spares' reservation was not interrupted,
# and a spare that fails its health check was.
AVAILABLE = (*SERVICE, "spare")
# Paid for and not available to jobs: the badput.
BADPUT = ("drained", "repair", "burnin", "other")
_RUNNING = frozenset({"allocated", "mixed", "completing"})
_DRAIN = frozenset({"drained", "draining"})
ELASTIC_REASON_PREFIX = DRAIN_REASON_PREFIX + "elastic:"
# slurmctld's drain of a node whose Epilog (ndfleet's own, at a job's end) exited non-zero: the health check's drain
# until its next periodic pass replaces the reason with the failed checks (ndfleet_node.slurm_health).
EPILOG_CAUSE = "check:epilog"
HOURS_PER_DAY = 24


@dataclass(frozen=True)
class StateSample:
    node: str  # the Slurm node (host name), lower case
    at: float  # unix seconds
    state: str  # one of ndfleet_node.names.SLURM_STATES
    reason: str


def category(state: str, reason: str) -> str | None:
    """The report's category for one Slurm state and reason; None for powered_down (not paid, not counted)."""
    if state == "powered_down":
        return None
    if state in _RUNNING:
        return "running"
    if state == "idle":
        return "idle"
    if state == "spare":
        return "spare"
    if state == "awaiting_burnin" or (state in _DRAIN and reason.startswith(BURNIN_REASON_PREFIX)):
        return "burnin"
    ours = reason.startswith(DRAIN_REASON_PREFIX) or reason == EPILOG_ERROR_REASON
    if state == "down" or (state in _DRAIN and ours):
        return "repair"
    if state in _DRAIN:
        return "drained"
    return "other"


def cause(state: str, reason: str) -> str:
    """Why a node left service: `check:<id>` for each health-check drain's first check, `elastic`, `slurm-down`
    (slurmd stopped answering), `burnin`, `operator` (a drain with someone else's reason), or `other` (a Slurm state
    ndfleet does not map). Slurm's "Epilog error" is the Epilog's drain, `check:epilog` until the interruption's
    next sample names the check (node_figures)."""
    if reason.startswith(BURNIN_REASON_PREFIX) or state == "awaiting_burnin":
        return "burnin"
    if reason.startswith(ELASTIC_REASON_PREFIX):
        return "elastic"
    if reason.startswith(DRAIN_REASON_PREFIX) and state in _DRAIN:
        first = reason[len(DRAIN_REASON_PREFIX):].split(",")[0].strip()
        return f"check:{first or 'unnamed'}"
    if reason == EPILOG_ERROR_REASON and state in _DRAIN:
        return EPILOG_CAUSE
    if state == "down":
        return "slurm-down"
    if state in _DRAIN:
        return "operator"
    return "other"


def island_of(node: str, prefixes: Mapping[str, str]) -> str:
    """The island whose scale set's computer name prefix (ndfleet.stackconfig.names.computer_name_prefix) the host
    name starts with, the longest when two do; "" if none."""
    best = ""
    for island, prefix in prefixes.items():
        if node.lower().startswith(prefix.lower()) and len(prefix) > len(prefixes.get(best, "")):
            best = island
    return best


@dataclass
class Figures:
    """One island's (or the cluster's) figures."""

    hours: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
    interruptions: dict[str, int] = field(default_factory=dict)
    back_in_service_s: list[float] = field(default_factory=list)
    still_out: int = 0  # interruptions not back in service by the period's end, the node still in Slurm
    # Interruptions whose node left Slurm while out (its series ended while others went on): replaced by automatic
    # repairs, or removed. Its place is taken by a new node, whose own hours count from its first state.
    left_slurm: int = 0

    @property
    def node_hours(self) -> float:
        return sum(self.hours.values())

    @property
    def service_hours(self) -> float:
        return sum(self.hours[c] for c in SERVICE)

    @property
    def badput_hours(self) -> float:
        return sum(self.hours[c] for c in BADPUT)

    @property
    def service_share(self) -> float | None:
        """In service, of the node-hours not held as warm spares (an island at full strength with spares is 100 %)."""
        meant_for_jobs = self.node_hours - self.hours["spare"]
        return self.service_hours / meant_for_jobs if meant_for_jobs > 0 else None

    def per_thousand_node_days(self) -> dict[str, float]:
        days = self.node_hours / HOURS_PER_DAY
        return {c: (n * 1000 / days if days else 0.0) for c, n in sorted(self.interruptions.items())}

    def add(self, other: Figures) -> None:
        for c in CATEGORIES:
            self.hours[c] += other.hours[c]
        for c, n in other.interruptions.items():
            self.interruptions[c] = self.interruptions.get(c, 0) + n
        self.back_in_service_s += other.back_in_service_s
        self.still_out += other.still_out
        self.left_slurm += other.left_slurm


def one_state_per_step(samples: Iterable[StateSample]) -> dict[str, list[StateSample]]:
    """Per node, its samples in time order, one a timestamp (the one out of service wins a tie)."""
    chosen: dict[tuple[str, float], StateSample] = {}
    for s in samples:
        key = (s.node, s.at)
        previous = chosen.get(key)
        if previous is None or category(previous.state, previous.reason) in SERVICE:
            chosen[key] = s
    out: dict[str, list[StateSample]] = {}
    for (node, _), s in sorted(chosen.items()):
        out.setdefault(node, []).append(s)
    return out


def node_figures(
    samples: Sequence[StateSample], step_s: float, until: float, last_step: float | None = None
) -> Figures:
    """One node's hours by category, its interruptions (service -> out of service) by cause, and how long each
    took to come back into service. A gap in the samples (no series at a step: the controller or the agent
    silent) counts in no category and ends no interruption. `last_step`: the last step any node has a state at; an
    interruption still open at the end counts as `left_slurm` when the node's series ended before it, else
    `still_out`."""
    f = Figures()
    out_since: float | None = None
    previous: str | None = None
    epilog_open = False  # the open interruption began as the Epilog's drain, its check not named yet
    for s in samples:
        span = max(0.0, min(step_s, until - s.at))
        now = category(s.state, s.reason)
        if now is not None:
            f.hours[now] += span / 3600
        if previous in AVAILABLE and now is not None and now not in AVAILABLE:
            c = cause(s.state, s.reason)
            f.interruptions[c] = f.interruptions.get(c, 0) + 1
            out_since = s.at
            epilog_open = c == EPILOG_CAUSE
        elif (
            epilog_open
            and now is not None
            and now not in AVAILABLE
            and (named := cause(s.state, s.reason)).startswith("check:")
            and named != EPILOG_CAUSE
        ):
            # The Epilog's drain, renamed by the health check's next pass: the interruption's cause is that check.
            f.interruptions[EPILOG_CAUSE] -= 1
            if not f.interruptions[EPILOG_CAUSE]:
                del f.interruptions[EPILOG_CAUSE]
            f.interruptions[named] = f.interruptions.get(named, 0) + 1
            epilog_open = False
        if out_since is not None and now in AVAILABLE:
            f.back_in_service_s.append(s.at - out_since)
            out_since, epilog_open = None, False
        if now is not None:
            previous = now
    if out_since is not None:
        if last_step is not None and samples and samples[-1].at < last_step:
            f.left_slurm += 1
        else:
            f.still_out += 1
    return f


@dataclass
class Report:
    stack: str
    since: float
    until: float
    step_s: float
    usd_per_node_hour: float | None
    islands: dict[str, Figures]
    cluster: Figures
    unplaced_nodes: tuple[str, ...]  # nodes whose host name names no island of the stack
    jobs: JobReport | None = None  # the requeued or node-failed jobs' figures (ndfleet.goodput.jobs)

    def badput_usd(self, f: Figures) -> float | None:
        return None if self.usd_per_node_hour is None else round(f.badput_hours * self.usd_per_node_hour, 2)


def build_report(
    stack: str,
    samples: Iterable[StateSample],
    *,
    since: float,
    until: float,
    step_s: float,
    prefixes: Mapping[str, str],
    usd_per_node_hour: float | None,
) -> Report:
    by_island: dict[str, Figures] = {i: Figures() for i in prefixes}
    unplaced = []
    by_node = one_state_per_step(samples)
    last_step = max((series[-1].at for series in by_node.values() if series), default=None)
    for node, series in by_node.items():
        island = island_of(node, prefixes)
        if not island:
            unplaced.append(node)
            continue
        by_island[island].add(node_figures(series, step_s, until, last_step))
    cluster = Figures()
    for f in by_island.values():
        cluster.add(f)
    return Report(stack, since, until, step_s, usd_per_node_hour, by_island, cluster, tuple(sorted(unplaced)))


def as_json(report: Report) -> dict[str, object]:
    def figures(f: Figures) -> Mapping[str, object]:
        times = f.back_in_service_s
        return {
            "nodeHours": round(f.node_hours, 4),
            "hours": {c: round(h, 4) for c, h in f.hours.items()},
            "serviceHours": round(f.service_hours, 4),
            "serviceShare": None if f.service_share is None else round(f.service_share, 4),
            "interruptions": dict(sorted(f.interruptions.items())),
            "interruptionsPer1000NodeDays": {c: round(v, 2) for c, v in f.per_thousand_node_days().items()},
            "drainToBackInServiceSeconds": {"count": len(times), "median": percentile(times, 50),
                                            "p95": percentile(times, 95), "stillOut": f.still_out,
                                            "leftSlurm": f.left_slurm},
            "badputNodeHours": round(f.badput_hours, 4),
            "badputUsd": report.badput_usd(f),
        }

    return {
        "stack": report.stack,
        "since": report.since,
        "until": report.until,
        "stepSeconds": report.step_s,
        "usdPerNodeHour": report.usd_per_node_hour,
        "islands": {name: figures(f) for name, f in report.islands.items()},
        "cluster": figures(report.cluster),
        "unplacedNodes": list(report.unplaced_nodes),
        "jobs": None if report.jobs is None else jobs_json(report.jobs),
        "notYetMeasured": list(NOT_YET_MEASURED),
    }


# What the issue asks for that the published series cannot tell yet (docs/goodput.md, "Not yet measured").
NOT_YET_MEASURED = (
    "detect time (fault to drain): no series holds the fault's own time (docs/goodput.md, detect time)",
    "work lost since a job's last checkpoint: not known to Slurm, so ETTR is an upper bound",
)
