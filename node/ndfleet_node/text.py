"""Bytes from tools to safe text: never raises, linear in the input's size."""

from __future__ import annotations

import re

# Control characters that have no place in a report or a header (tab and newline are kept by `decode`).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def decode(data: bytes | str) -> str:
    """Tool output as text: UTF-8 with undecodable bytes replaced, NULs and other control characters removed."""
    text = data if isinstance(data, str) else data.decode("utf-8", errors="replace")
    return _CONTROL.sub("", text.replace("\r\n", "\n"))


def first_line(text: str, limit: int = 200) -> str:
    for line in text.splitlines():
        if line.strip():
            return clip(line.strip(), limit)
    return ""


def clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def header_safe(text: str, limit: int = 300) -> str:
    """Printable ASCII only (CR/LF and non-ASCII become '?'), for an HTTP header value."""
    return clip(_UNPRINTABLE.sub("?", text), limit)


def seen(text: str, limit: int = 120) -> str:
    """What a parser saw, for a failure message: the first line, or that the output was empty."""
    line = first_line(text, limit)
    return f"first line {line!r}" if line else "empty output"
