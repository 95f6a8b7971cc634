"""The Pulumi program's steps, shared by `__main__.py` (pulumi up) and the offline plan (mock runtime)."""

from __future__ import annotations

import pulumi

from ndfleet.components.cluster import Cluster
from ndfleet.spec.config import ClusterSpec, load_spec, read_pulumi_config


class ProgramError(Exception):
    """A user-fixable problem found before any resource was registered."""


def spec_from_stack() -> ClusterSpec:
    """Read the running stack's `ndfleet:*` config and validate it; SpecError carries the message."""
    return load_spec(read_pulumi_config(), pulumi.get_stack())


def deploy(spec: ClusterSpec) -> Cluster:
    from ndfleet.bootstrap import BootstrapTooLarge, validation_budget_s

    budget = validation_budget_s(spec)
    explicit = spec.health.probe_grace_period_seconds  # None: follows the budget
    if explicit is not None and explicit < budget:
        # Azure would count a node still validating as unhealthy and repair it in a loop.
        raise ProgramError(
            f"ndfleet:health.probeGracePeriodSeconds = {explicit}: shorter than the "
            f"node's worst-case set-up and validation ({budget} s at validationLevel "
            f"{spec.health.validation_level!r}, dcgmLevel {spec.health.dcgm_level}); set it to at least {budget}"
        )
    for warning in spec.warnings:
        pulumi.log.warn(warning)
    try:
        cluster = Cluster(spec.name_prefix, spec)
    except BootstrapTooLarge as error:
        raise ProgramError(str(error)) from None
    for key, value in cluster.outputs.items():
        pulumi.export(key, value)
    return cluster


def under_mocks() -> bool:
    """True under Pulumi's mock runtime (tests, `ndfleet plan`), which must never call Azure."""
    from pulumi.runtime.mocks import MockMonitor
    from pulumi.runtime.settings import get_monitor

    return isinstance(get_monitor(), MockMonitor)


def run_preflight_if_enabled(spec: ClusterSpec) -> None:
    """`ndfleet:preflight: true`: check quota and SKU availability before anything is created."""
    if not spec.preflight or under_mocks():
        return
    from ndfleet.preflight import PreflightFailed, enforce_preflight

    try:
        enforce_preflight(spec)
    except PreflightFailed as error:
        raise ProgramError(str(error)) from None


def refuse_example_key(spec: ClusterSpec) -> None:
    """`pulumi up` with the example key of stacks/*.yaml would make a cluster nobody can log into; the offline
    plan (mock runtime) only warns (spec.warnings)."""
    from ndfleet.spec.sshkeys import is_example_key

    if is_example_key(spec.ssh_public_key) and not under_mocks():
        raise ProgramError(
            "ndfleet:sshPublicKey is the example key of ndfleet's stacks/*.yaml, whose private key nobody has: "
            "set your own (`pulumi config set ndfleet:sshPublicKey \"$(cat ~/.ssh/id_ed25519.pub)\"`)"
        )


def fail(message: str) -> None:
    """Stop `pulumi up` with a plain message: RunError ends the program without a Python traceback."""
    raise pulumi.RunError(message)


def main() -> None:
    """The whole Pulumi program: read the stack config, validate it, check Azure if asked, create the cluster.

    `__main__.py` calls this under `pulumi up`; `ndfleet plan` calls it under the mock runtime.
    """
    from ndfleet.spec.config import SpecError

    try:
        spec = spec_from_stack()
        refuse_example_key(spec)
        run_preflight_if_enabled(spec)
        deploy(spec)
    except (SpecError, ProgramError) as error:
        fail(str(error))


__all__ = [
    "ProgramError",
    "deploy",
    "fail",
    "main",
    "refuse_example_key",
    "run_preflight_if_enabled",
    "spec_from_stack",
    "under_mocks",
]
