"""The Resource Manager stand-in: the Virtual Machine Scale Sets REST API (Microsoft Learn, "Virtual Machine Scale
Sets", api-version 2024-07-01) for the elastic islands' scale sets, booting and removing twin machines as Azure
creates and deletes instances.

- `GET .../virtualMachineScaleSets/{name}`: the scale set, with `sku.capacity`;
- `PATCH` the same (e.g. `{"sku": {"capacity": n}}`, what the controller sends): merges only the members given into
  the scale set's model; a capacity only when the body has one ("Virtual Machine Scale Sets - Update": "Update a
  VM scale set", every body member optional). `PUT` (what pulumi-azure-native sends on every update,
  pulumi/pulumi-azure-native#3983): the body replaces the model and its `sku.capacity` is the new capacity
  ("Virtual Machine Scale Sets - Create Or Update"; the capacity reset the aks-engine upgrade met,
  Azure/aks-engine#2183, and any ARM template redeployment, Azure/vm-scale-sets#70); a PUT without a capacity keeps
  the current one (reported for a body without `sku` in Azure/vm-scale-sets#70, not confirmed by the reference).
  Either answers 200 with the scale set and an `Azure-AsyncOperation` header. A higher capacity creates instances,
  each listed at once as `Creating` with its computer name (Uniform scale sets: `computerNamePrefix` + the instance
  id in base 36, six digits) and booted as a new machine from the model's customData and userData (a PUT's new model
  boots the next instances), `Succeeded` once it runs. A lower capacity deletes instances in the order of the model's
  `scaleInPolicy.rules` (Microsoft Learn, "Use custom scale-in policies with Azure Virtual Machine Scale Sets":
  `Default` on a Uniform scale set balances zones and fault domains, one each here, then deletes the highest
  instance id; `NewestVM` the newest; `OldestVM` the oldest; the stand-in's ids grow with creation).
  `protectFromScaleIn` is not honoured: Microsoft Learn ("Instance Protection for Azure Virtual Machine Scale Set
  instances") promises it only against Autoscale-initiated scale-in and says operations initiated on the scale set
  are not blocked, so the stand-in does the worst the documentation allows;
- `GET .../virtualMachines`: the instances (`instanceId`, `properties.provisioningState`,
  `properties.osProfile.computerName`);
- `POST .../delete` with `{"instanceIds": [...]}`: 202 with `Azure-AsyncOperation` and `Location`; exactly those
  instances go (their machines are powered off and removed) and the capacity drops by as many.

The calls of a rolling upgrade (issue 42), on the fixed islands' scale sets too (`fixed`: their instances are the
machines the twin booted from the plan, kept in step with automatic repairs' replacements by the twin):

- `POST .../manualupgrade` with `{"instanceIds": [...]}` (Microsoft Learn, Compute REST 2024-07-01, "Virtual Machine
  Scale Sets - Update Instances": "Upgrades one or more virtual machines to the latest SKU set in the VM scale set
  model"; its body `VirtualMachineScaleSetVMInstanceRequiredIDs`, `instanceIds` required): the instances take the
  scale set's current model. The machine is left running: what the twin's models change (customData, the
  bundle's Key Vault parts, extension settings) reaches a running VM only through a reimage (Microsoft Learn,
  "Custom data and cloud-init on Azure Virtual Machines": custom data is applied at provisioning; "Modify a Virtual
  Machine Scale Set", Update the OS image for your scale set). An image reference change, which Azure applies by
  replacing the OS disk during the upgrade itself, is not modelled: the twin boots one image.
- `POST .../reimage` with `{"instanceIds": [...]}` (Microsoft Learn, "Virtual Machine Scale Sets - Reimage",
  `VirtualMachineScaleSetReimageParameters`: "Omitting the virtual machine scale set instance ids will result in the
  operation being performed on all virtual machines in the virtual machine scale set"; an empty list is not
  documented and is taken as omitted: the worst the reference allows): each instance's machine is powered off and
  removed and a fresh one boots under the SAME computer name, address, identity and host, from the boot data of the
  model the instance holds (its OS disk is new: a reimaged VM keeps its NIC and name, Learn, "Reimage a virtual
  machine"). The operation is `InProgress` until every new machine has started, then `Succeeded`, or `Failed` with
  an error when a boot could not start.
- Both answer 202 Accepted with `Azure-AsyncOperation` and `Location` (both documented responses of the two pages:
  200 OK, 202 Accepted with `Location`), and the operation's status URL
  (`GET /subscriptions/{id}/providers/Microsoft.Compute/locations/{region}/operations/{operationId}`, Microsoft
  Learn, "Track asynchronous Azure operations") answers `{"status": "InProgress"}` until it is done, then
  `"Succeeded"`, or `"Failed"` with `error: {code, message}`; its Location URL (`...?monitor=true`) answers 202
  while in progress and 200 when done. 400 `InvalidParameter` for a missing or empty `instanceIds` of
  manualupgrade (required) or one that is not a list of strings; 404 `NotFound` naming an instance the scale set does
  not have (Azure answers the whole request so; nothing is done); 409 `Conflict` while another operation of the
  stand-in holds one of the instances ("Azure REST API reference", common error responses).
- RBAC (Microsoft Learn, "Azure permissions for Compute"): `Microsoft.Compute/virtualMachineScaleSets/
  manualUpgrade/action` ("Manually updates instances to latest model of the virtual machine scale set") and
  `Microsoft.Compute/virtualMachineScaleSets/reimage/action` ("Reimages the instances of the virtual machine scale
  set"), judged as every other call. Reading an operation's status needs a token only: Azure asks read rights at
  the resource group ("Track asynchronous Azure operations", permissions), which no role of the plan lacks where
  it may start one.
- Each instance records the model it runs: the list's `properties.latestModelApplied` ("Virtual Machine Scale Set
  VMs - List": "Specifies whether the latest model has been applied to the virtual machine") is true while its model
  is the scale set's, false after a PUT or PATCH changed the scale set's model, until a manualupgrade of it (a new
  instance starts on the current model).

Callers need a managed-identity token the metadata stand-in issued for `https://management.azure.com` (401
otherwise) and a role granting the call's action at the scale set or a scope above it (Microsoft Learn, "Understand
scope for Azure RBAC": assignments are inherited by child scopes): the plan's role assignments and the actions of
their role definitions; only the identity of the machine the plan gives that role (the controller) may act (403
`AuthorizationFailed` otherwise). A write of the scale set (PUT/PATCH) is also checked on its linked resources, as
Resource Manager does: `subnets/join/action` at each subnet its instances join and
`userAssignedIdentities/assign/action` at each identity it carries, else 403 `LinkedAuthorizationFailed` (Microsoft
Learn, "Troubleshoot Azure RBAC", linked access checks; the error autoscalers met in Azure/aks-engine#2367).
A scale set named in `never_boots`
creates its instances but never boots them: an allocation that never comes up (the resume-fail test).

Injected answers (`inject`, below): the next deletes of a scale set can be answered as Resource Manager answers a
request it will not take now: 429 Too Many Requests with `Retry-After` in seconds (Microsoft Learn, "Understand how
Azure Resource Manager throttles requests"), 409 Conflict while another operation holds the scale set, 500/503
(Microsoft Learn, "Azure REST API reference", common error responses), all with the `{"error": {"code", "message"}}`
body. A scale set named in `fails_allocation` lists its new instances `Failed` and never boots them (an allocation
Azure could not complete: provisioningState Failed, Microsoft Learn, "Virtual machine states and billing").
"""

from __future__ import annotations

import base64
import copy
import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tests.twin.plan import ScaleSetTemplate, health_policy

ARM_HOST = "management.azure.com"
ARM_AUDIENCE = "https://management.azure.com"
SUBSCRIPTION = "00000000-0000-0000-0000-000000000000"
MAX_BODY_BYTES = 1 << 20
BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def computer_name(prefix: str, instance_id: int) -> str:
    """A Uniform scale set instance's host name: the prefix and the instance id in base 36, six digits."""
    digits = ""
    n = instance_id
    while True:
        n, r = divmod(n, 36)
        digits = BASE36[r] + digits
        if n == 0:
            break
    return prefix + digits.rjust(6, "0")


@dataclass
class Instance:
    instance_id: str
    computer_name: str
    provisioning_state: str = "Creating"
    # The model the instance runs (the scale set's model when it was created or last upgraded; module doc).
    model: dict[str, Any] = field(default_factory=dict)


@dataclass
class Operation:
    """A long-running operation as its Azure-AsyncOperation URL reports it (Learn, "Track asynchronous Azure
    operations"): InProgress until `done_at` (time.monotonic(); None: until `finish`), then Succeeded or Failed."""

    operation_id: str
    kind: str  # manualupgrade | reimage
    scale_set: str
    instance_ids: tuple[str, ...]
    started: float  # time.time()
    done_at: float | None = None
    status: str = "InProgress"
    error: dict[str, str] | None = None
    ended: float | None = None  # time.time()
    waiting: set[str] = field(default_factory=set)  # reimage: the instances whose new machine has not started

    def current(self) -> str:
        if self.status == "InProgress" and self.done_at is not None and time.monotonic() >= self.done_at:
            self.status, self.ended = "Succeeded", time.time()
        return self.status


# The action each call needs at the scale set (Microsoft Learn, "Azure permissions for Compute").
READ = "Microsoft.Compute/virtualMachineScaleSets/read"
WRITE = "Microsoft.Compute/virtualMachineScaleSets/write"
MANUAL_UPGRADE = "Microsoft.Compute/virtualMachineScaleSets/manualUpgrade/action"
REIMAGE = "Microsoft.Compute/virtualMachineScaleSets/reimage/action"
ACTIONS: dict[tuple[str, tuple[str, ...]], str] = {
    ("GET", ()): READ,
    ("GET", ("virtualmachines",)): "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
    ("PATCH", ()): WRITE,
    ("PUT", ()): WRITE,
    ("POST", ("delete",)): "Microsoft.Compute/virtualMachineScaleSets/delete/action",
    ("POST", ("manualupgrade",)): MANUAL_UPGRADE,
    ("POST", ("reimage",)): REIMAGE,
}
# How long a manual upgrade of instances takes here (the model is recorded; nothing boots): Azure takes longer.
MANUAL_UPGRADE_S = 2.0
API_VERSION = "2024-07-01"
OPERATIONS_PATH = f"/subscriptions/{SUBSCRIPTION}/providers/microsoft.compute/locations/eastus/operations/"
JOIN = "Microsoft.Network/virtualNetworks/subnets/join/action"
ASSIGN = "Microsoft.ManagedIdentity/userAssignedIdentities/assign/action"


@dataclass
class ScaleSet:
    template: ScaleSetTemplate
    instances: dict[str, Instance] = field(default_factory=dict)
    next_id: int = 0
    # The model as Azure holds it (a REST body): the plan's at first, then as PUT replaces and PATCH merges it.
    model: dict[str, Any] = field(default_factory=dict)
    # A fixed island's scale set: its instances are the plan's machines (`fixed_instances`), never scaled here.
    fixed: bool = False

    def __post_init__(self) -> None:
        if not self.model:
            self.model = copy.deepcopy(self.template.body)

    def add(self, inst: Instance) -> Instance:
        """An instance created now, on the scale set's current model."""
        inst.model = copy.deepcopy(self.model)
        self.instances[inst.instance_id] = inst
        self.next_id = max(self.next_id, int(inst.instance_id) + 1)
        return inst

    @property
    def resource_id(self) -> str:
        return (
            f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{self.template.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{self.template.name}"
        )


@dataclass
class ResourceManager:
    scale_sets: dict[str, ScaleSet]
    # scope -> actions granted there (tests/twin/plan.py role_grants)
    grants: dict[str, frozenset[str]]
    allowed_client_ids: set[str]
    # bearer token -> (client id, audience), as the metadata stand-in issued it
    tokens: Callable[[str], tuple[str, str] | None]
    # Start a new machine for the instance (marking it Succeeded once it runs), and power off and remove the machine
    # of a computer name: both return at once, the machine is Azure's business from there.
    boot: Callable[[ScaleSetTemplate, Instance], None]
    remove: Callable[[str], None]
    # Reimage the instance's machine: power it off, remove it and boot a fresh one under the same computer name from
    # the template (the boot data of the model the instance holds); call the last argument with None once the new
    # machine has started, or with the reason it could not. Returns at once.
    reimage: Callable[[ScaleSetTemplate, Instance, Callable[[str | None], None]], None] | None = None
    operations: dict[str, Operation] = field(default_factory=dict)
    never_boots: set[str] = field(default_factory=set)
    fails_allocation: set[str] = field(default_factory=set)
    # (scale set, "delete") -> the statuses its next deletes are answered with, first first (see the module doc)
    injected: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    # (method, scale set, what was asked, when: time.time()); DELETE for `POST .../delete`
    calls: list[tuple[str, str, Any, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(
        self, method: str, path: str, headers: Any, body: bytes, judge: bool = True
    ) -> tuple[int, Any, dict[str, str]]:
        """One request, answered as Resource Manager would. `judge` False: a caller with the deployer's own rights
        (`as_deployer`): its token and role are not judged, everything else is."""
        url = urllib.parse.urlsplit(path)
        if "api-version" not in dict(urllib.parse.parse_qsl(url.query)):
            return 400, _error("MissingApiVersionParameter", "The api-version query parameter is required"), {}
        auth = headers.get("Authorization", "")
        issued = self.tokens(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if not judge:
            issued = ("deployer", ARM_AUDIENCE)
        if issued is None or issued[1] != ARM_AUDIENCE:
            return 401, _error("InvalidAuthenticationToken", "The access token is missing or invalid"), {}
        if url.path.lower().startswith(OPERATIONS_PATH) and method == "GET":
            query = dict(urllib.parse.parse_qsl(url.query))
            return self._operation(url.path[len(OPERATIONS_PATH):], query.get("monitor") == "true")
        parts = url.path.strip("/").split("/")
        lower = [p.lower() for p in parts]
        if (
            len(parts) < 8
            or lower[:1] != ["subscriptions"]
            or lower[2] != "resourcegroups"
            or lower[6] != ("virtualmachinescalesets")
        ):
            return 404, _error("InvalidResourceType", f"no stand-in for {url.path}"), {}
        scale_set = self.scale_sets.get(parts[7])
        rest = lower[8:]
        if scale_set is None or scale_set.resource_id.lower() != "/" + "/".join(lower[:8]):
            return 404, _error("ResourceNotFound", f"The Resource '{'/'.join(parts[4:8])}' was not found."), {}
        action = ACTIONS.get((method, tuple(rest)))
        if action is None:
            return 405, _error("MethodNotAllowed", f"{method} {url.path}"), {}
        if judge and (issued[0] not in self.allowed_client_ids or not self.may(action, scale_set.resource_id)):
            return 403, _error(
                "AuthorizationFailed",
                f"The client '{issued[0]}' does not have authorization to perform action '{action}' over scope "
                f"'{scale_set.resource_id}'",
            ), {}
        if action == WRITE and judge:
            linked = [(JOIN, s) for s in scale_set.template.subnet_ids]
            linked += [(ASSIGN, i) for i in scale_set.template.identity_ids]
            missing = [(a, scope) for a, scope in linked if not self.may(a, scope)]
            if missing:
                return 403, _error(
                    "LinkedAuthorizationFailed",
                    f"The client '{issued[0]}' has permission to perform action '{action}' on scope "
                    f"'{scale_set.resource_id}'; however, it does not have permission to perform action(s) "
                    f"'{', '.join(a for a, _ in missing)}' on the linked scope(s) "
                    f"'{', '.join(scope for _, scope in missing)}' or the linked scope(s) are invalid.",
                ), {}
        async_headers = {
            "Azure-AsyncOperation": f"https://{ARM_HOST}/subscriptions/{SUBSCRIPTION}/providers/"
            f"Microsoft.Compute/locations/eastus/operations/{len(self.calls)}?api-version=2024-07-01"
        }
        with self.lock:
            if method == "GET" and not rest:
                return 200, self._model(scale_set), {}
            if method == "GET" and rest == ["virtualmachines"]:
                return 200, {"value": [self._instance(scale_set, i) for i in scale_set.instances.values()]}, {}
            doc = _json(body)
            if method in ("PATCH", "PUT") and not rest:
                status, answer = self._write(method, scale_set, doc)
                return status, answer, async_headers if status == 200 else {}
            if method == "POST" and rest == ["delete"]:
                ids = doc.get("instanceIds") if isinstance(doc, dict) else None
                if not isinstance(ids, list) or not ids:
                    return 400, _error("InvalidParameter", "instanceIds: a non-empty list is required"), {}
                refused = self._injected(scale_set.template.name, "delete", ids)
                if refused is not None:
                    return refused
                self.calls.append(("DELETE", scale_set.template.name, sorted(str(i) for i in ids), time.time()))
                for instance_id in ids:
                    self._delete(scale_set, str(instance_id))
                return 202, b"", {**async_headers, "Location": async_headers["Azure-AsyncOperation"]}
            if method == "POST" and rest in (["manualupgrade"], ["reimage"]):
                return self._roll_call(scale_set, rest[0], doc)
        return 405, _error("MethodNotAllowed", f"{method} {url.path}"), {}

    # --- a rolling upgrade's calls (module doc) ---------------------------------------------------------------
    def _roll_call(self, scale_set: ScaleSet, kind: str, doc: Any) -> tuple[int, Any, dict[str, str]]:
        """`manualupgrade` or `reimage` of instances (under the lock): checked whole, then started."""
        if not isinstance(doc, dict) and doc is not None:
            return 400, _error("InvalidRequestContent", "The request content could not be deserialized"), {}
        ids = (doc or {}).get("instanceIds")
        if kind == "reimage" and not ids:
            ids = sorted(scale_set.instances, key=int)  # omitted: every VM of the scale set (Learn, Reimage)
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
            return 400, _error("InvalidParameter", "instanceIds: a non-empty list of instance ids is required"), {}
        unknown = [i for i in ids if i not in scale_set.instances]
        if unknown:
            return 404, _error("NotFound", f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/"
                               f"{scale_set.template.name}/virtualMachines/{unknown[0]}' under resource group "
                               f"'{scale_set.template.resource_group}' was not found."), {}  # fmt: skip
        refused = self._injected(scale_set.template.name, kind, sorted(ids))
        if refused is not None:
            return refused
        held = sorted(set(ids) & self._busy(scale_set.template.name))
        if held:
            return 409, _error("Conflict", f"Operation '{kind}' is not allowed on instance(s) {', '.join(held)} "
                               f"of '{scale_set.template.name}': another operation is in progress."), {}  # fmt: skip
        op = Operation(f"{uuid.uuid4()}", kind, scale_set.template.name, tuple(dict.fromkeys(ids)), time.time())
        self.operations[op.operation_id] = op
        self.calls.append((kind.upper(), scale_set.template.name, sorted(op.instance_ids), op.started))
        if kind == "manualupgrade":
            for instance_id in op.instance_ids:
                scale_set.instances[instance_id].model = copy.deepcopy(scale_set.model)
            op.done_at = time.monotonic() + MANUAL_UPGRADE_S
        else:
            op.waiting = set(op.instance_ids)
            for instance_id in op.instance_ids:
                inst = scale_set.instances[instance_id]
                inst.provisioning_state = "Updating"
                template = _boots_from(scale_set.template, inst.model)
                if self.reimage is None:
                    self._reimaged(op, inst, "the stand-in was given no way to reimage a machine")
                else:
                    self.reimage(template, inst, lambda error, inst=inst: self._reimaged_locked(op, inst, error))
        return 202, b"", self._operation_headers(op)

    def _reimaged_locked(self, op: Operation, inst: Instance, error: str | None) -> None:
        with self.lock:
            self._reimaged(op, inst, error)

    def _reimaged(self, op: Operation, inst: Instance, error: str | None) -> None:
        op.waiting.discard(inst.instance_id)
        inst.provisioning_state = "Failed" if error else "Succeeded"
        if error and op.error is None:
            op.error = {"code": "InternalExecutionError", "message": f"instance {inst.instance_id}: {error}"}
        if not op.waiting:
            op.status, op.ended = ("Failed" if op.error else "Succeeded"), time.time()

    def _busy(self, scale_set: str) -> set[str]:
        return {i for op in self.operations.values() if op.scale_set == scale_set and op.current() == "InProgress"
                for i in op.instance_ids}  # fmt: skip

    def _operation_headers(self, op: Operation) -> dict[str, str]:
        url = f"https://{ARM_HOST}{OPERATIONS_PATH}{op.operation_id}?api-version={API_VERSION}"
        return {"Azure-AsyncOperation": url, "Location": url + "&monitor=true", "Retry-After": "1"}

    def _operation(self, operation_id: str, monitor: bool) -> tuple[int, Any, dict[str, str]]:
        with self.lock:
            op = self.operations.get(operation_id)
            if op is None:
                return 404, _error("NotFound", f"operation {operation_id} not found"), {}
            status = op.current()
            if monitor:  # the Location URL: 202 while it runs, then the operation's own final answer
                if status == "InProgress":
                    return 202, b"", {**self._operation_headers(op)}
                return (200, b"", {}) if status == "Succeeded" else (500, {"error": op.error}, {})
            doc: dict[str, Any] = {"name": op.operation_id, "status": status,
                                   "startTime": _iso(op.started)}  # fmt: skip
            if op.ended is not None:
                doc["endTime"] = _iso(op.ended)
            if op.error is not None:
                doc["error"] = op.error
            return 200, doc, {"Retry-After": "1"} if status == "InProgress" else {}

    def operation(self, operation_id: str) -> Operation:
        with self.lock:
            op = self.operations[operation_id]
            op.current()
            return op

    def latest_model_applied(self, scale_set: str, instance_id: str) -> bool:
        with self.lock:
            ss = self.scale_sets[scale_set]
            return _same_model(ss.instances[instance_id].model, ss.model)

    def instance_of(self, scale_set: str, computer_name: str) -> Instance | None:
        with self.lock:
            return next((i for i in self.scale_sets[scale_set].instances.values()
                         if i.computer_name == computer_name), None)  # fmt: skip

    def replaced(self, scale_set: str, old_name: str, new: Instance) -> None:
        """Automatic repairs replaced a fixed island's instance (the twin's doing): the old one goes, the new one is
        on the current model."""
        with self.lock:
            ss = self.scale_sets.get(scale_set)
            if ss is None:
                return
            for instance_id in [i for i, inst in ss.instances.items() if inst.computer_name == old_name]:
                del ss.instances[instance_id]
            ss.add(new)

    # --- injected answers (module doc) ----------------------------------------------------------------------
    def inject(self, scale_set: str, operation: str, statuses: list[int]) -> None:
        with self.lock:
            self.injected.setdefault((scale_set, operation), []).extend(statuses)

    def _injected(self, scale_set: str, operation: str, asked: Any) -> tuple[int, Any, dict[str, str]] | None:
        """The next injected answer for the operation, recorded in `calls` as REFUSED; None when none is left."""
        queue = self.injected.get((scale_set, operation))
        if not queue:
            return None
        status = queue.pop(0)
        self.calls.append(("REFUSED", scale_set, {"operation": operation, "status": status, "asked": asked},
                           time.time()))  # fmt: skip
        code, headers = {
            409: ("Conflict", {}),
            429: ("TooManyRequests", {"Retry-After": "5"}),
            503: ("ServiceUnavailable", {"Retry-After": "5"}),
        }.get(status, ("InternalServerError", {}))
        return status, _error(code, f"injected {status} for {operation}"), headers

    def refused(self, scale_set: str) -> list[int]:
        with self.lock:
            return [body["status"] for m, s, body, _ in self.calls if m == "REFUSED" and s == scale_set]

    def may(self, action: str, scope: str) -> bool:
        """Whether an assignment at the scope or one above it grants the action."""
        target = scope.lower().rstrip("/")
        return any(
            action in actions and (target == granted.lower().rstrip("/") or target.startswith(granted.lower() + "/"))
            for granted, actions in self.grants.items()
        )

    def get(self, scale_set: str) -> dict[str, Any]:
        """The scale set as `GET` answers it (what the program's capacity read sees)."""
        with self.lock:
            return self._model(self.scale_sets[scale_set])

    def as_deployer(self, method: str, path: str, body: Any = None) -> tuple[int, Any, dict[str, str]]:
        """A call with the deployer's (an operator's) own rights, as `deploy`: the stand-in judges only the
        controller's identity. `path` is the URL's path and query, `body` JSON or None."""
        data = b"" if body is None else json.dumps(body).encode()
        return self.handle(method, path, {}, data, judge=False)

    def deploy(self, scale_set: str, body: dict[str, Any]) -> tuple[int, Any]:
        """A deployment's `PUT` of the scale set (pulumi up, with the deployer's own rights: the stand-in judges only
        the controller's identity), answered as `handle` answers the controller's."""
        with self.lock:
            return self._write("PUT", self.scale_sets[scale_set], copy.deepcopy(body))

    # --- what Azure does --------------------------------------------------------------------------------------
    def _write(self, method: str, scale_set: ScaleSet, doc: Any) -> tuple[int, Any]:
        """A `PUT` (the body is the new model) or `PATCH` (the body's members merged into it) of the scale set."""
        if not isinstance(doc, dict):
            return 400, _error("InvalidRequestContent", "The request content was invalid and could not be deserialized")
        sku = doc.get("sku")
        capacity = sku.get("capacity") if isinstance(sku, dict) else None
        if sku is not None and not isinstance(sku, dict) or capacity is not None and (
            not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0
        ):
            return 400, _error("InvalidParameter", f"sku.capacity = {capacity!r}")
        if method == "PUT":
            if not isinstance(doc.get("location"), str):  # the one required member of the body
                return 400, _error("LocationRequired", "The location property is required for this definition.")
            model = doc
        else:
            model = _merge(scale_set.model, doc)
        scale_set.model = model
        scale_set.template = _boots_from(scale_set.template, model)
        asked: dict[str, Any] = {"members": sorted(doc)}
        if capacity is not None:
            asked["capacity"] = capacity
        self.calls.append((method, scale_set.template.name, asked, time.time()))
        self._scale(scale_set, len(scale_set.instances) if capacity is None else capacity)
        return 200, self._model(scale_set)

    def _scale(self, scale_set: ScaleSet, capacity: int) -> None:
        if scale_set.fixed:  # a fixed island's size is the plan's; the twin does not scale it
            return
        while len(scale_set.instances) < capacity:
            instance_id = scale_set.next_id
            scale_set.next_id += 1
            inst = Instance(str(instance_id), computer_name(scale_set.template.computer_name_prefix, instance_id))
            scale_set.add(inst)
            if scale_set.template.name in self.fails_allocation:
                inst.provisioning_state = "Failed"
            elif scale_set.template.name not in self.never_boots:
                self.boot(scale_set.template, inst)
        rules = ((scale_set.model.get("properties") or {}).get("scaleInPolicy") or {}).get("rules") or ["Default"]
        newest_first = rules[0] != "OldestVM"
        by_age = sorted(scale_set.instances, key=int, reverse=newest_first)
        for instance_id in by_age[: max(0, len(scale_set.instances) - capacity)]:
            self._delete(scale_set, instance_id)

    def _delete(self, scale_set: ScaleSet, instance_id: str) -> None:
        inst = scale_set.instances.pop(instance_id, None)
        if inst is not None:
            self.remove(inst.computer_name)

    def _model(self, scale_set: ScaleSet) -> dict[str, Any]:
        model = copy.deepcopy(scale_set.model)
        sku = {"name": "Standard_ND96isr_H100_v5", "tier": "Standard", **(model.get("sku") or {})}
        properties = {"orchestrationMode": "Uniform", **(model.get("properties") or {})}
        return {
            **model,
            "id": scale_set.resource_id,
            "name": scale_set.template.name,
            "location": model.get("location", "eastus"),
            "sku": {**sku, "capacity": len(scale_set.instances)},
            "properties": {**properties, "provisioningState": "Succeeded"},
        }

    def _instance(self, scale_set: ScaleSet, inst: Instance) -> dict[str, Any]:
        return {
            "instanceId": inst.instance_id,
            "name": f"{scale_set.template.name}_{inst.instance_id}",
            "id": f"{scale_set.resource_id}/virtualMachines/{inst.instance_id}",
            "properties": {
                "provisioningState": inst.provisioning_state,
                "osProfile": {"computerName": inst.computer_name},
                "latestModelApplied": _same_model(inst.model, scale_set.model),
            },
        }

    def deleted(self, scale_set: str) -> list[str]:
        with self.lock:
            return [i for m, s, body, _ in self.calls if m == "DELETE" and s == scale_set for i in body]

    def capacities(self, scale_set: str, method: str | None = None) -> list[int]:
        """The capacities asked of the scale set (by PATCH and PUT, or by `method` only), in order."""
        with self.lock:
            return [
                body["capacity"] for m, s, body, _ in self.calls
                if m in ("PATCH", "PUT") and m == (method or m) and s == scale_set and "capacity" in body
            ]  # fmt: skip

    def last_delete(self, scale_set: str) -> float:
        """When the last instances of the scale set were deleted (time.time(); 0 when none were)."""
        with self.lock:
            return max((at for m, s, _, at in self.calls if m == "DELETE" and s == scale_set), default=0.0)


def _merge(model: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A PATCH's body merged into the model: objects member by member, anything else (lists too) replaced."""
    merged = copy.deepcopy(model)
    for key, value in patch.items():
        old = merged.get(key)
        merged[key] = _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else copy.deepcopy(value)
    return merged


def _boots_from(template: ScaleSetTemplate, model: dict[str, Any]) -> ScaleSetTemplate:
    """The template an instance boots from on this model: its customData, userData, tags and health settings."""
    properties = model.get("properties") or {}
    profile = properties.get("virtualMachineProfile") or {}
    custom_data = (profile.get("osProfile") or {}).get("customData")
    try:
        health = health_policy(properties)
    except (KeyError, TypeError):
        health = template.health
    return replace(
        template,
        custom_data=base64.b64decode(custom_data) if isinstance(custom_data, str) else template.custom_data,
        user_data=profile.get("userData", template.user_data),
        tags=dict(model.get("tags") or template.tags),
        health=health,
    )


def _same_model(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two models are the same: their members but the capacity (a scale-out does not change the model)."""

    def key(m: dict[str, Any]) -> str:
        return json.dumps({**m, "sku": {k: v for k, v in (m.get("sku") or {}).items() if k != "capacity"}},
                          sort_keys=True)  # fmt: skip

    return key(a) == key(b)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}+00:00"


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError:
        return None


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
