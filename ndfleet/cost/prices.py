"""List prices per VM-hour: Linux, pay-as-you-go (the Retail Prices API's `Consumption` meter), USD, per region.

Each figure carries the date it was observed and where. ndfleet's build machines cannot reach Azure, so the table
holds only figures from public copies of Azure's list price (docs/sources.md, "Prices"); a size or region missing
here has no figure rather than a guessed one, and `ndfleet cost --refresh` reads today's price from the Retail
Prices API. Prices change: re-check before you budget.
"""

from __future__ import annotations

from dataclasses import dataclass

RETAIL_API_SOURCE = "Azure Retail Prices API (prices.azure.com), Linux pay-as-you-go"
_ND_SOURCE = "Azure Linux VM pricing page and Retail Prices API, East US (docs/cost.md, docs/sources.md#prices)"
_DSV5_SOURCE = (
    "public copies of the Retail Prices API's East US figure (docs/sources.md#prices); not fetched by ndfleet"
)


@dataclass(frozen=True)
class ListPrice:
    vm_size: str
    region: str
    usd_per_hour: float
    observed: str  # when the figure was seen: YYYY-MM, or YYYY-MM-DD for a refresh
    source: str


PRICE_TABLE: tuple[ListPrice, ...] = (
    ListPrice("Standard_ND96isr_H100_v5", "eastus", 98.32, "2026-09", _ND_SOURCE),
    ListPrice("Standard_ND96isr_H200_v5", "eastus", 110.24, "2026-09", _ND_SOURCE),
    # Dsv5 is priced per vCPU (USD 0.048 per vCPU-hour in East US): the Slurm controller and login defaults.
    ListPrice("Standard_D4s_v5", "eastus", 0.192, "2026-06", _DSV5_SOURCE),
    ListPrice("Standard_D8s_v5", "eastus", 0.384, "2026-06", _DSV5_SOURCE),
    ListPrice("Standard_D16s_v5", "eastus", 0.768, "2026-06", _DSV5_SOURCE),
    ListPrice("Standard_D32s_v5", "eastus", 1.536, "2026-06", _DSV5_SOURCE),
)


def table_price(vm_size: str, region: str) -> ListPrice | None:
    """The table's figure for this size in this region, or None: never another region's figure."""
    return next((p for p in PRICE_TABLE if p.vm_size == vm_size and p.region == region.lower()), None)
