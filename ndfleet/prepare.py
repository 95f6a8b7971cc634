"""The prepare step: everything decided about a stack before the first resource is registered.

`prepare(spec, cloud)` turns a validated ClusterSpec into what the components receive: every machine's boot data,
rendered here once and size-checked against Azure's limits (each island's customData and node bundle; with Slurm,
the controller's and the login nodes' customData and userData), the node's worst-case set-up + validation budget,
the effective Application Health grace period, and the cloud's storage DNS names. The components and `ndfleet
render` read the boot data from here; neither renders any (tests/test_layout.py keeps the components from importing
a renderer). `ndfleet.program.main`
(`pulumi up`), `ndfleet plan`, `ndfleet render` and `ndfleet preflight` all run it first, so they accept and
refuse exactly the same stacks, with the same messages, before anything exists.

The probe grace period rule (the Application Health extension's `gracePeriod`):
- not set by the user: the node's worst-case set-up + validation budget plus a margin of 25 % (at least
  10 minutes) for boot and cloud-init before set-up starts, rounded up to whole 5 minutes, capped at the
  extension's maximum of 14,400 s;
- set by the user: used as given, but refused when shorter than the budget (a node still validating would
  be judged unhealthy and repaired in a loop);
- either way, a budget over 14,400 s is refused: no grace period can cover it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ndfleet.boot_version import slurm_release
from ndfleet.monitoring.alerts import Alert, alerts
from ndfleet.nodefiles import nodebundle
from ndfleet.nodefiles.bootstrap import (
    BootstrapExtensions,
    BootstrapTooLarge,
    NodeBundle,
    RenderedBootstrap,
    bundle_shape,
    island_bootstrap,
    merge_extensions,
    neutral_island,
    render_bundle,
    validation_budget_s,
)
from ndfleet.slurm.conf import island_partitions
from ndfleet.slurm.elastic import elastic_scale_set_name
from ndfleet.stackconfig.clouds import (
    PUBLIC_CLOUD,
    StorageCloud,
    UnknownCloud,
    cloud_from_config,
    public_cloud_only_problems,
)
from ndfleet.stackconfig.clusterspec import ClusterSpec, IslandSpec
from ndfleet.stackconfig.config import STACK_CHECKS_SKIPPED, check_settings
from ndfleet.stackconfig.problems import SpecError
from ndfleet.stackconfig.settings import NAMESPACE
from ndfleet.stackconfig.stackfile import stacks_dir

# The Application Health extension's largest gracePeriod, in seconds (Microsoft Learn, "Using Application
# Health extension with Virtual Machine Scale Sets", extension schema: gracePeriod).
MAX_PROBE_GRACE_PERIOD_S = 14_400
GRACE_MARGIN_FRACTION = 0.25
GRACE_MARGIN_MIN_S = 600
GRACE_ROUND_S = 300
GRACE_SETTING = f"{NAMESPACE}:health.probeGracePeriodSeconds"


class PrepareError(SpecError):
    """The stack is valid setting by setting but cannot be deployed as a whole; every problem, one per line, in
    SpecError's form (one format for every stage of the checks)."""


@dataclass(frozen=True)
class PreparedIsland:
    island: IslandSpec
    bootstrap: RenderedBootstrap
    # An elastic island's fixed scale-set name, which the controller's programs address (ndfleet/slurm/elastic.py);
    # None: Azure's name from Pulumi's.
    scale_set_name: str | None = None
    # The Slurm release its nodes install ("" without Slurm): one of the boot version's inputs, and a scale-set tag.
    slurm_release: str = ""

    @property
    def boot_version(self) -> str:
        """The island's boot version (ndfleet/boot_version.py: image, boot data, Slurm release), computed once as
        its boot data is rendered; the scale set's tag, the node's Slurm feature and health answer carry it."""
        return self.bootstrap.boot_version


# The Slurm machines other than compute nodes, in the order prepare renders them; every login node boots the same.
SLURM_MACHINE_ROLES = ("controller", "login")


@dataclass(frozen=True)
class PreparedMachine:
    """A Slurm controller's or login node's boot data (ndfleet/slurm/machines.py), rendered once for the stack."""

    role: str  # "controller" | "login"
    bootstrap: RenderedBootstrap  # its cloud-config and the files it carries (`ndfleet render`)
    user_data: str  # base64 VM userData: the controller's library bundle, then the Slurm configuration

    @property
    def custom_data(self) -> str:
        """base64 customData, as the VM receives it."""
        return self.bootstrap.custom_data


@dataclass(frozen=True)
class PreparedCluster:
    spec: ClusterSpec
    cloud: StorageCloud
    islands: tuple[PreparedIsland, ...]
    validation_budget_s: int  # worst-case node set-up + validation
    probe_grace_period_s: int  # what the Application Health extension gets
    probe_grace_period_explicit: bool  # set by the user (else derived from the budget)
    # With Slurm: the controller's and the login nodes' boot data, in SLURM_MACHINE_ROLES order; else empty.
    slurm_machines: tuple[PreparedMachine, ...] = ()
    # With Slurm: every slot of the Slurm vault (nodebundle.SLOT_NAMES, in order) -> its value: the parts of the
    # islands' bundles, nodebundle.SLOT_PLACEHOLDER in the slots no bundle uses. Empty without Slurm.
    vault_slots: Mapping[str, str] = field(default_factory=dict)
    # The slurm.conf lines that keep jobs inside one island (the stack output slurmTopology, ndfleet/slurm/conf.py).
    slurm_topology: str = ""
    # The alert table (ndfleet/monitoring/alerts.py), which the Monitoring component deploys; () with monitoring off.
    alerts: tuple[Alert, ...] = ()

    def slurm_machine(self, role: str) -> PreparedMachine:
        """The prepared boot data of the Slurm `role` ("controller" or "login")."""
        return next(m for m in self.slurm_machines if m.role == role)


def default_probe_grace_period_s(budget_s: int) -> int:
    """The grace period when the user sets none: budget + margin, rounded up to 5 minutes, capped (module doc)."""
    margin = max(GRACE_MARGIN_MIN_S, math.ceil(budget_s * GRACE_MARGIN_FRACTION))
    rounded = math.ceil((budget_s + margin) / GRACE_ROUND_S) * GRACE_ROUND_S
    return min(MAX_PROBE_GRACE_PERIOD_S, rounded)


def explicit_probe_grace_period(spec: ClusterSpec) -> int | None:
    """The grace period the user wrote, or None when they left it out (a `None` value, or a pydantic default
    the stack never set)."""
    health = spec.health
    value = getattr(health, "probe_grace_period_seconds", None)
    if value is None or "probe_grace_period_seconds" not in health.model_fields_set:
        return None
    return int(value)


def bootstrap_extensions(spec: ClusterSpec, island: IslandSpec) -> BootstrapExtensions | None:
    """What optional features add to an island's bootstrap, merged in this order: Slurm's slurmd set-up
    (ndfleet/slurm/machines.py) and the metrics agent (ndfleet/monitoring/agent.py). Each says itself whether the
    stack turns it on (None: off); a new feature is one more entry here. They are rendered for the island-neutral
    placeholder (`neutral_island`): render_bootstrap puts them in the bundle every island of that shape shares,
    and the boot step fills in the island's name (ndfleet/nodefiles/nodebundle.py)."""
    from ndfleet.monitoring import agent as monitoring_agent
    from ndfleet.slurm import machines as slurm_machines

    features = (slurm_machines, monitoring_agent)
    neutral = neutral_island(island)
    return merge_extensions([feature.bootstrap_extensions(spec, neutral) for feature in features])


def slot_problem(spec: ClusterSpec, sizes: list[int], used: int) -> str:
    """The configuration problem of a stack whose distinct compute bundles need more Key Vault slots than the vault
    has."""
    return (
        f"stack {spec.stack!r}: its islands have {len(sizes)} distinct node bundles "
        f"({', '.join(f'{s:,}' for s in sizes)} "
        f"bytes xz) needing {used} Key Vault slots of {nodebundle.PART_CHARS:,} base64 characters; the Slurm vault "
        f"has {nodebundle.SLOT_COUNT}: give fewer islands distinct shapes (VM size, settings that change the bundle)"
    )


def prepare(spec: ClusterSpec, cloud: StorageCloud = PUBLIC_CLOUD) -> PreparedCluster:
    """Render and check everything for `spec`; PrepareError lists every problem found."""
    prepared = _prepare(spec, cloud)
    for seen in _recorders:
        seen.append(prepared)
    return prepared


def _prepare(spec: ClusterSpec, cloud: StorageCloud) -> PreparedCluster:
    # Warnings that need the monitoring exporters' series (ndfleet/monitoring/budget.py) or ndfleet's price table
    # (ndfleet/cost/estimate.py) join the spec's own.
    from ndfleet.cost.estimate import with_price_warnings
    from ndfleet.monitoring.budget import with_workspace_warnings

    spec = with_price_warnings(with_workspace_warnings(spec))
    problems: list[str] = []
    budget = validation_budget_s(spec)
    explicit = explicit_probe_grace_period(spec)
    level = f"validationLevel {spec.health.validation_level!r}, dcgmLevel {spec.health.dcgm_level}"
    if budget > MAX_PROBE_GRACE_PERIOD_S:
        problems.append(
            f"{NAMESPACE}:health: the node's worst-case set-up and validation takes {budget} s ({level}), longer "
            f"than the Application Health extension's largest grace period ({MAX_PROBE_GRACE_PERIOD_S} s); "
            "lower dcgmLevel or use validationLevel 'quick'"
        )
    elif explicit is not None and explicit < budget:
        # Azure would count a node still validating as unhealthy and repair it in a loop.
        problems.append(
            f"{GRACE_SETTING} = {explicit}: shorter than the node's worst-case set-up and validation ({budget} s "
            f"at {level}); set it to at least {budget}, or leave it out to get "
            f"{default_probe_grace_period_s(budget)} s"
        )
    grace = explicit if explicit is not None else default_probe_grace_period_s(budget)
    if spec.scheduler == "slurm":
        from ndfleet.slurm.elastic import idle_problems

        # A resumed node registers within the worst case the default grace period is sized for (boot, set-up,
        # validation), or is given up after resumeTimeoutMinutes.
        problems.extend(idle_problems(spec, default_probe_grace_period_s(budget)))
    # Monitoring, Slurm and impact reporting hold Azure public's host names (ndfleet/stackconfig/clouds.py).
    problems.extend(public_cloud_only_problems(spec, cloud, NAMESPACE))

    # Islands of one shape share one island-neutral bundle (bootstrap.render_bundle: rendered and xz-compressed once,
    # about 0.1 s of xz at preset 9e); each island adds only its customData, which names it (issue 30).
    bundles: dict[Any, NodeBundle] = {}
    shaped: list[tuple[IslandSpec, Any]] = []
    for island in spec.islands:
        try:
            shape = bundle_shape(island)
            if shape not in bundles:
                ext = bootstrap_extensions(spec, island)
                bundles[shape] = render_bundle(spec, island, ext, blob_endpoint_suffix=cloud.blob_endpoint_suffix)
            shaped.append((island, shape))
        except BootstrapTooLarge as error:
            problems.append(str(error))
    # Bundles that travel in the Slurm vault take consecutive slots of its fixed set (nodebundle.SLOT_COUNT), in the
    # order of the islands that first use them (docs/bootstrap.md, "Slots, not one secret per bundle").
    in_vault = [bundles[shape].bundle for _, shape in shaped if bundles[shape].vault]
    first, used = nodebundle.first_slots(in_vault)
    if used > nodebundle.SLOT_COUNT:
        problems.append(slot_problem(spec, [len(b) for b in first], used))
    islands: list[PreparedIsland] = []
    if used <= nodebundle.SLOT_COUNT:
        for island, shape in shaped:
            try:
                start = first.get(bundles[shape].bundle, 0)
                bootstrap = island_bootstrap(spec, island, bundles[shape], start)
                scale_set_name = elastic_scale_set_name(spec, island) if island.elastic is not None else None
                islands.append(PreparedIsland(island=island, bootstrap=bootstrap, scale_set_name=scale_set_name,
                                              slurm_release=slurm_release(spec)))
            except BootstrapTooLarge as error:
                problems.append(str(error))
    slurm_machines = prepare_slurm_machines(spec, problems)
    if problems:
        raise PrepareError(problems)
    return PreparedCluster(
        spec=spec,
        cloud=cloud,
        islands=tuple(islands),
        validation_budget_s=budget,
        probe_grace_period_s=grace,
        probe_grace_period_explicit=explicit is not None,
        slurm_machines=slurm_machines,
        vault_slots=vault_slots(spec, islands),
        slurm_topology=island_partitions(spec),
        alerts=tuple(alerts(spec)) if spec.monitoring.enabled else (),
    )


def vault_slots(spec: ClusterSpec, islands: list[PreparedIsland]) -> dict[str, str]:
    """The Slurm vault's slots and their values (PreparedCluster.vault_slots); {} without Slurm."""
    if spec.scheduler != "slurm":
        return {}
    return nodebundle.slot_values({k: v for p in islands for k, v in p.bootstrap.bundle_parts.items()})


def prepare_slurm_machines(spec: ClusterSpec, problems: list[str]) -> tuple[PreparedMachine, ...]:
    """The Slurm controller's and login nodes' boot data (none without Slurm); each one over an Azure limit is added
    to `problems`, beside the stack's other configuration problems."""
    if spec.scheduler != "slurm":
        return ()
    from ndfleet.slurm.machines import machine_bootstrap, machine_user_data

    machines: list[PreparedMachine] = []
    for role in SLURM_MACHINE_ROLES:
        found = len(problems)
        bootstrap: RenderedBootstrap | None = None
        user_data = ""
        try:
            bootstrap = machine_bootstrap(spec, role)
        except BootstrapTooLarge as error:
            problems.append(str(error))
        try:
            user_data = machine_user_data(spec, role)
        except BootstrapTooLarge as error:
            problems.append(str(error))
        if bootstrap is not None and len(problems) == found:
            machines.append(PreparedMachine(role=role, bootstrap=bootstrap, user_data=user_data))
    return tuple(machines)


# `ndfleet plan --program DIR` runs a program that is not ndfleet's own; what it prepared gives its plan the same
# summary, cost and warnings as `ndfleet plan --stack` (ndfleet/plans/any_program.py). While a recorder is open,
# every cluster prepared is added to it.
_recorders: list[list[PreparedCluster]] = []


@contextmanager
def recording_prepared() -> Iterator[list[PreparedCluster]]:
    """The clusters `prepare` returns while the block runs, in order."""
    seen: list[PreparedCluster] = []
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)


def prepare_config(
    raw: Mapping[str, object], stack: str, engine_config: Mapping[str, str], env: Mapping[str, str] | None = None
) -> PreparedCluster:
    """load_spec + the cloud of the stack + prepare: what every command runs first. Raises SpecError or
    PrepareError (both: a message naming each setting, no traceback)."""
    # A relative imageContract file is the stack file's neighbour: every command and the Pulumi program run in the
    # project, whose stack files are in stacks_dir() (Pulumi.yaml's stackConfigDir).
    checked = check_settings(raw, stack, stacks_dir())
    problems = list(checked.problems)
    try:
        cloud: StorageCloud | None = cloud_from_config(engine_config, env)
    except UnknownCloud as error:
        problems.append(str(error))
        cloud = None
    if checked.spec is None or cloud is None:
        # The stack-wide checks need a spec the settings stage accepted, and a known cloud: one line says they wait.
        skipped = checked.skipped_line() or (STACK_CHECKS_SKIPPED if checked.spec is not None else None)
        raise PrepareError(problems, skipped)
    if not problems:
        return prepare(checked.spec, cloud)
    # Only unknown keys so far, which the settings stage dropped to check the rest as written: the stack-wide
    # checks run too, and every problem is reported at once.
    try:
        _prepare(checked.spec, cloud)
    except PrepareError as error:
        problems += error.problems
    raise PrepareError(problems)


__all__ = [
    "MAX_PROBE_GRACE_PERIOD_S",
    "PrepareError",
    "bootstrap_extensions",
    "PreparedCluster",
    "PreparedIsland",
    "PreparedMachine",
    "SLURM_MACHINE_ROLES",
    "default_probe_grace_period_s",
    "explicit_probe_grace_period",
    "prepare",
    "prepare_config",
    "recording_prepared",
]
