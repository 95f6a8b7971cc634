"""Reading a deployed stack from Resource Manager: its island scale sets, their instances with the instance view,
the automatic-repairs service state, and its Azure Monitor workspace's query endpoint. Read-only calls (the Reader
role is enough), through the SDK clients and `ArmReader` of ndfleet.azure: its bounded transport, capped retries
and bounded paging (ndfleet.azure.arm: MAX_PAGES pages, 32 MiB and 60 s an answer).

Which scale sets are the stack's: Pulumi auto-names them (`<prefix>-<island>-vmss` plus a random suffix, and the
resource group too unless `ndfleet:resourceGroupName` is set), so the names are not known offline. Every island
scale set carries the tag `ndfleet:island` (components/ib_island.py) and its host names start with
`<namePrefix>-<island>-` (components/cluster.py, `computerNamePrefix`): a scale set belongs to the stack when both
match. The listing is the resource group's when the stack names one, else the subscription's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ndfleet_node.names import TAG_ISLAND

from ndfleet.azure.answers import AnswerShape, field_object, field_text
from ndfleet.azure.arm import (
    MAX_PAGES,
    ArmReader,
    RetrySettings,
    bounded_pages,
    client_kwargs,
    describe_error,
    is_transient,
)
from ndfleet.azure.clouds import CloudSettings
from ndfleet.azure.errors import CannotCheck
from ndfleet.stackconfig import names
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.status.facts import Instance, ScaleSet, instance_from_json, scale_set_from_json

MONITOR_ACCOUNTS_API = "2023-04-03"
# A scale set holds at most 1,000 instances (300 with singlePlacementGroup); a subscription's listing is bounded too.
MAX_INSTANCES = 1000
MAX_SCALE_SETS = 20_000


@dataclass(frozen=True)
class ArmView:
    scale_sets: dict[str, tuple[ScaleSet, ...]]  # island -> the scale sets found for it (normally one)
    query_endpoint: str | None  # the workspace's Prometheus query endpoint, when the stack has monitoring on
    workspace_problem: str | None  # why there is no endpoint, when monitoring is on


def computer_name_prefix(spec: ClusterSpec, island: str) -> str:
    return names.computer_name_prefix(spec.name_prefix, island)


def match_island(spec: ClusterSpec, doc: Mapping[str, Any]) -> str | None:
    """The island a listed scale set is, or None when it is not one of this stack's."""
    tags = doc.get("tags") if isinstance(doc.get("tags"), Mapping) else {}
    island = tags.get(TAG_ISLAND) if isinstance(tags, Mapping) else None
    if not isinstance(island, str) or island not in {i.name for i in spec.islands}:
        return None
    props = doc.get("properties")
    profile = props.get("virtualMachineProfile") if isinstance(props, Mapping) else None
    os_profile = profile.get("osProfile") if isinstance(profile, Mapping) else None
    prefix = os_profile.get("computerNamePrefix") if isinstance(os_profile, Mapping) else None
    return island if prefix == computer_name_prefix(spec, island) else None


def read_stack(
    spec: ClusterSpec,
    subscription_id: str,
    credential: Any,
    cloud: CloudSettings,
    *,
    retry: RetrySettings,
    transport: Any = None,
) -> ArmView:
    """Everything status needs from Resource Manager. Raises CannotCheck (one line) when it cannot be read."""
    from azure.mgmt.compute import ComputeManagementClient

    def client() -> Any:
        # A fresh policy set per client (see preflight.read: pipelines link their policies).
        kwargs = client_kwargs(cloud, retry, transport, user_agent="ndfleet-status")
        return ComputeManagementClient(credential, subscription_id, **kwargs)

    where = (
        f"resource group {spec.resource_group_name}" if spec.resource_group_name else f"subscription {subscription_id}"
    )
    what = f"the virtual machine scale sets of {where}"
    try:
        with client() as compute:
            listing = (
                compute.virtual_machine_scale_sets.list(spec.resource_group_name)
                if spec.resource_group_name
                else compute.virtual_machine_scale_sets.list_all()
            )
            found: list[tuple[str, Mapping[str, Any]]] = []
            for seen, doc in enumerate(bounded_pages(listing, what)):
                if seen >= MAX_SCALE_SETS:
                    raise CannotCheck(
                        f"could not read: {what} list more than {MAX_SCALE_SETS} scale sets; set "
                        "ndfleet:resourceGroupName to read one resource group"
                    )
                island = match_island(spec, doc)
                if island is not None:
                    found.append((island, doc))
    except _unreadable() as exc:
        raise CannotCheck(_could_not_read(exc, what, cloud, retry), transient=is_transient(exc)) from None

    def read_one(item: tuple[str, Mapping[str, Any]]) -> tuple[str, ScaleSet]:
        island, doc = item
        rg = _resource_group(doc)
        name = str(doc.get("name") or "")
        try:
            with client() as compute:
                view = compute.virtual_machine_scale_sets.get_instance_view(rg, name)
                vms = compute.virtual_machine_scale_set_vms.list(rg, name, expand="instanceView")
                instances: list[Instance] = []
                for vm in bounded_pages(vms, f"the instances of scale set {name}"):
                    if len(instances) >= MAX_INSTANCES:
                        raise CannotCheck(f"could not read: scale set {name} lists more than {MAX_INSTANCES} instances")
                    instances.append(instance_from_json(vm))
        except _unreadable() as exc:
            raise CannotCheck(
                _could_not_read(exc, f"scale set {name}", cloud, retry), transient=is_transient(exc)
            ) from None
        return island, scale_set_from_json(doc, island, view, tuple(instances))

    jobs: list[Callable[[], Any]] = [lambda item=item: read_one(item) for item in found]  # type: ignore[misc]
    scale_sets: dict[str, list[ScaleSet]] = {i.name: [] for i in spec.islands}
    if jobs:
        with ThreadPoolExecutor(max_workers=min(8, len(jobs))) as pool:
            for island, scale_set in pool.map(lambda job: job(), jobs):
                scale_sets[island].append(scale_set)

    endpoint, problem = None, None
    if spec.monitoring.enabled:
        endpoint, problem = _query_endpoint(spec, subscription_id, credential, cloud, retry, transport, found)
    return ArmView({k: tuple(v) for k, v in scale_sets.items()}, endpoint, problem)


def _resource_group(doc: Mapping[str, Any]) -> str:
    from ndfleet.status.facts import resource_group_of

    return resource_group_of(str(doc.get("id") or ""))


def _query_endpoint(
    spec: ClusterSpec,
    subscription_id: str,
    credential: Any,
    cloud: CloudSettings,
    retry: RetrySettings,
    transport: Any,
    found: list[tuple[str, Mapping[str, Any]]],
) -> tuple[str | None, str | None]:
    """The Azure Monitor workspace in the islands' resource group (components/monitoring.py puts it there)."""

    groups = sorted({_resource_group(doc) for _, doc in found})
    if not groups:
        return None, "no island scale set found, so no resource group to find the monitoring workspace in"
    endpoints: list[str] = []
    for group in groups:
        path = f"/subscriptions/{subscription_id}/resourceGroups/{group}/providers/Microsoft.Monitor/accounts"
        try:
            with ArmReader(credential, cloud, retry, transport) as arm:
                for account in arm.list(path, MONITOR_ACCOUNTS_API, max_pages=MAX_PAGES):
                    what = f"the Azure Monitor workspace {field_text(account, 'name', 'a workspace')}"
                    metrics = field_object(field_object(account, "properties", what), "metrics", what)
                    endpoint = field_text(metrics, "prometheusQueryEndpoint", what)
                    if endpoint:
                        endpoints.append(endpoint)
        except _unreadable() as exc:
            return None, describe_error(exc, f"the Azure Monitor workspaces of {group}", cloud, retry, "status")
    if len(endpoints) != 1:
        return None, (
            f"{len(endpoints)} Azure Monitor workspaces with a query endpoint in {', '.join(groups)}; expected one"
        )
    return endpoints[0], None


def _unreadable() -> tuple[type[Exception], ...]:
    """What a read can fail with: azure-core's errors, a shape refusal, and the SDK models' own deserialisation
    errors (a field of the wrong type in an answer)."""
    from azure.core.exceptions import AzureError

    return (AzureError, AnswerShape, TypeError, ValueError, KeyError, AttributeError, RecursionError)


def _could_not_read(exc: Exception, what: str, cloud: CloudSettings, retry: RetrySettings) -> str:
    return "could not read: " + describe_error(exc, what, cloud, retry, "status")
