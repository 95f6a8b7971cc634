"""`lspci -vv`: the negotiated PCIe link (LnkSta) of each device."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ndfleet_node.parsers import fail

_DEVICE = re.compile(r"^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F] ")
_LNKSTA = re.compile(r"LnkSta:\s*Speed ([0-9.]+GT/s)[^,]*, Width (x\d+)")


@dataclass(frozen=True)
class PcieLink:
    address: str
    speed: str  # "32GT/s"
    width: str  # "x16"


def parse_lnksta(text: str) -> list[PcieLink]:
    """Every device block that has a LnkSta line: its address, current speed and width."""
    links = []
    address = ""
    for line in text.splitlines():
        if _DEVICE.match(line):
            address = line.split(" ", 1)[0]
            continue
        m = _LNKSTA.search(line)
        if m and address:
            links.append(PcieLink(address, m.group(1), m.group(2)))
            address = ""
    if not links:
        raise fail("lspci -vv", text, "no device with 'LnkSta: Speed ..., Width ...'")
    return links
