"""Smoke stacks: a stack file that says `ndfleet:smoke: {of: prod}` is prod with one or two nodes per island.

The smoke stack's file holds only what must be its own (the `smoke` block, and what Pulumi requires of every stack
file, `location` and `sshPublicKey`); every other setting is read from the base stack's file when the stack is read,
here, called by `load_stack` for every command and for the Pulumi program under `pulumi up`
(`ndfleet.program.smoke_settings`). One derivation, so `ndfleet plan --stack prod-smoke` shows what
`pulumi up --stack prod-smoke` creates. What is changed from the base and why (docs/smoke.md):

- islands: the base's islands, same names, `smoke.nodesPerIsland` (1 or 2; 2 for a Slurm base, whose burn-in pairs
  an island's nodes) nodes each; an elastic island stays elastic with maxNodes 2 (the least an elastic island may
  have: its new nodes are burnt in in pairs) and at most 2 started (minNodes);
- validation: the base's level, DCGM at most level 1 (`smoke.dcgmLevel` to choose), so its time is bounded;
- Managed Lustre: the base's SKU at its smallest capacity (the feature is tested, not the throughput);
- names: its own resource group (a base's `resourceGroupName` is not inherited) and its own name prefix, checked
  against the base's so globally unique names (Managed Grafana) cannot collide;
- provider settings (`azure-native:*`) are each stack's own: Pulumi hands a provider only its own stack's config.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import STAND_IN_SSH_KEY, load_spec
from ndfleet.stackconfig.islands import SLURM_MIN_ISLAND_NODES
from ndfleet.stackconfig.names import default_prefix, grafana_name, stack_name_problem
from ndfleet.stackconfig.problems import SpecError, setting_problem, show_value
from ndfleet.stackconfig.settings import NAMESPACE, SMOKE_DCGM_LEVEL, SMOKE_KEY, SmokeConfig

SMOKE_SETTING = f"{NAMESPACE}:{SMOKE_KEY}"
# An elastic island's fewest nodes (derive.island_size: the burn-in tests new nodes in pairs).
SMOKE_ELASTIC_MAX_NODES = 2
# What a smoke stack's own file may set beside `smoke`: what Pulumi requires of every stack file (location and
# sshPublicKey, declared without a default in Pulumi.yaml), and what makes it a separate deployment.
OWN_SETTINGS = ("location", "sshPublicKey", "vnetAddressSpace", "resourceGroupName", "namePrefix", "subscriptionId")
# Settings Pulumi.yaml declares without a default: `pulumi up` refuses a stack file without them (pulumi/pulumi,
# sdk/go/common/workspace/project.go, ValidateStackConfigAndApplyProjectConfig: "Stack '...' is missing
# configuration value '...'"), so a smoke stack's file must repeat them even though the base has them.
PULUMI_REQUIRED = ("location", "sshPublicKey")
# Read from the base stack's own file, so dropped: they describe the base's sizing, not its features.
_SIZING = ("nodes", "islands", "plannedNodes")


class SmokeRefused(Exception):
    """The smoke stack cannot be derived; str() lists every problem (SpecError's form). `load_stack` raises it as a
    StackFileError: every command reports it as it reports a stack file it cannot read."""


def _full(key: str) -> str:
    return key if ":" in key else f"{NAMESPACE}:{key}"


def is_smoke(config: Mapping[str, Any]) -> bool:
    """True for a stack file's `config` mapping that sets `ndfleet:smoke` (or `smoke`)."""
    return any(_full(str(k)) == SMOKE_SETTING and v is not None for k, v in config.items())


def _has_secret(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"secure"} or any(_has_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_secret(v) for v in value)
    return False


def resolve_smoke(
    name: str,
    path: Path,
    config: Mapping[str, Any],
    read_config: Callable[[Path], dict[str, Any]],
    settings_of: Callable[[str, Path, dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """The smoke stack `name`'s settings (a stack file's `config` mapping, keys as written) from its own `config`
    and its base's file (the same folder as `path`). `read_config` reads a stack file's `config` (its errors pass
    through: they name the file); `settings_of` turns one into `ndfleet:*` settings over the project's defaults, as
    Pulumi would hand them to the program (stackfile.py passes both: this module does not import it). SmokeRefused
    with every problem."""
    own = {_full(str(k)): v for k, v in config.items()}
    problems: list[str] = []
    smoke: SmokeConfig | None = None
    try:
        smoke = SmokeConfig.model_validate(own[SMOKE_SETTING])
    except ValidationError as e:
        problems += [setting_problem({**err, "loc": (SMOKE_KEY, *err["loc"])}) for err in e.errors()]
    allowed = ", ".join([SMOKE_KEY, *OWN_SETTINGS])
    for key in own:
        short = key[len(NAMESPACE) + 1 :] if key.startswith(NAMESPACE + ":") else None
        if short is not None and short != SMOKE_KEY and short not in OWN_SETTINGS:
            problems.append(
                f"{key} is set in smoke stack {name!r}: a smoke stack takes every setting from its base, so that it "
                f"tests what the base deploys; change it in the base's file, and set here only: {allowed}"
            )
    if smoke is None:
        raise SmokeRefused(SpecError(problems).render())
    of = smoke.of
    where = f"{SMOKE_SETTING}.of = {of!r}"
    if of == name:
        problems.append(f"{where}: a stack cannot be a smoke run of itself (a cycle); name the stack it tests")
        raise SmokeRefused(SpecError(problems).render())
    base_file = path.parent / f"Pulumi.{of}.yaml"
    if stack_name_problem(of) is not None or not base_file.is_file():
        known = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in path.parent.glob("Pulumi.*.yaml"))
        guess = next(iter(difflib.get_close_matches(of, [k for k in known if k != name], n=1)), None)
        problems.append(
            f"{where}: no such stack ({base_file} does not exist); "
            + (f"did you mean of: {guess}? " if guess else "")
            + f"known stacks: {', '.join(known) or 'none'}"
        )
        raise SmokeRefused(SpecError(problems).render())
    base_config = {_full(str(k)): v for k, v in read_config(base_file).items()}
    if is_smoke(base_config):
        base_of = base_config[SMOKE_SETTING].get("of") if isinstance(base_config[SMOKE_SETTING], dict) else None
        cycle = f" and names {name!r} as its base: a cycle" if base_of == name else ""
        problems.append(
            f"{where}: {of!r} is itself a smoke stack (of {show_value(base_of)}){cycle}; a smoke stack's base is a "
            "full stack" + (f": write of: {base_of}" if isinstance(base_of, str) and base_of != name else "")
        )
        raise SmokeRefused(SpecError(problems).render())
    base_secrets = sorted(k for k, v in base_config.items() if _has_secret(v) and k != f"{NAMESPACE}:sshPublicKey"
                          and k.startswith(NAMESPACE + ":"))  # fmt: skip
    for key in base_secrets:
        problems.append(
            f"{key} of the base stack {of!r} holds a secret, encrypted with {of!r}'s key, which a smoke stack cannot "
            "read; make it a plain value in the base, or deploy the smoke run from a copy of the base's file"
        )
    base_raw = settings_of(of, base_file, {k: v for k, v in base_config.items() if not _has_secret(v)})
    # The base's key plays no part in what the smoke stack takes from it; a secret one is unreadable here.
    base_raw.setdefault("sshPublicKey", STAND_IN_SSH_KEY)
    try:
        base = load_spec(base_raw, of)
    except SpecError as e:
        problems.append(f"{where}: the base stack is refused; fix it first: " + "; ".join(e.problems))
        raise SmokeRefused(SpecError(problems).render()) from None

    for key in PULUMI_REQUIRED:
        if f"{NAMESPACE}:{key}" not in own:
            example = f" (the base's: {base.location})" if key == "location" else ""
            problems.append(
                f"{NAMESPACE}:{key} is missing from smoke stack {name!r}: Pulumi.yaml declares it without a default, "
                f"so `pulumi up` refuses a stack file without it; set it here too{example}"
            )
    location = own.get(f"{NAMESPACE}:location")
    if location is not None and location != base.location:
        problems.append(
            f"{NAMESPACE}:location = {show_value(location)}: the base stack {of!r} deploys to {base.location!r}, and "
            f"a smoke run tests that region's quota and capacity; set {base.location!r}"
        )
    own_group = own.get(f"{NAMESPACE}:resourceGroupName")
    if own_group is not None and base.resource_group_name is not None and own_group == base.resource_group_name:
        problems.append(
            f"{NAMESPACE}:resourceGroupName = {show_value(own_group)}: the base stack {of!r} deploys into it; a smoke "
            "stack needs its own group (leave resourceGroupName out and Pulumi creates one)"
        )

    # With Slurm an island of one node never leaves the burn-in (islands.SLURM_MIN_ISLAND_NODES): the smoke run of a
    # Slurm base takes 2 per island, so that its nodes enter service and take a job, as the base's do.
    least = SLURM_MIN_ISLAND_NODES if base.scheduler == "slurm" else 1
    per_island = smoke.nodes_per_island if smoke.nodes_per_island is not None else least
    if per_island < least:
        problems.append(
            f"{SMOKE_SETTING}.nodesPerIsland = {per_island}: the base stack {of!r} runs Slurm, whose burn-in tests an "
            f"island's nodes in pairs, so a node alone in its island would never take a job; set nodesPerIsland: "
            f"{least} (or leave it out: {least} for a Slurm base)"
        )
    smoke = smoke.model_copy(update={"nodes_per_island": per_island})

    resolved: dict[str, Any] = {k: v for k, v in base_config.items() if k.startswith(NAMESPACE + ":")}
    for key in (*_SIZING, "resourceGroupName", "namePrefix"):
        resolved.pop(f"{NAMESPACE}:{key}", None)
    resolved[f"{NAMESPACE}:islands"] = [_smoke_island(island, smoke) for island in base.islands]
    health = dict(base_config.get(f"{NAMESPACE}:health") or {})
    dcgm = smoke.dcgm_level if smoke.dcgm_level is not None else min(base.health.dcgm_level, SMOKE_DCGM_LEVEL)
    health["dcgmLevel"] = dcgm
    resolved[f"{NAMESPACE}:health"] = health
    if base.storage.lustre is not None:
        storage = dict(base_config[f"{NAMESPACE}:storage"])
        storage["lustre"] = {**storage["lustre"], "capacityTiB": base.storage.lustre.sku.min_tib}
        resolved[f"{NAMESPACE}:storage"] = storage
    resolved.update(own)  # the smoke block, location, key, and what makes it a separate deployment
    # The smoke block as it applies: the spec, the plan and its JSON say the DCGM level the run validates at.
    resolved[SMOKE_SETTING] = smoke.model_copy(update={"dcgm_level": dcgm}).model_dump(by_alias=True)

    smoke_prefix = own.get(f"{NAMESPACE}:namePrefix")
    if not isinstance(smoke_prefix, str):
        smoke_prefix = default_prefix(name)
    if grafana_name(smoke_prefix) == grafana_name(base.name_prefix):
        problems.append(
            f"{NAMESPACE}:namePrefix: the smoke stack's resource names would start like its base's "
            f"({smoke_prefix!r} and {base.name_prefix!r}; Managed Grafana's globally unique name takes the first 14 "
            f"characters: {grafana_name(smoke_prefix)!r}); set {NAMESPACE}:namePrefix in {name!r} to another, e.g. "
            f"'smoke-{base.name_prefix[:8].rstrip('-')}'"
        )
    if problems:
        raise SmokeRefused(SpecError(problems).render())
    return resolved


def _smoke_island(island: Any, smoke: SmokeConfig) -> dict[str, Any]:
    """One island of the base (an IslandSpec), at smoke size."""
    if island.elastic is None:
        return {"name": island.name, "nodes": smoke.nodes_per_island or 1}
    elastic = island.elastic
    return {
        "name": island.name,
        "elastic": {
            "minNodes": min(elastic.min_nodes, SMOKE_ELASTIC_MAX_NODES),
            "maxNodes": SMOKE_ELASTIC_MAX_NODES,
            "idleMinutes": elastic.idle_minutes,
            "resumeTimeoutMinutes": elastic.resume_timeout_minutes,
        },
    }


def smoke_lines(spec: ClusterSpec, validation_budget_s: int) -> list[str]:
    """What `ndfleet plan` says of a smoke stack under its islands: what it is a smoke run of, and how long its
    nodes' validation may take (`validation_budget_s`: ndfleet.nodefiles.bootstrap.validation_budget_s)."""
    if spec.smoke is None:
        return []
    smoke, health = spec.smoke, spec.health
    count = smoke.nodes_per_island or 1
    per_island = f"{count} node{'s' if count > 1 else ''} per island"
    elastic = f", elastic islands at most {SMOKE_ELASTIC_MAX_NODES}" if any(i.elastic for i in spec.islands) else ""
    return [
        f"  smoke run of stack {smoke.of}: {per_island}{elastic}; every other setting is {smoke.of}'s (docs/smoke.md)",
        f"  validation: each node within {validation_budget_s:,} s (about {round(validation_budget_s / 60)} minutes; "
        f"validationLevel {health.validation_level}, dcgmLevel {health.dcgm_level}) once Azure has started it",
    ]


__all__ = ["SMOKE_SETTING", "SmokeRefused", "is_smoke", "resolve_smoke", "smoke_lines"]
