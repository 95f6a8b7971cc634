"""nccl-tests output parsing: recorded real output, and the shapes a run can leave behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from ndfleet_node.burnin.parser import parse_nccl_test_output

DATA = Path(__file__).resolve().parent.parent / "data" / "nccl"


def test_recorded_two_node_sweep() -> None:
    out = parse_nccl_test_output((DATA / "all_reduce_perf_2node_h100_sweep.txt").read_text())
    assert out.complete
    assert out.ranks == 16
    assert out.hosts == ("ztan-mig-235z", "ztan-mig-gq73")
    assert len(out.sizes) == 31
    assert out.sizes[0].size_bytes == 8 and out.largest is not None
    big = out.largest
    assert big.size_bytes == 8589934592
    assert (big.oop_time_us, big.oop_algbw, big.oop_busbw, big.oop_wrong) == (47535.0, 180.71, 338.82, 0)
    assert (big.ip_time_us, big.ip_algbw, big.ip_busbw, big.ip_wrong) == (47743.0, 179.92, 337.35, 0)
    assert out.busbw == 337.35  # the lower of out-of-place and in-place at the largest size
    assert out.avg_busbw == 70.742
    assert out.out_of_bounds == 0 and out.wrong == 0
    assert out.problems == ()


ROW = "  17179869184  4294967296  float  sum  -1    83210  206.46  387.12  {w1}    83302  206.23  386.69  {w2}"
HEADER = "#  Rank  0 Group  0 Pid   1 on nd-a device  0 [0000:01:00] NVIDIA H100 80GB HBM3\n"
TRAILER = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 386.9\n"


@pytest.mark.parametrize(
    ("text", "complete", "busbw", "wrong"),
    [
        (HEADER + ROW.format(w1=0, w2=0) + "\n" + TRAILER, True, 386.69, 0),
        (HEADER + ROW.format(w1=12, w2=0) + "\n" + TRAILER, True, 386.69, 12),
        (HEADER + ROW.format(w1=3, w2=5) + "\n" + TRAILER, True, 386.69, 8),
        (HEADER + ROW.format(w1="N/A", w2="N/A") + "\n" + TRAILER, True, 386.69, 0),  # -c 0: nothing checked
        (HEADER, False, None, 0),  # killed before the first result
        (HEADER + ROW.format(w1=0, w2=0) + "\n", False, 386.69, 0),  # cut short before the trailer
        ("", False, None, 0),
        ("nd-a: NCCL WARN NET/IB : Got completion with error 12\n" + HEADER, False, None, 0),
    ],
    ids=["clean", "wrong-oop", "wrong-both", "unchecked", "no-rows", "no-trailer", "empty", "nccl-error"],
)
def test_output_shapes(text: str, complete: bool, busbw: float | None, wrong: int) -> None:
    out = parse_nccl_test_output(text)
    assert (out.complete, out.busbw, out.wrong) == (complete, busbw, wrong)


def test_out_of_bounds_values_count_as_wrong() -> None:
    text = HEADER + ROW.format(w1=0, w2=0) + "\n# Out of bounds values : 7 FAILED\n# Avg bus bandwidth    : 1.0\n"
    assert parse_nccl_test_output(text).wrong == 7


def test_garbled_row_is_a_problem_not_a_crash() -> None:
    out = parse_nccl_test_output(HEADER + "  1024  256 float sum -1 12.1 x.y 0.2 0\n" + TRAILER)
    assert out.sizes == () and not out.complete and "unreadable result row" in out.problems[0]
