"""The machines a plan JSON creates, as the twin boots them: name, role, address, customData, userData, tags; and
the elastic islands' scale sets, from which the Resource Manager stand-in boots new instances.

Read only from `ndfleet plan --format json` output: what the twin boots is exactly what Azure would receive.
"""

from __future__ import annotations

import base64
import ipaddress
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VMSS = "azure-native:compute:VirtualMachineScaleSet"
VM = "azure-native:compute:VirtualMachine"
NIC = "azure-native:network:NetworkInterface"
SUBNET = "azure-native:network:Subnet"
ROLE_ASSIGNMENT = "azure-native:authorization:RoleAssignment"
ROLE_DEFINITION = "azure-native:authorization:RoleDefinition"
SECRET = "azure-native:keyvault:Secret"
# Azure keeps the first four addresses and the last of every subnet (Microsoft Learn, virtual-networks-faq: "Are
# there any restrictions on using IP addresses within these subnets?"); .1 is the default gateway.
AZURE_RESERVED_LOW = 4


@dataclass
class Machine:
    name: str  # the computer name (host name) Azure gives it
    role: str  # controller | login | compute
    custom_data: bytes  # decoded customData (gzip or text), what cloud-init's data source hands over
    user_data: str | None  # base64, as IMDS serves it
    tags: dict[str, str]
    island: str | None = None
    ip: str = ""
    identity_client_id: str = ""
    vm_size: str = ""  # the scale set's sku.name: what the hardware stand-in gives the machine (compute only)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ScaleSetTemplate:
    """An elastic island's scale set (capacity 0 in the plan): what Azure boots each new instance from."""

    name: str  # vmScaleSetName: the fixed name the controller's programs address
    resource_group: str
    computer_name_prefix: str
    custom_data: bytes
    user_data: str | None
    tags: dict[str, str]
    island: str | None
    # the linked resources a new instance uses: the subnets its NICs join, the user-assigned identities it is given
    subnet_ids: tuple[str, ...] = ()
    identity_ids: tuple[str, ...] = ()
    vm_size: str = ""  # sku.name
    # The REST body pulumi-azure-native PUTs for this resource as the plan holds it (put_body).
    body: dict[str, Any] = field(default_factory=dict)
    # Its Application Health extension settings and automatic-repairs policy (health_policy): a new instance runs the
    # extension as every instance of the model does, so the Application Health stand-in probes it too.
    health: dict[str, Any] = field(default_factory=dict)


# The top-level members of a scale set's REST body; pulumi-azure-native flattens `properties` into the resource's
# inputs and puts every other input but the URL's (resourceGroupName, vmScaleSetName) back under it (Compute REST API
# 2024-11-01, "Virtual Machine Scale Sets - Create Or Update", request body).
REST_TOP_LEVEL = ("location", "tags", "sku", "plan", "identity", "zones", "extendedLocation", "etag")
URL_INPUTS = ("resourceGroupName", "vmScaleSetName")


def put_body(inputs: dict[str, Any]) -> dict[str, Any]:
    """The scale set's inputs as the body of the full PUT pulumi-azure-native sends on create and on every update
    (pulumi/pulumi-azure-native#3983: "every resource where the spec defines a PUT operation is created and updated
    via PUT"). A user-assigned identity goes as a map keyed by its id (the input is a list)."""
    body: dict[str, Any] = {k: v for k, v in inputs.items() if k in REST_TOP_LEVEL}
    identity = body.get("identity")
    if isinstance(identity, dict) and isinstance(identity.get("userAssignedIdentities"), list):
        body["identity"] = {**identity, "userAssignedIdentities": {i: {} for i in identity["userAssignedIdentities"]}}
    body["properties"] = {k: v for k, v in inputs.items() if k not in REST_TOP_LEVEL and k not in URL_INPUTS}
    return body


@dataclass
class PlanMachines:
    machines: list[Machine]
    compute_subnet: ipaddress.IPv4Network
    storage_subnet: ipaddress.IPv4Network
    vault_name: str | None
    outputs: dict[str, Any]
    # Elastic scale sets by name, and the resource ids the plan assigns a role at (the scaler's scope).
    scale_sets: dict[str, ScaleSetTemplate] = field(default_factory=dict)
    role_scopes: set[str] = field(default_factory=set)
    # scope -> the actions the plan's role assignments grant there (their role definitions' actions)
    grants: dict[str, frozenset[str]] = field(default_factory=dict)
    # the role definitions (the last segment of their id: a built-in role's GUID) the plan assigns to anyone
    assigned_roles: set[str] = field(default_factory=set)
    doc: dict[str, Any] = field(default_factory=dict)  # the plan JSON itself (the status stand-in's scale sets)
    # The Key Vault secrets whose value the plan holds (the compute bundle's parts): name -> value. A value the plan
    # cannot know (pulumi_random's, a Pulumi secret) is not here.
    vault_secrets: dict[str, str] = field(default_factory=dict)
    # The fixed islands' scale sets by name (what a rolling upgrade reimages their instances from).
    fixed_scale_sets: dict[str, ScaleSetTemplate] = field(default_factory=dict)

    def by_role(self, role: str) -> list[Machine]:
        return [m for m in self.machines if m.role == role]

    def get(self, name: str) -> Machine:
        return next(m for m in self.machines if m.name == name)


def _resources(plan: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [r for r in plan["resources"] if r["type"] == type_]


def load(path: Path, nodes_per_island: dict[str, int] | None = None) -> PlanMachines:
    plan = json.loads(path.read_text())
    subnets = {
        r["inputs"]["subnetName"]: ipaddress.ip_network(r["inputs"]["addressPrefix"]) for r in _resources(plan, SUBNET)
    }
    compute, storage = subnets["compute"], subnets["storage"]
    static_ips = {
        r["name"].removesuffix("-nic"): r["inputs"]["ipConfigurations"][0].get("privateIPAddress")
        for r in _resources(plan, NIC)
    }
    machines: list[Machine] = []
    scale_sets: dict[str, ScaleSetTemplate] = {}
    fixed_scale_sets: dict[str, ScaleSetTemplate] = {}
    for vm in _resources(plan, VM):
        inputs = vm["inputs"]
        tags = dict(inputs.get("tags") or {})
        machines.append(
            Machine(
                name=inputs["osProfile"]["computerName"],
                role=tags.get("ndfleet:slurm-role", "vm"),
                custom_data=base64.b64decode(inputs["osProfile"]["customData"]),
                user_data=inputs.get("userData"),
                tags=tags,
                ip=static_ips.get(vm["name"].removesuffix("-vm")) or "",
                identity_client_id=tags.get("ndfleet:identity-client-id", ""),
                extra={"resource_group": inputs.get("resourceGroupName", "")},
            )
        )
    for ss in _resources(plan, VMSS):
        inputs = ss["inputs"]
        profile = inputs["virtualMachineProfile"]
        tags = dict(inputs.get("tags") or {})
        island = tags.get("ndfleet:island")
        count = int(inputs["sku"]["capacity"])
        # An elastic island's scale set has the fixed name its controller's programs address; a fixed island's is
        # auto-named by Pulumi (under the plan's mocks: the resource's name, as `ndfleet status` reads it).
        template = ScaleSetTemplate(
            name=inputs.get("vmScaleSetName") or ss["name"],
            resource_group=inputs.get("resourceGroupName", ""),
            computer_name_prefix=profile["osProfile"]["computerNamePrefix"],
            custom_data=base64.b64decode(profile["osProfile"]["customData"]),
            user_data=profile.get("userData"),
            tags=tags,
            island=island,
            subnet_ids=tuple(
                ip["subnet"]["id"]
                for nic in profile["networkProfile"]["networkInterfaceConfigurations"]
                for ip in nic["ipConfigurations"]
            ),
            identity_ids=tuple((inputs.get("identity") or {}).get("userAssignedIdentities") or ()),
            vm_size=inputs["sku"]["name"],
            body=put_body(inputs),
            health=health_policy(inputs),
        )
        (scale_sets if inputs.get("vmScaleSetName") else fixed_scale_sets)[template.name] = template
        if nodes_per_island and island in nodes_per_island:
            count = nodes_per_island[island]
        for i in range(count):
            machines.append(
                Machine(
                    # Uniform scale sets name instances <computerNamePrefix><6 base-36 digits of the instance id>.
                    name=f"{profile['osProfile']['computerNamePrefix']}{i:06d}",
                    role="compute",
                    custom_data=base64.b64decode(profile["osProfile"]["customData"]),
                    user_data=profile.get("userData"),
                    tags=tags,
                    island=island,
                    identity_client_id=tags.get("ndfleet:identity-client-id", ""),
                    vm_size=inputs["sku"]["name"],
                    extra={"scale_set": ss["name"], "instance_id": i, **health_policy(inputs)},
                )
            )
    taken = {m.ip for m in machines if m.ip}
    free = (str(a) for a in list(compute.hosts())[AZURE_RESERVED_LOW - 1 :] if str(a) not in taken)
    for m in machines:
        if not m.ip:
            m.ip = next(free)
    vaults = [r["inputs"]["vaultName"] for r in plan["resources"] if r["type"] == "azure-native:keyvault:Vault"]
    scopes = {str(r["inputs"].get("scope", "")) for r in _resources(plan, ROLE_ASSIGNMENT)}
    return PlanMachines(
        machines, compute, storage, vaults[0] if vaults else None, plan.get("outputs", {}), scale_sets, scopes,
        role_grants(plan),
        {str(r["inputs"].get("roleDefinitionId", "")).rsplit("/", 1)[-1] for r in _resources(plan, ROLE_ASSIGNMENT)},
        plan,
        {
            str(r["inputs"]["secretName"]): value
            for r in _resources(plan, SECRET)
            if isinstance(props := r["inputs"].get("properties"), dict) and isinstance(value := props.get("value"), str)
        },
        fixed_scale_sets,
    )


def health_policy(inputs: dict[str, Any]) -> dict[str, Any]:
    """A scale set's Application Health extension settings and automatic-repairs policy, as the plan sends them
    (what the repairs stand-in, tests/twin/repairs.py, acts on)."""
    profile = inputs["virtualMachineProfile"]
    extensions = (profile.get("extensionProfile") or {}).get("extensions") or []
    health = next((e.get("settings") or {} for e in extensions if e.get("type") == "ApplicationHealthLinux"), {})
    return {
        "computer_name_prefix": profile["osProfile"]["computerNamePrefix"],
        "app_health": dict(health),
        "automatic_repairs": dict(inputs.get("automaticRepairsPolicy") or {}),
    }


def role_grants(plan: dict[str, Any]) -> dict[str, frozenset[str]]:
    """scope -> actions, for the plan's assignments of its own custom roles (under the mocks a role definition's id
    ends in its resource name). Built-in roles are not expanded: the stand-in only judges the elastic scaler."""
    actions = {
        r["name"]: frozenset(a for perm in r["inputs"].get("permissions") or () for a in perm.get("actions") or ())
        for r in _resources(plan, ROLE_DEFINITION)
    }
    grants: dict[str, frozenset[str]] = {}
    for r in _resources(plan, ROLE_ASSIGNMENT):
        granted = actions.get(str(r["inputs"].get("roleDefinitionId", "")).rsplit("/", 1)[-1])
        if granted:
            scope = str(r["inputs"].get("scope", ""))
            grants[scope] = grants.get(scope, frozenset()) | granted
    return grants
