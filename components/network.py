"""Network: resource group, VNet, subnets, NSG, NAT gateway for outbound, optional Azure Bastion.

GPU nodes get no public IP. Outbound traffic leaves through a NAT gateway with one static public IP (so
partners can allow-list it); inbound from the Internet is denied; administrators reach nodes through Bastion.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.network as network
import pulumi_azure_native.resources as resources

from ndfleet.spec.config import ClusterSpec


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
    spec: ClusterSpec


class Network(pulumi.ComponentResource):
    resource_group_name: pulumi.Output[str]
    vnet_id: pulumi.Output[str]
    compute_subnet_id: pulumi.Output[str]
    storage_subnet_id: pulumi.Output[str]
    lustre_subnet_id: pulumi.Output[str] | None
    nat_public_ip: pulumi.Output[str | None]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:Network", name, None, opts)
        spec = args.spec
        child = pulumi.ResourceOptions(parent=self)
        zones = [spec.zone] if spec.zone else None
        tags = spec.tags

        if spec.resource_group_name is None:
            rg = resources.ResourceGroup(f"{name}-rg", location=spec.location, tags=tags, opts=child)
            self.resource_group_name = rg.name
        else:
            self.resource_group_name = pulumi.Output.from_input(spec.resource_group_name)
        rg_name = self.resource_group_name

        nsg = network.NetworkSecurityGroup(
            f"{name}-nsg",
            resource_group_name=rg_name,
            location=spec.location,
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

        def static_ip(ip_name: str) -> network.PublicIPAddress:
            # Standard SKU, static: what NAT gateways and Bastion require; never attached to a node.
            return network.PublicIPAddress(
                ip_name,
                resource_group_name=rg_name,
                location=spec.location,
                sku=network.PublicIPAddressSkuArgs(name="Standard", tier="Regional"),
                public_ip_allocation_method="Static",
                public_ip_address_version="IPv4",
                zones=zones,
                tags=tags,
                opts=child,
            )

        nat_ip = static_ip(f"{name}-nat-ip")
        nat = network.NatGateway(
            f"{name}-nat",
            resource_group_name=rg_name,
            location=spec.location,
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
            location=spec.location,
            address_space=network.AddressSpaceArgs(address_prefixes=[spec.network.address_space]),
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

        compute_subnet = subnet("compute", spec.network.compute.cidr, nsg_id=nsg.id, nat_id=nat.id, depends=[])
        storage_subnet = subnet(
            "storage", spec.network.storage.cidr, nsg_id=nsg.id, nat_id=None, depends=[compute_subnet]
        )
        last: network.Subnet = storage_subnet
        self.lustre_subnet_id = None
        if spec.network.lustre is not None:
            lustre_subnet = subnet("lustre", spec.network.lustre.cidr, nsg_id=nsg.id, nat_id=nat.id, depends=[last])
            self.lustre_subnet_id = lustre_subnet.id
            last = lustre_subnet

        self.bastion_host_name: pulumi.Output[str] | None = None
        if spec.bastion and spec.network.bastion is not None:
            # The subnet must be named AzureBastionSubnet; no NSG of ours on it (Bastion needs its own rules).
            bastion_subnet = subnet(
                "AzureBastionSubnet", spec.network.bastion.cidr, nsg_id=None, nat_id=None, depends=[last]
            )
            bastion_ip = static_ip(f"{name}-bastion-ip")
            bastion = network.BastionHost(
                f"{name}-bastion",
                resource_group_name=rg_name,
                location=spec.location,
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
