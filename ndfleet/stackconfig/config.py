"""Read and validate the whole stack configuration into one ClusterSpec, before any resource exists.

Data flows one way: stack config (`ndfleet:*` keys) -> `StackConfig` (pydantic, the keys as the user writes
them) -> `ClusterSpec` (derived and cross-checked: islands, subnets, quota) -> components and templates.
Every error names the setting by its full path, the value given and what would be valid; all errors are
collected and reported at once, so a user fixes a stack file in one round.
"""

from __future__ import annotations

import base64
import difflib
import ipaddress
import json
import math
import re
from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ndfleet.stackconfig.names import stack_name_problem
from ndfleet.stackconfig.profiles import (
    DEFAULT_MAX_NODES_PER_ISLAND,
    HARD_MAX_NODES_PER_ISLAND,
    LUSTRE_SKUS,
    PROFILES,
    RDMA_RESERVED_CIDR,
    LustreSku,
    VmSizeProfile,
)
from ndfleet.stackconfig.regions import REGION_NAME, REGIONS_SOURCE, closest, has_zones, name_form
from ndfleet.stackconfig.sshkeys import check_ssh_public_key, is_example_key, looks_private

NAMESPACE = "ndfleet"

DEFAULT_VM_SIZE = "Standard_ND96isr_H100_v5"
DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"
DEFAULT_VNET = "10.40.0.0/16"

# Linux admin names Azure refuses (Microsoft.Compute osProfile.adminUsername).
RESERVED_ADMIN_NAMES = frozenset(
    (
        "administrator admin user user1 test user2 test1 user3 admin1 1 123 a actuser adm admin2 aspnet backup "
        "console david guest john owner root server sql support support_388945a0 sys test2 test3 user4 user5"
    ).split()
)

# Subnet headroom over the node count: automatic repairs and scale-outs create a VM before the old
# address is released, and Azure keeps 5 addresses of every subnet.
AZURE_RESERVED_ADDRESSES_PER_SUBNET = 5
NODE_HEADROOM_FRACTION = 0.2
NODE_HEADROOM_MIN = 8
MIN_COMPUTE_PREFIX = 26
STORAGE_SUBNET_PREFIX = 27  # private endpoints only
LUSTRE_SUBNET_PREFIX = 24  # Managed Lustre wants a dedicated subnet; /24 covers every capacity in the SKU table
BASTION_SUBNET_PREFIX = 26  # AzureBastionSubnet must be /26 or larger

# Azure allows 65,536 private IP addresses per virtual network (Microsoft Learn, "Azure subscription and
# service limits, quotas, and constraints" > Networking limits). Every node holds one, and so does every node of
# the headroom (a repair or scale-out creates the new VM before the old address is released): `nodes` is bounded
# so that nodes + headroom fit, MAX_NODES = 54,613. The bound also keeps every refusal instant.
AZURE_MAX_PRIVATE_IPS_PER_VNET = 65_536


def node_headroom(nodes: int) -> int:
    return max(NODE_HEADROOM_MIN, math.ceil(nodes * NODE_HEADROOM_FRACTION))


def _max_nodes() -> int:
    n = AZURE_MAX_PRIVATE_IPS_PER_VNET
    while n + node_headroom(n) > AZURE_MAX_PRIVATE_IPS_PER_VNET:
        n -= 1
    return n


MAX_NODES = _max_nodes()
NODES_BOUND = (
    f"at most {MAX_NODES:,}: Azure allows {AZURE_MAX_PRIVATE_IPS_PER_VNET:,} private IP addresses per virtual "
    f"network, and every node plus {NODE_HEADROOM_FRACTION:.0%} headroom for repairs and scale-outs takes one"
)
# A required setting that is missing or invalid is replaced by this stand-in for the second pass only (so the
# cross-setting checks of the other settings still run); checks that read it are skipped.
_STAND_INS = {
    "location": "eastus",
    # An ED25519 key of 32 zero bytes: well-formed, and nobody's.
    "sshPublicKey": "ssh-ed25519 " + base64.b64encode(b"\0\0\0\x0bssh-ed25519\0\0\0\x20" + bytes(32)).decode(),
}
EXAMPLE_KEY_WARNING = (
    f"{NAMESPACE}:sshPublicKey is the example key of ndfleet's stacks/*.yaml: nobody has its private key, so "
    "no one could log in; replace it with your own public key (`pulumi up` refuses it)"
)
_REQUIRED_EXAMPLES = {
    "location": "the Azure region's name, e.g. `ndfleet:location: eastus` (`az account list-locations -o table` "
    "lists the names)",
    "sshPublicKey": "one OpenSSH public key line, e.g. the contents of ~/.ssh/id_ed25519.pub",
}


class SpecError(Exception):
    """The stack configuration is invalid. `problems` holds one line per offending setting."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"invalid ndfleet stack configuration ({len(self.problems)} problem(s)):"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Settings(_Model):
    """A block of settings as the user writes them. Strict: a boolean is never a number (`nodes: true` is an
    error, not 1 node), a string never a number, a number never a string."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class IslandConfig(_Settings):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,14}$")
    nodes: int = Field(ge=1)


class LustreConfig(_Settings):
    sku: str = "AMLFS-Durable-Premium-250"
    capacity_tib: int = Field(alias="capacityTiB")

    @field_validator("sku")
    @classmethod
    def _known_sku(cls, v: str) -> str:
        if v not in LUSTRE_SKUS:
            raise ValueError(f"unknown Managed Lustre SKU; valid: {', '.join(LUSTRE_SKUS)}")
        return v


class StorageConfig(_Settings):
    account_sku: Literal["Standard_LRS", "Standard_ZRS", "Standard_GRS", "Standard_GZRS"] = Field(
        default="Standard_ZRS", alias="accountSku"
    )
    soft_delete_days: int = Field(default=14, ge=1, le=365, alias="softDeleteDays")
    lustre: LustreConfig | None = None


class HealthConfig(_Settings):
    validation_level: Literal["quick", "full"] = Field(default="full", alias="validationLevel")
    dcgm_level: int = Field(default=1, ge=0, le=3, alias="dcgmLevel")
    probe_port: int = Field(default=18300, ge=1024, le=65535, alias="probePort")
    repair_action: Literal["Replace", "Reimage", "Restart"] = Field(default="Replace", alias="repairAction")
    repair_grace_period_minutes: int = Field(default=30, ge=10, le=90, alias="repairGracePeriodMinutes")
    # The Application Health extension waits this long before a node's health counts. None (the default):
    # follow the node's worst-case set-up and validation time (computed in the prepare step from the profile);
    # an explicit value must cover that time. The extension allows at most 14,400 s.
    probe_grace_period_seconds: int | None = Field(default=None, ge=600, le=14400, alias="probeGracePeriodSeconds")
    # Guest Health Reporting: a node that finds a hardware fault files an impact report with its managed identity
    # (Microsoft.Impact/workloadImpacts) so Azure takes the host out of service. Needs the subscription onboarded
    # (docs/burnin.md); off, the node only logs the report it would have sent.
    impact_reporting: bool = Field(default=False, alias="impactReporting")


_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# Azure Monitor action groups allow at most 1,000 e-mail and 10 webhook receivers (Azure subscription and
# service limits, "Action groups"); a cluster's alerting needs a handful.
MAX_ALERT_EMAILS = 20
MAX_ALERT_WEBHOOKS = 10
# An encrypted webhook URL as an offline plan sees it (the stack's key decrypts it only under the Pulumi CLI).
SECRET_WEBHOOK = "[secret]"


class MonitoringConfig(_Settings):
    """`ndfleet:monitoring`: Azure Monitor managed Prometheus, Managed Grafana and alerts (docs/monitoring.md)."""

    enabled: bool = False
    # Who the Action Group notifies: e-mail addresses and HTTPS webhooks (at least one when enabled).
    emails: list[str] = Field(default_factory=list, max_length=MAX_ALERT_EMAILS)
    webhooks: list[str] = Field(default_factory=list, max_length=MAX_ALERT_WEBHOOKS)
    # Alert when fewer than this fraction of an island's nodes report Healthy.
    island_capacity_alert_fraction: float = Field(default=0.9, gt=0, le=1, alias="islandCapacityAlertFraction")
    # How often each node's Prometheus agent scrapes its exporters: the main cost driver (docs/monitoring.md).
    scrape_interval_seconds: int = Field(default=30, ge=10, le=300, alias="scrapeIntervalSeconds")

    @field_validator("emails")
    @classmethod
    def _emails(cls, v: list[str]) -> list[str]:
        bad = [e for e in v if not _EMAIL.match(e)]
        if bad:
            raise ValueError(f"not e-mail addresses: {bad}; give addresses such as ops@example.com")
        return v

    @field_validator("webhooks", mode="before")
    @classmethod
    def _encrypted_webhooks(cls, v: Any) -> Any:
        # `pulumi config set --secret --path 'ndfleet:monitoring.webhooks[0]' URL` stores {"secure": ...}; the
        # Pulumi CLI decrypts it for the program, an offline plan cannot, and sees the placeholder instead.
        if isinstance(v, list):
            return [SECRET_WEBHOOK if isinstance(w, dict) and set(w) == {"secure"} else w for w in v]
        return v

    @field_validator("webhooks")
    @classmethod
    def _webhooks(cls, v: list[str]) -> list[str]:
        bad = [i for i, w in enumerate(v) if w != SECRET_WEBHOOK and not re.match(r"^https://[^\s/]+(/\S*)?$", w)]
        if bad:
            # Index only: a webhook URL often carries a token, which an error message must not echo.
            raise ValueError(f"entries {bad} are not https:// URLs; Azure Monitor posts alerts over HTTPS only")
        return v


class SlurmConfig(_Settings):
    """`ndfleet:slurm`: the Slurm cluster's own machines and services (used when `scheduler: slurm`)."""

    # A slurm-smd package version of Microsoft's `stable` channel (the one Azure CycleCloud's Slurm template pinned
    # last: Azure/cyclecloud-slurm templates/slurm.txt); docs/slurm.md says how to list what a channel holds.
    version: str = Field(default="25.11.5-1")
    controller_vm_size: str = Field(
        default="Standard_D8s_v5", alias="controllerVmSize", pattern=r"^Standard_[A-Za-z0-9_]+$"
    )
    controller_state_disk_gb: int = Field(default=128, ge=32, le=4096, alias="controllerStateDiskGb")
    login_count: int = Field(default=1, ge=1, le=10, alias="loginCount")
    login_vm_size: str = Field(default="Standard_D8s_v5", alias="loginVmSize", pattern=r"^Standard_[A-Za-z0-9_]+$")
    database_sku: str = Field(default="Standard_B2ms", alias="databaseSku", pattern=r"^Standard_[A-Za-z0-9_]+$")
    database_storage_gb: int = Field(default=32, ge=20, le=16384, alias="databaseStorageGb")
    home_share_gib: int = Field(default=1024, ge=100, le=102400, alias="homeShareGiB")
    shared_share_gib: int = Field(default=1024, ge=100, le=102400, alias="sharedShareGiB")
    health_check_interval_s: int = Field(default=300, ge=60, le=3600, alias="healthCheckIntervalSeconds")
    remove_gone_nodes_after_minutes: int = Field(default=30, ge=5, le=1440, alias="removeGoneNodesAfterMinutes")

    @field_validator("version")
    @classmethod
    def _slurm_release(cls, v: str) -> str:
        # Slurm releases are YY.MM (02, 05, 08 or 11) plus a patch level; dynamic nodes need 22.05 or newer. The
        # package adds a Debian revision (-1).
        m = re.fullmatch(r"(2[2-9])\.(02|05|08|11)\.([0-9]{1,3})-([1-9][0-9]{0,2})", v)
        if m is None or (int(m.group(1)), int(m.group(2))) < (22, 5):
            raise ValueError(
                "must be a slurm-smd package version YY.MM.P-R of Slurm 22.05 or newer (dynamic nodes), "
                "e.g. 25.11.5-1"
            )
        return v

    @field_validator("database_sku")
    @classmethod
    def _database_tier(cls, v: str) -> str:
        if not re.fullmatch(r"Standard_(B|D|E)[0-9A-Za-z_]+", v):
            raise ValueError(
                "must be an Azure Database for MySQL Flexible Server compute size of the Burstable (Standard_B*), "
                "General Purpose (Standard_D*) or Business Critical (Standard_E*) tier, e.g. Standard_B2ms"
            )
        return v


class StackConfig(_Settings):
    """The `ndfleet:*` keys of a stack, as written in `stacks/Pulumi.<stack>.yaml`."""

    location: str
    zone: Literal["1", "2", "3"] | None = None
    vm_size: str = Field(default=DEFAULT_VM_SIZE, alias="vmSize")
    nodes: int | None = Field(default=None, ge=1, le=MAX_NODES)
    islands: list[IslandConfig] | None = Field(default=None, max_length=MAX_NODES)
    max_nodes_per_island: int = Field(
        default=DEFAULT_MAX_NODES_PER_ISLAND, ge=1, le=HARD_MAX_NODES_PER_ISLAND, alias="maxNodesPerIsland"
    )
    image: str = DEFAULT_IMAGE
    admin_username: str = Field(default="azureuser", alias="adminUsername")
    ssh_public_key: str = Field(alias="sshPublicKey")
    vnet_address_space: str = Field(default=DEFAULT_VNET, alias="vnetAddressSpace")
    resource_group_name: str | None = Field(
        default=None, alias="resourceGroupName", pattern=r"^[-\w._()]{1,89}[-\w_()]$"
    )
    name_prefix: str | None = Field(default=None, alias="namePrefix", pattern=r"^[a-z][a-z0-9-]{1,19}$")
    priority: Literal["Regular", "Spot"] = "Regular"
    spot_max_price: float = Field(default=-1, alias="spotMaxPrice")
    proximity_placement_group: bool = Field(default=True, alias="proximityPlacementGroup")
    bastion: bool = False
    os_disk_size_gb: int = Field(default=256, ge=64, le=4095, alias="osDiskSizeGb")
    tags: dict[str, str] = Field(default_factory=dict)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    preflight: bool = False
    scheduler: Literal["none", "slurm"] = "none"
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    subscription_id: str | None = Field(
        default=None, alias="subscriptionId", pattern=r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$"
    )

    @field_validator("location")
    @classmethod
    def _region_name(cls, v: str) -> str:
        if REGION_NAME.match(v):
            return v
        suggestion = name_form(v)
        if suggestion is not None:
            raise ValueError(
                f"write the region's name, not its display name: '{suggestion}' (the Name column of "
                "`az account list-locations -o table`)"
            )
        raise ValueError("must be an Azure region's name: lowercase letters and digits, e.g. eastus or westeurope")

    @field_validator("vm_size")
    @classmethod
    def _known_size(cls, v: str) -> str:
        if v not in PROFILES:
            raise ValueError(f"unsupported VM size; valid: {', '.join(PROFILES)}")
        return v

    @field_validator("image")
    @classmethod
    def _image_urn(cls, v: str) -> str:
        parts = v.split(":")
        if len(parts) != 4 or not all(parts):
            raise ValueError("must be a marketplace image URN publisher:offer:sku:version, e.g. " + DEFAULT_IMAGE)
        return v

    @field_validator("admin_username")
    @classmethod
    def _admin_name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", v):
            raise ValueError(
                "must be 1-32 characters: lowercase letters, digits, '_' or '-', not starting with a digit"
            )
        if v in RESERVED_ADMIN_NAMES:
            raise ValueError("is reserved by Azure; pick another name such as 'azureuser'")
        return v

    @field_validator("ssh_public_key")
    @classmethod
    def _ssh_key(cls, v: str) -> str:
        check_ssh_public_key(v)
        return v.strip()

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if len(key) > 512 or any(c in key for c in "<>%&\\?/"):
                raise ValueError(f"tag name {key!r} is invalid: at most 512 characters, none of <>%&\\?/")
        if len(v) > 40:
            raise ValueError("at most 40 tags (Azure allows 50; ndfleet adds its own)")
        return v

    @field_validator("vnet_address_space")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            ipaddress.IPv4Network(v, strict=True)
        except ValueError as e:
            raise ValueError(f"must be an IPv4 network in CIDR form such as {DEFAULT_VNET} ({e})") from None
        return v


# ----------------------------------------------------------------------------------------------------------
# The validated spec


class IslandSpec(_Model):
    """One InfiniBand island: one scale set, one placement group, one IB fabric."""

    name: str
    index: int
    nodes: int


class SubnetSpec(_Model):
    name: str
    cidr: str


class NetworkSpec(_Model):
    address_space: str
    compute: SubnetSpec
    storage: SubnetSpec
    lustre: SubnetSpec | None
    bastion: SubnetSpec | None


class ImageSpec(_Model):
    publisher: str
    offer: str
    sku: str
    version: str


class LustreSpec(_Model):
    sku: LustreSku
    capacity_tib: int

    @property
    def throughput_mbps(self) -> int:
        return self.sku.mbps_per_tib * self.capacity_tib


class StorageSpec(_Model):
    account_sku: str
    soft_delete_days: int
    containers: tuple[str, ...] = ("datasets", "checkpoints")
    lustre: LustreSpec | None


class ClusterSpec(_Model):
    """Everything the components need, validated and derived. Components make no decisions of their own."""

    stack: str
    name_prefix: str
    location: str
    zone: str | None
    profile: VmSizeProfile
    islands: tuple[IslandSpec, ...]
    max_nodes_per_island: int
    image: ImageSpec
    admin_username: str
    ssh_public_key: str
    resource_group_name: str | None
    network: NetworkSpec
    storage: StorageSpec
    health: HealthConfig
    monitoring: MonitoringConfig = MonitoringConfig()
    priority: str
    spot_max_price: float
    proximity_placement_group: bool
    bastion: bool
    os_disk_size_gb: int
    tags: dict[str, str]
    preflight: bool
    subscription_id: str | None
    warnings: tuple[str, ...] = ()
    # `ndfleet:scheduler`: "slurm" adds the Slurm controller, login node(s), accounting database, vault and NFS
    # share (components/slurm*.py); `slurm` holds their settings (None when the scheduler is "none").
    scheduler: str = "none"
    slurm: SlurmConfig | None = None

    @property
    def total_nodes(self) -> int:
        return sum(i.nodes for i in self.islands)

    @property
    def total_gpus(self) -> int:
        return self.total_nodes * self.profile.gpus_per_vm

    @property
    def vcpu_quota(self) -> dict[str, int]:
        """vCPUs needed per Azure quota family (the regional total is the same sum)."""
        return {self.profile.quota_family: self.total_nodes * self.profile.vcpus}

    def summary(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "vmSize": self.profile.name,
            "location": self.location,
            "zone": self.zone,
            "islands": [
                {"name": i.name, "nodes": i.nodes, "gpus": i.nodes * self.profile.gpus_per_vm} for i in self.islands
            ],
            "islandCount": len(self.islands),
            "nodes": self.total_nodes,
            "gpus": self.total_gpus,
            "vcpuQuota": self.vcpu_quota,
            "warnings": list(self.warnings),
        }


# ----------------------------------------------------------------------------------------------------------
# Reading configuration


_NUMERIC_OR_BOOL = (int, float, bool)


def from_engine(engine_config: Mapping[str, Any]) -> dict[str, Any]:
    """The `ndfleet:*` keys of config in the engine's form, namespace stripped, as the values the user wrote.

    Pulumi hands a program every config value as a string: structured values JSON-encoded, scalars as text
    ("301", "true"). Structured values are decoded, and number and boolean keys get their JSON value, so
    validation sees (and error messages show) what the stack file says. String keys stay strings: `zone: "2"`
    must not become the number 2.
    """
    fields = {f.alias or n: f for n, f in StackConfig.model_fields.items()}
    prefix = NAMESPACE + ":"
    out: dict[str, Any] = {}
    for full_key, value in engine_config.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix) :]
        if isinstance(value, str):
            field = fields.get(key)
            numeric = field is not None and all(
                a in _NUMERIC_OR_BOOL or a is type(None) for a in get_args(field.annotation) or (field.annotation,)
            )
            if value[:1] in ("{", "[") or numeric:
                try:
                    parsed = json.loads(value)
                except json.JSONDecodeError:
                    parsed = value
                if not numeric or isinstance(parsed, _NUMERIC_OR_BOOL):
                    value = parsed
        out[key] = value
    return out


def read_pulumi_config() -> dict[str, Any]:
    """All `ndfleet:*` keys of the running stack (Pulumi CLI or mock runtime), as `from_engine` gives them."""
    from pulumi.runtime import config as runtime_config

    merged: dict[str, Any] = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    return from_engine(merged)


def _path(loc: tuple[int | str, ...]) -> str:
    out = NAMESPACE + ":"
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if i else "") + part
    return out


_TYPE_MESSAGES = {
    "int_type": "must be a whole number",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a mapping of settings",
    "model_type": "must be a mapping of settings",
    "list_type": "must be a list",
}


def _friendly(err: Mapping[str, Any]) -> str:
    kind, value = err["type"], err.get("input")
    if kind in _TYPE_MESSAGES:
        got = "a boolean" if isinstance(value, bool) else type(value).__name__ if value is not None else "null"
        got = {"str": "a string", "int": "a number", "float": "a fraction", "dict": "a mapping", "list": "a list"}.get(
            got, got
        )
        return f"{_TYPE_MESSAGES[kind]}, not {got}"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "string_pattern_mismatch":
        return f"does not match the allowed form {err['ctx']['pattern']}"
    # Lower-case the first letter of pydantic's sentences ("Input should ..."), not of an acronym ("RSA keys").
    return msg[0].lower() + msg[1:] if len(msg) > 1 and msg[1].islower() else msg


# Settings whose values may carry a credential (a webhook URL's token): errors name them, never echo them.
_SECRET_SETTINGS = {("monitoring", "webhooks")}


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _known_keys(model: type[BaseModel]) -> list[str]:
    return sorted(f.alias or name for name, f in model.model_fields.items())


def _did_you_mean(key: str, known: list[str]) -> str | None:
    by_case = {k.lower(): k for k in known}
    if key.lower() in by_case:
        return by_case[key.lower()]
    match = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return match[0] if match else None


def _problem(err: Mapping[str, Any]) -> str:
    """One line for one per-setting error: the setting's full path, the value given (never a private key) and
    what is valid."""
    loc = tuple(err["loc"])
    path = _path(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        known = _known_keys(_model_at(loc[:-1]))
        guess = _did_you_mean(str(loc[-1]), known)
        hint = f"did you mean '{_path((*loc[:-1], guess))}'? " if guess else ""
        return f"{path} is not a known setting; {hint}known settings here: {', '.join(known)}"
    if kind == "missing":
        example = _REQUIRED_EXAMPLES.get(str(loc[-1])) if len(loc) == 1 else None
        return f"{path} is required" + (f": {example}" if example else "")
    if loc == ("nodes",) and kind == "less_than_equal":
        return f"{path} = {_show(err['input'])}: {NODES_BOUND}"
    if loc == ("islands",) and kind == "too_long":
        return f"{path}: {len(err['input'])} islands; {NODES_BOUND}"
    value = err.get("input")
    if loc == ("sshPublicKey",) and isinstance(value, str) and looks_private(value):
        return f"{path} (value not shown): {_friendly(err)}"
    if loc[:2] in _SECRET_SETTINGS:
        return f"{path} (value not shown): {_friendly(err)}"
    return f"{path} = {_show(value)}: {_friendly(err)}"


def load_spec(raw: Mapping[str, Any], stack: str) -> ClusterSpec:
    """Validate raw `ndfleet:*` config (namespace stripped) into a ClusterSpec, or raise SpecError.

    Every problem in one go: the settings are checked one by one, then the checks across settings (VNet size,
    islands, Lustre zone, ...) run over the settings that passed, skipping those that read a failed one.
    """
    problems: list[str] = []
    name_problem = stack_name_problem(stack)
    if name_problem is not None:
        problems.append(name_problem)
        stack = "invalid-stack-name"
    raw = dict(raw)
    broken: set[str] = set()
    try:
        config = StackConfig.model_validate(raw)
    except ValidationError as e:
        for err in e.errors():
            problems.append(_problem(err))
            broken.add(str(err["loc"][0]) if err["loc"] else "")
        kept = {k: v for k, v in raw.items() if k not in broken}
        for key, stand_in in _STAND_INS.items():
            kept.setdefault(key, stand_in)
        try:
            config = StackConfig.model_validate(kept)
        except ValidationError:  # cannot happen: every failed key was dropped; report what we have
            raise SpecError(problems) from None
    broken |= {k for k in _STAND_INS if k not in raw}
    spec, cross_problems = build_spec(config, stack, frozenset(broken))
    problems += cross_problems
    if problems or spec is None:
        raise SpecError(problems)
    return spec


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel]:
    """The model a validation error's location points into (`storage.lustre` -> LustreConfig)."""
    model: type[BaseModel] = StackConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        nested = _models_in(field.annotation) if field is not None else []
        if not nested:
            break
        model = nested[0]
    return model


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes inside an annotation such as `list[IslandConfig] | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def split_islands(nodes: int, max_per_island: int) -> list[int]:
    """Fill islands to the limit, the remainder last: 250 at 100 -> [100, 100, 50]."""
    count = math.ceil(nodes / max_per_island)
    return [max_per_island] * (count - 1) + [nodes - max_per_island * (count - 1)]


def compute_subnet_prefix(nodes: int) -> int:
    needed = nodes + node_headroom(nodes) + AZURE_RESERVED_ADDRESSES_PER_SUBNET
    return min(MIN_COMPUTE_PREFIX, 32 - math.ceil(math.log2(needed)))


def _allocate(vnet: ipaddress.IPv4Network, wanted: list[tuple[str, int]]) -> dict[str, ipaddress.IPv4Network] | None:
    """Carve subnets out of the VNet, largest first so every one stays aligned. None if they do not fit."""
    out: dict[str, ipaddress.IPv4Network] = {}
    cursor = int(vnet.network_address)
    end = int(vnet.broadcast_address) + 1
    for name, prefix in sorted(wanted, key=lambda w: w[1]):
        if prefix < vnet.prefixlen:
            return None
        size = 2 ** (32 - prefix)
        cursor = (cursor + size - 1) // size * size
        if cursor + size > end:
            return None
        out[name] = ipaddress.IPv4Network((cursor, prefix))
        cursor += size
    return out


def build_spec(
    config: StackConfig, stack: str, broken: frozenset[str] = frozenset()
) -> tuple[ClusterSpec | None, list[str]]:
    """The checks across settings and the derived spec. `broken`: top-level settings that failed their own
    check (replaced by defaults in `config`); a check that reads one of them is skipped, so that it neither
    repeats the problem nor reports one the user did not write. Returns (spec, []) or (None, problems)."""
    problems: list[str] = []
    warnings: list[str] = []
    profile = PROFILES[config.vm_size]
    limit = config.max_nodes_per_island

    def ok(*keys: str) -> bool:
        return not broken.intersection(keys)

    # Islands: a total to split, or an explicit list; exactly one of the two.
    islands: list[IslandSpec] = []
    if not ok("nodes", "islands", "maxNodesPerIsland"):
        pass
    elif (config.nodes is None) == (config.islands is None):
        problems.append(
            f"{NAMESPACE}:nodes / {NAMESPACE}:islands: set exactly one: 'nodes' (a total, split into islands "
            f"of at most maxNodesPerIsland) or 'islands' (a list of {{name, nodes}})"
        )
    elif config.nodes is not None:
        islands = [
            IslandSpec(name=f"ib{i:02d}", index=i, nodes=n) for i, n in enumerate(split_islands(config.nodes, limit))
        ]
    else:
        assert config.islands is not None
        if not config.islands:
            problems.append(f"{NAMESPACE}:islands = []: list at least one island")
        seen: set[str] = set()
        for i, island in enumerate(config.islands):
            if island.name in seen:
                problems.append(f"{NAMESPACE}:islands[{i}].name = {island.name!r}: island names must be unique")
            seen.add(island.name)
            if island.nodes > limit:
                problems.append(
                    f"{NAMESPACE}:islands[{i}].nodes = {island.nodes}: an InfiniBand island is one scale set with "
                    f"singlePlacementGroup, at most maxNodesPerIsland = {limit} nodes; split it into several islands"
                    + (" or raise maxNodesPerIsland (up to 300 after an Azure support request)" if limit < 300 else "")
                )
            islands.append(IslandSpec(name=island.name, index=i, nodes=island.nodes))
        total = sum(i.nodes for i in islands)
        if total > MAX_NODES:
            problems.append(f"{NAMESPACE}:islands: {total:,} nodes in all; {NODES_BOUND}")
    if limit > DEFAULT_MAX_NODES_PER_ISLAND:
        warnings.append(
            f"{NAMESPACE}:maxNodesPerIsland = {limit}: scale sets above {DEFAULT_MAX_NODES_PER_ISLAND} VMs with "
            "singlePlacementGroup need an Azure support request to raise the placement-group limit (up to 300)"
        )

    # Network: no overlap with the RDMA range; room for every subnet.
    vnet = ipaddress.IPv4Network(config.vnet_address_space)
    rdma = ipaddress.IPv4Network(RDMA_RESERVED_CIDR)
    network: NetworkSpec | None = None
    vnet_fits = ok("vnetAddressSpace")
    if vnet_fits and vnet.overlaps(rdma):
        vnet_fits = False
        problems.append(
            f"{NAMESPACE}:vnetAddressSpace = {config.vnet_address_space!r}: overlaps {RDMA_RESERVED_CIDR}, which the "
            f"InfiniBand RDMA network of ND-series VMs uses; choose a range outside it, e.g. {DEFAULT_VNET}"
        )
    if ok("vnetAddressSpace") and not vnet.is_private:
        warnings.append(f"{NAMESPACE}:vnetAddressSpace = {config.vnet_address_space!r} is not a private range")
    total_nodes = sum(i.nodes for i in islands)
    # The Slurm controller and login VMs share the compute subnet (same NSG, NAT for packages, no public IP).
    slurm_machines = 1 + config.slurm.login_count if config.scheduler == "slurm" else 0
    if islands and vnet_fits and total_nodes <= MAX_NODES and ok("storage", "bastion"):
        compute_prefix = compute_subnet_prefix(total_nodes + slurm_machines)
        wanted = [("compute", compute_prefix), ("storage", STORAGE_SUBNET_PREFIX)]
        if config.storage.lustre is not None:
            wanted.append(("lustre", LUSTRE_SUBNET_PREFIX))
        if config.bastion:
            wanted.append(("AzureBastionSubnet", BASTION_SUBNET_PREFIX))
        subnets = _allocate(vnet, wanted)
        if subnets is None:
            need = sum(2 ** (32 - p) for _, p in wanted)
            smallest = 32 - math.ceil(math.log2(need))
            problems.append(
                f"{NAMESPACE}:vnetAddressSpace = {config.vnet_address_space!r}: too small for {total_nodes} nodes plus "
                f"headroom; it needs subnets {', '.join(f'{n} /{p}' for n, p in wanted)} ({need} addresses): "
                f"use a /{smallest} or larger"
            )
        else:
            network = NetworkSpec(
                address_space=str(vnet),
                compute=SubnetSpec(name="compute", cidr=str(subnets["compute"])),
                storage=SubnetSpec(name="storage", cidr=str(subnets["storage"])),
                lustre=SubnetSpec(name="lustre", cidr=str(subnets["lustre"])) if "lustre" in subnets else None,
                bastion=(
                    SubnetSpec(name="AzureBastionSubnet", cidr=str(subnets["AzureBastionSubnet"]))
                    if "AzureBastionSubnet" in subnets
                    else None
                ),
            )

    # Region: known to the table (else a warning: a new region or another cloud).
    if ok("location") and has_zones(config.location) is None:
        guess = closest(config.location)
        warnings.append(
            f"{NAMESPACE}:location = {config.location!r} is not in ndfleet's region table ({REGIONS_SOURCE})"
            + (f"; did you mean {guess!r}?" if guess else "; check the name")
        )

    # Storage: Managed Lustre capacity must be a step of its SKU, and the file system sits in one zone where
    # the region has zones.
    lustre: LustreSpec | None = None
    if config.storage.lustre is not None:
        sku = LUSTRE_SKUS[config.storage.lustre.sku]
        cap = config.storage.lustre.capacity_tib
        if not sku.accepts(cap):
            problems.append(
                f"{NAMESPACE}:storage.lustre.capacityTiB = {cap}: {sku.name} takes {sku.min_tib} to {sku.max_tib} TiB "
                f"in steps of {sku.step_tib}"
            )
        else:
            lustre = LustreSpec(sku=sku, capacity_tib=cap)
        if ok("location", "zone") and config.zone is None:
            zonal = has_zones(config.location)
            if zonal:
                problems.append(
                    f"{NAMESPACE}:zone is not set, but {config.location} has availability zones and Azure Managed "
                    f"Lustre (storage.lustre) is created in one of them: set {NAMESPACE}:zone to '1', '2' or '3' "
                    "(the islands go to the same zone, next to their file system)"
                )
            elif zonal is None:
                warnings.append(
                    f"{NAMESPACE}:storage.lustre without {NAMESPACE}:zone: if {config.location} has availability "
                    "zones, Azure Managed Lustre needs one; set zone"
                )

    # Spot: -1 means "pay up to the on-demand price"; otherwise a positive USD/hour cap. Only for Spot.
    if ok("priority", "spotMaxPrice"):
        if config.priority == "Spot" and not (config.spot_max_price == -1 or config.spot_max_price > 0):
            problems.append(
                f"{NAMESPACE}:spotMaxPrice = {config.spot_max_price}: use -1 (up to on-demand) or a price > 0"
            )
        if config.priority == "Regular" and "spot_max_price" in config.model_fields_set:
            problems.append(
                f"{NAMESPACE}:spotMaxPrice = {_show(config.spot_max_price)}: applies only to Spot VMs, and "
                f"{NAMESPACE}:priority is 'Regular'; remove spotMaxPrice or set priority: Spot"
            )
    if config.priority == "Spot":
        warnings.append(f"{NAMESPACE}:priority = 'Spot': nodes can be evicted at any time; checkpoint often")
    if config.scheduler != "slurm" and "slurm" in config.model_fields_set:
        problems.append(
            f"{NAMESPACE}:slurm is set but {NAMESPACE}:scheduler = {config.scheduler!r}: set {NAMESPACE}:scheduler to "
            "'slurm' to deploy the Slurm cluster, or remove the slurm section"
        )
    reserved_tags = [k for k in config.tags if k.startswith("ndfleet:")]
    if reserved_tags:
        problems.append(f"{NAMESPACE}:tags: names starting with 'ndfleet:' are set by ndfleet itself: {reserved_tags}")
    if ok("sshPublicKey") and is_example_key(config.ssh_public_key):
        warnings.append(EXAMPLE_KEY_WARNING)

    if ok("monitoring"):
        problems += monitoring_problems(config.monitoring)

    if problems or network is None:
        return None, problems
    publisher, offer, sku_name, version = config.image.split(":")
    prefix = config.name_prefix or _default_prefix(stack)
    spec = ClusterSpec(
        stack=stack,
        name_prefix=prefix,
        location=config.location,
        zone=config.zone,
        profile=profile,
        islands=tuple(islands),
        max_nodes_per_island=limit,
        image=ImageSpec(publisher=publisher, offer=offer, sku=sku_name, version=version),
        admin_username=config.admin_username,
        ssh_public_key=config.ssh_public_key,
        resource_group_name=config.resource_group_name,
        network=network,
        storage=StorageSpec(
            account_sku=config.storage.account_sku, soft_delete_days=config.storage.soft_delete_days, lustre=lustre
        ),
        health=config.health,
        monitoring=config.monitoring,
        priority=config.priority,
        spot_max_price=config.spot_max_price,
        proximity_placement_group=config.proximity_placement_group,
        bastion=config.bastion,
        os_disk_size_gb=config.os_disk_size_gb,
        tags={**config.tags, "ndfleet:stack": stack},
        preflight=config.preflight,
        subscription_id=config.subscription_id,
        warnings=tuple(warnings),
        scheduler=config.scheduler,
        slurm=config.slurm if config.scheduler == "slurm" else None,
    )
    return spec, []


def monitoring_problems(monitoring: MonitoringConfig) -> list[str]:
    """Cross-field checks of `ndfleet:monitoring` (the field checks are on MonitoringConfig)."""
    if monitoring.enabled and not monitoring.emails and not monitoring.webhooks:
        return [
            f"{NAMESPACE}:monitoring.emails / {NAMESPACE}:monitoring.webhooks: monitoring is enabled but no one "
            "would be notified; list at least one e-mail address or https:// webhook"
        ]
    return []


def _default_prefix(stack: str) -> str:
    cleaned = re.sub(r"[^a-z0-9-]", "-", stack.lower()).strip("-") or "ndfleet"
    if not cleaned[0].isalpha():
        cleaned = "nd" + cleaned
    return cleaned[:20]
