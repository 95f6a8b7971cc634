"""Pure parsers: a tool's text in, facts out. One module per tool family.

Every parser takes the decoded text (`ndfleet_node.text.decode`) and returns plain data, or raises
`ParseError` with a message saying what it saw; never any other exception, whatever the input (truncated,
empty, garbage). Each is linear in the size of its input. Tests: tests/node/test_parsers.py on recordings
under tests/data/node/.
"""

from __future__ import annotations

from ndfleet_node.text import seen


class ParseError(ValueError):
    """The output is not what the tool prints; the message says what was seen."""


def fail(tool: str, text: str, what: str) -> ParseError:
    return ParseError(f"cannot read {tool} output ({what}): {seen(text)}")


def to_int(value: str) -> int | None:
    """'12' -> 12; '[N/A]', 'N/A', '' -> None."""
    value = value.strip()
    return int(value) if value.isdigit() else None


def to_float(value: str) -> float | None:
    try:
        f = float(value.strip())
    except ValueError:
        return None
    return f if f == f and f not in (float("inf"), float("-inf")) else None
