"""Reading the Guest Health Reporting impacts filed for a stack's nodes, and Azure's insights on them
(`ndfleet impact`, ndfleet/commands/impact.py, prints them).

Requests go through preflight's `ArmReader` (azure-core's pipeline: Resource Manager bearer token, retries
honouring Retry-After, paging). Reading needs the Impact Reader role (or Impact Reporter) on the subscription.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ndfleet.azure.arm import ArmReader, RetrySettings, describe_error
from ndfleet.azure.clouds import CloudSettings
from ndfleet.azure.errors import CannotCheck
from ndfleet.stackconfig.clusterspec import ClusterSpec

# Microsoft.Impact REST API version with the insights operations (azure-rest-api-specs, specification/impact,
# preview/2024-05-01-preview; the version pulumi-azure-native's impact module uses).
READ_API_VERSION = "2024-05-01-preview"


@dataclass
class Impact:
    name: str
    category: str
    description: str
    resource_id: str
    reported: str
    physical_host: str
    insights: list[dict[str, Any]] = field(default_factory=list)

    @property
    def vm(self) -> str:
        """`scaleset/instance` of the impacted VM."""
        parts = self.resource_id.split("/")
        lower = [p.lower() for p in parts]
        if "virtualmachinescalesets" in lower:
            i = lower.index("virtualmachinescalesets")
            return "/".join(parts[i + 1 : i + 4 : 2])
        return parts[-1] if parts else ""

    @property
    def state(self) -> str:
        """The latest insight's category, or `filed` while Azure has said nothing yet."""
        if not self.insights:
            return "filed"
        latest = max(self.insights, key=lambda i: i.get("properties", {}).get("eventTime", ""))
        return str(latest.get("properties", {}).get("category", "?"))

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "category": self.category, "description": self.description,
            "impactedResourceId": self.resource_id, "vm": self.vm, "reported": self.reported,
            "physicalHostName": self.physical_host, "state": self.state,
            "insights": [
                {k: i.get("properties", {}).get(k) for k in ("category", "status", "eventTime")}
                | {"title": i.get("properties", {}).get("content", {}).get("title", "")}
                for i in self.insights
            ],
        }  # fmt: skip


def impact_from(doc: Mapping[str, Any]) -> Impact:
    props = doc.get("properties", {}) or {}
    extra = props.get("additionalProperties", {}) or {}
    return Impact(
        name=str(doc.get("name", "")),
        category=str(props.get("impactCategory", "")),
        description=str(props.get("impactDescription", "")),
        resource_id=str(props.get("impactedResourceId", "")),
        reported=str(props.get("reportedTimeUtc") or props.get("startDateTime") or ""),
        physical_host=str(extra.get("PhysicalHostName", "")),
    )


def belongs_to_stack(resource_id: str, spec: ClusterSpec) -> bool:
    """A VM of one of the stack's scale sets (Pulumi auto-names them `<prefix>-<island>-vmss<suffix>`)."""
    parts = resource_id.lower().split("/")
    if "virtualmachinescalesets" not in parts:
        return False
    i = parts.index("virtualmachinescalesets")
    scale_set = parts[i + 1] if i + 1 < len(parts) else ""
    return any(scale_set.startswith(f"{spec.name_prefix}-{island.name}-vmss".lower()) for island in spec.islands)


class Reader:
    """Reads through preflight's `ArmReader` (azure-core pipeline, Resource Manager retries and errors)."""

    def __init__(self, cloud: CloudSettings, credential: Any, retry: RetrySettings, transport: Any = None):
        self.cloud, self.retry = cloud, retry
        self.arm = ArmReader(credential, cloud, retry, transport)

    def _fail(self, exc: Exception, what: str) -> CannotCheck:
        status = getattr(exc, "status_code", None)
        error = getattr(exc, "error", None)
        said = f"{getattr(error, 'code', '') or ''}: {getattr(error, 'message', '') or ''}".strip(": ")
        said = said.splitlines()[0] if said else ""
        if status == 403:
            hint = "reading impacts needs the Impact Reader (or Impact Reporter) role on the subscription"
            return CannotCheck(f"could not read {what}: HTTP 403 {said}; {hint}")
        if status == 429:
            attempts = self.retry.total + 1
            return CannotCheck(f"could not read {what}: HTTP 429 {said} after {attempts} attempts (waited as "
                               "Retry-After asked); try again in a minute")  # fmt: skip
        return CannotCheck(f"could not read impacts: {describe_error(exc, what, self.cloud, self.retry)}")

    def get(self, path: str, what: str) -> dict[str, Any]:
        from azure.core.exceptions import AzureError

        try:
            return self.arm.get(path, READ_API_VERSION)
        except AzureError as exc:
            raise self._fail(exc, what) from None

    def get_all(self, path: str, what: str) -> list[dict[str, Any]]:
        from azure.core.exceptions import AzureError

        try:
            return list(self.arm.list(path, READ_API_VERSION))
        except AzureError as exc:
            raise self._fail(exc, what) from None

    def close(self) -> None:
        self.arm.close()


def _impacts_path(subscription_id: str, name: str = "") -> str:
    base = f"/subscriptions/{subscription_id}/providers/Microsoft.Impact/workloadImpacts"
    return f"{base}/{name}" if name else base


def list_impacts(reader: Reader, spec: ClusterSpec, subscription_id: str) -> list[Impact]:
    impacts = [impact_from(d) for d in reader.get_all(_impacts_path(subscription_id), "the workload impacts")]
    mine = [i for i in impacts if belongs_to_stack(i.resource_id, spec)]
    for impact in mine:
        impact.insights = insights(reader, subscription_id, impact.name)
    return sorted(mine, key=lambda i: i.reported, reverse=True)


def insights(reader: Reader, subscription_id: str, name: str) -> list[dict[str, Any]]:
    return reader.get_all(f"{_impacts_path(subscription_id, name)}/insights", f"the insights of impact {name}")


def show_impact(reader: Reader, subscription_id: str, name: str) -> Impact:
    impact = impact_from(reader.get(_impacts_path(subscription_id, name), f"impact {name}"))
    impact.insights = insights(reader, subscription_id, name)
    return impact


def render_list(impacts: list[Impact], stack: str) -> str:
    if not impacts:
        return f"no impacts filed for the nodes of stack {stack}"
    rows = [("reported", "vm", "physical host", "category", "state", "name")]
    rows += [(i.reported, i.vm, i.physical_host, i.category.removeprefix("Resource.Hpc.Unhealthy."), i.state, i.name)
             for i in impacts]  # fmt: skip
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def render_show(impact: Impact) -> str:
    lines = [
        f"impact {impact.name}",
        f"  category      {impact.category}",
        f"  vm            {impact.vm}  ({impact.resource_id})",
        f"  physical host {impact.physical_host or '-'}",
        f"  reported      {impact.reported}",
        f"  description   {impact.description}",
        f"  state         {impact.state}",
    ]
    for i in sorted(impact.insights, key=lambda i: i.get("properties", {}).get("eventTime", "")):
        p = i.get("properties", {})
        lines.append(f"    {p.get('eventTime', '')}  {p.get('category', '')}: {p.get('content', {}).get('title', '')}")
    return "\n".join(lines)
