"""List prices per VM-hour: Linux, pay-as-you-go (the Retail Prices API's `Consumption` meter), USD, per region.

The recorded table is ndfleet/cost/prices.json: one row per VM size and region, each with the date it was observed,
where, and the Retail Prices API query that answers it (`sourceUrl`). ndfleet's build machines cannot reach Azure,
so the table holds figures from a public recording of the Retail Prices API's answers, program output committed to
git (docs/cost.md, "Where the prices come from"): every region that recording priced the ND sizes and the Slurm
sizes in. A size or region missing here has no figure rather than a guessed one (never another region's). Its
`noMeter` list names a size and region where the API had no meter at all, though Azure lists the size there or the
recording asked for it: `ndfleet plan` warns about those before anything is deployed. `ndfleet cost --refresh`
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
_NO_METER_FIELDS = ("vmSize", "region", "observed", "source")


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


@dataclass(frozen=True)
class NoMeter:
    """A size the Retail Prices API had no meter for in a region where Azure lists it or a recording asked for it."""

    vm_size: str
    region: str
    observed: str
    source: str  # what was seen, and where

    def as_row(self) -> dict[str, Any]:
        return dict(zip(_NO_METER_FIELDS, (self.vm_size, self.region, self.observed, self.source), strict=True))


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


def _no_meter(item: Any, where: str) -> NoMeter:
    if not isinstance(item, dict) or set(item) != set(_NO_METER_FIELDS):
        raise PriceTableError(f"{where}: a noMeter entry must have exactly the keys {', '.join(_NO_METER_FIELDS)}")
    if not all(isinstance(item[k], str) and item[k] and len(item[k]) <= 500 and item[k].isprintable()
               for k in _NO_METER_FIELDS):  # fmt: skip
        raise PriceTableError(f"{where}: vmSize, region, observed and source must be short printable text")
    return NoMeter(item["vmSize"], item["region"].lower(), item["observed"], item["source"])


def _load_doc(path: Path) -> dict[str, Any]:
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
    if not isinstance(doc.get("noMeter", []), list):
        raise PriceTableError(f"the price table {path}: 'noMeter' must be a list")
    return doc


def load_table(path: Path = TABLE_FILE) -> tuple[ListPrice, ...]:
    """The rows of a price table file, checked by shape; a bad file raises PriceTableError naming it."""
    doc = _load_doc(path)
    return tuple(_row(item, f"{path}, prices[{n}]") for n, item in enumerate(doc["prices"]))


def load_no_meter(path: Path = TABLE_FILE) -> tuple[NoMeter, ...]:
    """The file's `noMeter` entries (none when it has no such list), checked by shape."""
    doc = _load_doc(path)
    return tuple(_no_meter(item, f"{path}, noMeter[{n}]") for n, item in enumerate(doc.get("noMeter", [])))


def table_json(rows: Iterable[ListPrice], no_meter: Iterable[NoMeter] = ()) -> str:
    """A price table file's text: the rows sorted by size and region, one figure per size and region; then the
    sizes and regions without a meter, less those a row now prices."""
    unique = {(r.vm_size, r.region): r for r in rows}
    absent = {(n.vm_size, n.region): n for n in no_meter if (n.vm_size, n.region) not in unique}
    doc: dict[str, Any] = {
        "comment": "ndfleet's recorded list prices: Linux pay-as-you-go, USD per VM-hour, one row per VM size and "
        "region, each with the date it was observed, its source and the Retail Prices API query that answers it; "
        "noMeter: a size and region the API had no meter for. `ndfleet cost --refresh --write FILE` writes this "
        "format. docs/cost.md#where-the-prices-come-from.",
        "prices": [unique[k].as_row() for k in sorted(unique)],
    }
    if absent:
        doc["noMeter"] = [absent[k].as_row() for k in sorted(absent)]
    return json.dumps(doc, indent=2) + "\n"


def merged(old: Iterable[ListPrice], new: Iterable[ListPrice]) -> tuple[ListPrice, ...]:
    """`old` with `new`'s figures in place of the same size and region's."""
    rows = {(r.vm_size, r.region): r for r in old}
    rows.update({(r.vm_size, r.region): r for r in new})
    return tuple(rows[k] for k in sorted(rows))


PRICE_TABLE: tuple[ListPrice, ...] = load_table()
NO_METER: tuple[NoMeter, ...] = load_no_meter()
_BY_SIZE_AND_REGION = {(p.vm_size, p.region): p for p in PRICE_TABLE}


def table_price(vm_size: str, region: str) -> ListPrice | None:
    """The table's figure for this size in this region, or None: never another region's figure."""
    return _BY_SIZE_AND_REGION.get((vm_size, region.lower()))


def table_regions(vm_size: str) -> list[str]:
    """The regions the recorded table has a figure for this size in."""
    return sorted({p.region for p in PRICE_TABLE if p.vm_size == vm_size})


def missing_meter(vm_size: str, region: str) -> NoMeter | None:
    """The recorded absence of a meter for this size in this region, or None."""
    return next((n for n in NO_METER if n.vm_size == vm_size and n.region == region.lower()), None)


def no_price_line(vm_size: str, region: str) -> str:
    """One line for a size without a figure in a region: the regions that have one, and how to read today's."""
    regions = table_regions(vm_size)
    where = (
        f"ndfleet's table has it in {len(regions)} region{'s' if len(regions) > 1 else ''}: {', '.join(regions)}"
        if regions
        else "ndfleet's table has it in no region"
    )
    return (
        f"no list price recorded for {vm_size} in {region} ({where}): `ndfleet cost --refresh` (with network) reads "
        "it from Azure's Retail Prices API, `--write FILE` records it"
    )
