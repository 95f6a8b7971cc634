"""Text and numbers from outside (a server's answer, a metric label) made safe to print: one helper for every
renderer (status, impact, cost), so a label cannot move the cursor, colour the terminal or forge a line."""

from __future__ import annotations

import math
import unicodedata

# Unicode categories never printed as they came: controls (C0, DEL, C1 incl. U+0085), format characters (bidi
# overrides, zero-width), line and paragraph separators (U+2028, U+2029).
UNPRINTABLE = ("Cc", "Cf", "Zl", "Zp")


def terminal_safe(text: object, limit: int | None = 300, squeeze: bool = True) -> str:
    """`text` with every control and format character (C0, DEL, C1, U+2028/U+2029, U+0085, bidi overrides) and
    line break replaced by a space; runs of white space squeezed unless `squeeze` is off (a table's alignment);
    cut at `limit` characters."""
    cleaned = "".join(" " if unicodedata.category(c) in UNPRINTABLE else c for c in str(text))
    if squeeze:
        cleaned = " ".join(cleaned.split())
    return cleaned if limit is None or len(cleaned) <= limit else cleaned[: limit - 3] + "..."


def terminal_lines(lines: list[str]) -> str:
    """Lines a renderer built, joined: each made terminal-safe first, so no text inside can start a line."""
    return "\n".join(terminal_safe(line, limit=None, squeeze=False) for line in lines)


def one_line(text: object, limit: int = 300) -> str:
    """The first line of an error's text (before any line break), terminal-safe."""
    first = str(text).strip().split("\n", 1)[0]
    return terminal_safe(first, limit)


def plausible(value: object, low: float, high: float) -> bool:
    """A finite number within [low, high]: what a figure from outside must be before arithmetic or printing."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
        low <= value <= high
    )
