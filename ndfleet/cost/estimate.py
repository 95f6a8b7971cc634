"""What the stack's VMs cost per hour and per month: every VM the stack creates x its list price.

The VMs are almost all of the bill; what else Azure charges for (disks, storage, Managed Lustre, NAT gateway,
Bastion, the accounting database, data transfer) is named, not priced. A Spot VM's price moves with demand and is not
in the table: its figure is the ceiling Azure may charge, the on-demand list price or `spotMaxPrice` when set lower.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ndfleet.cost.month import HOURS_PER_MONTH, MONTH_NAME
from ndfleet.cost.prices import TABLE_NAME, ListPrice, missing_meter, no_price_line, table_price, table_regions
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.vms import VmGroup, stack_vms

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
class CostEstimate:
    region: str
    items: tuple[LineItem, ...]
    # A smoke stack's stated run length (ndfleet:smoke.hours, docs/smoke.md): priced as well as the hour and month.
    run_hours: float | None = None
    # Where every figure came from: the recorded table, or a refresh from the Retail Prices API on a date.
    prices_from: str = TABLE_NAME

    @property
    def usd_per_run(self) -> float | None:
        return None if self.run_hours is None else self.usd_per_hour * self.run_hours

    @property
    def usd_per_hour(self) -> float:
        """The priced VMs' total; see `missing` for what it leaves out."""
        return sum(i.usd_per_hour or 0.0 for i in self.items)

    @property
    def usd_per_month(self) -> float:
        return self.usd_per_hour * HOURS_PER_MONTH

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
    def spares_usd_per_hour(self) -> float:
        return sum(i.spares_usd_per_hour or 0.0 for i in self.items)

    @property
    def has_spot(self) -> bool:
        return any(i.group.spot for i in self.items)

    def as_json(self) -> dict[str, Any]:
        return {
            "currency": "USD",
            "region": self.region,
            "hoursPerMonth": HOURS_PER_MONTH,
            "items": [i.as_json() for i in self.items],
            "usdPerHour": round(self.usd_per_hour, 2),
            "usdPerMonth": round(self.usd_per_month, 2),
            **(
                {"runHours": self.run_hours, "usdPerRun": round(self.usd_per_run or 0.0, 2)}
                if self.run_hours is not None
                else {}
            ),
            **({"spares": self.spares, "sparesUsdPerHour": round(self.spares_usd_per_hour, 2),
                "sparesUsdPerMonth": round(self.spares_usd_per_hour * HOURS_PER_MONTH, 2)} if self.spares else {}),
            "complete": not self.missing,
            "missing": self.missing,
            "pricesFrom": self.prices_from,
            "notIncluded": NOT_PRICED,
        }


def estimate_cost(
    spec: ClusterSpec, price_of: PriceLookup = table_price, prices_from: str | None = None
) -> CostEstimate:
    items = tuple(
        LineItem(group, price_of(group.vm_size, spec.location), spec.spot_max_price) for group in stack_vms(spec)
    )
    run_hours = spec.smoke.hours if spec.smoke is not None else None
    if prices_from is None:
        observed = sorted({i.price.observed for i in items if i.price})
        when = f"observed {observed[0]}" + (f" to {observed[-1]}" if len(observed) > 1 else "") if observed else ""
        prices_from = f"{TABLE_NAME}, {when}".rstrip(", ")
    return CostEstimate(region=spec.location, items=items, run_hours=run_hours, prices_from=prices_from)


def usd(value: float) -> str:
    """A figure in US dollars: cents, or tenths of a cent between nothing and a dollar (nothing is US$0.00)."""
    return f"US${value:,.3f}" if 0 < value < 1 else f"US${value:,.2f}"


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
    priced = sum(i.group.count for i in estimate.items if i.usd_per_vm_hour is not None)
    if priced:
        qualifier = "the priced " if estimate.missing else ""
        lines.append(
            f"  total ({qualifier}{priced:,} VMs): {usd(estimate.usd_per_hour)} per hour, "
            f"{usd(estimate.usd_per_month)} per {MONTH_NAME}"
        )
    else:
        lines.append("  total: unknown, no VM of the stack has a list price in ndfleet's table for this region")
    if priced and estimate.spares:
        # Spares run (and bill) like every node; this is what keeping them costs on top of the nodes that serve.
        lines.append(
            f"  of which {estimate.spares:,} warm spare(s), held out of scheduling: "
            f"{usd(estimate.spares_usd_per_hour)} per hour, {usd(estimate.spares_usd_per_hour * HOURS_PER_MONTH)} "
            f"per {HOURS_PER_MONTH}-hour month"
        )
    if priced and estimate.run_hours is not None:
        lines.append(
            f"  smoke run of {estimate.run_hours:g} h (ndfleet:smoke.hours, up to destroy): "
            f"{usd(estimate.usd_per_run or 0.0)}"
        )
    lines += [f"  {m}" for m in estimate.missing]
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
        from ndfleet.monitoring.cost import estimate as monitoring_estimate

        monthly = monitoring_estimate(spec).usd_per_month
        lines.append(f"  monitoring ingestion: about {usd(monthly)} per {MONTH_NAME} on top (docs/monitoring.md)")
    return lines
