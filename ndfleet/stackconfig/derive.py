"""The checks across settings and the derived spec: islands, subnets, region, storage, Spot, monitoring.

`build_spec` takes settings that passed their own checks (settings.py) and returns a ClusterSpec or every
problem found; load_spec (config.py) calls it.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable
from pathlib import Path

from ndfleet_node.names import TAG_PREFIX, TAG_STACK

from ndfleet import images
from ndfleet.stackconfig.addressing import (
    BASTION_SLOT,
    LUSTRE_SLOT,
    STORAGE_SLOT,
    compute_subnet_capacity,
    layout,
    smallest_vnet_prefix,
)
from ndfleet.stackconfig.clusterspec import (
    ClusterSpec,
    ImageSpec,
    IslandSpec,
    LustreSpec,
    NetworkSpec,
    StorageSpec,
    SubnetSpec,
)
from ndfleet.stackconfig.islands import (
    SLURM_MIN_ISLAND_NODES,
    island_size,
    island_split_line,
    lone_island_problem,
    spare_problems,
)
from ndfleet.stackconfig.names import default_prefix, default_prefix_problem
from ndfleet.stackconfig.problems import show_value
from ndfleet.stackconfig.profiles import DEFAULT_MAX_NODES_PER_ISLAND, LUSTRE_SKUS, PROFILES, RDMA_RESERVED_CIDR
from ndfleet.stackconfig.regions import (
    OTHER_CLOUD_REGIONS,
    REGIONS,
    REGIONS_SOURCE,
    candidates,
    has_zones,
    zonal_near,
)
from ndfleet.stackconfig.settings import (
    DEFAULT_VNET,
    MAX_NODES,
    NAMESPACE,
    NODES_BOUND,
    MonitoringConfig,
    StackConfig,
)
from ndfleet.stackconfig.sshkeys import is_example_key

EXAMPLE_KEY_WARNING = (
    f"{NAMESPACE}:sshPublicKey is the example key of ndfleet's stacks/*.yaml: nobody has its private key, so "
    "no one could log in; replace it with your own public key (`pulumi up` refuses it)"
)


def latest_image_warning(image: ImageSpec) -> str:
    """What `latest` means for an island (ndfleet plan prints it; docs/plan-diff.md, "Image changes"); a gallery image
    definition without a version boots its newest version alike."""
    pin = (
        f"{image.gallery_id}/versions/<major.minor.patch>"
        if image.from_gallery
        else f"{image.publisher}:{image.offer}:{image.sku}:<version>"
    )
    return (
        f"{NAMESPACE}:image = {image.urn!r}: Azure resolves 'latest' each time it creates or reimages a VM, so each "
        "repair or scale-out may boot a newer image (GPU driver, OFED, NCCL) than the rest of its island; pin a "
        f"version, image: {pin} (the versions: {image.versions_command()})"
    )


def _declared_contract(config: StackConfig, image: ImageSpec, stack_dir: Path | None) -> tuple[ImageSpec, str]:
    """The image with the contract `imageContract` declares resolved (a file's path made absolute against the stack
    file's folder `stack_dir`, the file read and checked as ndfleet's own contracts are), or the problem with it ("" for
    none)."""
    declared = config.image_contract
    setting = f"{NAMESPACE}:imageContract"
    if declared is None:
        if image.from_gallery:
            return image, (
                f"{NAMESPACE}:image = {image.urn!r} is a gallery image, which has no contract in ndfleet/images: set "
                f"{setting} to the contract of what the image holds: one of ndfleet's "
                f"({', '.join(images.contract_names())}) when it is built on that marketplace image, or a contract "
                "file relative to the stack file "
                '(docs/images.md, "A team\'s own image")'
            )
        return image, ""
    if not image.from_gallery:
        return image, (
            f"{setting} = {declared!r}: applies only to a gallery image, and {NAMESPACE}:image = {image.urn!r} is a "
            "marketplace image, whose contract is ndfleet's (ndfleet/images); remove imageContract"
        )
    try:
        resolved = images.resolve_declared(declared, stack_dir)
    except images.ImageContractError as e:
        return image, f"{setting} = {declared!r}: {e}"
    return image.model_copy(update={"contract": resolved}), ""


def split_islands(nodes: int, max_per_island: int) -> list[int]:
    """Fill islands to the limit, the remainder last: 250 at 100 -> [100, 100, 50]."""
    count = math.ceil(nodes / max_per_island)
    return [max_per_island] * (count - 1) + [nodes - max_per_island * (count - 1)]


Ok = Callable[..., bool]


def build_spec(
    config: StackConfig, stack: str, broken: frozenset[str] = frozenset(), stack_dir: Path | None = None
) -> tuple[ClusterSpec | None, list[str]]:
    """The checks across settings and the derived spec. `broken`: top-level settings that failed their own
    check (replaced by defaults in `config`); a check that reads one of them is skipped, so that it neither
    repeats the problem nor reports one the user did not write. Returns (spec, []) or (None, problems).

    Named steps, in the order their problems and warnings are reported: islands, network, region, storage, the
    remaining settings; then the spec."""
    problems: list[str] = []
    warnings: list[str] = []

    def ok(*keys: str) -> bool:
        return not broken.intersection(keys)

    islands = _islands(config, ok, problems, warnings)
    network = _network(config, islands, ok, problems, warnings)
    _region(config, ok, problems, warnings)
    lustre = _lustre(config, ok, problems, warnings)
    image = _other_settings(config, stack, ok, problems, warnings, stack_dir)
    if problems or network is None:
        return None, problems
    return _spec(config, stack, islands, network, lustre, image, warnings), []


def _islands(config: StackConfig, ok: Ok, problems: list[str], warnings: list[str]) -> list[IslandSpec]:
    limit = config.max_nodes_per_island
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
        sizes = split_islands(config.nodes, limit)
        islands = [IslandSpec(name=f"ib{i:02d}", index=i, nodes=n) for i, n in enumerate(sizes)]
        if config.scheduler == "slurm" and min(sizes) < SLURM_MIN_ISLAND_NODES:
            split = " + ".join(str(n) for n in sizes)
            fix = (
                "set nodes to 2 or more" if len(sizes) == 1
                else f"choose a node count that leaves no island of 1 (maxNodesPerIsland = {limit}), or list islands"
            )
            shown = f" ({split} nodes)" if len(sizes) > 1 else ""
            problems.append(lone_island_problem(f"{NAMESPACE}:nodes = {config.nodes}{shown}", fix))
    else:
        assert config.islands is not None
        if not config.islands:
            problems.append(f"{NAMESPACE}:islands = []: list at least one island")
        seen: set[str] = set()
        for i, island in enumerate(config.islands):
            if island.name in seen:
                problems.append(f"{NAMESPACE}:islands[{i}].name = {island.name!r}: island names must be unique")
            seen.add(island.name)
            size, elastic, elastic_problems = island_size(island, i, config.scheduler)
            problems += elastic_problems + spare_problems(island, i, config.scheduler)
            if size > limit:
                key = "elastic.maxNodes" if island.elastic is not None else "nodes"
                problems.append(
                    f"{NAMESPACE}:islands[{i}].{key} = {size}: an InfiniBand island is one scale set with "
                    f"singlePlacementGroup, at most maxNodesPerIsland = {limit} nodes; split it into several islands"
                    + (" or raise maxNodesPerIsland (up to 300 after an Azure support request)" if limit < 300 else "")
                )
            islands.append(IslandSpec(name=island.name, index=i, nodes=max(size, 1), elastic=elastic,
                                      spares=island.spares))
        total = sum(i.nodes for i in islands)
        if total > MAX_NODES:
            problems.append(f"{NAMESPACE}:islands: {total:,} nodes in all; {NODES_BOUND}")
    if limit > DEFAULT_MAX_NODES_PER_ISLAND:
        warnings.append(
            f"{NAMESPACE}:maxNodesPerIsland = {limit}: scale sets above {DEFAULT_MAX_NODES_PER_ISLAND} VMs with "
            "singlePlacementGroup need an Azure support request to raise the placement-group limit (up to 300)"
        )

    return islands


def _network(
    config: StackConfig, islands: list[IslandSpec], ok: Ok, problems: list[str], warnings: list[str]
) -> NetworkSpec | None:
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
        warnings.append(
            f"{NAMESPACE}:vnetAddressSpace = {config.vnet_address_space!r} is not a private range: Azure routes it "
            "inside the VNet, so the nodes cannot reach the internet hosts that own it; prefer RFC 1918 space such "
            f"as {DEFAULT_VNET}"
        )
    total_nodes = sum(i.nodes for i in islands)
    # The Slurm controller and login VMs share the compute subnet (same NSG, NAT for packages, no public IP), at its
    # top (ndfleet.slurm.conf.slurm_addresses): the subnet never changes with the node count, so neither do they.
    slurm_machines = 1 + config.slurm.login_count if config.scheduler == "slurm" else 0
    sized_for = total_nodes
    if config.planned_nodes is not None and ok("plannedNodes"):
        if islands and config.planned_nodes < total_nodes:
            problems.append(
                f"{NAMESPACE}:plannedNodes = {config.planned_nodes}: below the stack's {total_nodes} nodes; it is the "
                "most nodes the stack will reach (the plan checks that the compute subnet holds them): set it to "
                f"{total_nodes} or more, or remove it"
            )
        sized_for = max(total_nodes, config.planned_nodes)
    if islands and vnet_fits and sized_for <= MAX_NODES and ok("storage", "bastion", "plannedNodes"):
        # The address plan (ndfleet/stackconfig/addressing.py): nothing in it depends on the node count.
        slots = tuple(
            slot for slot, used in ((STORAGE_SLOT, True), (LUSTRE_SLOT, config.storage.lustre is not None),
                                    (BASTION_SLOT, config.bastion))
            if used
        )  # fmt: skip
        planned = layout(vnet, slots)
        capacity = (
            compute_subnet_capacity(planned[0].prefixlen, slurm_machines) if planned is not None else 0
        )
        if planned is None or capacity < sized_for:
            smallest = smallest_vnet_prefix(slots, sized_for + slurm_machines)
            what = (
                f"{sized_for:,} nodes plus headroom" + (" (plannedNodes)" if sized_for > total_nodes else "")
                if planned is not None
                else "its fixed subnets"
            )
            problems.append(
                f"{NAMESPACE}:vnetAddressSpace = {config.vnet_address_space!r}: too small for {what}: the compute "
                "subnet is the upper half of the VNet"
                + (f" ({planned[0]}, room for {capacity:,} nodes)" if planned is not None else "")
                + ", the lower half holds "
                + ", ".join(f"{s.name} /{s.prefix}" for s in slots)
                + f" at fixed offsets (docs/network.md); use a /{smallest} or larger"
            )
        else:
            compute, fixed = planned
            network = NetworkSpec(
                address_space=str(vnet),
                compute=SubnetSpec(name="compute", cidr=str(compute)),
                compute_node_capacity=capacity,
                storage=SubnetSpec(name=STORAGE_SLOT.name, cidr=str(fixed[STORAGE_SLOT.name])),
                lustre=(
                    SubnetSpec(name=LUSTRE_SLOT.name, cidr=str(fixed[LUSTRE_SLOT.name]))
                    if LUSTRE_SLOT.name in fixed
                    else None
                ),
                bastion=(
                    SubnetSpec(name=BASTION_SLOT.name, cidr=str(fixed[BASTION_SLOT.name]))
                    if BASTION_SLOT.name in fixed
                    else None
                ),
            )

    return network


def _region(config: StackConfig, ok: Ok, problems: list[str], warnings: list[str]) -> None:
    # Region: known to the table, or said to be newer than it (a misspelt region fails only at `pulumi up`).
    if ok("location") and has_zones(config.location) is None:
        guesses = " or ".join(repr(g) for g in candidates(config.location))
        if config.new_region or config.location in OTHER_CLOUD_REGIONS:
            warnings.append(
                f"{NAMESPACE}:location = {config.location!r} is not in ndfleet's region table ({REGIONS_SOURCE}); "
                "taken as given" + (f"; did you mean {guesses}?" if guesses and config.new_region else "")
            )
        else:
            problems.append(
                f"{NAMESPACE}:location = {config.location!r} is not an Azure region ({REGIONS_SOURCE})"
                + (f"; did you mean {guesses}?" if guesses else "")
                + f" A region newer than that list: set {NAMESPACE}:newRegion: true"
            )
    # A zone in a region without zones: Azure refuses every zonal resource there (the scale sets, the NAT gateway and
    # its IP, Managed Lustre), and the first of them fails only after the network and storage exist.
    if ok("location", "zone") and config.zone is not None and has_zones(config.location) is False:
        display = REGIONS[config.location][0]
        near = " or ".join(repr(r) for r in zonal_near(config.location))
        problems.append(
            f"{NAMESPACE}:zone = {config.zone!r}: {config.location} ({display}) has no availability zones "
            f"({REGIONS_SOURCE}), so Azure would refuse the zonal scale sets, NAT gateway and Managed Lustre; remove "
            f"{NAMESPACE}:zone (a regional cluster), or choose a region with zones"
            + (f", e.g. {near}" if near else "")
        )



def _lustre(config: StackConfig, ok: Ok, problems: list[str], warnings: list[str]) -> LustreSpec | None:
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

    return lustre


def _other_settings(
    config: StackConfig, stack: str, ok: Ok, problems: list[str], warnings: list[str], stack_dir: Path | None
) -> ImageSpec:
    """Spot, Slurm, tags, image, key and monitoring; returns the image (its check warns on an unpinned one)."""
    # Spot: -1 means "pay up to the on-demand price"; otherwise a positive USD/hour cap. Only for Spot.
    if ok("priority", "spotMaxPrice"):
        if config.priority == "Spot" and not (config.spot_max_price == -1 or config.spot_max_price > 0):
            problems.append(
                f"{NAMESPACE}:spotMaxPrice = {config.spot_max_price}: use -1 (up to on-demand) or a price > 0"
            )
        if config.priority == "Regular" and "spot_max_price" in config.model_fields_set:
            problems.append(
                f"{NAMESPACE}:spotMaxPrice = {show_value(config.spot_max_price)}: applies only to Spot VMs, and "
                f"{NAMESPACE}:priority is 'Regular'; remove spotMaxPrice or set priority: Spot"
            )
    if config.priority == "Spot":
        warnings.append(f"{NAMESPACE}:priority = 'Spot': nodes can be evicted at any time; checkpoint often")
    if config.scheduler == "slurm" and not config.bastion:
        # The login nodes have private addresses only (docs/slurm.md): Bastion is the way in from outside the VNet.
        warnings.append(
            f"{NAMESPACE}:scheduler = 'slurm' with {NAMESPACE}:bastion off: the login node has no public address, so "
            f"it is reachable only from inside the VNet (a peered network or VPN); set {NAMESPACE}:bastion: true to "
            "reach it through Azure Bastion"
        )
    elif not config.bastion:
        # No machine of the stack has a public address, by design (docs/deploying.md, "Reaching a node").
        warnings.append(
            f"{NAMESPACE}:bastion off: the nodes have no public address, so they are reachable only from inside the "
            "VNet (a VM there, a peered network or a VPN gateway), not from a laptop on the internet; set "
            f"{NAMESPACE}:bastion: true to reach them through Azure Bastion (docs/deploying.md, \"Reaching a node\")"
        )
    if config.scheduler != "slurm" and "slurm" in config.model_fields_set:
        problems.append(
            f"{NAMESPACE}:slurm is set but {NAMESPACE}:scheduler = {config.scheduler!r}: set {NAMESPACE}:scheduler to "
            "'slurm' to deploy the Slurm cluster, or remove the slurm section"
        )
    reserved_tags = [k for k in config.tags if k.startswith(TAG_PREFIX)]
    if reserved_tags:
        problems.append(f"{NAMESPACE}:tags: names starting with 'ndfleet:' are set by ndfleet itself: {reserved_tags}")
    image = ImageSpec.from_urn(config.image)
    if ok("image") and not image.pinned:
        warnings.append(latest_image_warning(image))
    problem = ""
    if ok("image", "imageContract"):
        image, problem = _declared_contract(config, image, stack_dir)
        if problem:
            problems.append(problem)
    if ok("image", "imageContract") and not problem:
        # The nodes are rendered from the image's contract (ndfleet/images, docs/images.md): a version nobody has read
        # is set up as for the newest build read, and the plan says so.
        _, uncontracted = image.contract_of()
        if uncontracted:
            warnings.append(f"{NAMESPACE}:image = {image.urn!r}: {uncontracted}")
    if ok("sshPublicKey") and is_example_key(config.ssh_public_key):
        warnings.append(EXAMPLE_KEY_WARNING)

    if ok("monitoring"):
        problems += monitoring_problems(config.monitoring)
    if ok("namePrefix") and config.name_prefix is None and (prefix_problem := default_prefix_problem(stack)):
        problems.append(prefix_problem)

    return image


def _spec(
    config: StackConfig,
    stack: str,
    islands: list[IslandSpec],
    network: NetworkSpec,
    lustre: LustreSpec | None,
    image: ImageSpec,
    warnings: list[str],
) -> ClusterSpec:
    profile = PROFILES[config.vm_size]
    limit = config.max_nodes_per_island
    prefix = config.name_prefix or default_prefix(stack)
    split = (
        island_split_line(config.nodes, [i.nodes for i in islands], limit) if config.nodes is not None else None
    )
    spec = ClusterSpec(
        stack=stack,
        name_prefix=prefix,
        location=config.location,
        zone=config.zone,
        profile=profile,
        islands=tuple(islands),
        max_nodes_per_island=limit,
        image=image,
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
        tags={**config.tags, TAG_STACK: stack},
        preflight=config.preflight,
        subscription_id=config.subscription_id,
        warnings=tuple(warnings),
        island_split=split,
        scheduler=config.scheduler,
        slurm=config.slurm if config.scheduler == "slurm" else None,
        smoke=config.smoke,
    )
    return spec


def monitoring_problems(monitoring: MonitoringConfig) -> list[str]:
    """Cross-field checks of `ndfleet:monitoring` (the field checks are on MonitoringConfig)."""
    if monitoring.enabled and not monitoring.emails and not monitoring.webhooks:
        return [
            f"{NAMESPACE}:monitoring.emails / {NAMESPACE}:monitoring.webhooks: monitoring is enabled but no one "
            "would be notified; list at least one e-mail address or https:// webhook"
        ]
    return []
