"""The checks on the region, the VM size and quota: one pure function each, facts in, Check out."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import asdict

from ndfleet.azure.clouds import CloudSettings
from ndfleet.preflight.facts import Facts, Region, Sku, Unavailable, Usage, norm_location
from ndfleet.preflight.features import check_trusted_launch_default
from ndfleet.preflight.images import check_image_version
from ndfleet.preflight.impact import check_impact_provider, check_impact_role_permission
from ndfleet.preflight.machine_quota import (
    check_machine_family_quotas,
    check_spot_stack_dedicated_quota,
    quota_check,
    quota_fix,
    sku_size_facts,
)
from ndfleet.preflight.outcome import Check, unavailable_check
from ndfleet.preflight.permissions import Mode, check_permissions, deployment_scope
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.vms import quota_need


def _find_vm_sku(skus: Sequence[Sku], vm_size: str) -> Sku | None:
    return next((s for s in skus if s.name.lower() == vm_size.lower()), None)


def check_location(spec: ClusterSpec, regions: list[Region] | Unavailable) -> Check:
    title = "location exists"
    if isinstance(regions, Unavailable):
        return unavailable_check("location", title, regions)
    by_name = {norm_location(r.name): r for r in regions}
    region = by_name.get(norm_location(spec.location))
    if region is None:
        close = difflib.get_close_matches(spec.location, list(by_name), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return Check(
            "location",
            title,
            "fail",
            f"{spec.location!r} is not a location of this subscription{hint}",
            fix="set ndfleet:location to a region from `az account list-locations -o table`",
            figures={"location": spec.location, "suggestions": close},
        )
    if region.region_type.lower() == "logical":
        return Check(
            "location",
            title,
            "fail",
            f"{spec.location!r} ({region.display_name}) is a logical region; VMs need a physical one",
            fix="set ndfleet:location to a physical region such as eastus",
            figures={"location": spec.location, "regionType": region.region_type},
        )
    return Check("location", title, "pass", f"{region.name} ({region.display_name})", figures={"location": region.name})


def check_size_in_region(spec: ClusterSpec, skus: list[Sku] | Unavailable) -> Check:
    title = f"{spec.profile.name} offered in {spec.location}"
    if isinstance(skus, Unavailable):
        return unavailable_check("vm-size-region", title, skus)
    sku = _find_vm_sku(skus, spec.profile.name)
    if sku is None or norm_location(spec.location) not in sku.locations:
        return Check(
            "vm-size-region",
            title,
            "fail",
            f"{spec.profile.name} is not offered in {spec.location}",
            fix=(
                "pick a region that offers it: az vm list-skus --size "
                f"{spec.profile.name} --all --output table; or change ndfleet:vmSize"
            ),
            figures={"vmSize": spec.profile.name, "location": spec.location, "offered": False},
        )
    zones = sku.zones.get(norm_location(spec.location), ())
    zone_text = f"zones {', '.join(zones)}" if zones else "no availability zones"
    return Check(
        "vm-size-region",
        title,
        "pass",
        f"offered ({zone_text})",
        figures={"vmSize": sku.name, "location": spec.location, "offered": True, "zones": list(zones)},
    )


def check_size_in_zone(spec: ClusterSpec, skus: list[Sku] | Unavailable) -> Check:
    title = f"{spec.profile.name} offered in zone {spec.zone}" if spec.zone else "availability zone"
    if spec.zone is None:
        return Check("vm-size-zone", title, "skip", "no ndfleet:zone set: regional deployment")
    if isinstance(skus, Unavailable):
        return unavailable_check("vm-size-zone", title, skus)
    sku = _find_vm_sku(skus, spec.profile.name)
    zones = sku.zones.get(norm_location(spec.location), ()) if sku else ()
    if sku is None or norm_location(spec.location) not in sku.locations:
        return Check("vm-size-zone", title, "fail", f"not offered in {spec.location} at all (see vm-size-region)")
    if spec.zone not in zones:
        offered = f"it is offered in zones {', '.join(zones)}" if zones else "it is offered without zones there"
        return Check(
            "vm-size-zone",
            title,
            "fail",
            f"{spec.profile.name} is not offered in zone {spec.zone} of {spec.location}; {offered}",
            fix=(f"set ndfleet:zone to one of {', '.join(zones)}" if zones else "remove ndfleet:zone"),
            figures={"zone": spec.zone, "zones": list(zones)},
        )
    return Check("vm-size-zone", title, "pass", f"offered in zone {spec.zone}", figures={"zone": spec.zone})


def check_size_restrictions(spec: ClusterSpec, skus: list[Sku] | Unavailable) -> Check:
    title = f"{spec.profile.name} not restricted for the subscription"
    if isinstance(skus, Unavailable):
        return unavailable_check("vm-restrictions", title, skus)
    sku = _find_vm_sku(skus, spec.profile.name)
    if sku is None:
        return Check("vm-restrictions", title, "skip", f"no SKU entry for {spec.location} (see vm-size-region)")
    loc = norm_location(spec.location)
    blocking: list[str] = []
    partial: list[str] = []
    restricted_zones: list[str] = []
    for r in sku.restrictions:
        if r.locations and loc not in r.locations:
            continue
        if r.type.lower() == "location":
            blocking.append(f"restricted in {spec.location}: {r.reason}")
        elif r.type.lower() == "zone":
            restricted_zones += r.zones
            if spec.zone is not None and spec.zone in r.zones:
                blocking.append(f"restricted in zone {spec.zone} of {spec.location}: {r.reason}")
            elif spec.zone is None:
                partial.append(f"zones {', '.join(r.zones)} restricted: {r.reason}")
    figures = {
        "restrictions": [asdict(r) for r in sku.restrictions],
        "restrictedZones": sorted(set(restricted_zones)),
    }
    fix = (
        "ask Microsoft to enable the size for this subscription: Azure portal > Help + support > "
        "Create a support request > Service and subscription limits (quotas) > Compute-VM (cores-vCPUs) "
        "subscription limit increases; NotAvailableForSubscription means the size must be enabled before "
        "any quota applies. Or pick another region/zone."
    )
    if blocking:
        return Check("vm-restrictions", title, "fail", "; ".join(blocking), fix=fix, figures=figures)
    if partial:
        return Check(
            "vm-restrictions",
            title,
            "warn",
            "regional deployment, but " + "; ".join(partial) + ": Azure may place nodes only in the others",
            figures=figures,
        )
    return Check("vm-restrictions", title, "pass", "no restrictions", figures=figures)


def check_family_quota(
    spec: ClusterSpec,
    usages: list[Usage] | Unavailable,
    skus: list[Sku] | Unavailable,
    cloud: CloudSettings,
    subscription_id: str,
) -> Check:
    family = spec.profile.quota_family
    needed = spec.total_nodes * spec.profile.vcpus
    title = "VM family vCPU quota"
    if spec.priority == "Spot":
        return Check(
            "quota-family", title, "skip", "Spot VMs count against the regional Spot quota (lowPriorityCores) instead"
        )
    if isinstance(usages, Unavailable):
        return unavailable_check("quota-family", title, usages)
    by_name = {u.name.lower(): u for u in usages}
    usage = by_name.get(family.lower())
    note = ""
    if usage is None and not isinstance(skus, Unavailable):
        # The family name is data: Azure's SKU entry says which quota family the size counts against.
        sku = _find_vm_sku(skus, spec.profile.name)
        if sku is not None and sku.family and sku.family.lower() in by_name:
            usage = by_name[sku.family.lower()]
            note = f" (the profile says {family}; Azure's SKU says {sku.family})"
    if usage is None:
        families = sorted(u.name for u in usages if u.name.lower().endswith("family"))
        nd = [f for f in families if f.lower().startswith("standardnd")]
        shown = nd or families
        return Check(
            "quota-family",
            title,
            "fail",
            f"no usage entry named {family} in {spec.location}; the subscription's "
            f"{'ND ' if nd else ''}families there: {', '.join(shown[:20]) or 'none'}",
            fix=(
                "if the size is new to the subscription, ask for it in the Azure portal's Quotas page; "
                "if Azure names the family differently, correct quota_family in ndfleet/stackconfig/profiles.py"
            ),
            figures={"quotaName": family, "families": shown},
        )
    found = usage
    check = quota_check(
        "quota-family",
        title,
        found,
        needed,
        lambda new: quota_fix(cloud, subscription_id, spec.location, found.name, new, "dedicated"),
    )
    if note:
        return Check(check.id, check.title, check.status, check.detail + note, check.fix, check.figures)
    return check


def check_regional_quota(
    spec: ClusterSpec,
    usages: list[Usage] | Unavailable,
    cloud: CloudSettings,
    subscription_id: str,
    skus: list[Sku] | Unavailable | None = None,
) -> Check:
    need = quota_need(spec, sku_size_facts(spec, skus))
    spot = spec.priority == "Spot"
    # Spot GPU nodes count in the regional Spot quota only; every other VM (the Slurm machines) in `cores`.
    needed = need.spot if spot else need.regional
    name, kind = ("lowPriorityCores", "lowPriority") if spot else ("cores", "dedicated")
    title = "regional Spot vCPU quota" if spot else "regional total vCPU quota"
    if isinstance(usages, Unavailable):
        return unavailable_check("quota-regional", title, usages)
    usage = next((u for u in usages if u.name.lower() == name.lower()), None)
    if usage is None:
        return Check(
            "quota-regional",
            title,
            "fail",
            f"no usage entry named {name} in {spec.location}",
            figures={"quotaName": name},
        )
    found = usage
    check = quota_check(
        "quota-regional",
        title,
        found,
        needed,
        lambda new: quota_fix(cloud, subscription_id, spec.location, found.name, new, kind),
    )
    if need.unknown_sizes and not spot:
        uncounted = f" (not counted: {', '.join(need.unknown_sizes)}, vCPUs unknown; see its family check)"
        return Check(check.id, check.title, check.status, check.detail + uncounted, check.fix, check.figures)
    return check


def check_lustre_sku(spec: ClusterSpec, skus: list[Sku] | Unavailable | None) -> Check:
    lustre = spec.storage.lustre
    if lustre is None:
        return Check("lustre-sku", "Managed Lustre SKU", "skip", "no ndfleet:storage.lustre in the stack")
    name = lustre.sku.name
    title = f"Managed Lustre {name} offered in {spec.location}"
    if skus is None:
        skus = Unavailable("Microsoft.StorageCache SKUs were not read")
    if isinstance(skus, Unavailable):
        return unavailable_check("lustre-sku", title, skus)
    loc = norm_location(spec.location)
    sku = next(
        (s for s in skus if s.name.lower() == name.lower() and s.resource_type.lower() == "amlfilesystems"), None
    )
    offered = sorted({s.name for s in skus if s.resource_type.lower() == "amlfilesystems" and loc in s.locations})
    if sku is None or loc not in sku.locations:
        other = f"; offered there: {', '.join(offered)}" if offered else "; no Managed Lustre SKU is offered there"
        return Check(
            "lustre-sku",
            title,
            "fail",
            f"{name} is not offered in {spec.location}{other}",
            fix="change ndfleet:storage.lustre.sku, deploy in another region, or remove storage.lustre",
            figures={"sku": name, "offered": offered},
        )
    blocking = [r for r in sku.restrictions if r.type.lower() == "location" and (not r.locations or loc in r.locations)]
    if blocking:
        return Check(
            "lustre-sku",
            title,
            "fail",
            f"{name} is restricted in {spec.location}: {', '.join(r.reason for r in blocking)}",
            fix="open a support request to enable Azure Managed Lustre for the subscription",
            figures={"sku": name, "restrictions": [asdict(r) for r in blocking]},
        )
    zones = sku.zones.get(loc, ())
    if spec.zone is not None and zones and spec.zone not in zones:
        return Check(
            "lustre-sku",
            title,
            "warn",
            f"offered in {spec.location}, but in zones {', '.join(zones)} only, not zone {spec.zone}",
            figures={"sku": name, "zones": list(zones)},
        )
    return Check("lustre-sku", title, "pass", "offered", figures={"sku": name, "zones": list(zones)})


def run_checks(
    spec: ClusterSpec, facts: Facts, cloud: CloudSettings, subscription_id: str, mode: Mode = "up"
) -> list[Check]:
    """Every check, in the order of the table. `mode`: what the caller is about to run (preview reads, up writes)."""
    checks = [
        check_location(spec, facts.locations),
        check_size_in_region(spec, facts.compute_skus),
        check_size_in_zone(spec, facts.compute_skus),
        check_size_restrictions(spec, facts.compute_skus),
        check_image_version(spec, facts.image_versions),
        check_family_quota(spec, facts.usages, facts.compute_skus, cloud, subscription_id),
        *check_machine_family_quotas(spec, facts.usages, facts.compute_skus, cloud, subscription_id),
        check_regional_quota(spec, facts.usages, cloud, subscription_id, facts.compute_skus),
        *check_spot_stack_dedicated_quota(spec, facts.usages, facts.compute_skus, cloud, subscription_id),
        check_lustre_sku(spec, facts.lustre_skus),
        check_permissions(spec, facts.permissions, deployment_scope(spec, subscription_id), mode),
        check_trusted_launch_default(facts.trusted_launch_default),
    ]
    if spec.health.impact_reporting:
        checks += [
            check_impact_role_permission(facts.subscription_permissions, subscription_id, mode),
            check_impact_provider(facts.impact_provider, mode),
        ]
    return checks


