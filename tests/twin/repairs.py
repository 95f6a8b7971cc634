"""The twin's stand-ins for what Azure does about a broken node: Guest Health Reporting's Impact API, the Application
Health extension's probe, and the scale set's automatic instance repairs.

- Impact API (`PUT https://management.azure.com/subscriptions/{sub}/providers/Microsoft.Impact/workloadImpacts/{name}
  ?api-version=...`, Microsoft Learn, "Report guest health status" and the Microsoft.Impact REST reference): a
  managed-identity token for `https://management.azure.com` (401 otherwise), an identity the plan gives the Impact
  Reporter built-in role (403 `AuthorizationFailed` otherwise), a body with `properties.startDateTime`,
  `impactCategory`, `impactedResourceId` and `additionalProperties` holding `PhysicalHostName` or `VmUniqueId` (400
  otherwise: the page says one of the two is required); 201 with the resource on create, 200 when the name exists.
- Application Health extension, rich health states (Microsoft Learn, "Using Application Health extension with
  Virtual Machine Scale Sets"): it runs in the guest and probes `protocol://localhost:port/requestPath` every
  `intervalInSeconds`; the answer's `{"ApplicationHealthState": "Healthy"|"Unhealthy"}` is the state, anything else
  (no answer, another body) is `Unknown`; a state changes only after `numberOfProbes` consecutive probes agree; a new
  instance is `Initializing` until it answers Healthy that many times or its `gracePeriod` (seconds) ends.
- Automatic instance repairs (Microsoft Learn, "Automatic instance repairs for Azure Virtual Machine Scale Sets";
  Compute REST AutomaticRepairsPolicy): an instance `Unhealthy` or `Unknown` is repaired once the policy's
  `gracePeriod` (ISO 8601, at least PT10M) has passed since its last state change (its creation here); `Replace`
  deletes it and creates a new instance (a Uniform scale set gives it the next instance id, so a new computer name);
  repairs run in batches of at most 5 % of the scale set's instances, at least one. The service can be suspended and
  resumed per scale set (`setOrchestrationServiceState`, serviceName AutomaticRepairs): the twin starts with it
  suspended on every scale set, and a test resumes it where it wants the loop to run, as an operator would.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ARM_AUDIENCE = "https://management.azure.com"
MAX_BODY_BYTES = 1 << 20
STATES = ("Healthy", "Unhealthy")
KVP_KEY_BYTES, KVP_VALUE_BYTES = 512, 2048  # Linux include/uapi/linux/hyperv.h HV_KVP_EXCHANGE_MAX_{KEY,VALUE}_SIZE


def kvp_pool(pairs: dict[str, str]) -> bytes:
    """A Hyper-V KVP pool file as hv_kvp_daemon keeps it (/var/lib/hyperv/.kvp_pool_3 is the pool the host fills:
    PhysicalHostName, PhysicalHostNameFullyQualified; Microsoft Learn, "Data Exchange: Using key-value pairs to share
    information between the host and guest on Hyper-V"): fixed records of a NUL-padded key and value."""
    return b"".join(
        k.encode().ljust(KVP_KEY_BYTES, b"\0") + v.encode().ljust(KVP_VALUE_BYTES, b"\0") for k, v in pairs.items()
    )


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


@dataclass
class ImpactApi:
    tokens: Callable[[str], tuple[str, str] | None]
    reporter_client_ids: set[str]  # identities holding Impact Reporter (empty: the plan assigns it to nobody)
    # (name, body, client id, time.time()) of every impact accepted
    impacts: list[tuple[str, dict[str, Any], str, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    PATH = re.compile(r"^/subscriptions/([^/]+)/providers/microsoft\.impact/workloadimpacts/([^/]+)$", re.I)

    def handles(self, path: str) -> bool:
        return bool(self.PATH.match(urllib.parse.urlsplit(path).path))

    def handle(self, method: str, path: str, headers: Any, body: bytes) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(path)
        if "api-version" not in dict(urllib.parse.parse_qsl(url.query)):
            return 400, _error("MissingApiVersionParameter", "The api-version query parameter is required")
        auth = headers.get("Authorization", "")
        issued = self.tokens(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if issued is None or issued[1] != ARM_AUDIENCE:
            return 401, _error("InvalidAuthenticationToken", "The access token is missing or invalid")
        match = self.PATH.match(url.path)
        assert match is not None
        name = match.group(2)
        if issued[0] not in self.reporter_client_ids:
            return 403, _error(
                "AuthorizationFailed", f"The client '{issued[0]}' does not have authorization to perform action "
                "'Microsoft.Impact/WorkloadImpacts/Write'",
            )  # fmt: skip
        if method != "PUT":
            return 405, _error("MethodNotAllowed", method)
        try:
            doc = json.loads(body or b"null")
        except ValueError:
            doc = None
        props = doc.get("properties") if isinstance(doc, dict) else None
        extra = props.get("additionalProperties") if isinstance(props, dict) else None
        missing = [k for k in ("startDateTime", "impactCategory", "impactedResourceId")
                   if not isinstance(props, dict) or not props.get(k)]  # fmt: skip
        if not isinstance(extra, dict) or not (extra.get("PhysicalHostName") or extra.get("VmUniqueId")):
            missing.append("additionalProperties.PhysicalHostName or VmUniqueId")
        if missing:
            return 400, _error("InvalidRequestContent", f"missing: {', '.join(missing)}")
        assert isinstance(doc, dict)
        with self.lock:
            existed = any(n == name for n, _, _, _ in self.impacts)
            self.impacts.append((name, doc, issued[0], time.time()))
        resource = {"id": url.path, "name": name, "type": "Microsoft.Impact/workloadImpacts", **doc}
        return (200 if existed else 201), resource

    def filed(self) -> list[dict[str, Any]]:
        """The accepted impacts' properties, oldest first."""
        with self.lock:
            return [dict(body["properties"], _at=at) for _, body, _, at in self.impacts]


@dataclass
class Instance:
    """One scale-set instance as automatic repairs see it."""

    name: str
    scale_set: str
    created: float  # time.monotonic() of its last state change (its creation)
    state: str = "Initializing"
    last_raw: str = ""
    streak: int = 0
    last_probe: float = 0.0


@dataclass
class Repair:
    scale_set: str
    old: str
    state: str  # its health state when repaired
    at: float  # time.time()
    new: str = ""


@dataclass
class AutomaticRepairs:
    """The Application Health extension and automatic repairs (module doc): it probes every instance, an elastic
    island's too; it repairs only on the scale sets resumed (the fixed islands', by the repair loop's tests).

    `probe(name, port, path)` returns the endpoint's answer body or None (run in the machine, as the extension runs
    in the guest); `replace(name)` deletes the machine and boots its replacement, returning the new computer name;
    `machines()` lists the compute machines now running, with their plan's extras."""

    machines: Callable[[], list[Any]]
    probe: Callable[[str, int, str], str | None]
    replace: Callable[[str], str]
    instances: dict[str, Instance] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)  # scale sets whose AutomaticRepairs service state is Running
    repairs: list[Repair] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._loop, name="twin-automatic-repairs", daemon=True).start()

    def created(self, name: str, scale_set: str) -> None:
        with self.lock:
            self.instances[name] = Instance(name, scale_set, time.monotonic())

    def deleted(self, name: str) -> None:
        """The instance was deleted (an elastic island's scale-in): no longer probed or listed."""
        with self.lock:
            self.instances.pop(name, None)

    def resume(self, scale_set: str) -> None:
        with self.lock:
            self.running.add(scale_set)

    def state(self, name: str) -> str:
        with self.lock:
            inst = self.instances.get(name)
            return inst.state if inst else ""

    def _loop(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.step()
            except Exception as exc:  # noqa: BLE001 - the stand-in goes on, as Azure's would
                print(f"twin automatic repairs: {exc!r}")

    def step(self) -> None:
        now = time.monotonic()
        for tm in self.machines():
            extra = tm.spec.extra
            settings, policy = extra.get("app_health") or {}, extra.get("automatic_repairs") or {}
            with self.lock:
                inst = self.instances.get(tm.name)
            # The extension probes whether or not repairs run; only the repair waits for the service state.
            if inst is None or not settings or now - inst.last_probe < float(settings.get("intervalInSeconds", 5)):
                continue
            inst.last_probe = now
            answer = self.probe(tm.name, int(settings["port"]), str(settings.get("requestPath", "/")))
            raw = _health_state(answer)
            with self.lock:
                inst.streak = inst.streak + 1 if raw == inst.last_raw else 1
                inst.last_raw = raw
                agreed = inst.streak >= int(settings.get("numberOfProbes", 1))
                grace_over = now - inst.created >= float(settings.get("gracePeriod", 0))
                if agreed and (inst.state != "Initializing" or raw == "Healthy" or grace_over):
                    inst.state = raw
                due = now - inst.created >= _repair_grace_s(policy)
                busy = any(r.scale_set == inst.scale_set and not r.new for r in self.repairs)
                repair = (bool(policy.get("enabled")) and inst.scale_set in self.running
                          and inst.state in ("Unhealthy", "Unknown") and due and not busy)  # fmt: skip
                if repair:
                    record = Repair(inst.scale_set, tm.name, inst.state, time.time())
                    self.repairs.append(record)
                    del self.instances[tm.name]
            if repair and policy.get("repairAction", "Replace") == "Replace":
                new = self.replace(tm.name)
                with self.lock:
                    record.new = new
                    self.instances[new] = Instance(new, record.scale_set, time.monotonic())

    def done(self) -> list[Repair]:
        with self.lock:
            return list(self.repairs)

    def grace_left(self, name: str) -> float:
        """Seconds until a repair of `name` is due by its policy's `gracePeriod` (0: due now, or not an instance)."""
        machine = next((tm for tm in self.machines() if tm.name == name), None)
        with self.lock:
            inst = self.instances.get(name)
        if machine is None or inst is None:
            return 0.0
        policy = machine.spec.extra.get("automatic_repairs") or {}
        return max(0.0, inst.created + _repair_grace_s(policy) - time.monotonic())


def _health_state(answer: str | None) -> str:
    try:
        state = json.loads(answer or "").get("ApplicationHealthState")
    except (ValueError, AttributeError):
        return "Unknown"
    return state if state in STATES else "Unknown"


def _repair_grace_s(policy: dict[str, Any]) -> float:
    """The automatic-repairs policy's gracePeriod in seconds (PT10M when the policy names none)."""
    return _iso_minutes(str(policy.get("gracePeriod", "PT10M"))) * 60


def _iso_minutes(period: str) -> float:
    """PT10M, PT1H30M (the policy's ISO 8601 duration) in minutes."""
    match = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?", period)
    if not match:
        raise ValueError(f"gracePeriod {period!r} is not an ISO 8601 duration of hours and minutes")
    return int(match.group(1) or 0) * 60 + int(match.group(2) or 0)
