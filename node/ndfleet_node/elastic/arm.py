"""The scale-set operations an elastic island needs, against Azure Resource Manager with the controller's managed
identity: read the capacity, raise it, list the instances, delete chosen instances.

Microsoft Learn, Virtual Machine Scale Sets REST API: `PATCH .../virtualMachineScaleSets/{name}` with
`{"sku": {"capacity": n}}` scales a Uniform scale set; `GET .../virtualMachines` lists its instances (paged by
`nextLink`); `POST .../delete` with `{"instanceIds": [...]}` deletes those instances and no others. A scale-in by
capacity would let Azure choose which VMs go, so ndfleet never lowers the capacity itself.

A delete is asynchronous: Resource Manager answers 202 Accepted with `Azure-AsyncOperation` and `Location` headers
(Microsoft Learn, "Track asynchronous Azure operations"), and the instances show `provisioningState: Deleting`
until they are gone from the list. It may also be refused for now: 409 Conflict (another operation on the scale
set), 429 Too Many Requests with `Retry-After` (Microsoft Learn, "Understand how Azure Resource Manager throttles
requests"), 5xx. `delete_instances` retries those within the time it is given, after Retry-After (capped) or a
doubling backoff; the caller records the delete first and confirms it from the instance list (elastic/programs.py).

Each instance's `properties.provisioningState` (Microsoft Learn, "Virtual Machine Scale Set VMs - List" and
"Virtual machine states and billing", provisioning states): Creating, Updating, Succeeded are usable (a VM boots
and runs its set-up while still Creating); Deleting is going away; Failed did not come up (e.g. an allocation
failure) and will not by itself.

The roll (ndfleet_node/roll) brings chosen instances to the scale set's latest model: `POST .../manualupgrade` with
`{"instanceIds": [...]}` ("Virtual Machine Scale Sets - Update Instances") applies the model to them, then
`POST .../reimage` with `{"instanceIds": [...]}` ("Virtual Machine Scale Sets - Reimage") gives them a new OS disk
from the model's image, so cloud-init and the node's set-up run again with the model's customData and userData. Both
answer 202 Accepted with Azure-AsyncOperation and Location, polled until the operation's `status` is Succeeded,
Failed or Canceled ("Track asynchronous Azure operations"), and are refused for now like a delete (409, 429, 5xx).
Each instance's `properties.latestModelApplied` ("Virtual Machine Scale Set VMs - List") says whether it runs the
model; the model's tags (`GET` the scale set) carry ndfleet's boot version (names.TAG_BOOT_VERSION).

Bounds (every call through `net.fetch`, to the Resource Manager host only, with its token): an answer within
HTTP_DEADLINE_S and LIST_CAP bytes; the instance list within MAX_PAGES pages and MAX_INSTANCES instances, its
`nextLink` followed only on the same host and never to a page already read. The REST reference documents no
page size for this list, so one page is allowed to hold the whole scale set: a Uniform scale set holds at most
1,000 VMs (Microsoft Learn, "Azure subscription and service limits": virtual machine scale sets), and one VM in
the list is about 4 KiB (a 40-VM list is about 160 KiB), so 1,000 VMs fit in 8 MiB with room for larger entries.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ndfleet_node.net import ARM, MAX_RETRY_AFTER_S, FetchError, Http, Reply, Service, retry_after_s

API_VERSION = "2024-07-01"
MAX_INSTANCES = 1000  # the most VMs a scale set can hold (see above)
LIST_CAP = 8 << 20  # one answer; a page of the whole list at MAX_INSTANCES (see above)
MAX_PAGES = 50  # pages of at least 20 VMs each at MAX_INSTANCES; a loop of nextLinks ends here at the latest
# provisioningState of a scale-set VM (see above)
USABLE_STATES = frozenset({"Creating", "Updating", "Succeeded"})
DELETING = "Deleting"
FAILED = "Failed"
# A delete answered with one of these is asked again (see above); any other refusal is final.
RETRIED_STATUSES = frozenset({409, 429})
MAX_DELETE_ATTEMPTS = 20  # with the budget: a server answering at once cannot make this loop for ever


class ArmError(Exception):
    """Resource Manager refused or did not answer; the message says which request and why, in one line."""


@dataclass(frozen=True)
class ScaleSetInstance:
    instance_id: str
    computer_name: str
    provisioning_state: str
    latest_model_applied: bool | None = None  # properties.latestModelApplied; None when the answer lacks it

    @property
    def usable(self) -> bool:
        return self.provisioning_state in USABLE_STATES

    @property
    def failed(self) -> bool:
        return self.provisioning_state == FAILED


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
    send: Http | None = None  # None: `net.fetch` to `endpoint`, the only host the token goes to

    def __post_init__(self) -> None:
        try:
            self.service = Service("arm", self.endpoint, LIST_CAP)
        except FetchError as exc:
            raise ArmError(str(exc)) from None

    @property
    def url(self) -> str:
        return (
            f"{self.endpoint}/subscriptions/{self.subscription_id}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{self.name}"
        )

    def _call(
        self, method: str, url: str, what: str, body: dict[str, Any] | None = None, check: bool = True
    ) -> Reply:
        headers = {"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"}
        data = json.dumps(body).encode() if body is not None else None
        try:
            reply = (self.send or self.service.send)(method, url, headers, data)
        except FetchError as exc:
            raise ArmError(f"{what}: {exc}") from None
        if check and reply.status not in (200, 201, 202):
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

    def tags(self) -> dict[str, str]:
        """The scale set's tags (its model's: `pulumi up` writes them with the model)."""
        doc = self._call("GET", f"{self.url}?api-version={API_VERSION}", f"read scale set {self.name}").json()
        tags = doc.get("tags", {}) if isinstance(doc, dict) else None
        if not isinstance(tags, dict):
            raise ArmError(f"read scale set {self.name}: tags is not an object")
        return {str(k)[:512]: str(v)[:256] for k, v in tags.items()}

    def operation_status(self, url: str) -> str:
        """An async operation's `status` (InProgress, Succeeded, Failed, Canceled), read from its URL on the
        Resource Manager host only."""
        if not self.service.allows(url):
            raise ArmError(f"operation URL {url[:120]!r} is not on {self.endpoint}: refused")
        doc = self._call("GET", url, f"read operation of {self.name}").json()
        status = doc.get("status") if isinstance(doc, dict) else None
        if status not in ("InProgress", "Succeeded", "Failed", "Canceled"):
            raise ArmError(f"read operation of {self.name}: status {str(status)[:40]!r} is not one Azure documents")
        return str(status)

    def manual_upgrade(self, instance_ids: list[str], budget_s: float = 0.0,
                       now: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
        """Bring these instances to the latest model (Update Instances); the async operation's URL."""
        return self._post_instances("manualupgrade", "bring to the latest model", instance_ids, budget_s, now, sleep)

    def reimage(self, instance_ids: list[str], budget_s: float = 0.0,
                now: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
        """Reimage these instances from the model (Reimage); the async operation's URL."""
        return self._post_instances("reimage", "reimage", instance_ids, budget_s, now, sleep)

    def set_capacity(self, capacity: int) -> None:
        self._call("PATCH", f"{self.url}?api-version={API_VERSION}", f"scale {self.name} to {capacity}",
                   {"sku": {"capacity": capacity}})  # fmt: skip

    def instances(self) -> list[ScaleSetInstance]:
        url: str | None = f"{self.url}/virtualMachines?api-version={API_VERSION}"
        what = f"list the instances of {self.name}"
        out: list[ScaleSetInstance] = []
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            if not url:
                return out
            seen.add(url)
            doc = self._call("GET", url, what).json()
            if not isinstance(doc, dict) or not isinstance(doc.get("value"), list):
                raise ArmError(f"{what}: the answer has no value list")
            if len(out) + len(doc["value"]) > MAX_INSTANCES:
                raise ArmError(f"{what}: more than {MAX_INSTANCES} instances, more than a scale set holds")
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
                    latest_model_applied=latest if isinstance(latest := props.get("latestModelApplied"), bool)
                    else None,
                ))  # fmt: skip
            url = doc.get("nextLink") or None
            if url is not None and (not isinstance(url, str) or not self.service.allows(url) or url in seen):
                raise ArmError(f"{what}: nextLink {str(url)[:120]!r} is not a new page on {self.endpoint}: refused")
        raise ArmError(f"{what}: more than {MAX_PAGES} pages")

    def delete_instances(
        self,
        instance_ids: list[str],
        budget_s: float = 0.0,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> str:
        """Ask Azure to delete exactly these instances; 409, 429, 5xx and no answer are asked again while `budget_s`
        lasts (after Retry-After, capped, or 2, 4, 8 ... s), never waiting past it. Returns the async operation's URL
        (Azure-AsyncOperation, else Location; "" when neither came). ArmError when still refused: the delete may not
        have happened, and the caller keeps it on record."""
        return self._post_instances("delete", "delete", instance_ids, budget_s, now, sleep)

    def _post_instances(self, action: str, verb: str, instance_ids: list[str], budget_s: float,
                        now: Callable[[], float], sleep: Callable[[float], None]) -> str:
        """POST `{"instanceIds": [...]}` to the scale set's `action`, asked again as `delete_instances` says."""
        if not instance_ids:
            return ""
        what = f"{verb} instances {', '.join(instance_ids)} of {self.name}"
        url = f"{self.url}/{action}?api-version={API_VERSION}"
        deadline = now() + budget_s
        failure: ArmError | None = None
        for attempt in range(1, MAX_DELETE_ATTEMPTS + 1):
            try:
                reply = self._call("POST", url, what, {"instanceIds": instance_ids}, check=False)
                failure = None if reply.status in (200, 202) else _error(what, reply)
            except ArmError as exc:  # no answer: the outcome is unknown, asking again is safe
                reply, failure = None, exc
            if failure is None and reply is not None:
                return str(reply.headers.get("azure-asyncoperation") or reply.headers.get("location") or "")[:2000]
            final = reply is not None and reply.status not in RETRIED_STATUSES and reply.status < 500
            wait = retry_after_s(reply, attempt) if reply is not None else min(2.0**attempt, MAX_RETRY_AFTER_S)
            left = deadline - now()
            if final or wait > left:
                raise ArmError(f"{failure} (after {attempt} attempt{'s' if attempt > 1 else ''})")
            sleep(wait)
        raise ArmError(f"{failure} (still, after {MAX_DELETE_ATTEMPTS} attempts)")
