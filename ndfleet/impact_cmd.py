"""`ndfleet impact list|show`: the Guest Health Reporting impacts filed for a stack's nodes, and Azure's insights.

    ndfleet impact list --stack prod [--format table|json]
    ndfleet impact show NAME --stack prod [--format table|json]

`list` reads the subscription's workload impacts (GET .../providers/Microsoft.Impact/workloadImpacts, paged) and
keeps those whose impacted resource is a VM of one of the stack's scale sets (`<namePrefix>-<island>-vmss...`),
then each one's insights (GET .../workloadImpacts/{name}/insights): what Azure did with the report, e.g.
AcknowledgedUnhealthy, UpdatingNodeHealthState, NodeRemovedFromService (Microsoft Learn, "View impact reports
and insights"). `show` prints one impact with all its insights. Reading needs the Impact Reader role (or
Impact Reporter) on the subscription.

Requests go through preflight's `ArmReader` (azure-core's pipeline: Resource Manager bearer token, retries
honouring Retry-After, paging), with the same stack loading, cloud, subscription and credential resolution as
`ndfleet preflight`. Exit 0 listed, 2 could not read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ndfleet.preflight import (
    CannotCheck,
    CloudSettings,
    RetrySettings,
    build_credential,
    resolve_cloud,
    resolve_subscription,
)
from ndfleet.preflight.arm import ArmReader, describe_error
from ndfleet.preflight.command import load_stack_spec  # the stack -> spec step preflight uses
from ndfleet.spec.config import ClusterSpec
from ndfleet.spec.stackfile import add_stack_arguments

# Microsoft.Impact REST API version with the insights operations (azure-rest-api-specs, specification/impact,
# preview/2024-05-01-preview; the version pulumi-azure-native's impact module uses).
READ_API_VERSION = "2024-05-01-preview"

EXIT_OK = 0
EXIT_CANNOT_READ = 2


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


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("impact", help="impacts (Guest Health Reporting) filed for a stack's nodes")
    sub = p.add_subparsers(dest="impact_command", metavar="ACTION", required=True)
    for name, helptext in (("list", "every impact filed for the stack's nodes"), ("show", "one impact")):
        q = sub.add_parser(name, help=helptext)
        if name == "show":
            q.add_argument("name", help="the impact's name (a GUID, from `ndfleet impact list`)")
        add_stack_arguments(q)
        q.add_argument("--format", choices=("table", "json"), default="table")
        q.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    return run_cli(args)


def run_cli(
    args: argparse.Namespace, *, env: Mapping[str, str] | None = None, credential: Any = None, transport: Any = None,
    retry: RetrySettings | None = None,
) -> int:  # fmt: skip
    """The command; tests call it with a fake credential and a recorded transport."""
    env = os.environ if env is None else env
    owned = None
    reader: Reader | None = None
    try:
        spec, provider = load_stack_spec(args)
        cloud = resolve_cloud(env, provider)
        subscription_id = resolve_subscription(spec, env, provider)
        if credential is None:
            credential = owned = build_credential(cloud, env)
        reader = Reader(cloud, credential, retry or RetrySettings(), transport)
        if args.impact_command == "show":
            impact = show_impact(reader, subscription_id, args.name)
            print(json.dumps(impact.as_json(), indent=2) if args.format == "json" else render_show(impact))
        else:
            impacts = list_impacts(reader, spec, subscription_id)
            if args.format == "json":
                print(json.dumps({"stack": spec.stack, "impacts": [i.as_json() for i in impacts]}, indent=2))
            else:
                print(render_list(impacts, spec.stack))
    except CannotCheck as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_CANNOT_READ
    finally:
        if reader is not None:
            reader.close()
        if owned is not None:
            owned.close()
    return EXIT_OK
