"""What `ndfleet status` said at the repair loop's stages in a twin run (docs/operations.md, "What status says at
each stage"): each excerpt in the page is, line for line, the output recorded from that run under
tests/data/twin/status/ (tests/twin/test_repair.py writes it, one file per loop, under NDFLEET_TWIN_STATUS_OUT). The
twin test `test_status_answers_at_each_stage_and_names_the_island` holds the live output to the recorded table's
header, so a change of status's table shows up there and the recording is made again."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.test_samples import marked_blocks

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "operations.md"
MARKER = re.compile(r"<!-- twin-status: (tests/data/twin/status/[\w.-]+\.txt) -->")
EXCERPTS = marked_blocks(PAGE, MARKER)


def test_the_page_shows_recorded_twin_status() -> None:
    assert len(EXCERPTS) >= 2, "docs/operations.md shows no recorded twin status"


@pytest.mark.parametrize(("line", "match", "block"), EXCERPTS, ids=[m.group(1) for _, m, _ in EXCERPTS])
def test_each_excerpt_is_the_recorded_output(line: int, match: re.Match[str], block: tuple[str, ...]) -> None:
    recorded = (REPO / match.group(1)).read_text(encoding="utf-8").splitlines()
    assert list(block) == recorded, f"docs/operations.md:{line} differs from {match.group(1)}"
