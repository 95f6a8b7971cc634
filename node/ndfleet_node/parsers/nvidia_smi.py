"""nvidia-smi: `--query-gpu=... --format=csv,noheader,nounits`, `-q [-d SECTION]`, `nvlink -s`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ndfleet_node.parsers import ParseError, fail

_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")
_NVLINK_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?\s*$")
_NVLINK_LINK = re.compile(r"^\s+Link (\d+): (.*)$")


def parse_query_csv(text: str, fields: list[str]) -> list[dict[str, str]]:
    """One dict per GPU line, keyed by the queried field names; values stripped ('[N/A]' kept as is)."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            raise fail("nvidia-smi --query-gpu", line, f"{len(values)} fields where {len(fields)} were asked")
        rows.append(dict(zip(fields, values, strict=True)))
    if not rows:
        raise fail("nvidia-smi --query-gpu", text, "no GPU line")
    return rows


@dataclass
class QSection:
    """One block of `nvidia-smi -q`: its `key : value` lines and its nested blocks."""

    values: dict[str, str] = field(default_factory=dict)
    sections: dict[str, QSection] = field(default_factory=dict)

    def get(self, *path: str) -> str | None:
        node: QSection | None = self
        for name in path[:-1]:
            node = node.sections.get(name) if node else None
        return node.values.get(path[-1]) if node else None


def parse_q(text: str) -> dict[str, QSection]:
    """`nvidia-smi -q` (any -d): bus id -> that GPU's block (nesting by indentation)."""
    gpus: dict[str, QSection] = {}
    stack: list[tuple[int, QSection]] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        header = _GPU_HEADER.match(line)
        if header:
            gpu = QSection()
            gpus[header.group(1)] = gpu
            stack = [(-1, gpu)]
            continue
        if not stack:
            continue  # the preamble: timestamp, driver version, attached GPUs
        indent = len(line) - len(line.lstrip(" "))
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        key, sep, value = line.strip().partition(":")
        if sep:
            stack[-1][1].values[key.strip()] = value.strip()
        else:
            child = QSection()
            stack[-1][1].sections[key.strip()] = child
            stack.append((indent, child))
    if not gpus:
        raise fail("nvidia-smi -q", text, "no 'GPU <bus id>' block")
    return gpus


@dataclass(frozen=True)
class RowRemap:
    bus_id: str
    pending: bool
    failed: bool


def row_remaps(gpus: dict[str, QSection]) -> list[RowRemap]:
    """Row-remapper state per GPU from `nvidia-smi -q -d ROW_REMAPPER` (parse_q's result)."""
    out = []
    for bus, gpu in gpus.items():
        pending = gpu.get("Remapped Rows", "Pending")
        failed = gpu.get("Remapped Rows", "Remapping Failure Occurred")
        if pending is None and failed is None:
            raise ParseError(f"cannot read nvidia-smi -q -d ROW_REMAPPER output: GPU {bus} has no 'Remapped Rows'")
        out.append(RowRemap(bus, pending == "Yes", failed == "Yes"))
    return out


@dataclass(frozen=True)
class GpuLinks:
    index: int
    name: str
    uuid: str
    up: tuple[int, ...]
    down: tuple[int, ...]


def parse_nvlink_status(text: str) -> list[GpuLinks]:
    """`nvidia-smi nvlink -s`: per GPU, the links with a speed (up) and the `<inactive>` ones (down)."""
    gpus: list[GpuLinks] = []
    current: tuple[int, str, str] | None = None
    up: list[int] = []
    down: list[int] = []

    def close() -> None:
        if current is not None:
            gpus.append(GpuLinks(current[0], current[1], current[2], tuple(up), tuple(down)))

    for line in text.splitlines():
        g = _NVLINK_GPU.match(line)
        if g:
            close()
            current, up, down = (int(g.group(1)), g.group(2), g.group(3) or ""), [], []
            continue
        link = _NVLINK_LINK.match(line)
        if link and current is not None:
            state = link.group(2).strip()
            (down if "inactive" in state.lower() or not re.search(r"\d", state) else up).append(int(link.group(1)))
    close()
    if not gpus:
        raise fail("nvidia-smi nvlink -s", text, "no 'GPU N:' line")
    return gpus
