"""Read nccl-tests output (`all_reduce_perf` and friends): one pure function, text in, figures out.

nccl-tests prints, from rank 0 only, a header (`# nThread ... validation: 1 ...`), one `# Rank N ... on HOST
device D [...] MODEL` line per rank, then one row per message size with an out-of-place and an in-place block:

    size  count  type  redop  root  | time  algbw  busbw  #wrong | time  algbw  busbw  #wrong

and two trailers, `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth : X`. `#wrong` counts
elements that differ from the expected result (summed over all ranks); it reads `N/A` when the run was started
with `-c 0` (no check). Bandwidths are GB/s (10^9 bytes per second), times microseconds.
Source: NVIDIA/nccl-tests `src/common.cu` (print format) and `doc/PERFORMANCE.md` (algbw / busbw).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w+)")
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?$")


@dataclass(frozen=True)
class SizeResult:
    """One message size: the out-of-place and in-place figures."""

    size_bytes: int
    oop_time_us: float
    oop_algbw: float
    oop_busbw: float
    oop_wrong: int | None  # None: not checked (-c 0)
    ip_time_us: float
    ip_algbw: float
    ip_busbw: float
    ip_wrong: int | None

    @property
    def busbw(self) -> float:
        """The size's bus bandwidth: the lower of out-of-place and in-place (both must clear a floor)."""
        return min(self.oop_busbw, self.ip_busbw)

    @property
    def wrong(self) -> int:
        return (self.oop_wrong or 0) + (self.ip_wrong or 0)


@dataclass(frozen=True)
class NcclTestOutput:
    sizes: tuple[SizeResult, ...]
    avg_busbw: float | None
    out_of_bounds: int | None
    ranks: int
    hosts: tuple[str, ...]  # in rank order, each once
    problems: tuple[str, ...] = field(default=())

    @property
    def complete(self) -> bool:
        """The run got as far as the trailer: a run cut short (hang killed, crash) has no average line."""
        return self.avg_busbw is not None and bool(self.sizes)

    @property
    def wrong(self) -> int:
        return sum(s.wrong for s in self.sizes) + (self.out_of_bounds or 0)

    @property
    def largest(self) -> SizeResult | None:
        return max(self.sizes, key=lambda s: s.size_bytes) if self.sizes else None

    @property
    def busbw(self) -> float | None:
        """Bus bandwidth at the largest message size (what a floor is judged against)."""
        largest = self.largest
        return None if largest is None else largest.busbw


def _wrong(token: str) -> int | None:
    return None if token.upper() == "N/A" else int(token)


def _row(tokens: list[str]) -> SizeResult | None:
    # size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
    if len(tokens) != 13 or not tokens[0].isdigit():
        return None
    try:
        return SizeResult(
            size_bytes=int(tokens[0]),
            oop_time_us=float(tokens[5]),
            oop_algbw=float(tokens[6]),
            oop_busbw=float(tokens[7]),
            oop_wrong=_wrong(tokens[8]),
            ip_time_us=float(tokens[9]),
            ip_algbw=float(tokens[10]),
            ip_busbw=float(tokens[11]),
            ip_wrong=_wrong(tokens[12]),
        )
    except ValueError:
        return None


def parse_nccl_test_output(text: str) -> NcclTestOutput:
    """Figures from the text an nccl-tests binary printed (stdout, possibly mixed with mpirun/NCCL log lines)."""
    sizes: list[SizeResult] = []
    hosts: list[str] = []
    ranks = 0
    avg: float | None = None
    oob: int | None = None
    problems: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if m := _RANK.match(line):
                ranks += 1
                if m.group(2) not in hosts:
                    hosts.append(m.group(2))
            elif m := _AVG.match(line):
                avg = float(m.group(1))
            elif m := _OOB.match(line):
                oob = int(m.group(1))
            continue
        tokens = line.split()
        if tokens and tokens[0].isdigit() and len(tokens) >= 9:
            row = _row(tokens)
            if row is None:
                problems.append(f"unreadable result row: {line[:120]}")
            else:
                sizes.append(row)
    return NcclTestOutput(
        sizes=tuple(sizes), avg_busbw=avg, out_of_bounds=oob, ranks=ranks, hosts=tuple(hosts), problems=tuple(problems)
    )
