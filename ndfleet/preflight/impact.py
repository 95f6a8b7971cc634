"""What impact reporting (`ndfleet:health.impactReporting: true`) needs from the subscription, before `pulumi up`.

- The Impact Reporter role is assigned at **subscription** scope (components/impact_reporting.py: workload impacts
  are subscription-level resources). With `ndfleet:resourceGroupName` set, the `permissions` check reads the
  caller's rights on that group only, so the right to write that one role assignment is checked here, on the
  subscription (Microsoft.Authorization/permissions at subscription scope; the same matching as `permissions`).
- The `Microsoft.Impact` resource provider must be registered for the subscription. Nothing ndfleet deploys is a
  Microsoft.Impact resource, so neither Pulumi nor Resource Manager registers it; the node's first report would
  then be refused (`MissingSubscriptionRegistration`). Registering it is the first onboarding step of Guest Health
  Reporting (Microsoft Learn, "What is Guest Health Reporting?"); `GET /subscriptions/{id}/providers/
  Microsoft.Impact` answers its `registrationState` (Microsoft Learn, Resource Manager REST "Providers - Get";
  "Azure resource providers and types": a provider must be registered before use, `az provider register`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ndfleet.preflight.facts import ProviderRegistration, RolePermission, Unavailable
from ndfleet.preflight.outcome import Check, Status, unavailable_check
from ndfleet.preflight.permissions import ROLE_WRITER, Mode, is_allowed, roles_advice

PROVIDERS_API = "2021-04-01"
IMPACT_NAMESPACE = "Microsoft.Impact"
ROLE_ASSIGNMENT_WRITE = "Microsoft.Authorization/roleAssignments/write"


def subscription_scope(subscription_id: str) -> str:
    return f"/subscriptions/{subscription_id}"


def _miss(mode: Mode) -> Status:
    """What a requirement that only `pulumi up` or the running fleet needs is, in each mode."""
    return "fail" if mode == "up" else "warn"


def check_impact_role_permission(
    permissions: Sequence[RolePermission] | Unavailable | None, subscription_id: str, mode: Mode
) -> Check:
    check_id = "impact-reporter-permission"
    scope = subscription_scope(subscription_id)
    title = f"permission to assign Impact Reporter on {scope}"
    if permissions is None:
        return Check(check_id, title, "skip", "the subscription's permissions were not read")
    if isinstance(permissions, Unavailable):
        return unavailable_check(check_id, title, permissions)
    figures = {"scope": scope, "action": ROLE_ASSIGNMENT_WRITE}
    if is_allowed(permissions, ROLE_ASSIGNMENT_WRITE):
        return Check(check_id, title, "pass", f"{ROLE_ASSIGNMENT_WRITE} is allowed on {scope}", figures=figures)
    return Check(
        check_id,
        title,
        _miss(mode),
        f"missing {ROLE_WRITER} on the subscription: ndfleet:health.impactReporting gives the node identity the "
        f"Impact Reporter role at subscription scope ({ROLE_ASSIGNMENT_WRITE} on {scope}); rights on the resource "
        "group do not cover it, and `pulumi up` would stop at that role assignment",
        roles_advice([ROLE_WRITER], scope) + " Or set ndfleet:health.impactReporting: false.",
        figures,
    )


def check_impact_provider(registration: ProviderRegistration | Unavailable | None, mode: Mode) -> Check:
    check_id = "impact-provider"
    title = f"{IMPACT_NAMESPACE} resource provider registered"
    if registration is None:
        return Check(check_id, title, "skip", "the provider's registration was not read")
    if isinstance(registration, Unavailable):
        return unavailable_check(check_id, title, registration)
    figures = {"namespace": registration.namespace, "state": registration.state}
    state = registration.state.lower()
    if state == "registered":
        return Check(check_id, title, "pass", f"{IMPACT_NAMESPACE}: {registration.state}", figures=figures)
    fix = (
        f"az provider register --namespace {IMPACT_NAMESPACE} (needs */register/action on the subscription, e.g. "
        "Contributor), then finish Guest Health Reporting onboarding (docs/burnin.md); or set "
        "ndfleet:health.impactReporting: false"
    )
    if state == "registering":
        detail = f"{IMPACT_NAMESPACE} is still Registering: wait until `az provider show -n {IMPACT_NAMESPACE}` says "
        return Check(check_id, title, "warn", detail + "Registered before nodes report", fix, figures)
    return Check(
        check_id,
        title,
        _miss(mode),
        f"{IMPACT_NAMESPACE} is {registration.state} for the subscription: nodes could not file Guest Health "
        "Reports (Resource Manager answers MissingSubscriptionRegistration); nothing ndfleet deploys registers it",
        fix,
        figures,
    )
