"""Resource Manager's read calls `ndfleet status` makes (ndfleet/status/arm_read.py), for the twin's fixed islands,
answered from what the twin knows: the machines running, and each one's health as the Application Health stand-in
(tests/twin/repairs.py) holds it. Documented shapes (Microsoft Learn, Compute REST API 2024-07-01):

- `GET /subscriptions/{sub}/providers/Microsoft.Compute/virtualMachineScaleSets` ("Virtual Machine Scale Sets - List
  All") and the resource group's listing ("- List"): `{"value": [scale set]}` with `id`, `name`, `tags`, `sku`
  (`name`, `capacity`) and `properties` (`virtualMachineProfile.osProfile.computerNamePrefix`,
  `automaticRepairsPolicy`, `orchestrationMode`, `provisioningState`);
- `GET .../virtualMachineScaleSets/{name}/instanceView` ("- Get Instance View"): `statuses` and
  `orchestrationServices` (`[{"serviceName": "AutomaticRepairs", "serviceState": "Running"|"Suspended"}]`;
  "NotRunning" when the policy is off, Microsoft Learn "Automatic instance repairs");
- `GET .../virtualMachineScaleSets/{name}/virtualMachines?$expand=instanceView` ("Virtual Machine Scale Set VMs -
  List"): `{"value": [vm]}`, each with `instanceId`, `properties.provisioningState`, `osProfile.computerName`, and
  with `$expand=instanceView` `properties.instanceView` (`computerName`, `statuses` with `PowerState/running`,
  and `vmHealth.status.code` = `HealthState/healthy|unhealthy|unknown|initializing` when the Application Health
  extension reports; Microsoft Learn, "Using Application Health extension with Virtual Machine Scale Sets");
- `GET /subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Monitor/accounts` ("Azure Monitor Workspaces -
  List By Resource Group", 2023-04-03): `{"value": [{"name", "id", "properties": {"metrics":
  {"prometheusQueryEndpoint": ...}}}]}`.

Every call needs a bearer token for `https://management.azure.com` (401 otherwise); reading is the Reader role's,
which the operator is assumed to hold (the plan's role assignments are the deployer's business, not judged here).
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

ARM_AUDIENCE = "https://management.azure.com"
_VMSS = r"/providers/microsoft\.compute/virtualmachinescalesets"
LIST_ALL = re.compile(rf"^/subscriptions/([^/]+){_VMSS}$", re.I)
LIST_GROUP = re.compile(rf"^/subscriptions/([^/]+)/resourcegroups/([^/]+){_VMSS}$", re.I)
_GROUP = r"^/subscriptions/([^/]+)/resourcegroups/([^/]+)"
SCALE_SET = re.compile(rf"{_GROUP}{_VMSS}/([^/]+)/(instanceview|virtualmachines)$", re.I)
ACCOUNTS = re.compile(r"^/subscriptions/([^/]+)/resourcegroups/([^/]+)/providers/microsoft\.monitor/accounts$", re.I)


@dataclass(frozen=True)
class StatusVm:
    instance_id: str
    computer_name: str
    health: str  # the Application Health state: Healthy, Unhealthy, Unknown, Initializing; "" when not reported
    provisioning_state: str = "Succeeded"
    power_state: str = "running"


@dataclass(frozen=True)
class StatusScaleSet:
    name: str
    resource_group: str
    island: str
    computer_name_prefix: str
    vm_size: str
    tags: dict[str, str]
    repairs_policy: dict[str, Any]  # the plan's automaticRepairsPolicy
    repairs_running: bool  # the AutomaticRepairs service state (the twin starts it Suspended)
    vms: tuple[StatusVm, ...]
    # An elastic island's scale set is the Resource Manager stand-in's (tests/twin/arm.py): only the calls the
    # controller never makes (instance view, instances with $expand=instanceView) are answered here.
    fixed: bool = True
    # The model's capacity, as the plan sets it: automatic repairs' Replace deletes one VM and creates another, and
    # the scale set's capacity stays what it was (Microsoft Learn, "Automatic instance repairs for Azure Virtual
    # Machine Scale Sets"); None: the VMs there now (an elastic island's, whose list the Resource Manager stand-in
    # answers anyway).
    capacity: int | None = None


@dataclass
class StatusReads:
    subscription: str
    scale_sets: Callable[[], Sequence[StatusScaleSet]]
    tokens: Callable[[str], tuple[str, str] | None]
    # The stack's Azure Monitor workspace: (resource group, name, query endpoint), or None without monitoring.
    workspace: tuple[str, str, str] | None = None
    calls: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handles(self, method: str, path: str) -> bool:
        """The calls this stand-in answers: status's reads of the fixed islands, anything else is not its."""
        if method != "GET":
            return False
        url = urllib.parse.urlsplit(path)
        match = SCALE_SET.match(url.path)
        if match:
            found = next((s for s in self.scale_sets() if s.name == match.group(3)), None)
            expand = dict(urllib.parse.parse_qsl(url.query)).get("$expand", "").lower() == "instanceview"
            return found is not None and (found.fixed or match.group(4).lower() == "instanceview" or expand)
        return bool(LIST_ALL.match(url.path) or LIST_GROUP.match(url.path) or ACCOUNTS.match(url.path))

    def handle(self, method: str, path: str, headers: Any) -> tuple[int, Any]:
        status, doc = self._answer(path, headers)
        with self.lock:
            self.calls.append((urllib.parse.urlsplit(path).path, status))
        return status, doc

    def _answer(self, path: str, headers: Any) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if "api-version" not in query:
            return 400, _error("MissingApiVersionParameter", "The api-version query parameter is required")
        auth = headers.get("Authorization", "")
        issued = self.tokens(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if issued is None or issued[1] != ARM_AUDIENCE:
            return 401, _error("InvalidAuthenticationToken", "The access token is missing or invalid")
        scale_sets = list(self.scale_sets())
        if (m := LIST_ALL.match(url.path)) and self._ours(m.group(1)):
            return 200, {"value": [self._scale_set(s) for s in scale_sets]}
        if (m := LIST_GROUP.match(url.path)) and self._ours(m.group(1)):
            group = m.group(2).lower()
            return 200, {"value": [self._scale_set(s) for s in scale_sets if s.resource_group.lower() == group]}
        if (m := ACCOUNTS.match(url.path)) and self._ours(m.group(1)):
            if self.workspace is None or self.workspace[0].lower() != m.group(2).lower():
                return 200, {"value": []}
            return 200, {"value": [self._account()]}
        if (m := SCALE_SET.match(url.path)) and self._ours(m.group(1)):
            found = next((s for s in scale_sets if s.name == m.group(3)
                          and s.resource_group.lower() == m.group(2).lower()), None)  # fmt: skip
            if found is None:
                return 404, _error("ResourceNotFound", f"The Resource '{m.group(3)}' was not found.")
            if m.group(4).lower() == "instanceview":
                return 200, self._instance_view(found)
            expand = query.get("$expand", "").lower() == "instanceview"
            return 200, {"value": [self._vm(found, vm, expand) for vm in found.vms]}
        return 404, _error("SubscriptionNotFound", f"The subscription of {url.path} could not be found.")

    def _ours(self, subscription: str) -> bool:
        return subscription.lower() == self.subscription.lower()

    def _id(self, s: StatusScaleSet) -> str:
        return (f"/subscriptions/{self.subscription}/resourceGroups/{s.resource_group}/providers/"
                f"Microsoft.Compute/virtualMachineScaleSets/{s.name}")  # fmt: skip

    def _scale_set(self, s: StatusScaleSet) -> dict[str, Any]:
        return {
            "id": self._id(s),
            "name": s.name,
            "type": "Microsoft.Compute/virtualMachineScaleSets",
            "location": "eastus",
            "tags": dict(s.tags),
            "sku": {"name": s.vm_size, "tier": "Standard",
                    "capacity": len(s.vms) if s.capacity is None else s.capacity},
            "properties": {
                "orchestrationMode": "Uniform",
                "provisioningState": "Succeeded",
                "automaticRepairsPolicy": dict(s.repairs_policy),
                "virtualMachineProfile": {"osProfile": {"computerNamePrefix": s.computer_name_prefix}},
            },
        }

    def _instance_view(self, s: StatusScaleSet) -> dict[str, Any]:
        if not s.repairs_policy.get("enabled"):
            service = "NotRunning"
        else:
            service = "Running" if s.repairs_running else "Suspended"
        return {
            "statuses": [{"code": "ProvisioningState/succeeded", "level": "Info",
                          "displayStatus": "Provisioning succeeded"}],
            "orchestrationServices": [{"serviceName": "AutomaticRepairs", "serviceState": service}],
        }  # fmt: skip

    def _vm(self, s: StatusScaleSet, vm: StatusVm, expand: bool) -> dict[str, Any]:
        props: dict[str, Any] = {
            "latestModelApplied": True,
            "provisioningState": vm.provisioning_state,
            "osProfile": {"computerName": vm.computer_name, "adminUsername": "azureuser"},
        }
        if expand:
            view: dict[str, Any] = {
                "computerName": vm.computer_name,
                "statuses": [
                    {"code": f"ProvisioningState/{vm.provisioning_state.lower()}", "level": "Info"},
                    {"code": f"PowerState/{vm.power_state}", "level": "Info"},
                ],
            }
            if vm.health:
                view["vmHealth"] = {"status": {"code": f"HealthState/{vm.health.lower()}", "level": "Info"}}
            props["instanceView"] = view
        return {
            "name": f"{s.name}_{vm.instance_id}",
            "id": f"{self._id(s)}/virtualMachines/{vm.instance_id}",
            "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
            "location": "eastus",
            "instanceId": vm.instance_id,
            "sku": {"name": s.vm_size, "tier": "Standard"},
            "properties": props,
        }

    def _account(self) -> dict[str, Any]:
        assert self.workspace is not None
        group, name, endpoint = self.workspace
        return {
            "name": name,
            "id": f"/subscriptions/{self.subscription}/resourceGroups/{group}/providers/Microsoft.Monitor/accounts/"
            f"{name}",
            "type": "Microsoft.Monitor/accounts",
            "location": "eastus",
            "properties": {"metrics": {"prometheusQueryEndpoint": endpoint}, "provisioningState": "Succeeded"},
        }


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}
