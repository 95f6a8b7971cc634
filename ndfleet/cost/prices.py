"""List prices per VM-hour: Linux, pay-as-you-go (the Retail Prices API's `Consumption` meter), USD, per region.

The recorded table is ndfleet/cost/prices.json: one row per VM size and region, each with the date it was observed,
where, and the Retail Prices API query that answers it (`sourceUrl`). ndfleet's build machines cannot reach Azure,
so the table holds only figures from public copies of Azure's list price (docs/sources.md, "Prices"); a size or
region missing here has no figure rather than a guessed one (never another region's). `ndfleet cost --refresh`
reads today's price from the Retail Prices API and `--write FILE` records it in this same format, so a user with
network can fill the regions ndfleet has no figure for. Prices change: re-check before you budget.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RETAIL_API_SOURCE = "Azure Retail Prices API (prices.azure.com), Linux pay-as-you-go"
TABLE_FILE = Path(__file__).with_name("prices.json")
TABLE_NAME = "ndfleet's recorded price table (ndfleet/cost/prices.json)"
MAX_TABLE_BYTES = 1024 * 1024  # ~200 bytes a row: room for every VM size ndfleet knows in every Azure region
_FIELDS = ("vmSize", "region", "usdPerHour", "observed", "source", "sourceUrl")


class PriceTableError(Exception):
    """A price table file that is not one: the message names the file and what is wrong."""


@dataclass(frozen=True)
class ListPrice:
    vm_size: str
    region: str
    usd_per_hour: float
    observed: str  # when the figure was seen: YYYY-MM, or YYYY-MM-DD for a refresh
    source: str
    source_url: str = ""  # the Retail Prices API query that answers this figure

    def as_row(self) -> dict[str, Any]:
        return dict(zip(_FIELDS, (self.vm_size, self.region, self.usd_per_hour, self.observed, self.source,
                                  self.source_url), strict=True))  # fmt: skip


def source_url(vm_size: str, region: str) -> str:
    """The Retail Prices API query for one size in one region (the one `ndfleet cost --refresh` sends)."""
    from ndfleet.cost.retail import DEFAULT_ENDPOINT, query_url

    return urllib.parse.unquote(query_url(DEFAULT_ENDPOINT, vm_size, region).replace("+", " "))


def _row(item: Any, where: str) -> ListPrice:
    if not isinstance(item, dict) or set(item) != set(_FIELDS):
        raise PriceTableError(f"{where}: a row must have exactly the keys {', '.join(_FIELDS)}")
    price = item["usdPerHour"]
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price) or price <= 0:
        raise PriceTableError(f"{where}: usdPerHour must be a positive number, not {price!r:.40}")
    texts = [item[k] for k in _FIELDS if k != "usdPerHour"]
    if not all(isinstance(t, str) and t and len(t) <= 500 and t.isprintable() for t in texts):
        raise PriceTableError(f"{where}: vmSize, region, observed, source and sourceUrl must be short printable text")
    return ListPrice(item["vmSize"], item["region"].lower(), float(price), item["observed"], item["source"],
                     item["sourceUrl"])  # fmt: skip


def load_table(path: Path = TABLE_FILE) -> tuple[ListPrice, ...]:
    """The rows of a price table file, checked by shape; a bad file raises PriceTableError naming it."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_TABLE_BYTES + 1)
    except OSError as error:
        raise PriceTableError(f"cannot read the price table {path}: {error.strerror}") from None
    if len(raw) > MAX_TABLE_BYTES:
        raise PriceTableError(f"the price table {path} is larger than {MAX_TABLE_BYTES:,} bytes")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PriceTableError(f"the price table {path} is not JSON: {error}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("prices"), list):
        raise PriceTableError(f"the price table {path} has no 'prices' list")
    return tuple(_row(item, f"{path}, prices[{n}]") for n, item in enumerate(doc["prices"]))


def table_json(rows: Iterable[ListPrice]) -> str:
    """A price table file's text: the rows sorted by size and region, one figure per size and region."""
    unique = {(r.vm_size, r.region): r for r in rows}
    doc = {
        "comment": "ndfleet's recorded list prices: Linux pay-as-you-go, USD per VM-hour, one row per VM size and "
        "region, each with the date it was observed and the Retail Prices API query that answers it. `ndfleet cost "
        "--refresh --write FILE` writes this format. docs/sources.md#prices.",
        "prices": [unique[k].as_row() for k in sorted(unique)],
    }
    return json.dumps(doc, indent=2) + "\n"


def merged(old: Iterable[ListPrice], new: Iterable[ListPrice]) -> tuple[ListPrice, ...]:
    """`old` with `new`'s figures in place of the same size and region's."""
    rows = {(r.vm_size, r.region): r for r in old}
    rows.update({(r.vm_size, r.region): r for r in new})
    return tuple(rows[k] for k in sorted(rows))


PRICE_TABLE: tuple[ListPrice, ...] = load_table()


def table_price(vm_size: str, region: str) -> ListPrice | None:
    """The table's figure for this size in this region, or None: never another region's figure."""
    return next((p for p in PRICE_TABLE if p.vm_size == vm_size and p.region == region.lower()), None)


def table_regions(vm_size: str) -> list[str]:
    """The regions the recorded table has a figure for this size in."""
    return sorted({p.region for p in PRICE_TABLE if p.vm_size == vm_size})
