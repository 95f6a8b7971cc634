"""What Resource Manager says about a stack's scale sets, parsed from its JSON (the SDK models of azure-mgmt-compute
are mappings over that JSON) into plain data. Pure functions: tests feed them recorded answers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Instance view status codes (Compute REST API, VirtualMachineScaleSetVMInstanceView.statuses / vmHealth):
# "PowerState/running", "ProvisioningState/succeeded", "HealthState/healthy".
POWER_PREFIX = "PowerState/"
HEALTH_PREFIX = "HealthState/"
# Application Health extension states under rich health states (Microsoft Learn, "Application Health extension").
VM_HEALTH_STATES = ("healthy", "unhealthy", "initializing", "unknown")
# AutomaticRepairs orchestration service states (Microsoft Learn, "Automatic instance repairs": Running, Suspended,
# NotRunning when the feature is off).
REPAIR_SERVICE_STATES = ("Running", "Suspended", "NotRunning")


@dataclass(frozen=True)
class Instance:
    """One VM of a scale set, as Resource Manager sees it."""

    instance_id: str
    name: str  # the host name (osProfile.computerName): what the metrics and Slurm call the node
    provisioning_state: str  # Succeeded, Creating, Updating, Deleting, Failed, ...
    power_state: str  # running, deallocated, stopped, starting, stopping, deallocating; "unknown" when absent
    vm_health: str  # healthy | unhealthy | initializing | unknown; "none" when the instance view has no vmHealth
    latest_model: bool | None
    protected: bool  # protectFromScaleSetActions: automatic repairs skip the instance


@dataclass(frozen=True)
class ScaleSet:
    """One island's scale set: its settings, its repair service and its instances."""

    id: str
    name: str
    resource_group: str
    island: str
    vm_size: str
    capacity: int
    repairs_enabled: bool
    repair_grace_period: str  # ISO 8601, e.g. PT30M; "" when unset
    repair_action: str  # Replace | Reimage | Restart ("Replace" when unset: Azure's default)
    repair_service_state: str  # Running | Suspended | NotRunning | unknown
    instances: tuple[Instance, ...]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _get(doc: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(doc, Mapping):
            return None
        doc = doc.get(key)
    return doc


def resource_group_of(resource_id: str) -> str:
    """The resource group named in a resource id (/subscriptions/../resourceGroups/<rg>/providers/...)."""
    parts = resource_id.split("/")
    lowered = [p.lower() for p in parts]
    if "resourcegroups" in lowered:
        at = lowered.index("resourcegroups") + 1
        if at < len(parts):
            return parts[at]
    return ""


def instance_from_json(doc: Mapping[str, Any]) -> Instance:
    """An instance from `virtualMachineScaleSets/<name>/virtualMachines?$expand=instanceView`."""
    props = doc.get("properties") if isinstance(doc.get("properties"), Mapping) else {}
    view = _get(props, "instanceView") or {}
    power = "unknown"
    for status in _get(view, "statuses") or []:
        code = _text(_get(status, "code"))
        if code.startswith(POWER_PREFIX):
            power = code[len(POWER_PREFIX) :].lower() or "unknown"
    health_code = _text(_get(view, "vmHealth", "status", "code"))
    if health_code.startswith(HEALTH_PREFIX):
        health = health_code[len(HEALTH_PREFIX) :].lower()
        health = health if health in VM_HEALTH_STATES else "unknown"
    else:
        health = "none"
    latest = _get(props, "latestModelApplied")
    name = (
        _text(_get(view, "computerName")) or _text(_get(props, "osProfile", "computerName")) or _text(doc.get("name"))
    )
    return Instance(
        instance_id=_text(doc.get("instanceId")),
        name=name,
        provisioning_state=_text(_get(props, "provisioningState")) or "unknown",
        power_state=power,
        vm_health=health,
        latest_model=latest if isinstance(latest, bool) else None,
        protected=_get(props, "protectionPolicy", "protectFromScaleSetActions") is True,
    )


def repair_service_state(instance_view: Mapping[str, Any] | None) -> str:
    """The AutomaticRepairs service state from the scale set's instance view (`orchestrationServices`)."""
    for service in _get(instance_view, "orchestrationServices") or []:
        if _text(_get(service, "serviceName")) == "AutomaticRepairs":
            state = _text(_get(service, "serviceState"))
            return state if state in REPAIR_SERVICE_STATES else "unknown"
    return "unknown" if instance_view is None else "NotRunning"


def scale_set_from_json(
    doc: Mapping[str, Any], island: str, instance_view: Mapping[str, Any] | None, instances: tuple[Instance, ...]
) -> ScaleSet:
    props = doc.get("properties") if isinstance(doc.get("properties"), Mapping) else {}
    policy = _get(props, "automaticRepairsPolicy") or {}
    capacity = _get(doc, "sku", "capacity")
    resource_id = _text(doc.get("id"))
    return ScaleSet(
        id=resource_id,
        name=_text(doc.get("name")),
        resource_group=resource_group_of(resource_id),
        island=island,
        vm_size=_text(_get(doc, "sku", "name")),
        capacity=capacity if isinstance(capacity, int) and not isinstance(capacity, bool) else 0,
        repairs_enabled=_get(policy, "enabled") is True,
        repair_grace_period=_text(_get(policy, "gracePeriod")),
        repair_action=_text(_get(policy, "repairAction")) or "Replace",
        repair_service_state=repair_service_state(instance_view),
        instances=instances,
    )
