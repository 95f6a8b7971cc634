"""The Pulumi program's steps, shared by `__main__.py` (pulumi up) and the offline plan (mock runtime).

Order: read the stack config -> `ndfleet.prepare` (validate, render every bootstrap, budgets, the cloud; the
same step `ndfleet plan`, `render` and `preflight` run first) -> preflight if asked -> register the Cluster.
Nothing is registered until every check has passed.
"""

from __future__ import annotations

import os
from typing import Any

import pulumi

from ndfleet.components.cluster import Cluster, ClusterArgs
from ndfleet.prepare import PreparedCluster, PrepareError, prepare_config
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import read_pulumi_config
from ndfleet.stackconfig.settings import SMOKE_KEY


class ProgramError(Exception):
    """A user-fixable problem found before any resource was registered."""


def prepare_from_stack() -> PreparedCluster:
    """The running stack, prepared (ndfleet.prepare); SpecError / PrepareError / ProgramError carry the message."""
    provider = {}
    environment = pulumi.Config("azure-native").get("environment")
    if environment:
        provider["azure-native:environment"] = environment
    raw = read_pulumi_config()
    if SMOKE_KEY in raw and not under_mocks():
        # A smoke stack: its settings are derived from the stack files as every command derives them (under the
        # mocks, `ndfleet plan` has derived them already: ndfleet.stackconfig.stackfile.load_stack).
        raw = smoke_settings(pulumi.get_stack(), raw)
    return prepare_config(raw, pulumi.get_stack(), provider, os.environ)


def smoke_settings(stack_name: str, running: dict[str, Any]) -> dict[str, Any]:
    """Under `pulumi up`: the running smoke stack's settings, derived from the stack files as every command derives
    them (`load_stack`, docs/smoke.md). The engine's config cannot be used as it is: it holds only the smoke stack's
    own settings, with Pulumi.yaml's defaults merged in (a default cannot be told from a value the file sets). The
    secrets of the smoke stack's own file come from `running` (the engine decrypts them; the file holds ciphertext)."""
    from ndfleet.stackconfig.settings import NAMESPACE
    from ndfleet.stackconfig.stackfile import StackFileError, load_stack

    try:
        stack = load_stack(name=stack_name)
    except StackFileError as error:
        raise ProgramError(str(error)) from None
    raw = stack.ndfleet_config
    for key in stack.secret_keys:
        short = key.removeprefix(NAMESPACE + ":")
        if short != key and short in running:
            raw[short] = running[short]
    return raw


def deploy(prepared: PreparedCluster) -> Cluster:
    # Under the mocks `ndfleet plan` prints the warnings itself (in the table, or on stderr beside JSON): once.
    for warning in () if under_mocks() else prepared.spec.warnings:
        pulumi.log.warn(warning)
    cluster = Cluster(prepared.spec.name_prefix, ClusterArgs(prepared=prepared))
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
    from ndfleet.stackconfig.sshkeys import is_example_key

    if is_example_key(spec.ssh_public_key) and not under_mocks():
        raise ProgramError(
            "ndfleet:sshPublicKey is the example key of ndfleet's stacks/*.yaml, whose private key nobody has: "
            "set your own (`pulumi config set ndfleet:sshPublicKey \"$(cat ~/.ssh/id_ed25519.pub)\"`)"
        )


def fail(message: str) -> None:
    """Stop `pulumi up` with a plain message: RunError ends the program without a Python traceback."""
    raise pulumi.RunError(message)


def main() -> None:
    """The whole Pulumi program: read the stack config, prepare it, check Azure if asked, create the cluster.

    `__main__.py` calls this under `pulumi up`; `ndfleet plan` calls it under the mock runtime.
    """
    from ndfleet.stackconfig.problems import SpecError

    try:
        prepared = prepare_from_stack()
        refuse_example_key(prepared.spec)
        run_preflight_if_enabled(prepared.spec)
        deploy(prepared)
    except (SpecError, PrepareError, ProgramError) as error:
        fail(str(error))


__all__ = [
    "ProgramError",
    "deploy",
    "fail",
    "main",
    "prepare_from_stack",
    "refuse_example_key",
    "run_preflight_if_enabled",
    "smoke_settings",
    "under_mocks",
]
