"""Preflight as a command and as the Pulumi hook: load the stack, run every check, print or raise the result.

`ndfleet preflight` (ndfleet/commands/preflight.py) calls `run_cli`; the stack -> spec step is ndfleet.stackload's."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from ndfleet import stackload
from ndfleet.azure.arm import RetrySettings
from ndfleet.azure.auth import SharedTokenCredential, build_credential, first_token
from ndfleet.azure.clouds import resolve_cloud, resolve_subscription
from ndfleet.azure.errors import CannotCheck, PreflightFailed
from ndfleet.preflight.checks import run_checks
from ndfleet.preflight.permissions import Mode
from ndfleet.preflight.read import gather_facts
from ndfleet.preflight.report import EXIT_OK, Report, render_json, render_table
from ndfleet.stackconfig.clusterspec import ClusterSpec


def run_preflight(
    spec: ClusterSpec,
    *,
    env: Mapping[str, str] | None = None,
    provider_config: Mapping[str, str] | None = None,
    credential: Any = None,
    transport: Any = None,
    retry: RetrySettings | None = None,
    mode: Mode = "up",
) -> Report:
    """Run every check against Azure. Never raises for Azure trouble: a Report with `error` says what went wrong.
    `mode`: the Pulumi operation to check permissions for (`preview` needs reads, `up` writes)."""
    env = os.environ if env is None else env
    started = time.monotonic()
    report = Report(stack=spec.stack, subscription_id=None, cloud=None, spec=spec, checks=[])
    owned = None
    try:
        report.cloud = cloud = resolve_cloud(env, provider_config)
        report.subscription_id = subscription_id = resolve_subscription(spec, env, provider_config)
        if credential is None:
            credential = owned = build_credential(cloud, env)
        shared = SharedTokenCredential(credential)
        first_token(shared, cloud)
        facts = gather_facts(spec, subscription_id, shared, cloud, retry=retry, transport=transport)
        report.checks = run_checks(spec, facts, cloud, subscription_id, mode)
    except CannotCheck as exc:
        report.error = str(exc)
        report.error_details = exc.details
    finally:
        if owned is not None:
            owned.close()
        report.elapsed_s = round(time.monotonic() - started, 3)
    return report

def enforce_preflight(
    spec: ClusterSpec,
    *,
    env: Mapping[str, str] | None = None,
    credential: Any = None,
    transport: Any = None,
    retry: RetrySettings | None = None,
    mode: Mode | None = None,
) -> None:
    """For `pulumi preview` / `pulumi up` with `ndfleet:preflight: true`: run the checks, raise PreflightFailed
    (str() = the same text `ndfleet preflight` prints) when one fails or Azure cannot be asked. Never call it
    under the mock runtime. The permissions are checked for the operation that runs (`pulumi preview` needs
    reads, `pulumi up` writes). The keyword arguments exist for tests."""
    report = run_preflight(
        spec,
        env=env,
        provider_config=_pulumi_provider_config(),
        credential=credential,
        transport=transport,
        retry=retry,
        mode=mode if mode is not None else _pulumi_operation(),
    )
    if report.exit_code != EXIT_OK:
        raise PreflightFailed(render_table(report), report.exit_code)

def _pulumi_operation() -> Mode:
    """`preview` during `pulumi preview` (a dry run), else `up`."""
    try:
        import pulumi

        return "preview" if pulumi.runtime.is_dry_run() else "up"
    except Exception:  # noqa: BLE001 - outside a Pulumi program: check for the stricter one
        return "up"


def _pulumi_provider_config() -> dict[str, str]:
    """`azure-native:environment` / `subscriptionId` of the running Pulumi program, so the checks hit the same
    cloud and subscription the provider deploys to."""
    try:
        import pulumi

        cfg = pulumi.Config("azure-native")
        return {k: v for k in ("environment", "subscriptionId") if (v := cfg.get(k))}
    except Exception:  # noqa: BLE001 - outside a Pulumi program there is simply no provider config
        return {}

def load_stack_spec(
    stack_name: str | None, stack_file: str | None, name_override: str | None = None
) -> tuple[ClusterSpec, dict[str, str]]:
    """ndfleet.stackload's step, its refusal as CannotCheck (exit 2)."""
    try:
        return stackload.load_stack_spec(stack_name, stack_file, name_override)
    except stackload.StackRefused as exc:
        raise CannotCheck(f"could not check: {exc}") from None

def run_cli(
    args: argparse.Namespace,
    *,
    env: Mapping[str, str] | None = None,
    credential: Any = None,
    transport: Any = None,
    retry: RetrySettings | None = None,
) -> int:
    """The command; tests call it with a fake credential and a recorded transport."""
    try:
        spec, provider = load_stack_spec(args.stack, args.stack_file, args.stack_name)
    except CannotCheck as exc:
        report = Report(
            stack=args.stack or str(args.stack_file), subscription_id=None, cloud=None, spec=None, checks=[]
        )
        report.error = str(exc)
        _emit(report, args.format)
        return report.exit_code
    report = run_preflight(
        spec,
        env=env,
        provider_config=provider,
        credential=credential,
        transport=transport,
        retry=retry,
        mode=getattr(args, "mode", "up"),
    )
    _emit(report, args.format, verbose=getattr(args, "verbose", False))
    return report.exit_code

def _emit(report: Report, fmt: str, verbose: bool = False) -> None:
    from ndfleet.cliconvention import error_line

    if fmt == "json":
        print(render_json(report))
    elif report.error is not None:
        print(error_line("ndfleet preflight", report.error), file=sys.stderr)
    else:
        print(render_table(report))
    if verbose and report.error_details:
        print(report.error_details, file=sys.stderr)
