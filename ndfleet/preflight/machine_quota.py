"""Quota checks for the stack's VMs besides the GPU nodes (the Slurm controller and login nodes): one check per
quota family they need, and, when the GPU nodes are Spot, the regional total (`cores`) these dedicated VMs use.

A size's vCPUs and family come from Azure's SKU entry for the region when preflight could read it, else from
ndfleet's table (ndfleet/stackconfig/profiles.py MACHINE_SIZES); a size in neither is not offered there, or unknown.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ndfleet.azure.clouds import CloudSettings
from ndfleet.preflight.facts import Sku, Unavailable, Usage, norm_location
from ndfleet.preflight.outcome import Check, unavailable_check
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.vms import REGIONAL_QUOTA, SizeFacts, quota_need, stack_vms, table_size_facts


def quota_fix(cloud: CloudSettings, subscription_id: str, location: str, name: str, new_limit: int, kind: str) -> str:
    scope = f"/subscriptions/{subscription_id}/providers/Microsoft.Compute/locations/{location}"
    return (
        f"request more: Azure portal > Quotas > Compute ({cloud.portal}/#view/Microsoft_Azure_Capacity/"
        f"QuotaMenuBlade/~/myQuotas), or `az quota update --resource-name {name} --scope {scope} "
        f"--limit-object value={new_limit} --resource-type {kind}` (Azure CLI quota extension)"
    )


def quota_check(
    check_id: str,
    title: str,
    usage: Usage,
    needed: int,
    fix: Callable[[int], str],
) -> Check:
    figures = {
        "quotaName": usage.name,
        "limit": usage.limit,
        "used": usage.current,
        "available": usage.available,
        "needed": needed,
        "missing": max(0, needed - usage.available),
    }
    figures_text = f"limit {usage.limit}, in use {usage.current}, available {usage.available}, needed {needed}"
    if usage.available >= needed:
        return Check(check_id, title, "pass", f"{usage.name}: {figures_text}", figures=figures)
    missing = needed - usage.available
    return Check(
        check_id,
        title,
        "fail",
        f"{usage.name}: {missing} vCPUs missing ({figures_text})",
        fix=fix(usage.current + needed),
        figures=figures,
    )


def sku_size_facts(spec: ClusterSpec, skus: list[Sku] | Unavailable | None) -> Callable[[str], SizeFacts | None]:
    """vCPUs and quota family of a size: Azure's SKU entry in the stack's region first, then ndfleet's tables."""
    table = table_size_facts(spec)
    by_name = {} if skus is None or isinstance(skus, Unavailable) else {s.name.lower(): s for s in skus}

    def lookup(vm_size: str) -> SizeFacts | None:
        sku = by_name.get(vm_size.lower())
        vcpus = (sku.capabilities.get("vCPUs") or "") if sku else ""
        if sku is not None and sku.family and vcpus.isdigit() and norm_location(spec.location) in sku.locations:
            return SizeFacts(int(vcpus), sku.family)
        return table(vm_size)

    return lookup


def _usage(usages: list[Usage], name: str) -> Usage | None:
    return next((u for u in usages if u.name.lower() == name.lower()), None)


def check_machine_family_quotas(
    spec: ClusterSpec,
    usages: list[Usage] | Unavailable,
    skus: list[Sku] | Unavailable,
    cloud: CloudSettings,
    subscription_id: str,
) -> list[Check]:
    lookup = sku_size_facts(spec, skus)
    needed: dict[str, int] = {}
    checks: list[Check] = []
    for group in stack_vms(spec):
        if group.gpu:
            continue
        facts = lookup(group.vm_size)
        if facts is None:
            title = f"{group.vm_size} vCPU quota ({group.role})"
            if isinstance(skus, Unavailable):
                checks.append(unavailable_check(f"quota-family-{group.vm_size}", title, skus))
                continue
            checks.append(
                Check(
                    f"quota-family-{group.vm_size}",
                    title,
                    "fail",
                    f"{group.vm_size} has no SKU entry in {spec.location} (not offered there) and is not in "
                    "ndfleet's size table: its vCPUs and quota family are unknown",
                    fix="set ndfleet:slurm.controllerVmSize / loginVmSize to a size offered there "
                    f"(az vm list-skus --location {spec.location} --resource-type virtualMachines --output table)",
                    figures={"vmSize": group.vm_size, "location": spec.location},
                )
            )
            continue
        needed[facts.quota_family] = needed.get(facts.quota_family, 0) + facts.vcpus * group.count
    for family, vcpus in needed.items():
        check_id, title = f"quota-family-{family}", f"{family} vCPU quota (Slurm machines)"
        if isinstance(usages, Unavailable):
            checks.append(unavailable_check(check_id, title, usages))
            continue
        usage = _usage(usages, family)
        if usage is None:
            checks.append(
                Check(
                    check_id, title, "fail", f"no usage entry named {family} in {spec.location}",
                    fix="ask for the family's quota in the Azure portal's Quotas page, or pick another size",
                    figures={"quotaName": family},
                )
            )  # fmt: skip
            continue
        fix = functools.partial(quota_fix, cloud, subscription_id, spec.location, usage.name, kind="dedicated")
        checks.append(quota_check(check_id, title, usage, vcpus, fix))
    return checks


def check_spot_stack_dedicated_quota(
    spec: ClusterSpec,
    usages: list[Usage] | Unavailable,
    skus: list[Sku] | Unavailable,
    cloud: CloudSettings,
    subscription_id: str,
) -> list[Check]:
    """With Spot GPU nodes, `quota-regional` checks the Spot quota; the Slurm machines still need `cores`."""

    if spec.priority != "Spot":
        return []
    need = quota_need(spec, sku_size_facts(spec, skus))
    if not need.regional:
        return []
    check_id, title = "quota-regional-cores", "regional total vCPU quota (non-Spot VMs)"
    if isinstance(usages, Unavailable):
        return [unavailable_check(check_id, title, usages)]
    usage = _usage(usages, REGIONAL_QUOTA)
    if usage is None:
        return [Check(check_id, title, "fail", f"no usage entry named {REGIONAL_QUOTA} in {spec.location}")]
    found = usage
    return [
        quota_check(
            check_id, title, found, need.regional,
            lambda new: quota_fix(cloud, subscription_id, spec.location, found.name, new, "dedicated"),
        )
    ]  # fmt: skip
