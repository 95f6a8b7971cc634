"""A private endpoint with its private DNS zone, VNet link and zone group: how a Slurm data service is reached.

A plain helper (not a component): the Slurm data-service components call it with `parent=self`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_azure_native.network as network
import pulumi_azure_native.privatedns as privatedns


@dataclass(frozen=True)
class PrivateLinkArgs:
    resource_group_name: pulumi.Input[str]
    location: str
    subnet_id: pulumi.Input[str]
    vnet_id: pulumi.Input[str]
    target_id: pulumi.Input[str]
    group_id: str  # the sub-resource: "vault", "mysqlServer", "file"
    zone_name: str  # the privatelink zone of that sub-resource
    tags: dict[str, str]


def private_link(name: str, args: PrivateLinkArgs, parent: pulumi.Resource) -> network.PrivateEndpoint:
    child = pulumi.ResourceOptions(parent=parent)
    endpoint = network.PrivateEndpoint(
        f"{name}-pe",
        resource_group_name=args.resource_group_name,
        location=args.location,
        subnet=network.SubnetArgs(id=args.subnet_id),
        private_link_service_connections=[
            network.PrivateLinkServiceConnectionArgs(
                name=args.group_id, private_link_service_id=args.target_id, group_ids=[args.group_id]
            )
        ],
        tags=args.tags,
        opts=child,
    )
    zone = privatedns.PrivateZone(
        f"{name}-dns",
        resource_group_name=args.resource_group_name,
        private_zone_name=args.zone_name,
        location="Global",
        tags=args.tags,
        opts=child,
    )
    privatedns.VirtualNetworkLink(
        f"{name}-dns-link",
        resource_group_name=args.resource_group_name,
        private_zone_name=zone.name,
        location="Global",
        registration_enabled=False,
        virtual_network=privatedns.SubResourceArgs(id=args.vnet_id),
        tags=args.tags,
        opts=child,
    )
    network.PrivateDnsZoneGroup(
        f"{name}-dns-group",
        resource_group_name=args.resource_group_name,
        private_endpoint_name=endpoint.name,
        private_dns_zone_group_name="default",
        private_dns_zone_configs=[network.PrivateDnsZoneConfigArgs(name=args.group_id, private_dns_zone_id=zone.id)],
        opts=child,
    )
    return endpoint


def cannot_delete_lock(
    name: str, scope: pulumi.Input[str], holds: str, parent: pulumi.Resource
) -> None:
    """Azure refuses to delete what this locks, whoever asks (Pulumi's `protect` only guards Pulumi)."""
    import pulumi_azure_native.authorization as authorization

    authorization.ManagementLockByScope(
        name,
        scope=scope,
        lock_name="ndfleet-data-cannot-delete",
        level="CanNotDelete",
        notes=f"Holds {holds}; remove this lock deliberately before deleting.",
        opts=pulumi.ResourceOptions(parent=parent),
    )
