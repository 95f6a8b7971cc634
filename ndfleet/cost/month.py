"""The one month length ndfleet prices with: 730 hours, for VMs and for monitoring alike.

Azure's pricing calculator (https://azure.microsoft.com/pricing/calculator/) counts a month as 730 hours: 8,760
hours a year (365 x 24) / 12; Microsoft's own cost-estimation notes state the same convention ("Azure uses 730
hours/month as the standard billing period", github.com/github/awesome-copilot, plugins/azure-cloud-development/
skills/azure-pricing/references/COST-ESTIMATOR.md). A 30-day month (720 hours) would be 1.4 % lower; ndfleet uses one
length everywhere so that `cost`, `plan`, `diff` and the monitoring estimate add up.

A monthly figure is always `per_month` of the unrounded hourly one, here: a month of a rounded hourly figure (197.41 x
730) is off by up to 730 x half a cent, US$3.65, which is how `diff` once disagreed with `plan` (issue 44).
"""

from __future__ import annotations

HOURS_PER_MONTH = 730
MINUTES_PER_MONTH = HOURS_PER_MONTH * 60
MONTH_NAME = f"{HOURS_PER_MONTH}-hour month"


def per_month(usd_per_hour: float) -> float:
    """A month of an hourly figure: give it unrounded (round what is shown, never what is multiplied)."""
    return usd_per_hour * HOURS_PER_MONTH
