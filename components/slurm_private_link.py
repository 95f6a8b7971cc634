"""A private endpoint with its private DNS zone, VNet link and zone group: how a data service is reached privately.

A plain helper (not a component): the Slurm data-service components and Storage call it with `parent=self`. The endpoint
waits for `after` (the service's own writes, so nothing writes to one resource concurrently), the zone group for
the endpoint and the VNet link; `PrivateLink.boot_dependencies` is what a machine must wait for before its first
boot reaches the service by name (the endpoint, the zone's VNet link and the A record the zone group writes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_azure_native.network as network
import pulumi_azure_native.privatedns as privatedns


@dataclass(frozen=True)
class PrivateLinkArgs:
    resource_group_name: pulumi.Input[str]
    location: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    vnet_id: pulumi.Input[str]
    target_id: pulumi.Input[str]
    group_id: str  # the sub-resource: "vault", "mysqlServer", "file"
    zone_name: str  # the privatelink zone of that sub-resource
    tags: dict[str, str]


@dataclass(frozen=True)
class PrivateLink:
    endpoint: network.PrivateEndpoint
    dns_link: privatedns.VirtualNetworkLink
    dns_group: network.PrivateDnsZoneGroup

    @property
    def boot_dependencies(self) -> list[pulumi.Resource]:
        return [self.endpoint, self.dns_link, self.dns_group]


def private_link(
    name: str, args: PrivateLinkArgs, parent: pulumi.Resource, after: Sequence[pulumi.Resource] = ()
) -> PrivateLink:
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
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)),
    )
    zone = privatedns.PrivateZone(
        f"{name}-dns",
        resource_group_name=args.resource_group_name,
        private_zone_name=args.zone_name,
        location="Global",
        tags=args.tags,
        opts=child,
    )
    link = privatedns.VirtualNetworkLink(
        f"{name}-dns-link",
        resource_group_name=args.resource_group_name,
        private_zone_name=zone.name,
        location="Global",
        registration_enabled=False,
        virtual_network=privatedns.SubResourceArgs(id=args.vnet_id),
        tags=args.tags,
        opts=child,
    )
    group = network.PrivateDnsZoneGroup(
        f"{name}-dns-group",
        resource_group_name=args.resource_group_name,
        private_endpoint_name=endpoint.name,
        private_dns_zone_group_name="default",
        private_dns_zone_configs=[network.PrivateDnsZoneConfigArgs(name=args.group_id, private_dns_zone_id=zone.id)],
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[endpoint, link]),
    )
    return PrivateLink(endpoint, link, group)


def cannot_delete_lock(
    name: str,
    scope: pulumi.Input[str],
    holds: str,
    parent: pulumi.Resource,
    after: Sequence[pulumi.Resource] = (),
) -> None:
    """Azure refuses to delete what this locks, whoever asks (Pulumi's `protect` only guards Pulumi). `after`: put
    it on last, so that nothing under it is left half-made (a failed private endpoint cannot be deleted under a
    CanNotDelete lock: `ScopeLocked`)."""
    import pulumi_azure_native.authorization as authorization

    authorization.ManagementLockByScope(
        name,
        scope=scope,
        lock_name="ndfleet-data-cannot-delete",
        level="CanNotDelete",
        notes=f"Holds {holds}; remove this lock deliberately before deleting.",
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)),
    )
