"""The cluster: network, node identity, storage and one InfiniBand island per scale set, from prepared artefacts.

`Cluster` is the one component that reads the whole stack: it takes `ndfleet.prepare.PreparedCluster` (the
validated spec, each island's rendered bootstrap, the effective health grace period, the cloud) and hands each
part only what it needs through its own `...Args`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_azure_native.authorization as authorization
from ndfleet_node.names import (
    TAG_IDENTITY_CLIENT_ID,
    TAG_LUSTRE_MGS,
    TAG_METRICS_DCR,
    TAG_METRICS_ENDPOINT,
    TAG_STORAGE_ACCOUNT,
)

from ndfleet.components.elastic_scaling import ElasticScaling, ElasticScalingArgs
from ndfleet.components.ib_island import HealthArgs, IbIsland, IbIslandArgs, ImageArgs
from ndfleet.components.identity import NodeIdentity, NodeIdentityArgs
from ndfleet.components.impact_reporting import ImpactReporting, ImpactReportingArgs
from ndfleet.components.monitoring import Monitoring, MonitoringArgs
from ndfleet.components.network import Network, NetworkArgs
from ndfleet.components.roll_access import RollAccess, RollAccessArgs
from ndfleet.components.slurm import ControllerMetrics, SlurmCluster, SlurmClusterArgs, SlurmMachineBoot
from ndfleet.components.storage import LustreArgs, Storage, StorageArgs, storage_account_name
from ndfleet.prepare import PreparedCluster, PreparedIsland
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.names import computer_name_prefix
from ndfleet.stackconfig.summary import spec_summary


@dataclass(frozen=True)
class ClusterArgs:
    prepared: PreparedCluster


def network_args(spec: ClusterSpec) -> NetworkArgs:
    net = spec.network
    return NetworkArgs(
        location=spec.location,
        address_space=net.address_space,
        compute_cidr=net.compute.cidr,
        storage_cidr=net.storage.cidr,
        lustre_cidr=net.lustre.cidr if net.lustre is not None else None,
        bastion_cidr=net.bastion.cidr if spec.bastion and net.bastion is not None else None,
        zone=spec.zone,
        resource_group_name=spec.resource_group_name,
        tags=spec.tags,
    )


def storage_args(
    prepared: PreparedCluster, net: Network, identity: NodeIdentity, subscription_id: pulumi.Output[str]
) -> StorageArgs:
    spec = prepared.spec
    lustre = spec.storage.lustre
    if lustre is not None and net.lustre_subnet_id is None:
        raise ValueError("the spec has Managed Lustre but the network has no Lustre subnet")
    return StorageArgs(
        resource_group_name=net.resource_group_name,
        location=spec.location,
        account_name=subscription_id.apply(lambda sub: storage_account_name(spec.name_prefix, sub, spec.stack)),
        private_endpoint_subnet_id=net.storage_subnet_id,
        vnet_id=net.vnet_id,
        account_sku=spec.storage.account_sku,
        soft_delete_days=spec.storage.soft_delete_days,
        containers=spec.storage.containers,
        blob_data_principal_id=identity.principal_id,
        subscription_id=subscription_id,
        cloud=prepared.cloud,
        lustre=(
            LustreArgs(
                sku=lustre.sku.name,
                capacity_tib=lustre.capacity_tib,
                subnet_id=net.lustre_subnet_id,  # type: ignore[arg-type]  # checked above
                zone=spec.zone,
            )
            if lustre is not None
            else None
        ),
        tags=spec.tags,
    )


def monitoring_args(
    prepared: PreparedCluster, net: Network, identity: NodeIdentity, subscription_id: pulumi.Output[str]
) -> MonitoringArgs:
    spec = prepared.spec
    return MonitoringArgs(
        resource_group_name=net.resource_group_name,
        location=spec.location,
        stack=spec.stack,
        name_prefix=spec.name_prefix,
        vnet_id=net.vnet_id,
        private_endpoint_subnet_id=net.storage_subnet_id,
        node_principal_id=identity.principal_id,
        subscription_id=subscription_id,
        alerts=prepared.alerts,
        emails=spec.monitoring.emails,
        webhooks=spec.monitoring.webhooks,
        tags=spec.tags,
    )


def island_args(
    spec: ClusterSpec,
    p: PreparedIsland,
    net: Network,
    identity: NodeIdentity,
    image: ImageArgs,
    health: HealthArgs,
    node_tags: Mapping[str, pulumi.Input[str]],
    node_boot_dependencies: Sequence[pulumi.Resource],
) -> IbIslandArgs:
    return IbIslandArgs(
        resource_group_name=net.resource_group_name,
        location=spec.location,
        subnet_id=net.compute_subnet_id,
        identity_id=identity.id,
        ssh_public_key=spec.ssh_public_key,
        custom_data=p.bootstrap.custom_data,
        user_data=p.bootstrap.vm_user_data or None,
        # An elastic island starts empty: Slurm's power saving creates its VMs (docs/elastic.md).
        node_count=0 if p.island.elastic is not None else p.island.nodes,
        elastic=p.island.elastic is not None,
        scale_set_name=p.scale_set_name,
        boot_version=p.boot_version,
        slurm_release=p.slurm_release,
        vm_size=spec.profile.name,
        island_name=p.island.name,
        computer_name_prefix=computer_name_prefix(spec.name_prefix, p.island.name),
        admin_username=spec.admin_username,
        zone=spec.zone,
        image=image,
        os_disk_size_gb=spec.os_disk_size_gb,
        health=health,
        priority="Spot" if spec.priority == "Spot" else "Regular",
        spot_max_price=spec.spot_max_price,
        proximity_placement_group=spec.proximity_placement_group,
        tags=node_tags,
        # First boot needs every private endpoint it reaches, their DNS records and the node
        # identity's role assignments: blob storage, and with them on, Slurm and monitoring.
        boot_dependencies=node_boot_dependencies,
    )



def slurm_machine_boot(prepared: PreparedCluster, role: str) -> SlurmMachineBoot:
    """The Slurm `role`'s boot data, as prepared: the VM's customData and userData."""
    machine = prepared.slurm_machine(role)
    return SlurmMachineBoot(custom_data=machine.custom_data, user_data=machine.user_data)


def cluster_outputs(
    prepared: PreparedCluster,
    net: Network,
    store: Storage,
    islands: Sequence[IbIsland],
    monitoring: Monitoring | None,
    slurm: SlurmCluster | None,
) -> dict[str, pulumi.Input[object]]:
    """The stack's outputs (`pulumi stack output`)."""
    spec = prepared.spec
    outputs: dict[str, pulumi.Input[object]] = {
        "resourceGroupName": net.resource_group_name,
        "islands": {
            p.island.name: {"scaleSetId": component.scale_set_id, "nodeCount": component.node_count}
            for p, component in zip(prepared.islands, islands, strict=True)
        },
        "storage": {
            "accountName": store.account_name,
            "blobEndpoint": store.blob_endpoint,
            "containers": list(spec.storage.containers),
            "lustreMgsAddress": store.lustre_mgs_address,
        },
        "natPublicIp": net.nat_public_ip,
        "bastionName": net.bastion_host_name,
        "slurmTopology": prepared.slurm_topology,
        "summary": spec_summary(spec),
    }
    if monitoring is not None:
        outputs["monitoring"] = {
            "workspaceId": monitoring.workspace_id,
            "grafanaName": monitoring.grafana_name,
            "grafanaEndpoint": monitoring.grafana_endpoint,
        }
    if slurm is not None:
        outputs["slurm"] = slurm.outputs
    return outputs


class Cluster(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:Cluster", name, None, opts)
        prepared = args.prepared
        spec = prepared.spec
        child = pulumi.ResourceOptions(parent=self)
        client_config = authorization.get_client_config_output()
        subscription_id = client_config.subscription_id

        net = Network(f"{name}-net", network_args(spec), opts=child)
        self.network = net
        identity = NodeIdentity(
            f"{name}-nodes",
            NodeIdentityArgs(resource_group_name=net.resource_group_name, location=spec.location, tags=spec.tags),
            opts=child,
        )
        self.identity = identity
        store = Storage(
            f"{name}-data",
            storage_args(prepared, net, identity, subscription_id),
            opts=child,
        )
        self.storage = store

        # Values only known after deployment reach the node through its scale set's tags, which it reads from
        # the instance metadata service at boot: customData stays deterministic and holds no secrets.
        node_tags: dict[str, pulumi.Input[str]] = {
            **spec.tags,
            TAG_STORAGE_ACCOUNT: store.account_name,
            TAG_IDENTITY_CLIENT_ID: identity.client_id,
        }
        if store.lustre_mgs_address is not None:
            node_tags[TAG_LUSTRE_MGS] = store.lustre_mgs_address
        controller_metrics: ControllerMetrics | None = None
        monitoring: Monitoring | None = None
        if spec.monitoring.enabled:
            monitoring = Monitoring(
                f"{name}-mon",
                monitoring_args(prepared, net, identity, subscription_id),
                opts=child,
            )
            metrics_tags: dict[str, pulumi.Input[str]] = {
                TAG_METRICS_ENDPOINT: monitoring.ingest_endpoint,
                TAG_METRICS_DCR: monitoring.rule_immutable_id,
            }
            node_tags.update(metrics_tags)
            # The Slurm controller publishes every node's Slurm state through the same rule (ndfleet status).
            controller_metrics = ControllerMetrics(
                rule_id=monitoring.rule_id, tags=metrics_tags, boot_dependencies=monitoring.path_dependencies
            )
        slurm: SlurmCluster | None = None
        if spec.scheduler == "slurm":
            slurm = SlurmCluster(
                f"{name}-slurm",
                SlurmClusterArgs(
                    spec=spec,
                    resource_group_name=net.resource_group_name,
                    vnet_id=net.vnet_id,
                    compute_subnet_id=net.compute_subnet_id,
                    storage_subnet_id=net.storage_subnet_id,
                    subscription_id=subscription_id,
                    tenant_id=client_config.tenant_id,
                    node_principal_id=identity.principal_id,
                    controller_boot=slurm_machine_boot(prepared, "controller"),
                    login_boot=slurm_machine_boot(prepared, "login"),
                    metrics=controller_metrics,
                    vault_slots=prepared.vault_slots,
                ),
                opts=child,
            )
            # The nodes find the vault (munge key) and the NFS share through their scale set's tags.
            node_tags.update(slurm.node_tags)
        health = HealthArgs(
            probe_port=spec.health.probe_port,
            probe_grace_period_seconds=prepared.probe_grace_period_s,
            repair_action=spec.health.repair_action,
            repair_grace_period_minutes=spec.health.repair_grace_period_minutes,
        )
        image = ImageArgs(
            publisher=spec.image.publisher,
            offer=spec.image.offer,
            sku=spec.image.sku,
            version=spec.image.version,
            gallery_id=spec.image.gallery_id,
        )
        node_boot_dependencies: list[pulumi.Resource] = list(store.boot_dependencies)
        if slurm is not None:
            node_boot_dependencies += slurm.node_boot_dependencies
        if monitoring is not None:
            node_boot_dependencies += monitoring.boot_dependencies
        impact = ImpactReporting(
            f"{name}-impact",
            ImpactReportingArgs(spec=spec, principal_id=identity.principal_id, subscription_id=subscription_id),
            opts=child,
        )
        node_boot_dependencies += impact.boot_dependencies
        self.islands = [
            IbIsland(
                f"{name}-{p.island.name}",
                island_args(spec, p, net, identity, image, health, node_tags, node_boot_dependencies),
                opts=child,
            )
            for p in prepared.islands
        ]
        elastic = {
            p.island.name: component.scale_set_id
            for p, component in zip(prepared.islands, self.islands, strict=True)
            if p.island.elastic is not None
        }
        if elastic and slurm is not None:
            ElasticScaling(
                f"{name}-elastic",
                ElasticScalingArgs(
                    resource_group_id=pulumi.Output.all(subscription_id, net.resource_group_name).apply(
                        lambda a: f"/subscriptions/{a[0]}/resourceGroups/{a[1]}"
                    ),
                    controller_principal_id=slurm.controller_principal_id,
                    scale_set_ids=elastic,
                    subnet_id=net.compute_subnet_id,
                    node_identity_id=identity.id,
                    role_name=pulumi.Output.all(subscription_id, net.resource_group_name).apply(
                        lambda a: f"ndfleet elastic scaler ({spec.name_prefix}, {spec.stack}; {a[1]} in {a[0]})"
                    ),
                ),
                opts=child,
            )
        if slurm is not None:
            # The roll on the controller brings every island's VMs to its scale set's model (docs/upgrades.md).
            RollAccess(
                f"{name}-roll",
                RollAccessArgs(
                    resource_group_id=pulumi.Output.all(subscription_id, net.resource_group_name).apply(
                        lambda a: f"/subscriptions/{a[0]}/resourceGroups/{a[1]}"
                    ),
                    controller_principal_id=slurm.controller_principal_id,
                    scale_set_ids={p.island.name: c.scale_set_id for p, c in zip(prepared.islands, self.islands,
                                                                                 strict=True)},  # fmt: skip
                    role_name=pulumi.Output.all(subscription_id, net.resource_group_name).apply(
                        lambda a: f"ndfleet roll ({spec.name_prefix}, {spec.stack}; {a[1]} in {a[0]})"
                    ),
                ),
                opts=child,
            )

        self.outputs = cluster_outputs(prepared, net, store, self.islands, monitoring, slurm)
        self.register_outputs(self.outputs)
