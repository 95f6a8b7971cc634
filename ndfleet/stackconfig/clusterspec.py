"""The validated, derived cluster spec (`ClusterSpec`): everything the components need, decided once.

derive.py builds it from the settings (settings.py); load_spec (config.py) is the way in.
"""

from __future__ import annotations

from ndfleet import images
from ndfleet.images import ImageContract
from ndfleet.stackconfig.profiles import LustreSku, VmSizeProfile
from ndfleet.stackconfig.settings import FrozenModel, HealthConfig, MonitoringConfig, SlurmConfig, SmokeConfig


class ElasticSpec(FrozenModel):
    min_nodes: int
    idle_minutes: int
    resume_timeout_minutes: int


class IslandSpec(FrozenModel):
    """One InfiniBand island: one scale set, one placement group, one IB fabric. An elastic island's `nodes` is its
    maximum (what subnet, quota and Slurm's node names are sized for); Slurm decides how many run (docs/elastic.md)."""

    name: str
    index: int
    nodes: int
    elastic: ElasticSpec | None = None
    # Of `nodes`, how many the controller holds burned in and out of scheduling (docs/operations.md, "Warm spares").
    spares: int = 0

    @property
    def in_service(self) -> int:
        """Nodes that take jobs when the island is at full strength."""
        return self.nodes - self.spares


class SubnetSpec(FrozenModel):
    name: str
    cidr: str


class NetworkSpec(FrozenModel):
    address_space: str
    compute: SubnetSpec
    # How many nodes the compute subnet holds (with the headroom for repairs and the Slurm machines) before it,
    # and with it every other subnet, has to be re-ranged.
    compute_node_capacity: int
    storage: SubnetSpec
    lustre: SubnetSpec | None
    bastion: SubnetSpec | None


class ImageSpec(FrozenModel):
    """The `image` setting: a marketplace image, `publisher:offer:sku:version`, or an Azure Compute Gallery image
    (`gallery_id`, a version's resource id or its definition's), with the contract the stack declares for it
    (`imageContract`: `contract`, an ndfleet contract's name[@version] or a contract file's absolute path)."""

    publisher: str = ""
    offer: str = ""
    sku: str = ""
    version: str = ""
    gallery_id: str = ""
    contract: str = ""

    @classmethod
    def from_urn(cls, urn: str, contract: str = "") -> ImageSpec:
        """The spec of an `image` value, either form (settings.py checks it first)."""
        if urn.startswith("/"):
            _, _, version = urn.partition("/versions/")
            return cls(gallery_id=urn, version=version or "latest", contract=contract)
        publisher, offer, sku, version = urn.split(":")
        return cls(publisher=publisher, offer=offer, sku=sku, version=version, contract=contract)

    @property
    def from_gallery(self) -> bool:
        return bool(self.gallery_id)

    def contract_of(self) -> tuple[ImageContract, str]:
        """The image's contract and why it is not the image's own ("" when it is): images.for_image."""
        return images.for_image(self.urn, declared=self.contract)

    @property
    def urn(self) -> str:
        """The `image` value: the URN, or the gallery image's id."""
        return self.gallery_id or f"{self.publisher}:{self.offer}:{self.sku}:{self.version}"

    @property
    def pinned(self) -> bool:
        """False for `latest`, which Azure resolves to the newest published version each time it creates, scales out
        or reimages a VM (Microsoft Learn, "Modify a Virtual Machine Scale Set", OS Updates)."""
        return self.version.lower() != "latest"

    def versions_command(self, location: str | None = None) -> str:
        """The Azure CLI command that lists the published versions of this image (in `location`, when given)."""
        if self.gallery_id:
            # /subscriptions/<s>/resourceGroups/<g>/providers/Microsoft.Compute/galleries/<x>/images/<d>[/versions/<v>]
            parts = self.gallery_id.split("/")
            return (
                f"az sig image-version list --subscription {parts[2]} --resource-group {parts[4]} "
                f"--gallery-name {parts[8]} --gallery-image-definition {parts[10]} --output table"
            )
        where = f" --location {location}" if location else ""
        return (
            f"az vm image list{where} --publisher {self.publisher} --offer {self.offer} --sku {self.sku} --all "
            "--output table"
        )


class LustreSpec(FrozenModel):
    sku: LustreSku
    capacity_tib: int

    @property
    def throughput_mbps(self) -> int:
        return self.sku.mbps_per_tib * self.capacity_tib


class StorageSpec(FrozenModel):
    account_sku: str
    soft_delete_days: int
    containers: tuple[str, ...] = ("datasets", "checkpoints")
    lustre: LustreSpec | None


class ClusterSpec(FrozenModel):
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
    # Why `ndfleet:nodes` became several islands, one line for the plan (derive.island_split_line); None when the
    # stack lists its islands or they are one.
    island_split: str | None = None
    # `ndfleet:scheduler`: "slurm" adds the Slurm controller, login node(s), accounting database, vault and NFS
    # share (components/slurm*.py); `slurm` holds their settings (None when the scheduler is "none").
    scheduler: str = "none"
    slurm: SlurmConfig | None = None
    # A smoke stack (docs/smoke.md): its base and run length; None for any other stack.
    smoke: SmokeConfig | None = None

    @property
    def total_nodes(self) -> int:
        return sum(i.nodes for i in self.islands)

    @property
    def total_gpus(self) -> int:
        return self.total_nodes * self.profile.gpus_per_vm
