"""How ndfleet writes a figure in US dollars: one home, so `plan`, `cost`, `diff`, `goodput` and the monitoring line
read alike (standard library only; imported by ndfleet/cost/estimate.py and ndfleet/monitoring/budget.py alike)."""

from __future__ import annotations


def usd(value: float) -> str:
    """A figure in US dollars: cents, or tenths of a cent between nothing and a dollar (nothing is US$0.00)."""
    return f"US${value:,.3f}" if 0 < value < 1 else f"US${value:,.2f}"
