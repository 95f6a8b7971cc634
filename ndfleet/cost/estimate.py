"""What the stack's VMs cost per hour and per month: every VM the stack creates x its list price.

An unknown figure is unknown, never 0: a line without a price has `usdPerHour` null in the JSON, and so has a total
with no priced line at all. A total of some priced lines is the sum of those, `complete` false, and `unpricedItems`
names the lines it leaves out (docs/plan-json.md, "Unknown cost").

The VMs are almost all of the bill; what else Azure charges for (disks, storage, Managed Lustre, NAT gateway,
Bastion, the accounting database, data transfer) is named, not priced. A Spot VM's price moves with demand and is not
in the table: its figure is the ceiling Azure may charge, the on-demand list price or `spotMaxPrice` when set lower.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ndfleet.cost.money import usd
from ndfleet.cost.month import HOURS_PER_MONTH, MONTH_NAME, per_month
from ndfleet.cost.prices import TABLE_NAME, ListPrice, missing_meter, no_price_line, table_price, table_regions
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.vms import VmGroup, stack_vms

# Azure Managed Lustre bills by capacity and SKU; ndfleet's price table holds VM prices only, and no price read from a
# primary source (Microsoft Learn, the Retail Prices API) is recorded, so its line is unknown rather than left out.
LUSTRE_NOT_PRICED = (
    "not in ndfleet's price table, which holds VM prices only: Azure bills Managed Lustre by capacity and SKU"
)
NOT_PRICED = "disks, storage, Managed Lustre, NAT gateway, Bastion, Slurm database and shares, monitoring, traffic"
PriceLookup = Callable[[str, str], ListPrice | None]


@dataclass(frozen=True)
class LineItem:
    group: VmGroup
    price: ListPrice | None
    spot_max_price: float  # -1: up to the on-demand price (only read for Spot VMs)

    @property
    def basis(self) -> str:
        if not self.group.spot:
            return "list price"
        capped = self.spot_max_price > 0 and (self.price is None or self.spot_max_price < self.price.usd_per_hour)
        return "Spot ceiling: spotMaxPrice" if capped else "Spot ceiling: on-demand list price"

    @property
    def usd_per_vm_hour(self) -> float | None:
        if self.basis == "Spot ceiling: spotMaxPrice":
            return self.spot_max_price
        return self.price.usd_per_hour if self.price else None

    @property
    def usd_per_hour(self) -> float | None:
        each = self.usd_per_vm_hour
        return None if each is None else each * self.group.count

    @property
    def spares_usd_per_hour(self) -> float | None:
        """What the group's warm spares cost: VMs like the others, billed while they wait (docs/operations.md)."""
        each = self.usd_per_vm_hour
        return None if each is None else each * self.group.spares

    def as_json(self) -> dict[str, Any]:
        spares = self.spares_usd_per_hour
        return {
            **({"spares": self.group.spares,
                "sparesUsdPerHour": None if spares is None else round(spares, 4)} if self.group.spares else {}),
            "role": self.group.role,
            "vmSize": self.group.vm_size,
            "count": self.group.count,
            "spot": self.group.spot,
            "basis": self.basis,
            "usdPerVmHour": self.usd_per_vm_hour,
            "usdPerHour": None if self.usd_per_hour is None else round(self.usd_per_hour, 4),
            "priceObserved": self.price.observed if self.price else None,
            "priceSource": self.price.source if self.price else None,
        }


@dataclass(frozen=True)
class UnpricedService:
    """What the stack creates besides VMs that is billed but has no figure here: shown, as unknown, not omitted."""

    service: str
    detail: str
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"service": self.service, "detail": self.detail, "usdPerHour": None, "usdPerMonth": None,
                "reason": self.reason}  # fmt: skip


@dataclass(frozen=True)
class CostEstimate:
    region: str
    items: tuple[LineItem, ...]
    # Billed, not priced (outside the VM totals): Managed Lustre.
    services: tuple[UnpricedService, ...] = ()
    # A smoke stack's stated run length (ndfleet:smoke.hours, docs/smoke.md): priced as well as the hour and month.
    run_hours: float | None = None
    # Where every figure came from: the recorded table, or a refresh from the Retail Prices API on a date.
    prices_from: str = TABLE_NAME

    @property
    def priced(self) -> tuple[LineItem, ...]:
        return tuple(i for i in self.items if i.usd_per_hour is not None)

    @property
    def unpriced_items(self) -> list[str]:
        """The lines without a figure (their `role`), which a total leaves out."""
        return [i.group.role for i in self.items if i.usd_per_hour is None]

    @property
    def usd_per_hour(self) -> float | None:
        """The priced VMs' total, unrounded; None when no VM has a price. See `missing` for what it leaves out."""
        return sum(i.usd_per_hour or 0.0 for i in self.priced) if self.priced else None

    @property
    def usd_per_month(self) -> float | None:
        hourly = self.usd_per_hour
        return None if hourly is None else per_month(hourly)

    @property
    def usd_per_run(self) -> float | None:
        hourly = self.usd_per_hour
        return None if self.run_hours is None or hourly is None else hourly * self.run_hours

    @property
    def missing(self) -> list[str]:
        """One message per size without a figure in this region, in the order the VMs are listed."""
        sizes = dict.fromkeys(i.group.vm_size for i in self.items if i.usd_per_vm_hour is None)
        return [no_price_line(size, self.region) for size in sizes]

    @property
    def sources(self) -> list[str]:
        """Where the figures come from, each once, in the order the VMs are listed."""
        return list(dict.fromkeys(i.price.source for i in self.items if i.price))

    @property
    def spares(self) -> int:
        return sum(i.group.spares for i in self.items)

    @property
    def spares_usd_per_hour(self) -> float | None:
        """What the warm spares cost; None when no island with spares has a price."""
        known = [i.spares_usd_per_hour for i in self.items if i.group.spares and i.spares_usd_per_hour is not None]
        return sum(known) if known else None

    @property
    def has_spot(self) -> bool:
        return any(i.group.spot for i in self.items)

    def as_json(self) -> dict[str, Any]:
        spares = self.spares_usd_per_hour
        return {
            "currency": "USD",
            "region": self.region,
            "hoursPerMonth": HOURS_PER_MONTH,
            "items": [i.as_json() for i in self.items],
            "usdPerHour": _rounded(self.usd_per_hour),
            "usdPerMonth": _rounded(self.usd_per_month),
            **({"runHours": self.run_hours, "usdPerRun": _rounded(self.usd_per_run)} if self.run_hours is not None
               else {}),
            **({"spares": self.spares, "sparesUsdPerHour": _rounded(spares),
                "sparesUsdPerMonth": _rounded(None if spares is None else per_month(spares))} if self.spares else {}),
            "complete": not self.missing,
            "unpricedItems": self.unpriced_items,
            "services": [s.as_json() for s in self.services],
            "missing": self.missing,
            "pricesFrom": self.prices_from,
            "notIncluded": NOT_PRICED,
        }  # fmt: skip


def _rounded(value: float | None) -> float | None:
    """A total as the JSON carries it: cents, or null when unknown (never 0 for "no figure")."""
    return None if value is None else round(value, 2)


def estimate_cost(
    spec: ClusterSpec, price_of: PriceLookup | None = None, prices_from: str | None = None
) -> CostEstimate:
    price_of = price_of or table_price
    items = tuple(
        LineItem(group, price_of(group.vm_size, spec.location), spec.spot_max_price) for group in stack_vms(spec)
    )
    run_hours = spec.smoke.hours if spec.smoke is not None else None
    if prices_from is None:
        observed = sorted({i.price.observed for i in items if i.price})
        when = f"observed {observed[0]}" + (f" to {observed[-1]}" if len(observed) > 1 else "") if observed else ""
        prices_from = f"{TABLE_NAME}, {when}".rstrip(", ")
    lustre = spec.storage.lustre
    services = (
        (UnpricedService("Azure Managed Lustre", f"{lustre.sku.name}, {lustre.capacity_tib} TiB", LUSTRE_NOT_PRICED),)
        if lustre is not None
        else ()
    )
    return CostEstimate(spec.location, items, services, run_hours, prices_from)


def render_cost(estimate: CostEstimate, title: str = "Cost (VMs only") -> list[str]:
    """The cost block of `ndfleet plan` and `ndfleet cost`: one line per VM group, the total, the caveats."""
    lines = [f"{title}, Linux pay-as-you-go list price in {estimate.region}, USD):"]
    rows = []
    for item in estimate.items:
        each = item.usd_per_vm_hour
        price = f"{usd(each)}/h each" if each is not None else "no list price"
        total = f"{usd(item.usd_per_hour or 0)}/h" if each is not None else "-"
        when = f"{item.price.observed}" if item.price else ("spotMaxPrice" if each is not None else "")
        spot = ", Spot ceiling" if item.group.spot else ""
        rows.append((item.group.role, f"{item.group.count:,} x {item.group.vm_size}", price, total, when + spot))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    for row in rows:
        cells = [row[c].ljust(widths[c]) if c != 3 else row[c].rjust(widths[c]) for c in range(4)]
        lines.append(f"  {'  '.join(cells)}  {row[4]}".rstrip())
    priced = sum(i.group.count for i in estimate.priced)
    hourly, monthly = estimate.usd_per_hour, estimate.usd_per_month
    if hourly is not None and monthly is not None:
        qualifier = "the priced " if estimate.missing else ""
        lines.append(f"  total ({qualifier}{priced:,} VMs): {usd(hourly)} per hour, {usd(monthly)} per {MONTH_NAME}")
    else:
        lines.append("  total: unknown, no VM of the stack has a list price in ndfleet's table for this region")
    spares = estimate.spares_usd_per_hour
    if spares is not None:
        # Spares run (and bill) like every node; this is what keeping them costs on top of the nodes that serve.
        lines.append(
            f"  of which {estimate.spares:,} warm spare(s), held out of scheduling: "
            f"{usd(spares)} per hour, {usd(per_month(spares))} per {MONTH_NAME}"
        )
    if estimate.usd_per_run is not None and estimate.run_hours is not None:
        lines.append(
            f"  smoke run of {estimate.run_hours:g} h (ndfleet:smoke.hours, up to destroy): {usd(estimate.usd_per_run)}"
        )
    lines += [f"  {m}" for m in estimate.missing]
    lines += [f"  {s.service} ({s.detail}): unknown, {s.reason}" for s in estimate.services]
    if estimate.has_spot:
        lines.append(
            "  Spot: the GPU nodes' figure is the most Azure may charge (on-demand list price, or spotMaxPrice when "
            "lower); the Spot price itself moves with demand"
        )
    lines.append(f"  prices: {estimate.prices_from}")
    lines += [f"  source: {source}" for source in estimate.sources]
    lines.append(f"  not included: {NOT_PRICED}")
    lines.append("  prices change: `ndfleet cost --refresh` reads today's from Azure's Retail Prices API")
    return lines


def price_warnings(spec: ClusterSpec) -> list[str]:
    """What `ndfleet plan` (and the Pulumi program) warns about before deploying: a VM size the Retail Prices API had
    no meter for in the stack's region, though Azure lists it there or a recording asked for it (prices.json's
    `noMeter`). `ndfleet preflight` asks Azure itself whether the subscription may deploy the size there."""
    warnings = []
    for size in dict.fromkeys(g.vm_size for g in stack_vms(spec)):
        absent = missing_meter(size, spec.location)
        if absent is None:
            continue
        regions = table_regions(size)
        warnings.append(
            f"{size} in {spec.location}, as of {absent.observed}: {absent.source}; Azure may not offer the size here "
            "and ndfleet has no list price for it: `ndfleet preflight` asks Azure whether the subscription may deploy "
            f"it and has the quota; regions with a recorded price: {', '.join(regions) or 'none'}"
        )
    return warnings


def with_price_warnings(spec: ClusterSpec) -> ClusterSpec:
    """The spec with `price_warnings` added to its warnings (here, not in the spec's own checks, which sit below
    ndfleet's price table)."""
    found = price_warnings(spec)
    return spec.model_copy(update={"warnings": (*spec.warnings, *found)}) if found else spec


def plan_cost_lines(spec: ClusterSpec) -> list[str]:
    """The block `ndfleet plan` prints under its summary: the VMs' cost and, with monitoring on, its ingestion."""
    lines = ["", *render_cost(estimate_cost(spec))]
    if spec.monitoring.enabled:
        from ndfleet.monitoring.budget import ingestion_line

        lines.append(ingestion_line(spec))
    return lines
