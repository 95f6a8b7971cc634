"""The stack's marketplace image is published in its region.

A node boots `ndfleet:image` (`publisher:offer:sku:version`) whenever Azure creates or reimages it: at `pulumi up`,
and at every repair and scale-out after. A version that is not published in the stack's location fails all of them.
Compute's VirtualMachineImages API answers `GET /subscriptions/{id}/providers/Microsoft.Compute/locations/{location}/
publishers/{publisher}/artifacttypes/vmimage/offers/{offer}/skus/{sku}/versions/{version}` with the image, and 404
(`NotFound`, "Artifact: VMImage was not found.") when it is not published there; `GET .../skus/{sku}/versions` lists
the published versions (REST reference "Virtual Machine Images - Get" and "- List"; azure-rest-api-specs,
VirtualMachineImages_Get / _List). Publishers withdraw old versions, so a pin that worked once can stop working.
For `latest` there is no version to look up: the check asks for the list instead, which must not be empty.
"""

from __future__ import annotations

from ndfleet.preflight.facts import ImageVersions, Unavailable
from ndfleet.preflight.outcome import Check, unavailable_check
from ndfleet.stackconfig.clusterspec import ClusterSpec


def newest_version(versions: tuple[str, ...]) -> str:
    """The highest of marketplace versions `Major.Minor.Patch` (numbers compared as numbers)."""

    def key(version: str) -> tuple[tuple[int, str], ...]:
        return tuple((int(part), "") if part.isdigit() else (-1, part) for part in version.split("."))

    return max(versions, key=key)


def check_image_version(spec: ClusterSpec, found: ImageVersions | Unavailable | None) -> Check:
    image = spec.image
    check_id = "image-version"
    title = f"image {image.urn} published in {spec.location}"
    if image.from_gallery:
        return Check(
            check_id,
            f"image {image.urn} in {spec.location}",
            "skip",
            "a gallery image: preflight reads marketplace versions only; `az sig image-version show --ids <id> "
            "--query publishingProfile.targetRegions` lists the regions it is replicated to, and the deployer needs "
            'read access to it (docs/images.md, "A team\'s own image")',
        )
    if found is None:
        return Check(check_id, title, "skip", "the image's versions were not read")
    if isinstance(found, Unavailable):
        return unavailable_check(check_id, title, found)
    fix = (
        f"list the versions published there: {image.versions_command(spec.location)}; set ndfleet:image to one of "
        "them (docs/plan-diff.md, \"Image changes\": moving a running island to it means reimaging its nodes)"
    )
    figures: dict[str, object] = {"image": image.urn, "location": spec.location, "pinned": image.pinned}
    if image.pinned:
        published = image.version in found.versions
        figures["published"] = published
        if published:
            return Check(check_id, title, "pass", f"version {image.version} is published", figures=figures)
        return Check(
            check_id,
            title,
            "fail",
            f"{image.urn} is not published in {spec.location} (Resource Manager answered 404): no node could be "
            "created, repaired or added from it",
            fix=fix,
            figures=figures,
        )
    figures["versions"] = len(found.versions)
    if not found.versions:
        figures["published"] = False
        return Check(
            check_id,
            title,
            "fail",
            f"{image.publisher}:{image.offer}:{image.sku} has no version published in {spec.location}, so "
            f"'{image.version}' resolves to nothing",
            fix=fix,
            figures=figures,
        )
    newest = newest_version(found.versions)
    figures.update(published=True, newest=newest)
    return Check(
        check_id,
        title,
        "pass",
        f"'{image.version}' is {newest} today ({len(found.versions)} versions published); pin it to keep every node "
        f"of an island on one image: {image.publisher}:{image.offer}:{image.sku}:{newest}",
        figures=figures,
    )
