"""The cluster: network, storage, node identity and one InfiniBand island per scale set, from one ClusterSpec."""

from __future__ import annotations

import pulumi
import pulumi_azure_native.authorization as authorization

from ndfleet.components.ib_island import IbIsland, IbIslandArgs
from ndfleet.components.identity import NodeIdentity, NodeIdentityArgs
from ndfleet.components.network import Network, NetworkArgs
from ndfleet.components.slurm import SlurmCluster, SlurmClusterArgs
from ndfleet.components.storage import Storage, StorageArgs
from ndfleet.slurm.conf import island_partitions
from ndfleet.spec.config import ClusterSpec


def slurm_topology(spec: ClusterSpec) -> str:
    """The slurm.conf lines that keep every job inside one InfiniBand island (ndfleet/slurm/conf.py)."""
    return island_partitions(spec)


class Cluster(pulumi.ComponentResource):
    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("ndfleet:cluster:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        client_config = authorization.get_client_config_output()
        subscription_id = client_config.subscription_id

        net = Network(f"{name}-net", NetworkArgs(spec=spec), opts=child)
        store = Storage(
            f"{name}-data",
            StorageArgs(
                spec=spec,
                resource_group_name=net.resource_group_name,
                vnet_id=net.vnet_id,
                storage_subnet_id=net.storage_subnet_id,
                lustre_subnet_id=net.lustre_subnet_id,
                subscription_id=subscription_id,
            ),
            opts=child,
        )
        identity = NodeIdentity(
            f"{name}-nodes",
            NodeIdentityArgs(
                spec=spec,
                resource_group_name=net.resource_group_name,
                storage_account_id=store.account_id,
                subscription_id=subscription_id,
            ),
            opts=child,
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
                ),
                opts=child,
            )
        self.islands = [
            IbIsland(
                f"{name}-{island.name}",
                IbIslandArgs(
                    spec=spec,
                    island=island,
                    resource_group_name=net.resource_group_name,
                    subnet_id=net.compute_subnet_id,
                    identity_id=identity.id,
                    identity_client_id=identity.client_id,
                    storage_account_name=store.account_name,
                    lustre_mgs_address=store.lustre_mgs_address,
                    extra_tags=slurm.node_tags if slurm is not None else None,
                ),
                opts=child,
            )
            for island in spec.islands
        ]

        self.outputs: dict[str, pulumi.Input[object]] = {
            "resourceGroupName": net.resource_group_name,
            "islands": {
                island.name: {"scaleSetId": component.scale_set_id, "nodeCount": component.node_count}
                for island, component in zip(spec.islands, self.islands, strict=True)
            },
            "storage": {
                "accountName": store.account_name,
                "blobEndpoint": store.blob_endpoint,
                "containers": list(spec.storage.containers),
                "lustreMgsAddress": store.lustre_mgs_address,
            },
            "natPublicIp": net.nat_public_ip,
            "bastionName": net.bastion_host_name,
            "slurmTopology": slurm_topology(spec),
            "summary": spec.summary(),
        }
        if slurm is not None:
            self.outputs["slurm"] = slurm.outputs
        self.register_outputs(self.outputs)
