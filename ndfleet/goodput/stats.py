"""The report's one percentile (node figures and job figures alike)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank percentile: the smallest value with at least p % of the values at or below it
    (NIST/SEMATECH e-Handbook's definition of the order statistic; no interpolation, so it is one observed value)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]
