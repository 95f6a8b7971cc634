"""Where each subnet sits in the VNet: the small ones at fixed offsets in its lower half, the compute subnet is its
upper half, whatever the node count (docs/configuration.md, "Address plan").

Azure refuses to change a subnet's address range while anything is in it (Microsoft Learn, "Add, change, or delete a
virtual network subnet": the range can be changed only if there are no resources in the subnet). A compute subnet
sized from the node count therefore froze a stack at the size it was first deployed with, and carving the subnets by
size moved every other subnet (and the controller's fixed address with them) when it grew. Here nothing depends on
the node count: growing or shrinking a stack, or setting `plannedNodes` later, changes no address range and no fixed
address. The only ceiling is the VNet itself; a stack that needs more nodes than its upper half holds needs a larger
`vnetAddressSpace` (a new network, so a rebuild), and the plan says how many nodes fit.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

from ndfleet.stackconfig.settings import (
    AZURE_RESERVED_ADDRESSES_PER_SUBNET,
    NODE_HEADROOM_FRACTION,
    NODE_HEADROOM_MIN,
    node_headroom,
)

# Azure's smallest subnet is a /29 (Microsoft Learn, "Azure Virtual Network FAQ": the smallest supported IPv4 subnet is
# /29, the largest /2); Azure keeps 5 addresses of each (the first four and the last: the same FAQ, "Are there any
# restrictions on using IP addresses within these subnets?").
SMALLEST_SUBNET_PREFIX = 29


@dataclass(frozen=True)
class SubnetSlot:
    """A small subnet's fixed place: `offset` addresses after the VNet's first, `prefix` long."""

    name: str  # the Azure subnet name
    offset: int
    prefix: int
    why: str  # what it holds and why this size

    def network(self, vnet: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network((int(vnet.network_address) + self.offset, self.prefix))

    @property
    def end(self) -> int:
        """The offset just past the slot."""
        return self.offset + 2 ** (32 - self.prefix)


# Each slot is aligned to its own size and keeps its offset whether the others are used or not, so turning Lustre or
# Bastion on or off moves no other subnet. 32-63 is left free.
STORAGE_SLOT = SubnetSlot(
    "storage", 0, 27,
    "private endpoints (blob, Key Vault, MySQL, file share, Azure Monitor): a handful of addresses",
)  # fmt: skip
BASTION_SLOT = SubnetSlot(
    "AzureBastionSubnet", 64, 26,
    "Azure Bastion: the subnet must be named AzureBastionSubnet and be a /26 or larger (Microsoft Learn, "
    "\"About Azure Bastion configuration settings\", Azure Bastion subnet)",
)  # fmt: skip
LUSTRE_SLOT = SubnetSlot(
    "lustre", 512, 23,
    "Azure Managed Lustre, a subnet of its own: Microsoft Learn, \"Azure Managed Lustre file system "
    "prerequisites\", network size requirements, recommends a /24 for 96-196 TiB and a /23 for 200-400 TiB",
)  # fmt: skip
SUBNET_SLOTS = (STORAGE_SLOT, BASTION_SLOT, LUSTRE_SLOT)


def compute_subnet(vnet: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The compute subnet: the VNet's upper half (a /17 of a /16), for every node count."""
    half = vnet.num_addresses // 2
    return ipaddress.IPv4Network((int(vnet.network_address) + half, vnet.prefixlen + 1))


def machines_prefix(machines: int) -> int:
    """The longest prefix of a subnet that holds `machines` VMs, their headroom and Azure's reserved addresses."""
    needed = machines + node_headroom(machines) + AZURE_RESERVED_ADDRESSES_PER_SUBNET
    return min(SMALLEST_SUBNET_PREFIX, 32 - math.ceil(math.log2(needed)))


def compute_subnet_capacity(prefix: int, other_machines: int) -> int:
    """The most nodes a compute subnet of `prefix` holds beside `other_machines` (the Slurm VMs), with the
    headroom and Azure's reserved addresses: the inverse of machines_prefix."""
    room = 2 ** (32 - prefix) - AZURE_RESERVED_ADDRESSES_PER_SUBNET
    # No more than room / (1 + fraction) fit, nor room - the minimum headroom: start there (a /9 would otherwise
    # count down over a million candidates) and step down to the first that fits.
    machines = max(0, min(room - NODE_HEADROOM_MIN, int(room / (1 + NODE_HEADROOM_FRACTION)) + 1))
    while machines > 0 and machines + node_headroom(machines) > room:
        machines -= 1
    return max(0, machines - other_machines)


def smallest_vnet_prefix(slots: tuple[SubnetSlot, ...], machines: int) -> int:
    """The longest VNet prefix whose lower half holds `slots` and whose upper half holds `machines`."""
    lower = max((s.end for s in slots), default=0)
    by_slots = 32 - math.ceil(math.log2(max(lower, 2 ** (32 - SMALLEST_SUBNET_PREFIX)))) - 1
    return min(by_slots, machines_prefix(machines) - 1)


def layout(
    vnet: ipaddress.IPv4Network, slots: tuple[SubnetSlot, ...]
) -> tuple[ipaddress.IPv4Network, dict[str, ipaddress.IPv4Network]] | None:
    """The compute subnet and each slot's subnet; None if the slots do not fit in the lower half or the upper half
    is smaller than Azure's smallest subnet."""
    if vnet.prefixlen + 1 > SMALLEST_SUBNET_PREFIX or max((s.end for s in slots), default=0) > vnet.num_addresses // 2:
        return None
    return compute_subnet(vnet), {s.name: s.network(vnet) for s in slots}
