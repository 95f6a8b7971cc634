"""The node program's parsers on recorded tool output (tests/data/node), and on what a broken tool prints:
truncated, empty, garbage, non-UTF-8, NUL bytes, a 2 MB line. A parser returns facts or raises ParseError
with what it saw; nothing else, whatever the input."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ndfleet_node.checks.gpu import GPU_FIELDS
from ndfleet_node.parsers import ParseError
from ndfleet_node.parsers.dcgm import parse_diag_json, parse_diag_text
from ndfleet_node.parsers.infiniband import parse_ibstat
from ndfleet_node.parsers.logs import lost_carrier_counts, normalise_bus, parse_xids
from ndfleet_node.parsers.lspci import parse_lnksta
from ndfleet_node.parsers.nvidia_smi import parse_nvlink_status, parse_q, parse_query_csv, row_remaps
from ndfleet_node.parsers.perf import parse_all_reduce_perf, parse_ib_write_bw, parse_nvbandwidth
from ndfleet_node.parsers.procfs import cpu_count, loaded_modules, mem_total_gib, mount_points
from ndfleet_node.text import decode

DATA = Path(__file__).resolve().parents[1] / "data" / "node"


def recorded(name: str) -> str:
    return decode((DATA / name).read_bytes())


# --- facts from recorded output (table: parser, recording, what must come out) -------------------------------

def _query(text: str) -> list[dict[str, str]]:
    return parse_query_csv(text, GPU_FIELDS)


CASES: list[tuple[str, Callable[[str], Any], str, Callable[[Any], bool]]] = [
    ("query csv: 8 GPUs", _query, "nvidia-smi-query-gpu.csv", lambda r: len(r) == 8),
    ("query csv: fields", _query, "nvidia-smi-query-gpu.csv",
     lambda r: r[5]["pci.bus_id"] == "0000000A:00:00.0"
     and r[4]["ecc.errors.corrected.aggregate.dram"] == "2120"),
    ("query csv: model", _query, "nvidia-smi-query-gpu.csv",
     lambda r: {g["name"] for g in r} == {"NVIDIA H100 80GB HBM3"}),
    ("-q: 8 GPUs by bus id", parse_q, "nvidia-smi-q.txt", lambda r: len(r) == 8 and "0000000C:00:00.0" in r),
    ("-q: nested sections", parse_q, "nvidia-smi-q.txt",
     lambda r: r["00000001:00:00.0"].get("PCI", "GPU Link Info", "Link Width", "Current") == "16x"),
    ("-q: ECC counts", parse_q, "nvidia-smi-q.txt",
     lambda r: r["00000002:00:00.0"].get("ECC Errors", "Aggregate", "DRAM Correctable") == "118"),
    ("-q: remap pending on GPU 5", lambda t: row_remaps(parse_q(t)), "nvidia-smi-q.txt",
     lambda r: [x.bus_id for x in r if x.pending] == ["0000000A:00:00.0"]),
    ("-q -d ROW_REMAPPER", lambda t: row_remaps(parse_q(t)), "nvidia-smi-q-row-remapper.txt",
     lambda r: [(x.pending, x.failed) for x in r if x.pending or x.failed] == [(True, False), (False, True)]),
    ("nvlink -s: 8 GPUs, 18 links", parse_nvlink_status, "nvidia-smi-nvlink-s.txt",
     lambda r: len(r) == 8 and all(len(g.up) + len(g.down) == 18 for g in r)),
    ("nvlink -s: GPU 2 link 7 down", parse_nvlink_status, "nvidia-smi-nvlink-s.txt",
     lambda r: [(g.index, g.down) for g in r if g.down] == [(2, (7,))]),
    ("ibstat: 9 ports", parse_ibstat, "ibstat.txt", lambda r: len(r) == 9),
    ("ibstat: mlx5_ib2 down", parse_ibstat, "ibstat.txt",
     lambda r: (r["mlx5_ib2", 1].state, r["mlx5_ib2", 1].physical_state) == ("Down", "Polling")),
    ("ibstat: rate and layer", parse_ibstat, "ibstat.txt",
     lambda r: r["mlx5_ib7", 1].rate_gbps == 400 and r["mlx5_an0", 1].link_layer == "Ethernet"),
    ("lspci: gen 5 x16", parse_lnksta, "lspci-vv-cx7.txt",
     lambda r: [(x.address, x.speed, x.width) for x in r] == [("0101:00:00.0", "32GT/s", "x16")]),
    ("lspci: downtrained x8", parse_lnksta, "lspci-vv-cx7-x8.txt", lambda r: r[0].width == "x8"),
    ("all_reduce_perf: avg busbw", parse_all_reduce_perf, "all_reduce_perf.txt",
     lambda r: r.avg_busbw_gbps == 461.226 and r.out_of_bounds == 0 and r.wrong == 0),
    ("all_reduce_perf: wrong results", parse_all_reduce_perf, "all_reduce_perf-wrong.txt",
     lambda r: r.out_of_bounds == 12 and r.wrong == 12),
    ("ib_write_bw: average Gb/s", lambda t: parse_ib_write_bw(t, 8388608), "ib_write_bw-client.txt",
     lambda r: r == 391.46),
    ("nvbandwidth: three tests", parse_nvbandwidth, "nvbandwidth.txt",
     lambda r: set(r) == {"host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce"}),
    ("nvbandwidth: host row, 8 GPUs", parse_nvbandwidth, "nvbandwidth.txt",
     lambda r: sorted(r["host_to_device_memcpy_ce"]) == [(0, c) for c in range(8)]),
    ("nvbandwidth: d2d without the diagonal", parse_nvbandwidth, "nvbandwidth.txt",
     lambda r: len(r["device_to_device_memcpy_read_ce"]) == 56
     and r["device_to_device_memcpy_read_ce"][1, 0] == 389.41),
    ("dcgmi text: all pass", parse_diag_text, "dcgmi-diag-r2.txt",
     lambda r: len(r) == 12 and not any(t.failed for t in r)),
    ("dcgmi text: memory fails on GPU 3", parse_diag_text, "dcgmi-diag-r2-fail.txt",
     lambda r: [(t.name, t.detail) for t in r if t.failed] == [("GPU Memory", "GPU: 3")]),
    ("dcgmi json: all pass", parse_diag_json, "dcgmi-diag-r2.json",
     lambda r: len(r) == 12 and not any(t.failed for t in r)),
    ("dcgmi json: memory fails on GPU 3", parse_diag_json, "dcgmi-diag-r2-fail.json",
     lambda r: [(t.name, t.detail[:8]) for t in r if t.failed] == [("GPU Memory", "GPU: 3 (")]),
    ("kernel log: Xids", parse_xids, "journalctl-kernel-xid79-flap.txt",
     lambda r: [(x.code, x.bus_key) for x in r] == [(13, "0002:00:00"), (79, "0008:00:00")]),
    ("kernel log: lost carrier", lost_carrier_counts, "journalctl-kernel-xid79-flap.txt",
     lambda r: dict(r) == {"ib3": 8}),
]  # fmt: skip


@pytest.mark.parametrize(("parser", "name", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parser_reads_the_recording(parser, name, expect):
    assert expect(parser(recorded(name)))


def test_bus_ids_of_the_driver_and_nvidia_smi_meet():
    assert normalise_bus("PCI:0008:00:00") == normalise_bus("00000008:00:00.0") == "0008:00:00"


def test_procfs_parsers():
    assert mem_total_gib("MemTotal:       1956684232 kB\nMemFree: 1 kB\n") == 1866
    assert cpu_count("processor\t: 0\nvendor_id\t: x\n\nprocessor\t: 1\n") == 2
    assert mount_points("blobfuse2 /mnt/blob/my\\040data fuse rw 0 0\n") == {"/mnt/blob/my data"}
    assert loaded_modules("nvidia_peermem 16384 0 - Live 0x0 (POE)\n\n") == {"nvidia_peermem"}
    with pytest.raises(ParseError, match="no MemTotal"):
        mem_total_gib("MemFree: 1 kB\n")


# --- what a broken tool prints: only ParseError, and a message saying what was seen -------------------------

PARSERS: dict[str, Callable[[str], Any]] = {
    "query_csv": _query,
    "q": lambda t: row_remaps(parse_q(t)),
    "nvlink": parse_nvlink_status,
    "ibstat": parse_ibstat,
    "lspci": parse_lnksta,
    "all_reduce_perf": parse_all_reduce_perf,
    "ib_write_bw": lambda t: parse_ib_write_bw(t, 8388608),
    "nvbandwidth": parse_nvbandwidth,
    "dcgm_text": parse_diag_text,
    "dcgm_json": parse_diag_json,
    "xids": parse_xids,
    "lost_carrier": lost_carrier_counts,
    "meminfo": mem_total_gib,
}
RECORDING_OF = {
    "query_csv": "nvidia-smi-query-gpu.csv", "q": "nvidia-smi-q.txt", "nvlink": "nvidia-smi-nvlink-s.txt",
    "ibstat": "ibstat.txt", "lspci": "lspci-vv-cx7.txt",
    "all_reduce_perf": "all_reduce_perf.txt", "ib_write_bw": "ib_write_bw-client.txt", "nvbandwidth": "nvbandwidth.txt",
    "dcgm_text": "dcgmi-diag-r2.txt", "dcgm_json": "dcgmi-diag-r2.json", "xids": "journalctl-kernel-xid79-flap.txt",
    "lost_carrier": "journalctl-kernel-xid79-flap.txt",
}  # fmt: skip
_rng = random.Random(9)
BAD_INPUTS = {
    "empty": b"",
    "blank lines": b"\n\n   \n",
    "garbage": bytes(_rng.randrange(256) for _ in range(4096)),
    "non-UTF-8": "GPU 0: NVIDIA H100 \u00e9\u00e8".encode("latin-1") + b"\xff\xfe\x80\n",
    "NUL bytes": b"\x00" * 1000 + b"\nLink 0: \x00\n",
    "2 MB line": b"A" * (2 * 1024 * 1024),
    "2 MB of separators": b"|" * (2 * 1024 * 1024),
    "error message": b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    "deep JSON": b"[" * 100_000,
}


def _call(parser: Callable[[str], Any], text: str) -> None:
    try:
        parser(text)
    except ParseError as e:
        assert "cannot read" in str(e) or "no " in str(e), str(e)
        assert "first line" in str(e) or "empty output" in str(e) or ":" in str(e)


@pytest.mark.parametrize("bad", BAD_INPUTS)
@pytest.mark.parametrize("parser", PARSERS)
def test_broken_output_gives_facts_or_parse_error_only(parser, bad):
    _call(PARSERS[parser], decode(BAD_INPUTS[bad]))


@pytest.mark.parametrize("parser", RECORDING_OF)
def test_truncated_recordings_give_facts_or_parse_error_only(parser):
    text = recorded(RECORDING_OF[parser])
    for cut in sorted({len(text) * k // 17 for k in range(17)} | {1, 2, len(text) - 1}):
        _call(PARSERS[parser], text[:cut])


def test_parse_error_says_what_it_saw():
    with pytest.raises(ParseError) as e:
        parse_ibstat("ibstat: command failed: no InfiniBand devices\n")
    assert str(e.value) == (
        "cannot read ibstat output (no CA with a port): first line 'ibstat: command failed: no InfiniBand devices'"
    )
    with pytest.raises(ParseError, match="empty output"):
        parse_nvlink_status("")


def test_decode_makes_any_bytes_text():
    text = decode(b"ok \xff\xfe \x00 nul \x1b[31m red\r\n")
    assert "\x00" not in text and "\x1b" not in text and "\r" not in text
    assert text.encode("utf-8")  # always encodable
