"""Which Guest Health Reporting category a failed check files under: one table, each row with its reason.

Categories are Azure's `Resource.Hpc.Unhealthy.*` list (Microsoft Learn, "Guest Health Reporting impact
categories", azure-impact-reporting/guest-health-impact-categories): each takes the host out of production
for diagnosis and repair. Where a check maps to an NHC fault, the category is the one Azure's own NHC uses for
it (Azure/azurehpc-health-checks, `triggerGHR.sh`: NHC2002 MissingIB, NHC2003 IBPerformance, NHC2004
IBPortDown, NHC2005 IBPortFlapping, NHC2007 HpcRowRemapFailure, NHC2009 HpcMissingGpu, NHC2013 XID79,
NHC2014 XID48, NHC2015 UnhealthyGPUNvidiasmi, NHC2016 NvLink, NHC2020 HpcGpuDcgmDiagFailure; anything else
HpcGenericFailure). Checks that point at software or configuration (a module not loaded, a mount, a launch
error) map to None: they fail the node, which automatic repairs replace, but Azure is not told the host is bad.

Check ids are the validator's (docs/bootstrap.md) and the burn-in's `burnin.<reason>`.
"""

from __future__ import annotations

import re

PREFIX = "Resource.Hpc.Unhealthy."

# The validator's checks carry their category in their @check (ndfleet_node.checks); the burn-in's verdicts
# here. burnin id -> category suffix, or None: not reported. Why each, as a comment (comments stay out of the zipapp).
BURNIN_CATEGORIES: dict[str, str | None] = {
    "burnin.busbw-below-floor": "IBPerformance",  # cross-node busbw below floor with several partners (NHC2003)
    "burnin.hang": "HpcGenericFailure",  # cross-node NCCL test hung with several partners
    "burnin.wrong-results": "HpcGenericFailure",  # cross-node all-reduce returned wrong values with several partners
    "burnin.launch-error": None,  # the test could not start on the host: ssh / MPI, not hardware
}

# The controller's host ledger (ndfleet_node.host_ledger): a host that failed twice. HpcGenericFailure: the host's
# faults had different checks (or one with no category of its own); every Unhealthy category takes the host out of
# production for diagnosis and repair (guest-health-impact-categories), which is what a repeat calls for.
REPEAT_CHECK = "host.repeat-failure"  # filed by the node whose drain says so (names.REPEAT_HOST_REASON)
HOST_CATEGORIES: dict[str, str | None] = {REPEAT_CHECK: "HpcGenericFailure"}


def check_categories() -> dict[str, str | None]:
    """Every check id -> its category suffix (None: not reported): the validator's checks, then the burn-in's."""
    # Imported here: the controller ships this module for elastic islands without the validator's checks.
    from ndfleet_node.checks import load_all

    return {**{c.id: c.impact for c in load_all().values()}, **BURNIN_CATEGORIES, **HOST_CATEGORIES}


# Xids with a category of their own (guest-health-impact-categories; NHC2011-NHC2014). Which Xids fail a node is
# the VM-size profile's list (thresholds.xid_fail_codes); each one here is in it (tests/impact).
XID_CATEGORIES = {95: "XID95UncontainedECCError", 94: "XID94ContainedECCError", 79: "XID79FallenOffBus",
                  48: "XID48DoubleBitECC"}  # fmt: skip
_XID = re.compile(r"\bxid\D{0,3}(\d+)", re.IGNORECASE)
_MISSING = re.compile(r"\b(missing|not found|absent|no such)\b", re.IGNORECASE)
_TIMED_OUT = re.compile(r"\b(timed out|timeout|hung|no answer)\b", re.IGNORECASE)


def category_for(check_id: str, message: str = "") -> str | None:
    """The full category (`Resource.Hpc.Unhealthy.X`) a failed check files under, or None (do not report)."""
    own = {**BURNIN_CATEGORIES, **HOST_CATEGORIES}
    suffix = own[check_id] if check_id in own else check_categories().get(check_id)
    if suffix is None:
        return None
    if check_id.startswith("gpu.") and _TIMED_OUT.search(message):
        suffix = "UnhealthyGPUNvidiasmi"  # nvidia-smi itself hung (NHC2015)
    elif check_id == "gpu.xid":
        codes = [int(c) for c in _XID.findall(message)]
        special = [XID_CATEGORIES[c] for c in sorted(XID_CATEGORIES, reverse=True) if c in codes]
        suffix = special[0] if special else suffix
    elif check_id == "ib.ports" and _MISSING.search(message):
        suffix = "MissingIB"
    return PREFIX + suffix
