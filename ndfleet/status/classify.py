"""Joining what Azure and the workspace say, node by node, and deciding which nodes need a person and what to do.

Each node gets a `health` (healthy, starting, unhealthy, unknown), a `repair` (what automatic repairs are doing
about it) and the `actions` a person should take (empty when none). The advice restates Microsoft Learn,
"Automatic instance repairs" and "Application Health extension" (docs/operations.md cites the sections).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ndfleet_node.names import AWAITING_BURNIN_REASON, BURNIN_REASON_PREFIX, DRAIN_REASON_PREFIX

from ndfleet.cost.prices import table_price
from ndfleet.stackconfig.clusterspec import ClusterSpec, IslandSpec
from ndfleet.status.facts import Instance, ScaleSet
from ndfleet.status.metrics_view import SLURM_SERVING, MetricsView, SlurmNode, Validation

HEALTH_STATES = ("healthy", "starting", "unhealthy", "unknown")
REPAIR_STATES = ("none", "pending", "in-progress", "suspended", "off", "protected", "unknown")
# Provisioning states of an instance Azure is working on (creating, reimaging, deleting it).
TRANSITIONAL = ("Creating", "Updating", "Deleting", "Migrating")


@dataclass(frozen=True)
class NodeStatus:
    island: str
    scale_set: str
    resource_group: str
    instance: Instance
    validation: Validation
    slurm: SlurmNode | None  # None: the stack has no Slurm or its states were not read
    health: str
    repair: str
    actions: tuple[str, ...]


@dataclass(frozen=True)
class IslandStatus:
    name: str
    wanted: int
    scale_sets: tuple[ScaleSet, ...]
    nodes: tuple[NodeStatus, ...]
    actions: tuple[str, ...]  # about the island as a whole (scale set missing, repairs suspended, ...)
    cost_per_hour: float | None
    spares_wanted: int = 0  # the stack's `islands[].spares` (docs/operations.md, "Warm spares")

    @property
    def spares(self) -> int:
        """Burned-in nodes held in the island's spares reservation (the controller's Slurm state "spare")."""
        return sum(1 for n in self.nodes if n.slurm is not None and n.slurm.state == "spare")

    @property
    def running(self) -> int:
        return sum(1 for n in self.nodes if n.instance.power_state == "running")

    @property
    def validated(self) -> int:
        return sum(1 for n in self.nodes if n.validation.state == "passed")

    @property
    def in_slurm(self) -> int:
        return sum(1 for n in self.nodes if n.slurm is not None and n.slurm.state in SLURM_SERVING)

    @property
    def unhealthy(self) -> int:
        return sum(1 for n in self.nodes if n.health == "unhealthy") + self.missing

    @property
    def repairing(self) -> int:
        return sum(1 for n in self.nodes if n.repair in ("pending", "in-progress"))

    @property
    def missing(self) -> int:
        return max(0, self.wanted - len(self.nodes))

    @property
    def all_healthy(self) -> bool:
        return not self.missing and all(n.health == "healthy" for n in self.nodes) and len(self.nodes) == self.wanted


@dataclass
class StackStatus:
    stack: str
    subscription_id: str | None
    location: str
    vm_size: str
    slurm: bool
    monitoring: bool
    islands: list[IslandStatus] = field(default_factory=list)
    validation_read: bool = True  # False: monitoring off, or the workspace could not be queried
    notes: list[str] = field(default_factory=list)  # what could not be read, and what it means
    error: str | None = None  # could not read Azure at all
    error_details: str = ""  # what the library said (--verbose)
    error_transient: bool = False  # reading again may work (network, throttling, 5xx); else --watch stops

    @property
    def exit_code(self) -> int:
        """0 every wanted node healthy; 1 some known not healthy; 2 could not read, or could not tell."""
        if self.error is not None:
            return 2
        if any(n.health in ("unhealthy", "starting") for i in self.islands for n in i.nodes):
            return 1
        if any(i.missing or len(i.nodes) != i.wanted for i in self.islands):
            return 1
        if any(n.health == "unknown" for i in self.islands for n in i.nodes):
            return 2
        return 0


def _vmss(scale_set: ScaleSet) -> str:
    return f"--resource-group {scale_set.resource_group} --name {scale_set.name}"


def _repair(instance: Instance, scale_set: ScaleSet) -> str:
    if instance.vm_health != "unhealthy":
        return "none"
    if instance.provisioning_state in TRANSITIONAL:
        return "in-progress"
    if instance.protected:
        return "protected"
    if not scale_set.repairs_enabled or scale_set.repair_service_state == "NotRunning":
        return "off"
    if scale_set.repair_service_state == "Suspended":
        return "suspended"
    if scale_set.repair_service_state == "Running":
        return "pending"
    return "unknown"


def _health(instance: Instance, validation: Validation, slurm: SlurmNode | None) -> str:
    if instance.provisioning_state == "Failed" or instance.power_state in (
        "deallocated", "deallocating", "stopped", "stopping"
    ):
        return "unhealthy"
    if instance.vm_health in ("unhealthy", "unknown") or validation.state == "failed":
        return "unhealthy"
    drained = slurm is not None and slurm.state in ("drained", "draining")
    awaiting_burnin = slurm is not None and (
        slurm.state == "awaiting_burnin" or (drained and slurm.reason == AWAITING_BURNIN_REASON)
    )
    if slurm is not None and (slurm.state in ("down", "powered_down") or (drained and not awaiting_burnin)):
        return "unhealthy"
    if (
        instance.provisioning_state in TRANSITIONAL
        or instance.power_state == "starting"
        or instance.vm_health == "initializing"
        or validation.state == "pending"
        or awaiting_burnin
    ):
        return "starting"
    if instance.power_state != "running" or instance.provisioning_state != "Succeeded":
        return "unknown"
    if instance.vm_health != "healthy" or validation.state == "unknown":
        return "unknown"
    return "healthy"


def _actions(node: Instance, scale_set: ScaleSet, validation: Validation, slurm: SlurmNode | None,
             repair: str) -> list[str]:
    ids = f"{_vmss(scale_set)} --instance-ids {node.instance_id}"
    out: list[str] = []
    if node.provisioning_state == "Failed":
        out.append(f"provisioning failed: reimage it (`az vmss reimage {ids}`) or delete it "
                   f"(`az vmss delete-instances {ids}`; the scale set's capacity then drops, `pulumi up` restores it)")
    if node.power_state in ("deallocated", "stopped"):
        billing = " (a stopped, not deallocated, VM is still billed)" if node.power_state == "stopped" else ""
        out.append(f"{node.power_state}{billing}: start it with `az vmss start {ids}` if it should run")
    if repair == "suspended":
        out.append(f"automatic repairs are suspended on {scale_set.name} (replacements kept coming back "
                   "unhealthy): find the cause (its failed checks, the node's /run/ndfleet/report.json), then "
                   "`az vmss set-orchestration-service-state --service-name AutomaticRepairs --action Resume "
                   f"{_vmss(scale_set)}`")
    elif repair == "off":
        out.append(f"unhealthy and automatic repairs are off on {scale_set.name}: repair it by hand "
                   f"(`az vmss reimage {ids}`), then `pulumi up` to restore the repair policy")
    elif repair == "protected":
        out.append("unhealthy, but instance protection keeps automatic repairs away: remove the protection "
                   f"(`az vmss update {_vmss(scale_set)} --instance-id {node.instance_id} "
                   "--protect-from-scale-set-actions false`) or repair it by hand")
    elif repair == "unknown":
        out.append(f"unhealthy and the state of automatic repairs on {scale_set.name} could not be read: "
                   f"`az vmss get-instance-view {_vmss(scale_set)}` shows it")
    if node.vm_health == "unknown":
        out.append("the Application Health extension gets no valid answer from the node's health endpoint "
                   "(Unknown), which automatic repairs do not act on: check the node (boot diagnostics, "
                   f"`ndfleet-node` services) or reimage it (`az vmss reimage {ids}`)")
    if validation.state == "failed" and node.vm_health == "healthy":
        out.append("validation failed but Azure sees the node healthy: the health endpoint does not report the "
                   "validation; check `ndfleet-health` on the node")
    if slurm is not None and slurm.state in ("drained", "draining") and node.vm_health == "healthy":
        if slurm.reason.startswith(BURNIN_REASON_PREFIX):
            if slurm.reason != AWAITING_BURNIN_REASON:
                out.append(f"held by the fabric burn-in ({slurm.reason}): see docs/burnin.md before resuming it")
        elif slurm.reason.startswith(DRAIN_REASON_PREFIX):
            out.append(f"drained by the health check ({slurm.reason}) while Azure sees it healthy: read "
                       "/run/ndfleet/report.json on the node; it resumes itself when the check passes again")
        else:
            out.append(f"drained in Slurm ({slurm.reason or 'no reason'}): "
                       f"`scontrol update nodename={node.name} state=resume` when the work on it is done")
    if slurm is not None and slurm.state == "down" and node.power_state == "running":
        out.append("Slurm reports it down (slurmd not responding): check `systemctl status slurmd` on the node")
    if node.latest_model is False:
        out.append(f"runs an older scale-set model: `az vmss update-instances {ids}` (a customData change needs "
                   f"`az vmss reimage {ids}`; docs/bootstrap.md)")
    return out


def wanted_nodes(island: IslandSpec, scale_sets: tuple[ScaleSet, ...]) -> int:
    """The nodes an island should have now: a fixed island its planned nodes; an elastic island the VMs Slurm asked
    for, its scale set's capacity now (0 up to maxNodes, docs/elastic.md), so an idle elastic island is no finding."""
    return sum(s.capacity for s in scale_sets) if island.elastic is not None else island.nodes


def classify_island(
    spec: ClusterSpec,
    island: str,
    wanted: int,
    scale_sets: tuple[ScaleSet, ...],
    metrics: MetricsView,
    elastic: bool = False,
) -> IslandStatus:
    """`elastic`: Slurm sets the scale set's capacity (docs/elastic.md), so a capacity other than the plan's is no
    finding and `pulumi up` is not the remedy."""
    nodes: list[NodeStatus] = []
    island_actions: list[str] = []
    if not scale_sets:
        island_actions.append(
            f"no scale set found for island {island} (tag ndfleet:island={island}, host names "
            f"{spec.name_prefix}-{island}-*): deploy the stack with `pulumi up`, or check the caller can read it"
        )
    if len(scale_sets) > 1:
        island_actions.append(
            f"{len(scale_sets)} scale sets claim island {island} ({', '.join(s.name for s in scale_sets)}): "
            "another stack uses the same namePrefix, or a replaced scale set was left behind"
        )
    for scale_set in scale_sets:
        if scale_set.capacity != wanted and len(scale_sets) == 1 and not elastic:
            island_actions.append(
                f"scale set {scale_set.name} has capacity {scale_set.capacity}, the stack wants {wanted}: "
                "run `pulumi up` (or `pulumi refresh` if someone scaled it by hand)"
            )
        if scale_set.repair_service_state == "Suspended":
            island_actions.append(
                f"automatic repairs are suspended on {scale_set.name}: "
                "`az vmss set-orchestration-service-state --service-name AutomaticRepairs --action Resume "
                f"{_vmss(scale_set)}` once the cause is fixed"
            )
        elif not scale_set.repairs_enabled:
            island_actions.append(
                f"automatic repairs are off on {scale_set.name}: run `pulumi up` to restore the repair policy"
            )
        for instance in scale_set.instances:
            key = instance.name.lower()
            if metrics.validation is None:
                validation = (
                    Validation("unknown", (), metrics.validation_problem)
                    if metrics.validation_problem
                    else Validation("not-collected")
                )
            else:
                validation = metrics.validation.get(
                    key, Validation("unknown", (), "no validation metrics from the node in the last 5 minutes")
                )
            slurm: SlurmNode | None = None
            if metrics.slurm is not None:
                slurm = metrics.slurm.get(key, SlurmNode("absent"))
            repair = _repair(instance, scale_set)
            nodes.append(
                NodeStatus(
                    island=island,
                    scale_set=scale_set.name,
                    resource_group=scale_set.resource_group,
                    instance=instance,
                    validation=validation,
                    slurm=slurm,
                    health=_health(instance, validation, slurm),
                    repair=repair,
                    actions=tuple(_actions(instance, scale_set, validation, slurm, repair)),
                )
            )
    if any(n.repair == "suspended" for n in nodes):
        # The unhealthy node's own action says it, with the cause to look for first.
        island_actions = [a for a in island_actions if not a.startswith("automatic repairs are suspended")]
    price = table_price(spec.profile.name, spec.location)
    running = sum(1 for n in nodes if n.instance.power_state == "running")
    return IslandStatus(
        name=island,
        wanted=wanted,
        scale_sets=scale_sets,
        nodes=tuple(sorted(nodes, key=lambda n: (n.scale_set, n.instance.name))),
        actions=tuple(island_actions),
        cost_per_hour=None if price is None else round(price.usd_per_hour * running, 2),
        spares_wanted=next((i.spares for i in spec.islands if i.name == island), 0),
    )
