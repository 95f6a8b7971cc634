"""Azure regions of the public cloud by name, with whether each has availability zones.

Offline, ndfleet cannot ask Azure which regions have zones, so it keeps the table below, copied from
Microsoft Learn, "Azure regions list" (https://learn.microsoft.com/azure/reliability/regions-list, page dated
2025-09-23; columns "Programmatic name" and "Availability zone support"). It is used for two things only:
- a region written by its display name ("West Europe") is told its name form (`westeurope`);
- Azure Managed Lustre is created in one zone where the region has zones (Microsoft Learn, "Create an Azure
  Managed Lustre file system", Basics tab: "Availability zone"), so a Lustre stack there must set `zone`;
- a `zone` in a region without zones is refused: Azure accepts zonal resources (scale sets, NAT gateway, public IPs,
  Managed Lustre) only in the regions with availability zones (Microsoft Learn, "Azure regions with availability
  zone support", learn.microsoft.com/azure/reliability/availability-zones-region-support), and the first refusal
  would come at `pulumi up`, after the network and storage exist.
A region missing from the table is refused, with the names it most likely means (`useast` -> `eastus`): a
misspelt region otherwise fails only at `pulumi up`, after other resources exist. A region newer than the table is
accepted when the stack says so (`ndfleet:newRegion: true`, then a warning): refresh the table from the page
above when Azure adds regions.
"""

from __future__ import annotations

import difflib
import re

REGIONS_SOURCE = "Microsoft Learn, Azure regions list (learn.microsoft.com/azure/reliability/regions-list, 2025-09-23)"

# name -> (display name, has availability zones)
REGIONS: dict[str, tuple[str, bool]] = {
    "australiacentral": ("Australia Central", False),
    "australiacentral2": ("Australia Central 2", False),
    "australiaeast": ("Australia East", True),
    "australiasoutheast": ("Australia Southeast", False),
    "austriaeast": ("Austria East", True),
    "belgiumcentral": ("Belgium Central", True),
    "brazilsouth": ("Brazil South", True),
    "brazilsoutheast": ("Brazil Southeast", False),
    "canadacentral": ("Canada Central", True),
    "canadaeast": ("Canada East", False),
    "centralindia": ("Central India", True),
    "centralus": ("Central US", True),
    "chilecentral": ("Chile Central", True),
    "denmarkeast": ("Denmark East", True),
    "eastasia": ("East Asia", True),
    "eastus": ("East US", True),
    "eastus2": ("East US 2", True),
    "francecentral": ("France Central", True),
    "francesouth": ("France South", False),
    "germanynorth": ("Germany North", False),
    "germanywestcentral": ("Germany West Central", True),
    "indonesiacentral": ("Indonesia Central", True),
    "israelcentral": ("Israel Central", True),
    "italynorth": ("Italy North", True),
    "japaneast": ("Japan East", True),
    "japanwest": ("Japan West", True),
    "koreacentral": ("Korea Central", True),
    "koreasouth": ("Korea South", False),
    "malaysiawest": ("Malaysia West", True),
    "mexicocentral": ("Mexico Central", True),
    "newzealandnorth": ("New Zealand North", True),
    "northcentralus": ("North Central US", False),
    "northeurope": ("North Europe", True),
    "norwayeast": ("Norway East", True),
    "norwaywest": ("Norway West", False),
    "polandcentral": ("Poland Central", True),
    "qatarcentral": ("Qatar Central", True),
    "southafricanorth": ("South Africa North", True),
    "southafricawest": ("South Africa West", False),
    "southcentralus": ("South Central US", True),
    "southindia": ("South India", False),
    "southeastasia": ("Southeast Asia", True),
    "spaincentral": ("Spain Central", True),
    "swedencentral": ("Sweden Central", True),
    "switzerlandnorth": ("Switzerland North", True),
    "switzerlandwest": ("Switzerland West", False),
    "uaecentral": ("UAE Central", False),
    "uaenorth": ("UAE North", True),
    "uksouth": ("UK South", True),
    "ukwest": ("UK West", False),
    "westcentralus": ("West Central US", False),
    "westeurope": ("West Europe", True),
    "westindia": ("West India", False),
    "westus": ("West US", False),
    "westus2": ("West US 2", True),
    "westus3": ("West US 3", True),
}

# Regions of the other Azure clouds (the table above is the public cloud's), by name only: whether they have
# zones is not recorded, so a stack there is warned, not refused. Sources (Microsoft Learn): "What is Azure
# Government?" regions (learn.microsoft.com/azure/azure-government/documentation-government-welcome) and the Azure
# China region list (learn.microsoft.com/azure/china/overview-operations).
OTHER_CLOUD_REGIONS = frozenset({
    "usgovvirginia", "usgovarizona", "usgovtexas", "usdodcentral", "usdodeast",
    "chinaeast", "chinaeast2", "chinaeast3", "chinanorth", "chinanorth2", "chinanorth3",
})  # fmt: skip

# The form Azure Resource Manager takes for `location`: lowercase letters and digits, no spaces.
REGION_NAME = re.compile(r"^[a-z][a-z0-9]{2,40}$")


def has_zones(region: str) -> bool | None:
    """Whether the region has availability zones; None when the table does not know the region."""
    entry = REGIONS.get(region)
    return entry[1] if entry else None


# Words of a display name that say where in its geography a region is ("North Central US" -> "US").
_DIRECTIONS = frozenset({"north", "south", "east", "west", "central", "northeast", "southeast", "2", "3"})


def _geography(region: str) -> str:
    words = REGIONS[region][0].lower().split()
    return " ".join(w for w in words if w not in _DIRECTIONS)


def zonal_near(region: str, limit: int = 2) -> list[str]:
    """Regions with availability zones in the same geography as a known region (`northcentralus` -> `centralus`,
    `southcentralus`: the display names without their direction words), likeliest first."""
    if region not in REGIONS:
        return []
    geography = _geography(region)
    same = [name for name, (_, zonal) in REGIONS.items() if zonal and name != region and _geography(name) == geography]
    return difflib.get_close_matches(region, same, n=limit, cutoff=0.0)


def name_form(text: str) -> str | None:
    """The name form of a region written as its display name or with other case/spaces ("West Europe" ->
    "westeurope"); None if that still is no region name."""
    candidate = re.sub(r"[\s_-]+", "", text.strip().lower())
    return candidate if REGION_NAME.match(candidate) else None


def candidates(region: str, limit: int = 3) -> list[str]:
    """Known regions a wrong name may mean, likeliest first: the same letters in another order (`useast` ->
    `eastus`, `uswest2` -> `westus2`: words swapped), then the closest spellings."""
    letters = sorted(region)
    found = [name for name in REGIONS if sorted(name) == letters]
    found += [n for n in difflib.get_close_matches(region, REGIONS, n=limit, cutoff=0.6) if n not in found]
    return found[:limit]
