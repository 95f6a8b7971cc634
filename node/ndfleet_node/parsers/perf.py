"""Bandwidth tests: nccl-tests `all_reduce_perf`, perftest `ib_write_bw`, `nvbandwidth`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ndfleet_node.parsers import fail, to_float, to_int

_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\S+)")


@dataclass(frozen=True)
class AllReduce:
    avg_busbw_gbps: float
    out_of_bounds: int  # values that failed the result check (# Out of bounds values : N OK|FAILED)
    wrong: int  # sum of the #wrong columns over every size


def parse_all_reduce_perf(text: str) -> AllReduce:
    """nccl-tests output: the average bus bandwidth and whether any result was wrong."""
    avg: float | None = None
    oob = 0
    wrong = 0
    for line in text.splitlines():
        m = _AVG_BUSBW.match(line)
        if m:
            avg = to_float(m.group(1))
            continue
        m = _OUT_OF_BOUNDS.match(line)
        if m:
            oob = int(m.group(1)) or (1 if m.group(2) == "FAILED" else 0)
            continue
        fields = line.split()
        # size count type redop root time algbw busbw #wrong time algbw busbw #wrong
        if len(fields) == 13 and fields[0].isdigit():
            wrong += sum(to_int(fields[i]) or 0 for i in (8, 12))
    if avg is None:
        raise fail("all_reduce_perf", text, "no '# Avg bus bandwidth' line")
    return AllReduce(avg, oob, wrong)


def parse_ib_write_bw(text: str, message_bytes: int) -> float:
    """perftest client output: BW average (Gb/s with --report_gbits) of the row for `message_bytes`."""
    header = False
    for line in text.splitlines():
        fields = line.split()
        if fields[:1] == ["#bytes"]:
            header = True
            continue
        if header and len(fields) >= 4 and fields[0] == str(message_bytes):
            value = to_float(fields[3])
            if value is not None:
                return value
    raise fail("ib_write_bw", text, f"no result row for {message_bytes} bytes")


# nvbandwidth: test name -> {(row, column): GB/s}; N/A cells are left out. Rows of host tests are the CPU (0).
NvbMatrix = dict[tuple[int, int], float]


def parse_nvbandwidth(text: str) -> dict[str, NvbMatrix]:
    results: dict[str, NvbMatrix] = {}
    test = ""
    columns: list[int] | None = None
    for line in text.splitlines():
        if line.startswith("Running "):
            test = line[len("Running ") :].strip().rstrip(".")
            results[test] = {}
            columns = None
            continue
        if not test:
            continue
        fields = line.split()
        if not fields or fields[0] == "SUM":
            if columns is not None:
                test, columns = "", None
            continue
        if "bandwidth" in line and "(GB/s)" in line:
            continue
        if columns is None:
            if all(f.isdigit() for f in fields):
                columns = [int(f) for f in fields]
            continue
        if not fields[0].isdigit():
            continue
        row = int(fields[0])
        for col, cell in zip(columns, fields[1:], strict=False):
            value = to_float(cell)
            if value is not None:
                results[test][(row, col)] = value
    if not any(results.values()):
        raise fail("nvbandwidth", text, "no result matrix")
    return results
