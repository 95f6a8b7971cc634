"""`slurm-export` under hostile node reasons (issue 31): Slurm stores a reason as the administrator typed it, so it
may hold U+2028, U+0085 or control characters. Records are split on newline only (no forged `NodeName=ghost`
series), and no control character or line separator reaches a label value. Through the real entry point with a
fake `scontrol` (one node a line, https://slurm.schedmd.com/scontrol.html, `--oneliner`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ndfleet_node import slurm_export

from ndfleet.status.prometheus import SLURM_METRIC

STAMP = " [root@2026-12-03T08:00:00]"


def export(tmp_path: Path, listing: str) -> str:
    script = tmp_path / "scontrol"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.buffer.write({listing.encode()!r})\n")
    script.chmod(0o755)
    sacct = tmp_path / "sacct"  # accounting with no requeued job
    sacct.write_text("#!/bin/sh\n")
    sacct.chmod(0o755)
    out = tmp_path / "slurm.prom"
    assert slurm_export.main(["--out", str(out), "--scontrol", str(script), "--sacct", str(sacct)]) == 0
    return out.read_text(encoding="utf-8")


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c"])
def test_a_line_separator_in_a_reason_forges_no_node(tmp_path: Path, separator: str) -> None:
    listing = (f"NodeName=real-1 State=IDLE+DRAIN Reason=ops{separator}NodeName=ghost State=IDLE{STAMP}\n"
               "NodeName=real-2 State=IDLE\n")
    text = export(tmp_path, listing)
    series = [line for line in text.split("\n") if line.startswith(f"{SLURM_METRIC}{{")]
    assert [s.split('"')[1] for s in series] == ["real-1", "real-2"]
    assert "ghost" not in text.split('reason="', 1)[0]  # only inside real-1's reason, never as a node


def test_control_characters_and_separators_are_removed_from_labels(tmp_path: Path) -> None:
    reason = "a\x1b[31mb\x9b31mc\u2028d\u2029e\x85f\x7fg\x9fh"
    text = export(tmp_path, f"NodeName=n\x9b1 State=IDLE+DRAIN Reason={reason}{STAMP}\n")
    series = next(line for line in text.split("\n") if line.startswith(f"{SLURM_METRIC}{{"))
    assert 'slurm_node="n1"' in series and 'reason="a[31mb31mcdefgh"' in series
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c in "\u2028\u2029" for c in text.replace("\n", ""))
