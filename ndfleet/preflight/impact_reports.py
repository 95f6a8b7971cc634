"""Reading the Guest Health Reporting impacts filed for a stack's nodes, and Azure's insights on them
(`ndfleet impact`, ndfleet/commands/impact.py, prints them).

Requests go through ndfleet.azure's `ArmReader` (its bounded transport, capped Retry-After, bounded paging);
answers are checked by shape (`impact_from`, `insight_from`) and rendered terminal-safe.
Reading needs the Impact Reader role (or Impact Reporter) on the subscription.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ndfleet.azure.answers import AnswerShape, field_object, field_text
from ndfleet.azure.arm import ArmReader, RetrySettings, describe_error
from ndfleet.azure.clouds import CloudSettings
from ndfleet.azure.errors import CannotCheck
from ndfleet.azure.text import one_line, terminal_lines, terminal_safe
from ndfleet.stackconfig.clusterspec import ClusterSpec

# Microsoft.Impact REST API version with the insights operations (azure-rest-api-specs, specification/impact,
# preview/2024-05-01-preview; the version pulumi-azure-native's impact module uses).
READ_API_VERSION = "2024-05-01-preview"
T = TypeVar("T")


@dataclass(frozen=True)
class Insight:
    """One insight (`properties.category`, `status`, `eventTime`, `content.title`), checked by shape."""

    category: str
    status: str
    event_time: str
    title: str

    def as_json(self) -> dict[str, Any]:
        return {"category": self.category, "status": self.status, "eventTime": self.event_time, "title": self.title}


def insight_from(doc: Mapping[str, Any]) -> Insight:
    what = "an impact's insight"
    props = field_object(doc, "properties", what)
    return Insight(
        field_text(props, "category", what), field_text(props, "status", what), field_text(props, "eventTime", what),
        field_text(field_object(props, "content", what), "title", what),
    )  # fmt: skip


@dataclass
class Impact:
    name: str
    category: str
    description: str
    resource_id: str
    reported: str
    physical_host: str
    insights: list[Insight] = field(default_factory=list)

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
        return max(self.insights, key=lambda i: i.event_time).category or "?"

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "category": self.category, "description": self.description,
            "impactedResourceId": self.resource_id, "vm": self.vm, "reported": self.reported,
            "physicalHostName": self.physical_host, "state": self.state,
            "insights": [i.as_json() for i in self.insights],
        }  # fmt: skip


def impact_from(doc: Mapping[str, Any]) -> Impact:
    what = "a workload impact"
    props = field_object(doc, "properties", what)
    extra = field_object(props, "additionalProperties", what)
    return Impact(
        name=field_text(doc, "name", what),
        category=field_text(props, "impactCategory", what),
        description=field_text(props, "impactDescription", what),
        resource_id=field_text(props, "impactedResourceId", what),
        reported=field_text(props, "reportedTimeUtc", what) or field_text(props, "startDateTime", what),
        physical_host=field_text(extra, "PhysicalHostName", what),
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
    """Reads through ndfleet.azure's `ArmReader` (bounded pipeline, Resource Manager retries and errors)."""

    def __init__(self, cloud: CloudSettings, credential: Any, retry: RetrySettings, transport: Any = None):
        self.cloud, self.retry = cloud, retry
        self.arm = ArmReader(credential, cloud, retry, transport)

    def _fail(self, exc: Exception, what: str) -> CannotCheck:
        status = getattr(exc, "status_code", None)
        error = getattr(exc, "error", None)
        said = one_line(f"{getattr(error, 'code', '') or ''}: {getattr(error, 'message', '') or ''}".strip(": "))
        if status == 403:
            hint = "reading impacts needs the Impact Reader (or Impact Reporter) role on the subscription"
            return CannotCheck(f"could not read {what}: HTTP 403 {said}; {hint}")
        if status == 429 and getattr(getattr(exc, "response", None), "ndfleet_refused_wait", None) is None:
            attempts = self.retry.total + 1
            return CannotCheck(f"could not read {what}: HTTP 429 {said} after {attempts} attempts (waited as "
                               "Retry-After asked); try again in a minute")  # fmt: skip
        return CannotCheck(f"could not read impacts: {describe_error(exc, what, self.cloud, self.retry)}")

    def get(self, path: str, what: str, shape: Callable[[Mapping[str, Any]], T]) -> T:
        from azure.core.exceptions import AzureError

        try:
            return shape(self.arm.get(path, READ_API_VERSION))
        except (AzureError, AnswerShape, RecursionError) as exc:
            raise self._fail(exc, what) from None

    def get_all(self, path: str, what: str, shape: Callable[[Mapping[str, Any]], T]) -> list[T]:
        from azure.core.exceptions import AzureError

        try:
            return [shape(doc) for doc in self.arm.list(path, READ_API_VERSION)]
        except (AzureError, AnswerShape, RecursionError) as exc:
            raise self._fail(exc, what) from None

    def close(self) -> None:
        self.arm.close()


def _impacts_path(subscription_id: str, name: str = "") -> str:
    base = f"/subscriptions/{subscription_id}/providers/Microsoft.Impact/workloadImpacts"
    return f"{base}/{name}" if name else base


def list_impacts(reader: Reader, spec: ClusterSpec, subscription_id: str) -> list[Impact]:
    impacts = reader.get_all(_impacts_path(subscription_id), "the workload impacts", impact_from)
    mine = [i for i in impacts if belongs_to_stack(i.resource_id, spec)]
    for impact in mine:
        impact.insights = insights(reader, subscription_id, impact.name)
    return sorted(mine, key=lambda i: i.reported, reverse=True)


def insights(reader: Reader, subscription_id: str, name: str) -> list[Insight]:
    path = f"{_impacts_path(subscription_id, name)}/insights"
    return reader.get_all(path, f"the insights of impact {one_line(name, 80)}", insight_from)


def show_impact(reader: Reader, subscription_id: str, name: str) -> Impact:
    impact = reader.get(_impacts_path(subscription_id, name), f"impact {one_line(name, 80)}", impact_from)
    impact.insights = insights(reader, subscription_id, name)
    return impact


def render_list(impacts: list[Impact], stack: str) -> str:
    if not impacts:
        return f"no impacts filed for the nodes of stack {stack}"
    rows = [("reported", "vm", "physical host", "category", "state", "name")]
    rows += [(i.reported, i.vm, i.physical_host, i.category.removeprefix("Resource.Hpc.Unhealthy."), i.state, i.name)
             for i in impacts]  # fmt: skip
    rows = [tuple(terminal_safe(v, 120) for v in r) for r in rows]  # type: ignore[misc]  # cleaned, then measured
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return terminal_lines(["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows])


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
    for i in sorted(impact.insights, key=lambda i: i.event_time):
        lines.append(f"    {i.event_time}  {i.category}: {i.title}")
    return terminal_lines(lines)
