"""The result of one check: what the table row, the JSON entry and the exit code are made of."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ndfleet.preflight.facts import Unavailable

Status = Literal["pass", "warn", "fail", "skip", "error"]


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    status: Status
    detail: str
    fix: str = ""
    figures: dict[str, Any] = field(default_factory=dict)


def unavailable_check(check_id: str, title: str, unavailable: Unavailable) -> Check:
    return Check(check_id, title, "error", f"could not check: {unavailable.reason}")
