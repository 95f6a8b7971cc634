"""The rules that guard an ndfleet cluster, as plain functions over (resource type, camelCase inputs).

The same functions run in three places: the Pulumi CrossGuard pack in policy/ (`pulumi preview --policy-pack
policy`), `ndfleet policy PLAN.json` and `ndfleet plan --policies` (offline, over the plan's resource inputs).
A rule's `check(resource_type, props)` returns the problems it finds (empty: the resource keeps the rule, or the
rule does not apply to that type). docs/policies.md lists the rules with their sources. The check functions are
in policy_checks.py; here are the rules (id, enforcement, source, fix) and their evaluation over a plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ndfleet.plans.policy_checks import (
    Check,
    Props,
    check_accelerated_networking,
    check_automatic_repairs,
    check_custom_role_actions,
    check_fault_domain_count,
    check_health_extension,
    check_island_default_size,
    check_island_size,
    check_key_vault_rbac_private,
    check_manual_upgrade,
    check_mysql_private,
    check_nfs_account_private,
    check_nic_no_public_ip,
    check_no_overprovision,
    check_no_public_ip,
    check_no_rdma_overlap,
    check_proximity_placement_group,
    check_role_least_privilege,
    check_single_placement_group,
    check_ssh_password_disabled,
    check_storage_no_public_blob,
    check_storage_no_shared_key,
    check_storage_private,
    check_storage_tls12,
)
from ndfleet.plans.resource_types import (
    KEY_VAULT_TYPE,
    MYSQL_SERVER_TYPE,
    NIC_TYPE,
    ROLE_ASSIGNMENT_TYPE,
    ROLE_DEFINITION_TYPE,
    STORAGE_ACCOUNT_TYPE,
    SUBNET_TYPE,
    VM_TYPE,
    VMSS_TYPE,
    VNET_TYPE,
)
from ndfleet.stackconfig.profiles import (
    DEFAULT_MAX_NODES_PER_ISLAND,
    HARD_MAX_NODES_PER_ISLAND,
    RDMA_RESERVED_CIDR,
)

MANDATORY = "mandatory"
ADVISORY = "advisory"


@dataclass(frozen=True)
class Rule:
    id: str
    description: str
    enforcement: str  # MANDATORY | ADVISORY
    resource_types: tuple[str, ...]
    source: str
    fix: str
    check: Check


@dataclass(frozen=True)
class Violation:
    rule_id: str
    enforcement: str
    resource_type: str
    resource_name: str
    message: str
    fix: str
    source: str

    @property
    def mandatory(self) -> bool:
        return self.enforcement == MANDATORY


# ----------------------------------------------------------------------------------------------------------
# The rules

_IB = "Azure docs: setup-infiniband.md; virtual-machine-scale-sets-placement-groups.md"

RULES: tuple[Rule, ...] = (
    Rule(
        "nd-single-placement-group", "An ND-series scale set has singlePlacementGroup: true (InfiniBand)",
        MANDATORY, (VMSS_TYPE,), _IB + " (large scale sets, singlePlacementGroup: false, do not support InfiniBand)",
        "keep the island in one scale set with singlePlacementGroup: true; split more nodes into more islands "
        "(ndfleet:maxNodesPerIsland)", check_single_placement_group,
    ),
    Rule(
        "nd-fault-domain-count",
        "An ND-series scale set has platformFaultDomainCount: 1 when regional, 5 when zonal",
        MANDATORY, (VMSS_TYPE,), "Azure CycleCloud (FaultDomainCount=1 on every regional IB scale set); Microsoft "
        "Learn: virtual-machine-scale-sets-manage-fault-domains (zonal Uniform: 1 or 5), "
        "virtual-machine-scale-sets-use-availability-zones (max spreading needs multiple placement groups); "
        "docs/sources.md",
        "set platformFaultDomainCount: 1 without zones, 5 with a zone", check_fault_domain_count,
    ),
    Rule(
        "nd-no-overprovision", "An ND-series scale set has overprovision: false",
        MANDATORY, (VMSS_TYPE,), "Azure docs: virtual-machine-scale-sets-design-overview.md (overprovisioning); "
        "CycleCloud overrides it for IB scale sets", "set overprovision: false", check_no_overprovision,
    ),
    Rule(
        "nd-island-size", f"An ND-series scale set holds at most {HARD_MAX_NODES_PER_ISLAND} nodes",
        MANDATORY, (VMSS_TYPE,), "Azure docs: virtual-machine-scale-sets-placement-groups.md (a single placement "
        f"group: {DEFAULT_MAX_NODES_PER_ISLAND} VMs, {HARD_MAX_NODES_PER_ISLAND} after a support request)",
        "lower ndfleet:maxNodesPerIsland (or the island's nodes) so the nodes split into more islands",
        check_island_size,
    ),
    Rule(
        "vnet-no-rdma-overlap", f"No VNet or subnet overlaps {RDMA_RESERVED_CIDR}",
        MANDATORY, (VNET_TYPE, SUBNET_TYPE), "Azure docs: setup-infiniband.md (the RDMA network reserves "
        f"{RDMA_RESERVED_CIDR})", "pick ndfleet:vnetAddressSpace outside 172.16.0.0/16, e.g. 10.40.0.0/16",
        check_no_rdma_overlap,
    ),
    Rule(
        "gpu-no-public-ip", "No GPU node NIC has a public IP",
        MANDATORY, (VMSS_TYPE, VM_TYPE), "Azure security baseline for Virtual Machines (NS-1/NS-2: no direct "
        "Internet exposure); ndfleet design: outbound through NAT gateway, admin access through Bastion",
        "remove publicIPAddressConfiguration from the node NIC; reach nodes through Azure Bastion (ndfleet:bastion)",
        check_no_public_ip,
    ),
    Rule(
        "ssh-password-disabled", "SSH password authentication is disabled",
        MANDATORY, (VMSS_TYPE, VM_TYPE), "Azure docs: linux/create-ssh-keys-detailed.md; Azure security baseline "
        "(IM: use SSH keys)", "set osProfile.linuxConfiguration.disablePasswordAuthentication: true and give "
        "ndfleet:sshPublicKey; set no adminPassword", check_ssh_password_disabled,
    ),
    Rule(
        "storage-no-public-blob", "A storage account allows no anonymous (public) blob access",
        MANDATORY, (STORAGE_ACCOUNT_TYPE,), "Azure docs: storage/blobs/anonymous-read-access-prevent.md",
        "set allowBlobPublicAccess: false", check_storage_no_public_blob,
    ),
    Rule(
        "storage-no-shared-key", "A storage account allows no shared-key access",
        MANDATORY, (STORAGE_ACCOUNT_TYPE,), "Azure docs: storage/common/shared-key-authorization-prevent.md",
        "set allowSharedKeyAccess: false and grant the node identity Storage Blob Data Contributor",
        check_storage_no_shared_key,
    ),
    Rule(
        "storage-tls12", "A storage account requires TLS 1.2 or later",
        MANDATORY, (STORAGE_ACCOUNT_TYPE,), "Azure docs: storage/common/transport-layer-security-configure-minimum-"
        "version.md", "set minimumTlsVersion: TLS1_2", check_storage_tls12,
    ),
    Rule(
        "gpu-health-extension", "A GPU scale set carries the Application Health extension",
        MANDATORY, (VMSS_TYPE,), "Azure docs: virtual-machine-scale-sets-health-extension.md",
        "add the ApplicationHealthLinux extension (publisher Microsoft.ManagedServices, typeHandlerVersion 2.0) "
        "probing the node health endpoint (ndfleet:health.probePort)", check_health_extension,
    ),
    Rule(
        "gpu-automatic-repairs", "A GPU scale set has automatic repairs enabled",
        MANDATORY, (VMSS_TYPE,), "Azure docs: virtual-machine-scale-sets-automatic-instance-repairs.md",
        "set automaticRepairsPolicy: {enabled: true, gracePeriod: PT30M, repairAction: Replace} "
        "(ndfleet:health.repairAction)", check_automatic_repairs,
    ),
    Rule(
        "identity-least-privilege", "A role assignment grants only the role an ndfleet identity needs, on its one "
        "resource", MANDATORY, (ROLE_ASSIGNMENT_TYPE,), "Azure docs: role-based-access-control/best-practices.md "
        "(least privilege, narrowest scope); azure-monitor/metrics/prometheus-remote-write-virtual-machines.md "
        "(Monitoring Metrics Publisher on the data collection rule); managed-grafana/how-to-permissions.md",
        "grant the node identity Storage Blob Data Contributor on its storage account, Monitoring Metrics "
        "Publisher on the data collection rule, Key Vault Secrets User on one secret and (impact reporting) "
        "Impact Reporter on the subscription, and Grafana Monitoring Data Reader on the Azure Monitor workspace; "
        "nothing broader; the elastic scaler's custom role only on an elastic scale set, the compute subnet and the "
        "nodes' identity",
        check_role_least_privilege,
    ),
    Rule(
        "custom-role-least-privilege", "A custom role grants only the elastic scaler's or the roll's actions, in "
        "one resource group", MANDATORY, (ROLE_DEFINITION_TYPE,),
        "Azure docs: role-based-access-control/custom-roles.md, best-practices.md (least privilege); docs/elastic.md "
        "(the scaler's actions, each with its source)",
        "define the role with exactly the actions of components/elastic_scaling.py ELASTIC_ACTIONS (or "
        "components/roll_access.py ROLL_ACTIONS), assignable in the stack's resource group", check_custom_role_actions,
    ),
    Rule(
        "nic-no-public-ip", "No cluster NIC (Slurm controller, login node) has a public IP",
        MANDATORY, (NIC_TYPE,), "Azure security baseline for Virtual Machines (NS-1/NS-2: no direct Internet "
        "exposure); Azure docs: bastion/bastion-overview.md", "remove publicIPAddress from the NIC's IP configuration; "
        "reach the login node through Azure Bastion (ndfleet:bastion)", check_nic_no_public_ip,
    ),
    Rule(
        "mysql-private", "The Slurm accounting database (MySQL Flexible Server) allows no public network access",
        MANDATORY, (MYSQL_SERVER_TYPE,), "Azure docs: mysql/flexible-server/concepts-networking-private-link.md; "
        "concepts-networking.md", "set network.publicNetworkAccess: Disabled and add a private endpoint (ndfleet does)",
        check_mysql_private,
    ),
    Rule(
        "keyvault-rbac-private", "A Key Vault uses RBAC authorization, purge protection and no public network access",
        MANDATORY, (KEY_VAULT_TYPE,), "Azure docs: key-vault/general/rbac-guide.md; key-vault/general/"
        "private-link-service.md; key-vault/general/soft-delete-overview.md (purge protection)",
        "set properties.enableRbacAuthorization: true, enablePurgeProtection: true, publicNetworkAccess: Disabled",
        check_key_vault_rbac_private,
    ),
    Rule(
        "nfs-account-private", "An NFS (FileStorage) account is not reachable from public networks",
        MANDATORY, (STORAGE_ACCOUNT_TYPE,), "Azure docs: storage/files/files-nfs-protocol.md (NFS shares rely on "
        "network-level security); storage-files-networking-overview.md", "set publicNetworkAccess: Disabled and "
        "mount the share through its private endpoint", check_nfs_account_private,
    ),
    # --- advisory
    Rule(
        "nd-island-default-size", f"An ND-series scale set holds at most {DEFAULT_MAX_NODES_PER_ISLAND} nodes "
        "without a support request", ADVISORY, (VMSS_TYPE,),
        "Azure docs: virtual-machine-scale-sets-placement-groups.md",
        f"file an Azure support request to raise the single placement group limit to {HARD_MAX_NODES_PER_ISLAND}, "
        f"or keep ndfleet:maxNodesPerIsland at {DEFAULT_MAX_NODES_PER_ISLAND}", check_island_default_size,
    ),
    Rule(
        "nd-proximity-placement-group", "An ND-series scale set is in a proximity placement group",
        ADVISORY, (VMSS_TYPE,), "Azure docs: co-location.md (proximity placement groups; one zone or none)",
        "set ndfleet:proximityPlacementGroup: true", check_proximity_placement_group,
    ),
    Rule(
        "nd-manual-upgrade", "An ND-series scale set uses upgradePolicy.mode Manual",
        ADVISORY, (VMSS_TYPE,), "Azure docs: virtual-machine-scale-sets-upgrade-policy.md",
        "set upgradePolicy: {mode: Manual} and roll out model changes between jobs", check_manual_upgrade,
    ),
    Rule(
        "nd-accelerated-networking", "An ND-series scale set NIC has accelerated networking",
        ADVISORY, (VMSS_TYPE,), "Azure docs: sizes/gpu-accelerated/ndh100v5-series.md (accelerated networking "
        "supported); accelerated-networking-overview.md", "set enableAcceleratedNetworking: true on the node NIC",
        check_accelerated_networking,
    ),
    Rule(
        "storage-private-network", "A storage account is not reachable from every network",
        ADVISORY, (STORAGE_ACCOUNT_TYPE,), "Azure docs: storage/common/storage-network-security.md",
        "set publicNetworkAccess: Disabled with a private endpoint, or networkRuleSet.defaultAction: Deny",
        check_storage_private,
    ),
)

RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}


# ----------------------------------------------------------------------------------------------------------
# Evaluating


def check_resource(resource_type: str, props: Props, name: str = "", rules: Sequence[Rule] = RULES) -> list[Violation]:
    """Every violation of `rules` by one resource."""
    out = []
    for rule in rules:
        if resource_type not in rule.resource_types:
            continue
        for message in rule.check(resource_type, props):
            out.append(Violation(rule.id, rule.enforcement, resource_type, name, message, rule.fix, rule.source))
    return out


def evaluate_plan(plan: Mapping[str, Any], rules: Sequence[Rule] = RULES) -> list[Violation]:
    """Every violation in an offline plan (`ndfleet plan --format json`), mandatory first, then by resource."""
    out: list[Violation] = []
    for res in plan.get("resources") or []:
        if not isinstance(res, Mapping):
            continue
        out += check_resource(str(res.get("type", "")), res.get("inputs") or {}, str(res.get("name", "")), rules)
    out.sort(key=lambda v: (not v.mandatory, v.resource_type, v.resource_name, v.rule_id))
    return out


def has_mandatory(violations: Iterable[Violation]) -> bool:
    return any(v.mandatory for v in violations)


def format_violations(violations: Sequence[Violation]) -> str:
    """Every violation: resource, rule, problem and fix; mandatory ones as errors, advisory ones as warnings."""
    if not violations:
        return f"policy: all {len(RULES)} rules pass\n"
    lines = []
    for v in violations:
        level = "ERROR" if v.mandatory else "WARNING"
        lines.append(f"{level} [{v.rule_id}] {v.resource_type} {v.resource_name}: {v.message}")
        lines.append(f"    fix: {v.fix}")
        lines.append(f"    source: {v.source}")
    mandatory = sum(1 for v in violations if v.mandatory)
    lines.append(f"policy: {mandatory} mandatory violation(s), {len(violations) - mandatory} advisory warning(s)")
    return "\n".join(lines) + "\n"


def report_policies(plan: Mapping[str, Any], stream: TextIO) -> int:
    """`ndfleet plan --policies` (ndfleet's plan or a program's): print the violations, 1 when one is mandatory."""
    violations = evaluate_plan(plan)
    print(format_violations(violations), file=stream)
    return 1 if has_mandatory(violations) else 0


def rules_table_markdown() -> str:
    """The rules as a markdown table (docs/policies.md carries the same table; a test keeps them equal)."""
    lines = ["| id | level | rule | resource types | how to fix | source |", "|---|---|---|---|---|---|"]
    for r in RULES:
        types = ", ".join(f"`{t.split(':', 1)[1]}`" for t in r.resource_types)
        lines.append(f"| `{r.id}` | {r.enforcement} | {r.description} | {types} | {r.fix} | {r.source} |")
    return "\n".join(lines)
