"""The facts preflight reads from Resource Manager, as plain data: the check functions never see SDK models."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class Region:
    name: str
    display_name: str
    region_type: str  # "Physical" or "Logical" ("" when Resource Manager does not say)


@dataclass(frozen=True)
class SkuRestriction:
    type: str  # "Location" or "Zone"
    reason: str  # NotAvailableForSubscription, QuotaId, ...
    locations: tuple[str, ...]
    zones: tuple[str, ...]


@dataclass(frozen=True)
class Sku:
    name: str
    resource_type: str
    family: str | None
    locations: tuple[str, ...]
    zones: dict[str, tuple[str, ...]]  # location -> zones it is offered in
    restrictions: tuple[SkuRestriction, ...]
    capabilities: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Usage:
    name: str
    localized_name: str
    current: int
    limit: int

    @property
    def available(self) -> int:
        return self.limit - self.current


@dataclass(frozen=True)
class Unavailable:
    """A fact that could not be read: the checks that need it report `error` with this reason."""

    reason: str


@dataclass(frozen=True)
class RolePermission:
    """One entry of Microsoft.Authorization/permissions: what one of the caller's role assignments allows at the
    scope (actions minus notActions; `*` is a wildcard, matching is case-insensitive)."""

    actions: tuple[str, ...]
    not_actions: tuple[str, ...] = ()


@dataclass(frozen=True)
class FeatureRegistration:
    """A preview feature's registration state for the subscription (Microsoft.Features)."""

    namespace: str
    name: str
    state: str  # Registered, Registering, NotRegistered, Unregistering, Unregistered, Pending; "NotFound"


@dataclass(frozen=True)
class ProviderRegistration:
    """A resource provider's registration state for the subscription (`GET /subscriptions/{id}/providers/{ns}`)."""

    namespace: str
    state: str  # Registered, Registering, NotRegistered, Unregistering, Unregistered


@dataclass(frozen=True)
class ImageVersions:
    """The versions of the stack's marketplace image published in its location (Compute's VirtualMachineImages): for a
    pinned version, that version when it is published; for `latest`, every published version. Empty: none (404)."""

    versions: tuple[str, ...]


@dataclass(frozen=True)
class Facts:
    locations: list[Region] | Unavailable
    compute_skus: list[Sku] | Unavailable  # virtualMachines SKUs of the stack's location
    usages: list[Usage] | Unavailable
    lustre_skus: list[Sku] | Unavailable | None  # None: the stack has no Managed Lustre
    # The caller's effective permissions at the deployment scope; None: not read (tests of the other checks).
    permissions: list[RolePermission] | Unavailable | None = None
    trusted_launch_default: FeatureRegistration | Unavailable | None = None
    # Impact reporting only (None otherwise): the caller's permissions at subscription scope, where the Impact
    # Reporter role is assigned, and the Microsoft.Impact provider's registration (ndfleet/preflight/impact.py).
    subscription_permissions: list[RolePermission] | Unavailable | None = None
    impact_provider: ProviderRegistration | Unavailable | None = None
    # The stack's image in its location; None: not read (tests of the other checks).
    image_versions: ImageVersions | Unavailable | None = None


def norm_location(name: str) -> str:
    return name.replace(" ", "").lower()


def wire_text(value: Any) -> str:
    """SDK enums (ResourceSkuRestrictionsType.LOCATION) as the wire string ("Location")."""
    if value is None:
        return ""
    return str(value.value) if isinstance(value, Enum) else str(value)


def _values(restriction: Any) -> list[str]:
    """The restriction's `values` (locations): `values_property` in typespec-generated models, where `values`
    is the Mapping method; `values` in older autorest models."""
    found = getattr(restriction, "values_property", None)
    if found is None:
        found = getattr(restriction, "values", None)
    return list(found) if isinstance(found, (list, tuple)) else []


def sku_from_model(model: Any) -> Sku:
    zones: dict[str, tuple[str, ...]] = {}
    for info in model.location_info or []:
        if info.location:
            zones[norm_location(info.location)] = tuple(sorted(info.zones or []))
    restrictions = []
    for r in model.restrictions or []:
        info = getattr(r, "restriction_info", None)
        restrictions.append(
            SkuRestriction(
                type=wire_text(r.type),
                reason=wire_text(r.reason_code) or "unknown reason",
                locations=tuple(norm_location(x) for x in ((info.locations if info else None) or _values(r))),
                zones=tuple(sorted((info.zones if info else None) or [])),
            )
        )
    return Sku(
        name=model.name or "",
        resource_type=model.resource_type or "",
        family=getattr(model, "family", None),
        locations=tuple(norm_location(x) for x in model.locations or []),
        zones=zones,
        restrictions=tuple(restrictions),
        capabilities={c.name: c.value for c in (model.capabilities or []) if c.name},
    )


