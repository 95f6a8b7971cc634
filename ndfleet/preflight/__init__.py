"""`ndfleet preflight`: ask Azure, before anything is created, whether the stack can be deployed.

A GPU cluster deployment most often fails twenty minutes into `pulumi up`: the VM family's vCPU quota is too
small, the size is not offered in the region or zone, it is restricted for the subscription, or the deployer may
create resources but not the role assignment and locks the stack ends with. This package reads the facts from
Resource Manager with the Azure SDK (its pipeline, retry and error handling) and checks them in seconds:

    location               the region exists for the subscription and is a physical region
    vm-size-region         the VM size is offered in the region (Microsoft.Compute/skus)
    vm-size-zone           ... and in the stack's availability zone, when one is set
    vm-restrictions        it is not restricted for the subscription (NotAvailableForSubscription, QuotaId)
    quota-family           the VM family's vCPU limit minus usage covers nodes x vCPUs
    quota-regional         and so does the regional total (`cores`; `lowPriorityCores` for Spot)
    lustre-sku             the Managed Lustre SKU is offered in the region, if the stack has it
    permissions            the caller's effective permissions on the deployment scope cover preview / up
    trusted-launch-default the subscription does not make new scale sets Trusted Launch (Secure Boot) by default

Modules, one job each (reading Azure itself, the cloud, credentials, the Resource Manager pipeline and its
errors, is ndfleet.azure's, shared with status, impact and cost): `facts` (what is read, as plain data), `read`
(reading it in parallel),
`checks` / `permissions` / `features` (pure check functions), `report` (table and JSON), `command` (what
`ndfleet preflight` runs, and the Pulumi hook `enforce_preflight`), `impact_reports` (reading the impacts filed
for a stack's nodes). Exit codes: 0 every check passed (warnings allowed), 1 a check failed, 2 it could not check.
Every fact it relies on, with its source: docs/sources.md.
"""

from __future__ import annotations

from ndfleet.azure.arm import RetrySettings
from ndfleet.azure.auth import build_credential, managed_identity_wanted
from ndfleet.azure.clouds import CLOUDS, CloudSettings, resolve_cloud, resolve_subscription
from ndfleet.azure.errors import CannotCheck, PreflightFailed
from ndfleet.preflight.checks import run_checks
from ndfleet.preflight.command import enforce_preflight, load_stack_spec, run_cli, run_preflight
from ndfleet.preflight.facts import Facts
from ndfleet.preflight.outcome import Check
from ndfleet.preflight.report import EXIT_CANNOT_CHECK, EXIT_FAILED, EXIT_OK, Report, render_json, render_table
from ndfleet.stackconfig.config import load_spec

__all__ = [
    "CLOUDS",
    "EXIT_CANNOT_CHECK",
    "EXIT_FAILED",
    "EXIT_OK",
    "CannotCheck",
    "Check",
    "CloudSettings",
    "Facts",
    "PreflightFailed",
    "Report",
    "RetrySettings",
    "build_credential",
    "enforce_preflight",
    "load_spec",
    "load_stack_spec",
    "managed_identity_wanted",
    "render_json",
    "render_table",
    "resolve_cloud",
    "resolve_subscription",
    "run_checks",
    "run_cli",
    "run_preflight",
]
