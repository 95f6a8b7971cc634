"""Building the plan: run the real Pulumi program under Pulumi's mock runtime and record what `pulumi up` would
create (`ndfleet plan`, ndfleet/commands/plan.py, prints it).

No cloud credentials and no Pulumi CLI are needed: the program runs in-process against a mock resource
monitor that records every registration with the exact inputs the program sends to the provider (camelCase
wire names). Provider-computed values (ids, principal ids) are filled deterministically so a plan of the same
commit is byte-identical every time. The JSON form is a stable interface (docs/plan-json.md).
"""

from __future__ import annotations

import copy
import gc
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi.runtime
from pulumi.runtime.mocks import MockMonitor
from pulumi.runtime.settings import ROOT, SETTINGS
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from ndfleet.cost.estimate import estimate_cost
from ndfleet.monitoring.budget import as_json as monitoring_json
from ndfleet.prepare import recording_prepared
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.stackfile import StackFile
from ndfleet.stackconfig.summary import spec_summary
from ndfleet.stackconfig.vms import REGIONAL_QUOTA, SPOT_QUOTA, quota_need

SCHEMA_VERSION = 1
MOCK_SUBSCRIPTION_ID = "00000000-0000-0000-0000-000000000000"
MOCK_TENANT_ID = "11111111-1111-1111-1111-111111111111"

_PROVIDER_NAMESPACES = {
    "authorization": "Microsoft.Authorization",
    "compute": "Microsoft.Compute",
    "managedidentity": "Microsoft.ManagedIdentity",
    "network": "Microsoft.Network",
    "privatedns": "Microsoft.Network",
    "resources": "Microsoft.Resources",
    "storage": "Microsoft.Storage",
    "storagecache": "Microsoft.StorageCache",
    "monitor": "Microsoft.Insights",
    "alertsmanagement": "Microsoft.AlertsManagement",
}
# The input that carries a resource's own Azure name, where it is not "<lowerCamelType>Name".
_NAME_INPUTS = {
    "azure-native:storage:StorageAccount": "accountName",
    "azure-native:storage:BlobServiceProperties": "blobServicesName",
    "azure-native:managedidentity:UserAssignedIdentity": "resourceName",
    "azure-native:authorization:ManagementLockByScope": "lockName",
    "azure-native:network:PrivateDnsZoneGroup": "privateDnsZoneGroupName",
    "azure-native:dashboard:Grafana": "workspaceName",
    "azure-native:alertsmanagement:PrometheusRuleGroup": "ruleGroupName",
    "azure-native:monitor:PrivateLinkScope": "scopeName",
}
# Resource types whose ARM path is not "<namespace>/<lowerCamelType>s".
_RESOURCE_PATHS = {
    "azure-native:monitor:AzureMonitorWorkspace": "Microsoft.Monitor/accounts",
    "azure-native:dashboard:Grafana": "Microsoft.Dashboard/grafana",
    "azure-native:monitor:PrivateLinkScope": "Microsoft.Insights/privateLinkScopes",
}


@dataclass
class PlannedResource:
    type: str
    name: str
    parent: str | None
    protect: bool
    inputs: dict[str, Any]
    # Logical names of the resources this one waits for (`depends_on` and input references), sorted.
    depends_on: list[str] = field(default_factory=list)
    # `retain_on_delete`: when the program no longer declares it, Pulumi forgets it and Azure keeps it.
    retain_on_delete: bool = False

    def as_json(self) -> dict[str, Any]:
        out = {
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "protect": self.protect,
            "dependsOn": self.depends_on,
            "inputs": self.inputs,
        }
        if self.retain_on_delete:
            out["retainOnDelete"] = True
        return out


@dataclass
class Plan:
    stack: str
    spec: ClusterSpec
    resources: list[PlannedResource]
    outputs: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "schemaVersion": SCHEMA_VERSION,
            "stack": self.stack,
            "resources": [r.as_json() for r in sorted(self.resources, key=lambda r: (r.type, r.name))],
            "outputs": self.outputs,
            "summary": plan_summary(self.spec),
            "cost": estimate_cost(self.spec).as_json(),
        }

    def to_json(self) -> str:
        """Deterministic JSON, one resource per line: readable and diffable, and fast (json's C encoder
        runs only without `indent`; a 1,280-node plan is 0.3 s slower pretty-printed)."""
        doc = self.as_json()

        def dumps(value: Any) -> str:
            return json.dumps(value, sort_keys=True, separators=(", ", ": "), allow_nan=False)

        resources = ",\n".join("    " + dumps(r) for r in doc.pop("resources"))
        head = ",\n".join(f"  {dumps(k)}: {dumps(v)}" for k, v in sorted(doc.items()))
        return "{\n" + head + ',\n  "resources": [\n' + resources + "\n  ]\n}\n"


def plan_summary(spec: ClusterSpec) -> dict[str, Any]:
    """The plan document's `summary`: the stack's (spec_summary, also a stack output) and the figures the table's
    summary prints besides, so a script reads what a person reads (docs/plan-json.md): the regional vCPU totals, the
    compute subnet's room and the monitoring estimate."""
    need = quota_need(spec)
    extra: dict[str, Any] = {
        "regionalVcpuQuota": {REGIONAL_QUOTA: need.regional, **({SPOT_QUOTA: need.spot} if need.spot else {})},
    }
    if spec.network is not None:
        extra["computeSubnet"] = {"cidr": spec.network.compute.cidr, "nodeCapacity": spec.network.compute_node_capacity}
    monitoring = monitoring_json(spec)
    if monitoring is not None:
        extra["monitoring"] = monitoring
    return {**spec_summary(spec), **extra}


def _lower_camel(s: str) -> str:
    return s[:1].lower() + s[1:]


def _fake_uuid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "ndfleet:" + "/".join(parts)))


# What the mock runtime answers for a generated secret (pulumi_random's `result`): a marker a test can look for,
# since a plan must never show a secret, mocked or real.
MOCK_SECRET_PREFIX = "ndfleet-mock-secret:"
SECRET_PLACEHOLDER = "[secret]"


def _plain(value: Any) -> Any:
    """The wire carries every number as a double; show integral ones as integers (2, not 2.0). A Pulumi secret
    is shown as "[secret]", never its value."""
    if pulumi.runtime.rpc.is_rpc_secret(value):
        return SECRET_PLACEHOLDER
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# The invoke an elastic island's scale set reads its live capacity with (ndfleet/components/ib_island.py).
GET_SCALE_SET = "azure-native:compute:getVirtualMachineScaleSet"


class RecordingMocks(pulumi.runtime.Mocks):
    """Records every resource and answers with deterministic provider outputs."""

    def __init__(self) -> None:
        self.registered: dict[str, dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        typ, name, inputs = args.typ, args.name, _plain(dict(args.inputs))
        self.registered[f"{typ}::{name}"] = inputs
        if not args.custom:
            return None, {}
        _, module, kind = typ.split(":")
        physical = inputs.get(_NAME_INPUTS.get(typ, _lower_camel(kind) + "Name")) or name
        rg = inputs.get("resourceGroupName") or "rg"
        if typ == "azure-native:resources:ResourceGroup":
            rid = f"/subscriptions/{MOCK_SUBSCRIPTION_ID}/resourceGroups/{physical}"
        elif typ == "azure-native:authorization:ManagementLockByScope":
            rid = f"{inputs.get('scope')}/providers/Microsoft.Authorization/locks/{physical}"
        elif typ == "azure-native:authorization:RoleAssignment":
            rid = f"{inputs.get('scope')}/providers/Microsoft.Authorization/roleAssignments/{_fake_uuid(name)}"
        else:
            namespace = _PROVIDER_NAMESPACES.get(module, "Microsoft." + module.capitalize())
            path = _RESOURCE_PATHS.get(typ, f"{namespace}/{_lower_camel(kind)}s")
            rid = f"/subscriptions/{MOCK_SUBSCRIPTION_ID}/resourceGroups/{rg}/providers/{path}/{physical}"
        # The SDK fills outputs the mock leaves out from the inputs; only those whose output shape differs
        # from the input's are given here.
        state: dict[str, Any] = {"name": physical, "id": rid}
        identity = inputs.get("identity")
        if isinstance(identity, dict) and isinstance(identity.get("userAssignedIdentities"), list):
            # Input: a list of identity ids; output: a map keyed by id.
            ids = identity["userAssignedIdentities"]
            state["identity"] = {**identity, "userAssignedIdentities": {i: {} for i in ids}}
        if typ == "azure-native:managedidentity:UserAssignedIdentity":
            state["principalId"] = _fake_uuid(name, "principal")
            state["clientId"] = _fake_uuid(name, "client")
        elif typ == "azure-native:storage:StorageAccount":
            state["primaryEndpoints"] = {"blob": f"https://{physical}.blob.core.windows.net/"}
        elif typ == "azure-native:monitor:DataCollectionEndpoint":
            host = f"{physical}-abcd.{inputs.get('location')}-1.metrics.ingest.monitor.azure.com"
            state["metricsIngestion"] = {"endpoint": f"https://{host}"}
        elif typ == "azure-native:monitor:DataCollectionRule":
            state["immutableId"] = "dcr-" + _fake_uuid(name, "dcr").replace("-", "")
        elif typ == "azure-native:dashboard:Grafana":
            state["identity"] = {**(inputs.get("identity") or {}), "principalId": _fake_uuid(name, "principal")}
            endpoint = f"https://{physical}.grafana.azure.com"
            state["properties"] = {**(inputs.get("properties") or {}), "endpoint": endpoint}
        elif typ == "random:index/randomString:RandomString" and "result" not in inputs:
            # A name suffix, not a secret: lowercase letters and digits of the asked length, stable per name.
            state["result"] = _fake_uuid(name, "suffix").replace("-", "")[: int(inputs.get("length", 8))]
        elif typ.startswith("random:") and "result" not in inputs:
            state["result"] = MOCK_SECRET_PREFIX + name
        return rid, state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        if args.token == "azure-native:authorization:getClientConfig":
            return {
                "clientId": _fake_uuid("client"),
                "objectId": _fake_uuid("object"),
                "subscriptionId": MOCK_SUBSCRIPTION_ID,
                "tenantId": MOCK_TENANT_ID,
            }, []
        if args.token == GET_SCALE_SET:
            # A plan is a first deployment: the elastic scale set whose live capacity the program reads does not
            # exist yet, and the provider says so as Resource Manager does (404, code ResourceNotFound).
            name = args.args.get("vmScaleSetName")
            return {}, [("vmScaleSetName", f"ResourceNotFound: the scale set {name!r} was not found (404)")]
        return {}, []


def _urn_name(urn: str) -> str:
    return urn.split("::")[-1]


def dependency_names(request: Any) -> list[str]:
    """Logical names of every resource a registration waits for: its `depends_on` and the resources its inputs
    refer to (the SDK sends the union as `dependencies`; components expanded to their resources), sorted."""
    return sorted({_urn_name(urn) for urn in request.dependencies})


class RecordingMonitor(MockMonitor):
    """Also keeps what the mock's arguments leave out: the parent, the `protect` option and the dependencies."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        # (type, name, parent name, protect, retain on delete), in registration order.
        self.order: list[tuple[str, str, str | None, bool, bool]] = []
        # "type::name" -> logical names of what it waits for
        self.depends_on: dict[str, list[str]] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        if request.type != "pulumi:pulumi:Stack":
            parent_urn: str = request.parent
            parent_name = _urn_name(parent_urn) if parent_urn else None
            if parent_urn and parent_urn.split("::")[2].split("$")[-1] == "pulumi:pulumi:Stack":
                parent_name = None
            self.order.append(
                (request.type, request.name, parent_name, bool(request.protect), bool(request.retainOnDelete))
            )
            self.depends_on[f"{request.type}::{request.name}"] = dependency_names(request)
        return super().RegisterResource(request)


def _resolve(value: Any) -> Any:
    out = _sync_await(pulumi.Output.from_input(value).future())
    return json.loads(json.dumps(out, default=str))


def run_plan(stack: StackFile) -> Plan:
    """Run the program (`ndfleet.program.main`, which `__main__.py` calls) under the mock runtime; the plan's spec is
    the one the program prepared (ndfleet.prepare), not a second one built here. A stack the prepare step refuses
    raises pulumi.RunError with its message before any registration."""
    # The run allocates ~10^5 short-lived objects (Outputs, futures) and frees them at the end: the cyclic
    # collector would only rescan them, which costs a quarter of the wall time of a large plan.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with recording_prepared() as prepared:
            run = execute_program(stack)
        (cluster,) = prepared  # ndfleet's program prepares its one cluster, or fails
        return Plan(stack=stack.name, spec=cluster.spec, resources=run.resources, outputs=run.outputs)
    finally:
        if gc_was_enabled:
            gc.enable()


@dataclass
class ProgramRun:
    """What one run of the program under the mock runtime registered, and what it exported."""

    mocks: RecordingMocks
    monitor: RecordingMonitor
    outputs: dict[str, Any]

    @property
    def resources(self) -> list[PlannedResource]:
        return [
            PlannedResource(
                type=t,
                name=n,
                parent=p,
                protect=prot,
                inputs=self.mocks.registered.get(f"{t}::{n}", {}),
                depends_on=self.monitor.depends_on.get(f"{t}::{n}", []),
                retain_on_delete=retain,
            )
            for t, n, p, prot, retain in self.monitor.order
        ]


def _drop_aliases(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
    """A plan starts from no state, so a resource's aliases (the URNs of its earlier names or types, which
    `pulumi up` matches against the stack's state) can match nothing. pulumi-azure-native gives each resource one
    per earlier API version (29 for a scale set), and each costs the mock runtime a chain of Outputs: dropped here,
    the plan's resources and inputs are the same (the plan does not record aliases)."""
    if not args.opts.aliases:
        return None
    opts = copy.copy(args.opts)
    opts.aliases = None
    return pulumi.ResourceTransformationResult(args.props, opts)


def execute_program(
    stack: StackFile, program: Callable[[], None] | None = None, project: str = "ndfleet", *, aliases: bool = False
) -> ProgramRun:
    """Run the program (`ndfleet.program.main`, or any other Pulumi Python program's function: the examples)
    under the mock runtime with the stack's config, as `pulumi up` would run it.

    Errors the program raises (pulumi.RunError for invalid config) propagate; `ProgramRun` is not returned then.
    """
    mocks = RecordingMocks()
    monitor = RecordingMonitor(mocks)
    ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack.name, preview=False, monitor=monitor)
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()
    pulumi.runtime.set_all_config(stack.engine_config, list(stack.secret_keys))
    run = ProgramRun(mocks=mocks, monitor=monitor, outputs={})

    if program is None:
        from ndfleet.program import main

        program = main
    chosen = program

    def without_aliases() -> None:
        pulumi.runtime.register_stack_transformation(_drop_aliases)
        chosen()

    # aliases=True keeps them, as `pulumi up` does (tests/test_plan_aliases.py compares the two).
    _sync_await(run_pulumi_func(chosen if aliases else without_aliases))
    root = pulumi.runtime.get_root_resource()
    exported: dict[str, Any] = getattr(root, "outputs", {}) or {}
    run.outputs = {k: _resolve(v) for k, v in sorted(exported.items())}
    return run
