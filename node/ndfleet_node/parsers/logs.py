"""Kernel and system log lines (journalctl or dmesg): NVIDIA Xid events and IPoIB lost-carrier events."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+),?\s*(.*)")
_LOST_CARRIER = re.compile(r"(\bib\d+): [Ll]ost carrier")


@dataclass(frozen=True)
class Xid:
    pci: str  # as the driver prints it: "PCI:0008:00:00"
    code: int
    text: str

    @property
    def bus_key(self) -> str:
        return normalise_bus(self.pci)


def normalise_bus(bus: str) -> str:
    """'PCI:0008:00:00', '00000008:00:00.0' -> '0008:00:00': the short form both the driver and nvidia-smi share."""
    b = bus.lower()
    b = b[4:] if b.startswith("pci:") else b
    b = b.split(".")[0]
    return b[-10:]


def parse_xids(text: str) -> list[Xid]:
    """Every Xid event; an empty log is a valid answer (no Xids), so this never fails."""
    out = []
    for line in text.splitlines():
        m = _XID.search(line)
        if m:
            out.append(Xid(m.group(1), int(m.group(2)), m.group(3).strip()))
    return out


def lost_carrier_counts(text: str) -> Counter[str]:
    """Interface -> number of 'ibN: lost carrier' lines."""
    return Counter(m.group(1) for line in text.splitlines() for m in [_LOST_CARRIER.search(line)] if m)
