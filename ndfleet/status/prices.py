"""Hourly list price of a running VM, for status's cost column.

Stand-in until the cost helper's price table (ndfleet/cost/prices.py) is wired in: the pay-as-you-go Linux list
prices README.md quotes (East US, observed September 2026; docs/sources.md, "Prices"). Other regions and sizes have
no price here: the cost column says unknown rather than guess.
"""

from __future__ import annotations

# (VM size, region) -> US$ per VM-hour.
LIST_PRICES_USD: dict[tuple[str, str], float] = {
    ("Standard_ND96isr_H100_v5", "eastus"): 98.32,
    ("Standard_ND96isr_H200_v5", "eastus"): 110.24,
}


def price_per_hour(size: str, region: str) -> float | None:
    return LIST_PRICES_USD.get((size, region.lower()))
