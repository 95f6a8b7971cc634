"""The stack's settings as the user writes them (`ndfleet:*` keys): one strict pydantic model per block, each
field checked on its own. The checks across settings, and what is derived from them, are in derive.py."""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ndfleet.stackconfig.profiles import DEFAULT_MAX_NODES_PER_ISLAND, HARD_MAX_NODES_PER_ISLAND, LUSTRE_SKUS, PROFILES
from ndfleet.stackconfig.regions import REGION_NAME, name_form
from ndfleet.stackconfig.sshkeys import check_ssh_public_key

NAMESPACE = "ndfleet"
# The setting that makes a stack a smoke run of another (SmokeConfig; ndfleet/stackconfig/smoke.py).
SMOKE_KEY = "smoke"

DEFAULT_VM_SIZE = "Standard_ND96isr_H100_v5"
DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"
# An Azure Compute Gallery image version's resource id, or its image definition's (Azure then boots the definition's
# latest version): the form ImageReference.id takes (Compute REST API, ImageReference: "to use 'latest' version of
# gallery image, just set '/subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/providers/
# Microsoft.Compute/galleries/{galleryName}/images/{imageName}' in the 'id' field without version input"). A version
# is named MajorVersion.MinorVersion.Patch, and `latest` is the highest of them not excluded from latest (Learn, "Store
# and share images in an Azure Compute Gallery"); a gallery's name has letters, digits, dots and underscores, an image
# definition's also dashes (Learn, "Create a gallery", "Create an image definition"). Each number is held to ten digits.
GALLERY_IMAGE_FORM = (
    "/subscriptions/<subscription id>/resourceGroups/<group>/providers/Microsoft.Compute/galleries/<gallery>"
    "/images/<definition>[/versions/<major.minor.patch>]"
)
_GUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
GALLERY_IMAGE_ID = re.compile(
    rf"/subscriptions/{_GUID}"
    r"/resourceGroups/[-\w.()]{1,90}/providers/Microsoft\.Compute/galleries/[A-Za-z0-9_.]{1,80}"
    r"/images/[A-Za-z0-9_.-]{1,80}(?:/versions/\d{1,10}\.\d{1,10}\.\d{1,10})?",
    re.IGNORECASE,
)
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
# The subnets' sizes and places: ndfleet/stackconfig/addressing.py.

# Azure allows 65,536 private IP addresses per virtual network (Microsoft Learn, "Azure subscription and
# service limits, quotas, and constraints" > Networking limits). Every node holds one, and so does every node of
# the headroom (a repair or scale-out creates the new VM before the old address is released): `nodes` is bounded
# so that nodes + headroom fit, MAX_NODES = 54,613. The bound also keeps every refusal instant.
AZURE_MAX_PRIVATE_IPS_PER_VNET = 65_536


# Ranges Azure refuses in a virtual network's address space (Microsoft Learn, "Azure Virtual Network FAQ", "What
# address ranges can I use in my virtual networks?"). 168.63.129.16 is Azure's platform address: DNS, DHCP, the
# VM agent's and the health probes' host endpoint (Microsoft Learn, "What is IP address 168.63.129.16?").
AZURE_REFUSED_VNET_RANGES = {
    "224.0.0.0/4": "multicast",
    "255.255.255.255/32": "broadcast",
    "127.0.0.0/8": "loopback",
    "169.254.0.0/16": "link-local",
    "168.63.129.16/32": "Azure's platform address for DNS, DHCP and health probes",
}
AZURE_REFUSED_VNET_RANGES_SOURCE = "Microsoft Learn, Azure Virtual Network FAQ, address ranges"


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

# namePrefix's bound: ndfleet's own budget, so that every name built on the
# prefix fits its Azure limit with room to spare. The tightest: the accounting database's private endpoint,
# `<prefix>-slurm-accounting-mysql-pe` (27 characters after the prefix; a private endpoint's name is 2-64), and the
# hosts, `<prefix>-<island>-` (computerNamePrefix, the island up to 15) plus the scale set's 6-character instance id
# (a Linux computer name is at most 64: Microsoft Learn, "Naming rules and restrictions for Azure resources", and the
# Compute REST API's osProfile.computerName, "Max-length (Linux): 64 characters").
MAX_NAME_PREFIX = 20



def _gallery_id_fault(value: str) -> str:
    """The first part of a would-be gallery image id that is wrong (the value itself is shown shortened)."""
    parts = value.split("/")[1:]
    keys = ("subscriptions", "resourceGroups", "providers", "galleries", "images", "versions")
    want = dict(zip(range(0, 12, 2), keys, strict=True))
    checks = {1: _GUID, 7: r"[A-Za-z0-9_.]{1,80}", 9: r"[A-Za-z0-9_.-]{1,80}"}
    checks[11] = r"\d{1,10}\.\d{1,10}\.\d{1,10}"
    names = {1: "subscription id", 3: "resource group", 7: "gallery name", 9: "image definition", 11: "version"}
    if len(parts) not in (10, 12):
        return f"{len(parts)} parts, not 10 (a definition) or 12 (a version)"
    for i, part in enumerate(parts):
        if i in want and part.lower() != want[i].lower():
            return f"{part!r} where {want[i]!r} belongs"
        if i == 5 and part.lower() != "microsoft.compute":
            return f"provider {part!r}, not 'Microsoft.Compute'"
        if i in checks and not re.fullmatch(checks[i], part):
            return f"{names[i]} {part!r}"
    return "a name with characters Azure does not allow"


class FrozenModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SettingsModel(FrozenModel):
    """A block of settings as the user writes them. Strict: a boolean is never a number (`nodes: true` is an
    error, not 1 node), a string never a number, a number never a string."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class ElasticConfig(SettingsModel):
    """`islands[i].elastic`: Slurm adds nodes to the island when jobs wait for them and releases idle ones
    (docs/elastic.md). Off unless set: ND H100 v5 capacity is scarce, and a released node may not come back soon."""

    min_nodes: int = Field(default=0, ge=0, alias="minNodes")
    max_nodes: int = Field(ge=1, alias="maxNodes")
    idle_minutes: int = Field(default=60, ge=1, le=10080, alias="idleMinutes")
    # From the resume request to slurmd registering: VM allocation, set-up and full validation (whose default budget
    # is 40 minutes: the health probe's grace period) with room to spare. A node later than this is given up.
    resume_timeout_minutes: int = Field(default=60, ge=2, le=240, alias="resumeTimeoutMinutes")


class IslandConfig(SettingsModel):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,14}$")
    # Required unless `elastic` is set: an elastic island's size is elastic.maxNodes.
    nodes: int | None = Field(default=None, ge=1)
    elastic: ElasticConfig | None = None
    # Burned-in nodes of this island held out of scheduling, to take a failed node's place at once
    # (docs/operations.md, "Warm spares"). Part of `nodes`: 0 <= spares < nodes.
    spares: int = Field(default=0, ge=0)


class LustreConfig(SettingsModel):
    sku: str = "AMLFS-Durable-Premium-250"
    capacity_tib: int = Field(alias="capacityTiB")

    @field_validator("sku")
    @classmethod
    def _known_sku(cls, v: str) -> str:
        if v not in LUSTRE_SKUS:
            raise ValueError(f"unknown Managed Lustre SKU; valid: {', '.join(LUSTRE_SKUS)}")
        return v


class StorageConfig(SettingsModel):
    account_sku: Literal["Standard_LRS", "Standard_ZRS", "Standard_GRS", "Standard_GZRS"] = Field(
        default="Standard_ZRS", alias="accountSku"
    )
    soft_delete_days: int = Field(default=14, ge=1, le=365, alias="softDeleteDays")
    lustre: LustreConfig | None = None


class HealthConfig(SettingsModel):
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
# An encrypted (`secure:`) value as an offline tool sees it: the stack's key decrypts it only under the Pulumi CLI.
ENCRYPTED_VALUE = "[secret]"
SECRET_WEBHOOK = ENCRYPTED_VALUE


class MonitoringConfig(SettingsModel):
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


class SlurmConfig(SettingsModel):
    """`ndfleet:slurm`: the Slurm cluster's own machines and services (used when `scheduler: slurm`)."""

    # A Slurm release YY.MM.P (the one Azure CycleCloud's Slurm template pinned last: Azure/cyclecloud-slurm
    # templates/slurm.txt); the set-up installs the newest slurm-smd package revision of it that Microsoft's `stable`
    # channel has (docs/slurm.md). An exact package version YY.MM.P-R is also accepted.
    version: str = Field(default="25.11.5")
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
    # How long a requeued job waits before it may start again: Slurm's SchedulerParameters=requeue_delay from 25.11
    # on, before that AuthInfo cred_expire, the job step credential's lifetime (slurm.conf(5); slurmctld sets the
    # job's BeginTime to requeue + hold + 1; ndfleet/slurm/conf.py, requeue_hold_settings).
    # Slurm's default is 120 s and it refuses less than 5 (src/common/slurm_cred.c); 70 s is what AWS ParallelCluster
    # sets from 3.3.0 on "to reduce the time requeued jobs must wait" (aws-parallelcluster CHANGELOG.md): every second
    # of it is a second the whole job's nodes stand idle after a fault.
    requeue_hold_s: int = Field(default=70, ge=5, le=3600, alias="requeueHoldSeconds")
    # The Epilog measures each node at its job's end (validation level `epilog`: the quick checks and the 8-GPU
    # all-reduce against the VM size's floor), so a GPU slow with no clock-event reason is out before the next job
    # lands on it. Off, the Epilog runs the quick checks only: for a cluster of many short jobs, whose nodes would
    # spend each job's end measuring (docs/slurm.md).
    epilog_performance_check: bool = Field(default=True, alias="epilogPerformanceCheck")

    @field_validator("version")
    @classmethod
    def _slurm_release(cls, v: str) -> str:
        # Slurm releases are YY.MM (02, 05, 08 or 11) plus a patch level; dynamic nodes need 22.05 or newer. A
        # package version adds a revision (-1), which Microsoft raises when it rebuilds (Azure/cyclecloud-slurm #411).
        m = re.fullmatch(r"(2[2-9])\.(02|05|08|11)\.([0-9]{1,3})(-[1-9][0-9]{0,2})?", v)
        if m is None or (int(m.group(1)), int(m.group(2))) < (22, 5):
            raise ValueError(
                "must be a Slurm release YY.MM.P of 22.05 or newer (dynamic nodes), e.g. 25.11.5 (the newest "
                "slurm-smd package of it is installed), or an exact slurm-smd package version YY.MM.P-R, e.g. 25.11.5-1"
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


# A smoke run, from `pulumi up` to `pulumi destroy`, priced at this many hours unless `smoke.hours` says otherwise:
# Azure's creation of the cluster (Managed Lustre and Bastion take the longest), each node's set-up and validation
# (at most 1,510 s at dcgmLevel 1), a look at the result and the teardown (docs/smoke.md).
DEFAULT_SMOKE_HOURS = 2.0
# The smoke stack's validation: `full` at DCGM level 1 unless the base asks for less, so every check runs but the
# long DCGM diagnostics (levels 2 and 3) do not set its time (docs/smoke.md, "Validation").
SMOKE_DCGM_LEVEL = 1


class SmokeConfig(SettingsModel):
    """`ndfleet:smoke`: this stack is a smoke run of the stack `of`: every setting of `of`, one or two nodes per
    island (docs/smoke.md). ndfleet.stackconfig.smoke derives the rest when the stack file is read."""

    of: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,100}$")
    # None: 2 when the base runs Slurm (its burn-in pairs an island's nodes; derive.SLURM_MIN_ISLAND_NODES), else 1.
    nodes_per_island: int | None = Field(default=None, ge=1, le=2, alias="nodesPerIsland")
    # None: the base's DCGM level, at most SMOKE_DCGM_LEVEL.
    dcgm_level: int | None = Field(default=None, ge=0, le=3, alias="dcgmLevel")
    hours: float = Field(default=DEFAULT_SMOKE_HOURS, gt=0, le=168)


class StackConfig(SettingsModel):
    """The `ndfleet:*` keys of a stack, as written in `stacks/Pulumi.<stack>.yaml`."""

    location: str
    zone: Literal["1", "2", "3"] | None = None
    # The location is a region newer than ndfleet's region table (regions.py): accepted with a warning.
    new_region: bool = Field(default=False, alias="newRegion")
    vm_size: str = Field(default=DEFAULT_VM_SIZE, alias="vmSize")
    nodes: int | None = Field(default=None, ge=1, le=MAX_NODES)
    islands: list[IslandConfig] | None = Field(default=None, max_length=MAX_NODES)
    max_nodes_per_island: int = Field(
        default=DEFAULT_MAX_NODES_PER_ISLAND, ge=1, le=HARD_MAX_NODES_PER_ISLAND, alias="maxNodesPerIsland"
    )
    # The node count the compute subnet is sized for (default: the stack's nodes). Subnets are carved from the
    # VNet by size, so growing the compute subnet moves every other subnet: set this once to the largest size
    # the stack will reach, and growing up to it changes no address range.
    planned_nodes: int | None = Field(default=None, ge=1, le=MAX_NODES, alias="plannedNodes")
    image: str = DEFAULT_IMAGE
    # What the team's own image holds (docs/images.md, "A team's own image"): one of ndfleet's contracts
    # (`ubuntu-hpc-2204@22.04.2024102301`) or a contract file, relative to the stack file. Required with a gallery
    # image; a marketplace image gets its contract from ndfleet/images.
    image_contract: str | None = Field(default=None, alias="imageContract", min_length=1, max_length=500)
    admin_username: str = Field(default="azureuser", alias="adminUsername")
    ssh_public_key: str = Field(alias="sshPublicKey")
    vnet_address_space: str = Field(default=DEFAULT_VNET, alias="vnetAddressSpace")
    resource_group_name: str | None = Field(
        default=None, alias="resourceGroupName", pattern=r"^[-\w._()]{1,89}[-\w_()]$"
    )
    # At most MAX_NAME_PREFIX characters (why: beside it); a stack without it takes its name (derive.default_prefix).
    name_prefix: str | None = Field(
        default=None, alias="namePrefix", pattern=rf"^[a-z][a-z0-9-]{{0,{MAX_NAME_PREFIX - 2}}}[a-z0-9]$"
    )
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
    # Set in a smoke stack's file; the rest of its settings are its base's (ndfleet.stackconfig.smoke).
    smoke: SmokeConfig | None = None

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
        # Refused, not normalised, when only the case differs: ndfleet copies the name into the scale sets and keys
        # its profiles, prices and quota families by it, so the stack file holds the one spelling Azure lists
        # (`az vm list-skus`), and a later fix of its case can never show up in a diff.
        if v not in PROFILES:
            by_case = {p.lower(): p for p in PROFILES}
            close = difflib.get_close_matches(v, list(PROFILES), n=1, cutoff=0.9)
            guess = by_case.get(v.lower()) or (close[0] if close else None)
            case = guess is not None and guess.lower() == v.lower()
            hint = (f"did you mean '{guess}'" + (" (the spelling Azure lists; ndfleet takes no other)" if case else "")
                    + "? ") if guess else ""  # fmt: skip
            raise ValueError(f"unsupported VM size; {hint}valid: {', '.join(PROFILES)}")
        return v

    @field_validator("name_prefix")
    @classmethod
    def _one_dash(cls, v: str | None) -> str | None:
        # Host names are `<prefix>-<island>-<instance>`: a double dash would read as an empty part.
        if v is not None and "--" in v:
            raise ValueError("has a double dash ('--'): host and resource names join its parts with single dashes")
        return v

    @field_validator("image")
    @classmethod
    def _image_urn(cls, v: str) -> str:
        if v.startswith("/"):
            if not GALLERY_IMAGE_ID.fullmatch(v):
                raise ValueError(
                    f"is not an Azure Compute Gallery image id ({_gallery_id_fault(v)}): use {GALLERY_IMAGE_FORM} "
                    "(the version's resource id, `az sig image-version show --query id`), or a marketplace URN "
                    "publisher:offer:sku:version"
                )
            return v
        parts = v.split(":")
        if len(parts) != 4 or not all(parts):
            raise ValueError(
                f"must be a marketplace image URN publisher:offer:sku:version, e.g. {DEFAULT_IMAGE}, or an Azure "
                f"Compute Gallery image id {GALLERY_IMAGE_FORM}"
            )
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
        if "/" not in v:
            # ipaddress reads a bare address as a /32, one address: never what a VNet's range means, and which
            # prefix was meant cannot be guessed (10.70.0.0 could be a /16 or a /24).
            raise ValueError(f"has no prefix length: write the range in CIDR form, address/prefix, such as {v}/16")
        try:
            network = ipaddress.IPv4Network(v, strict=True)
        except ValueError as e:
            raise ValueError(f"must be an IPv4 network in CIDR form such as {DEFAULT_VNET} ({e})") from None
        refused = [f"{r} ({what})" for r, what in AZURE_REFUSED_VNET_RANGES.items() if network.overlaps(
            ipaddress.IPv4Network(r))]
        if refused:
            raise ValueError(
                f"overlaps {', '.join(refused)}, which Azure does not allow in a virtual network's address space "
                f"({AZURE_REFUSED_VNET_RANGES_SOURCE}); use a private range such as {DEFAULT_VNET}"
            )
        return v


