"""Pulumi resource type tokens (`azure-native:<module>:<Resource>`) ndfleet's plan readers match on: the plan diff
(plans/plandiff), the policy checks (plans/policy_checks.py) and the tests. Defined here only.

Tokens as the azure-native provider names its resources (Pulumi Registry, azure-native API docs).
"""

from __future__ import annotations

VMSS_TYPE = "azure-native:compute:VirtualMachineScaleSet"
VM_TYPE = "azure-native:compute:VirtualMachine"
DISK_TYPE = "azure-native:compute:Disk"
PPG_TYPE = "azure-native:compute:ProximityPlacementGroup"
VNET_TYPE = "azure-native:network:VirtualNetwork"
SUBNET_TYPE = "azure-native:network:Subnet"
NIC_TYPE = "azure-native:network:NetworkInterface"
NSG_TYPE = "azure-native:network:NetworkSecurityGroup"
PUBLIC_IP_TYPE = "azure-native:network:PublicIPAddress"
NAT_GATEWAY_TYPE = "azure-native:network:NatGateway"
BASTION_TYPE = "azure-native:network:BastionHost"
PRIVATE_ENDPOINT_TYPE = "azure-native:network:PrivateEndpoint"
STORAGE_ACCOUNT_TYPE = "azure-native:storage:StorageAccount"
BLOB_CONTAINER_TYPE = "azure-native:storage:BlobContainer"
BLOB_SERVICE_TYPE = "azure-native:storage:BlobServiceProperties"
FILE_SHARE_TYPE = "azure-native:storage:FileShare"
AML_FILESYSTEM_TYPE = "azure-native:storagecache:AmlFilesystem"
ROLE_ASSIGNMENT_TYPE = "azure-native:authorization:RoleAssignment"
ROLE_DEFINITION_TYPE = "azure-native:authorization:RoleDefinition"
LOCK_BY_SCOPE_TYPE = "azure-native:authorization:ManagementLockByScope"
LOCK_AT_RESOURCE_GROUP_TYPE = "azure-native:authorization:ManagementLockAtResourceGroupLevel"
LOCK_AT_RESOURCE_TYPE = "azure-native:authorization:ManagementLockAtResourceLevel"
IDENTITY_TYPE = "azure-native:managedidentity:UserAssignedIdentity"
RESOURCE_GROUP_TYPE = "azure-native:resources:ResourceGroup"
MYSQL_SERVER_TYPE = "azure-native:dbformysql:Server"
MYSQL_DATABASE_TYPE = "azure-native:dbformysql:Database"
KEY_VAULT_TYPE = "azure-native:keyvault:Vault"
MONITOR_WORKSPACE_TYPE = "azure-native:monitor:AzureMonitorWorkspace"
