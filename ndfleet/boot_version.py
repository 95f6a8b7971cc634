"""An island's boot version: one short id for what a node of the island boots from (issue 42, "Know the versions").

What a node of an island boots from is, and is only:
- the image it is created from: its marketplace URN or Compute Gallery id, as written (`image`);
- its boot data: the island's customData (the boot step and its manifest, which names the island and the bundle's
  size, sha256 and Key Vault slots) and the node bundle it fetches (userData, or the same bytes in the Slurm
  vault's parts: the parts are the bundle's base64 cut into slots, so the bundle's bytes and the slot names in the
  manifest are their whole content);
- the Slurm release its nodes install (`slurm.version`; none without Slurm).

The version is the first 12 hex digits of a sha256 over those, each length-prefixed so no two inputs run together.
The stack's capacity (`nodes`, spares, elastic sizes), its tags and its repair policy are no part of any of them, so
they leave the version alone; a change of any one of them changes it. An image `...:latest` keeps its version when
Azure publishes a newer image: ndfleet cannot see that offline (pin a version; docs/images.md).

The version is written INTO the boot data (customData's manifest "boot_version"; the bundle holds
nodebundle.BOOT_VERSION_PLACEHOLDER where it goes, which the boot step replaces), so it is computed over the
customData rendered with that placeholder in its place (bootstrap.island_bootstrap), then put in: the same
customData, with the version, is what Azure receives.

48 bits: two different boot data of one stack share a version with odds of about n^2 / 2^49 for n versions, nil for
the handful a fleet runs at once; Slurm features and tags take the 12 characters as they are.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ndfleet.stackconfig.clusterspec import ClusterSpec

BOOT_VERSION_HEX = 12
# Where the version goes in the node bundle's files (slurmd's `Feature=...,boot-<version>`, node.json's
# "boot_version"): the boot step replaces it with the manifest's "boot_version" (ndfleet/nodefiles/nodebundle.py,
# as it does the island's name). The version is a hash over the bundle itself, so the bundle can only hold a
# placeholder; customData, per scale set, carries the value. Letters, digits and hyphens only, like the island's
# placeholder: nothing a template quotes or escapes changes it.
BOOT_VERSION_PLACEHOLDER = "ndfleet-boot-version-placeholder-9b3d"


def boot_version(image: str, custom_data: str, bundle: bytes, slurm_release: str) -> str:
    """The boot version of an island whose nodes boot `image` with `custom_data` (the cloud-config, rendered with
    nodebundle.BOOT_VERSION_PLACEHOLDER as its version) and `bundle` (what userData or the vault's parts decode
    to), and install Slurm `slurm_release` ("" without Slurm)."""
    digest = hashlib.sha256()
    for part in (b"ndfleet-boot-version-1", image.encode(), custom_data.encode(), bundle, slurm_release.encode()):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:BOOT_VERSION_HEX]


def slurm_release(spec: ClusterSpec) -> str:
    """The Slurm release the stack's nodes install ("" without Slurm): one of the boot version's inputs."""
    return spec.slurm.version if spec.scheduler == "slurm" and spec.slurm is not None else ""


__all__ = ["BOOT_VERSION_HEX", "BOOT_VERSION_PLACEHOLDER", "boot_version", "slurm_release"]
