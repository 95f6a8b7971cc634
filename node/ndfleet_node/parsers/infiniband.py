"""InfiniBand: `ibstat`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ndfleet_node.parsers import fail

_CA = re.compile(r"^CA '([^']+)'")
_PORT = re.compile(r"^\s+Port (\d+):\s*$")
_KV = re.compile(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(.*)$")


@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str
    physical_state: str
    rate_gbps: float | None
    link_layer: str


def parse_ibstat(text: str) -> dict[tuple[str, int], IbPort]:
    """`ibstat`: (device, port) -> its state, physical state, rate and link layer."""
    ports: dict[tuple[str, int], IbPort] = {}
    ca = ""
    port: int | None = None
    attrs: dict[str, str] = {}

    def close() -> None:
        if ca and port is not None:
            try:
                rate: float | None = float(attrs.get("Rate", ""))
            except ValueError:
                rate = None
            ports[(ca, port)] = IbPort(
                ca, port, attrs.get("State", "?"), attrs.get("Physical state", "?"), rate, attrs.get("Link layer", "?")
            )

    for line in text.splitlines():
        m = _CA.match(line)
        if m:
            close()
            ca, port, attrs = m.group(1), None, {}
            continue
        m = _PORT.match(line)
        if m and ca:
            close()
            port, attrs = int(m.group(1)), {}
            continue
        m = _KV.match(line)
        if m and port is not None:
            attrs[m.group(1)] = m.group(2).strip()
    close()
    if not ports:
        raise fail("ibstat", text, "no CA with a port")
    return ports
