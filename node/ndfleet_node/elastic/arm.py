"""The scale-set operations an elastic island needs, against Azure Resource Manager with the controller's managed
identity: read the capacity, raise it, list the instances, delete chosen instances.

Microsoft Learn, Virtual Machine Scale Sets REST API: `PATCH .../virtualMachineScaleSets/{name}` with
`{"sku": {"capacity": n}}` scales a Uniform scale set; `GET .../virtualMachines` lists its instances (paged by
`nextLink`); `POST .../delete` with `{"instanceIds": [...]}` deletes those instances and no others. A scale-in by
capacity would let Azure choose which VMs go, so ndfleet never lowers the capacity itself.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ndfleet_node.impact import ARM, Http, ImpactError, Reply, http

API_VERSION = "2024-07-01"
MAX_PAGES = 20  # 300 instances at most per scale set; a page holds many


class ArmError(Exception):
    """Resource Manager refused or did not answer; the message says which request and why, in one line."""


@dataclass(frozen=True)
class ScaleSetInstance:
    instance_id: str
    computer_name: str
    provisioning_state: str


def _error(what: str, reply: Reply) -> ArmError:
    doc = reply.json()
    detail = ""
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        detail = f": {str(err.get('code', ''))[:80]} {str(err.get('message', ''))[:200]}".rstrip()
    return ArmError(f"{what}: HTTP {reply.status}{detail}")


@dataclass
class ScaleSetApi:
    """One scale set. `token` returns a bearer token for Resource Manager (the instance metadata service's)."""

    subscription_id: str
    resource_group: str
    name: str
    token: Callable[[], str]
    endpoint: str = ARM
    send: Http = http

    @property
    def url(self) -> str:
        return (
            f"{self.endpoint}/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{self.name}"
        )

    def _call(self, method: str, url: str, what: str, body: dict[str, Any] | None = None) -> Reply:
        headers = {"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"}
        data = json.dumps(body).encode() if body is not None else None
        try:
            reply = self.send(method, url, headers, data)
        except ImpactError as exc:
            raise ArmError(f"{what}: {exc}") from None
        if reply.status not in (200, 201, 202):
            raise _error(what, reply)
        return reply

    def capacity(self) -> int:
        doc = self._call("GET", f"{self.url}?api-version={API_VERSION}", f"read scale set {self.name}").json()
        try:
            value = doc["sku"]["capacity"]
        except (KeyError, TypeError):
            raise ArmError(f"read scale set {self.name}: the answer has no sku.capacity") from None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ArmError(f"read scale set {self.name}: sku.capacity = {value!r} is not a count")
        return value

    def set_capacity(self, capacity: int) -> None:
        self._call("PATCH", f"{self.url}?api-version={API_VERSION}", f"scale {self.name} to {capacity}",
                   {"sku": {"capacity": capacity}})  # fmt: skip

    def instances(self) -> list[ScaleSetInstance]:
        url: str | None = f"{self.url}/virtualMachines?api-version={API_VERSION}"
        out: list[ScaleSetInstance] = []
        for _ in range(MAX_PAGES):
            if not url:
                return out
            doc = self._call("GET", url, f"list the instances of {self.name}").json()
            if not isinstance(doc, dict) or not isinstance(doc.get("value"), list):
                raise ArmError(f"list the instances of {self.name}: the answer has no value list")
            for vm in doc["value"]:
                props = vm.get("properties") if isinstance(vm, dict) else None
                if not isinstance(props, dict) or not isinstance(vm.get("instanceId"), str):
                    continue
                os_profile = props.get("osProfile")
                if not isinstance(os_profile, dict):
                    os_profile = {}
                out.append(ScaleSetInstance(
                    instance_id=vm["instanceId"],
                    computer_name=str(os_profile.get("computerName", "")),
                    provisioning_state=str(props.get("provisioningState", "")),
                ))  # fmt: skip
            nxt = doc.get("nextLink")
            url = nxt if isinstance(nxt, str) and nxt.startswith(self.endpoint + "/") else None
        raise ArmError(f"list the instances of {self.name}: more than {MAX_PAGES} pages")

    def delete_instances(self, instance_ids: list[str]) -> None:
        if instance_ids:
            what = f"delete instances {', '.join(instance_ids)} of {self.name}"
            self._call("POST", f"{self.url}/delete?api-version={API_VERSION}", what, {"instanceIds": instance_ids})
