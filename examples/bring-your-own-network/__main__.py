"""Bring your own network: one ndfleet InfiniBand island and locked-down storage in an existing VNet.

For a platform team with a hub-and-spoke network: no VNet, subnet, NSG, NAT gateway or Bastion is created;
the island goes into your subnet and the storage account gets a private endpoint in another one. What ndfleet
adds: the node identity, the storage account (no public or shared-key access, private endpoint, versioning,
soft delete, protected and CanNotDelete-locked, writes ordered), and the island (one Uniform scale set, one
placement group, accelerated networking, no public IP, validated bootstrap, health extension, repairs).

Your subnets must give the nodes a route to the package mirrors they use, and resolve the blob private DNS
zone (this program links the zone it creates to your VNet; with central DNS, link yours instead).
"""

from __future__ import annotations

import pulumi
import pulumi_azure_native.authorization as authorization

from ndfleet.components.ib_island import HealthArgs, IbIsland, IbIslandArgs
from ndfleet.components.identity import NodeIdentity, NodeIdentityArgs
from ndfleet.components.storage import Storage, StorageArgs, storage_account_name
from ndfleet.nodefiles.bootstrap import TAG_IDENTITY_CLIENT_ID, TAG_STORAGE_ACCOUNT
from ndfleet.prepare import PrepareError, prepare
from ndfleet.program import ProgramError, refuse_example_key
from ndfleet.stackconfig.clouds import UnknownCloud, storage_cloud
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.problems import SpecError
from ndfleet.stackconfig.settings import DEFAULT_VM_SIZE


def main() -> None:
    cfg = pulumi.Config("byon")
    stack = pulumi.get_stack()
    location = cfg.require("location")
    resource_group = cfg.require("resourceGroupName")
    nodes = cfg.get_int("nodes") or 2
    vm_size = cfg.get("vmSize") or DEFAULT_VM_SIZE
    ssh_public_key = cfg.require("sshPublicKey")
    try:
        cloud = storage_cloud(pulumi.Config("azure-native").get("environment"))
        # ndfleet's prepare step renders the node bootstrap (cloud-init) and derives the health grace period
        # from the validation budget; its checks (key format, sizes, customData limit) run before anything exists.
        spec = load_spec(
            {
                "location": location,
                "vmSize": vm_size,
                "islands": [{"name": "ib00", "nodes": nodes}],
                "maxNodesPerIsland": max(100, nodes),
                "sshPublicKey": ssh_public_key,
            },
            stack,
        )
        prepared = prepare(spec, cloud)
        refuse_example_key(spec)  # `pulumi up` only: nobody has the private key of the placeholder key
    except (SpecError, PrepareError, UnknownCloud, ProgramError) as error:
        # The settings are read under the byon: namespace here.
        raise pulumi.RunError(str(error).replace("ndfleet:", "byon:")) from None
    island = prepared.islands[0]

    identity = NodeIdentity("nodes", NodeIdentityArgs(resource_group_name=resource_group, location=location))
    subscription_id = authorization.get_client_config_output().subscription_id
    store = Storage(
        "data",
        StorageArgs(
            resource_group_name=resource_group,
            location=location,
            account_name=subscription_id.apply(lambda sub: storage_account_name(spec.name_prefix, sub, stack)),
            private_endpoint_subnet_id=cfg.require("storageSubnetId"),
            vnet_id=cfg.require("vnetId"),
            blob_data_principal_id=identity.principal_id,
            subscription_id=subscription_id,
            cloud=cloud,
        ),
    )
    ib = IbIsland(
        "ib00",
        IbIslandArgs(
            resource_group_name=resource_group,
            location=location,
            subnet_id=cfg.require("computeSubnetId"),
            identity_id=identity.id,
            ssh_public_key=ssh_public_key,
            custom_data=island.bootstrap.custom_data,
            user_data=island.bootstrap.vm_user_data,  # the node bundle the customData's boot step fetches
            node_count=nodes,
            vm_size=vm_size,
            computer_name_prefix=f"{spec.name_prefix}-ib00-",
            health=HealthArgs(probe_grace_period_seconds=prepared.probe_grace_period_s),
            # The node finds its storage account and identity in its scale set's tags at boot.
            tags={TAG_STORAGE_ACCOUNT: store.account_name, TAG_IDENTITY_CLIENT_ID: identity.client_id},
            boot_dependencies=store.boot_dependencies,
        ),
    )
    pulumi.export("scaleSetId", ib.scale_set_id)
    pulumi.export("storageAccountName", store.account_name)


if __name__ == "__main__":
    main()
