"""Network: resource group, VNet, subnets, NSG, NAT gateway for outbound, optional Azure Bastion.

GPU nodes get no public IP. Outbound traffic leaves through a NAT gateway with one static public IP (so
partners can allow-list it); inbound from the Internet is denied; administrators reach nodes through Bastion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native.network as network
import pulumi_azure_native.resources as resources


def _inbound_rule(name: str, priority: int, access: str, source: str, destination: str) -> network.SecurityRuleArgs:
    return network.SecurityRuleArgs(
        name=name,
        priority=priority,
        direction="Inbound",
        access=access,
        protocol="*",
        source_address_prefix=source,
        source_port_range="*",
        destination_address_prefix=destination,
        destination_port_range="*",
    )


@dataclass(frozen=True)
class NetworkArgs:
    """A new VNet for one cluster. To use an existing network instead, skip this component and pass its subnet
    ids to IbIslandArgs / StorageArgs (examples/bring-your-own-network)."""

    location: str
    address_space: str
    compute_cidr: str
    storage_cidr: str
    lustre_cidr: str | None = None
    bastion_cidr: str | None = None  # set to deploy Azure Bastion (subnet AzureBastionSubnet)
    zone: str | None = None
    resource_group_name: str | None = None  # an existing group; default: a new one
    tags: Mapping[str, str] = field(default_factory=dict)


class Network(pulumi.ComponentResource):
    resource_group_name: pulumi.Output[str]
    vnet_id: pulumi.Output[str]
    compute_subnet_id: pulumi.Output[str]
    storage_subnet_id: pulumi.Output[str]
    lustre_subnet_id: pulumi.Output[str] | None
    nat_public_ip: pulumi.Output[str | None]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        zones = [args.zone] if args.zone else None
        tags = dict(args.tags)
        location = args.location

        if args.resource_group_name is None:
            rg = resources.ResourceGroup(f"{name}-rg", location=location, tags=tags, opts=child)
            self.resource_group_name = rg.name
        else:
            self.resource_group_name = pulumi.Output.from_input(args.resource_group_name)
        rg_name = self.resource_group_name

        nsg = network.NetworkSecurityGroup(
            f"{name}-nsg",
            resource_group_name=rg_name,
            location=location,
            security_rules=[
                # Node-to-node (NCCL bootstrap over TCP, Slurm, NFS, Lustre 988/1019-1023) stays inside the VNet.
                _inbound_rule("allow-vnet-inbound", 100, "Allow", "VirtualNetwork", "VirtualNetwork"),
                # Azure's health probes (Application Health extension, load balancers) come from this tag.
                _inbound_rule("allow-azure-lb-inbound", 110, "Allow", "AzureLoadBalancer", "*"),
                # Explicit, so a later broad allow rule added by hand cannot silently open the nodes.
                _inbound_rule("deny-internet-inbound", 4000, "Deny", "Internet", "*"),
            ],
            tags=tags,
            opts=child,
        )

        def static_ip(ip_name: str, ip_zones: list[str] | None) -> network.PublicIPAddress:
            # Standard SKU, static: what NAT gateways and Bastion require; never attached to a node.
            return network.PublicIPAddress(
                ip_name,
                resource_group_name=rg_name,
                location=location,
                sku=network.PublicIPAddressSkuArgs(name="Standard", tier="Regional"),
                public_ip_allocation_method="Static",
                public_ip_address_version="IPv4",
                zones=ip_zones,
                tags=tags,
                opts=child,
            )

        # The NAT gateway and its IP share the cluster's zone (a zonal NAT gateway needs an IP in its zone).
        nat_ip = static_ip(f"{name}-nat-ip", zones)
        nat = network.NatGateway(
            f"{name}-nat",
            resource_group_name=rg_name,
            location=location,
            sku=network.NatGatewaySkuArgs(name="Standard"),
            public_ip_addresses=[network.SubResourceArgs(id=nat_ip.id)],
            idle_timeout_in_minutes=10,
            zones=zones,
            tags=tags,
            opts=child,
        )

        vnet = network.VirtualNetwork(
            f"{name}-vnet",
            resource_group_name=rg_name,
            location=location,
            address_space=network.AddressSpaceArgs(address_prefixes=[args.address_space]),
            tags=tags,
            # Subnets are their own resources below; ignore them here so the two never fight.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["subnets"]),
        )

        def subnet(
            key: str,
            cidr: str,
            *,
            nsg_id: pulumi.Output[str] | None,
            nat_id: pulumi.Output[str] | None,
            depends: list[pulumi.Resource],
        ) -> network.Subnet:
            return network.Subnet(
                f"{name}-{key}",
                resource_group_name=rg_name,
                virtual_network_name=vnet.name,
                subnet_name=key,
                address_prefix=cidr,
                network_security_group=network.NetworkSecurityGroupArgs(id=nsg_id) if nsg_id is not None else None,
                nat_gateway=network.SubResourceArgs(id=nat_id) if nat_id is not None else None,
                # No implicit outbound IP: outbound goes through the NAT gateway only (Bastion has its own IP).
                default_outbound_access=False if key != "AzureBastionSubnet" else None,
                private_endpoint_network_policies="Disabled",
                # Azure serialises writes to one VNet's subnets; chain them to avoid AnotherOperationInProgress.
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends),
            )

        compute_subnet = subnet("compute", args.compute_cidr, nsg_id=nsg.id, nat_id=nat.id, depends=[])
        storage_subnet = subnet("storage", args.storage_cidr, nsg_id=nsg.id, nat_id=None, depends=[compute_subnet])
        last: network.Subnet = storage_subnet
        self.lustre_subnet_id = None
        if args.lustre_cidr is not None:
            lustre_subnet = subnet("lustre", args.lustre_cidr, nsg_id=nsg.id, nat_id=nat.id, depends=[last])
            self.lustre_subnet_id = lustre_subnet.id
            last = lustre_subnet

        self.bastion_host_name: pulumi.Output[str] | None = None
        if args.bastion_cidr is not None:
            # The subnet must be named AzureBastionSubnet; no NSG of ours on it (Bastion needs its own rules).
            bastion_subnet = subnet("AzureBastionSubnet", args.bastion_cidr, nsg_id=None, nat_id=None, depends=[last])
            # Bastion is deployed without zones (zone redundancy for Bastion is a preview in a few regions only:
            # Microsoft Learn, "Reliability in Azure Bastion"), so its public IP is non-zonal too: a zonal IP on a
            # non-zonal Bastion may be refused, and the two must agree.
            bastion_ip = static_ip(f"{name}-bastion-ip", None)
            bastion = network.BastionHost(
                f"{name}-bastion",
                resource_group_name=rg_name,
                location=location,
                # Standard with tunnelling: `az network bastion ssh` from the admin's own terminal, key auth.
                sku=network.SkuArgs(name="Standard"),
                enable_tunneling=True,
                enable_ip_connect=True,
                ip_configurations=[
                    network.BastionHostIPConfigurationArgs(
                        name="bastion",
                        subnet=network.SubResourceArgs(id=bastion_subnet.id),
                        public_ip_address=network.SubResourceArgs(id=bastion_ip.id),
                    )
                ],
                tags=tags,
                opts=child,
            )
            self.bastion_host_name = bastion.name

        self.vnet_id = vnet.id
        self.compute_subnet_id = compute_subnet.id
        self.storage_subnet_id = storage_subnet.id
        self.nat_public_ip = nat_ip.ip_address
        self.register_outputs(
            {
                "resourceGroupName": self.resource_group_name,
                "vnetId": self.vnet_id,
                "computeSubnetId": self.compute_subnet_id,
                "storageSubnetId": self.storage_subnet_id,
            }
        )
