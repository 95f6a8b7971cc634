"""Reading the facts: the SDK management clients for locations, SKUs, usages and the image's versions, `ArmReader`
for permissions and preview features, all in parallel, each failure kept as an `Unavailable` for the checks that
needed it."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ndfleet.azure.arm import ArmReader, RetrySettings, bounded_pages, client_kwargs, describe_error
from ndfleet.azure.clouds import CloudSettings
from ndfleet.preflight.facts import (
    Facts,
    FeatureRegistration,
    ImageVersions,
    ProviderRegistration,
    Region,
    RolePermission,
    Sku,
    Unavailable,
    Usage,
    sku_from_model,
    wire_text,
)
from ndfleet.preflight.features import FEATURES_API, TRUSTED_LAUNCH_DEFAULT_FEATURE
from ndfleet.preflight.impact import IMPACT_NAMESPACE, PROVIDERS_API, subscription_scope
from ndfleet.preflight.permissions import PERMISSIONS_API, deployment_scope
from ndfleet.stackconfig.clusterspec import ClusterSpec


def gather_facts(
    spec: ClusterSpec,
    subscription_id: str,
    credential: Any,
    cloud: CloudSettings,
    *,
    retry: RetrySettings | None = None,
    transport: Any = None,
) -> Facts:
    """Read locations, resource SKUs, usages, the image's versions, (when needed) Managed Lustre SKUs, the caller's
    permissions at the deployment scope and the Trusted Launch default feature, in parallel."""
    from azure.core.exceptions import AzureError
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.resource.subscriptions import SubscriptionClient

    retry = retry or RetrySettings()

    def kwargs() -> dict[str, Any]:
        # A fresh policy set per client: a pipeline links its policies (`policy.next`), so one RetryPolicy
        # shared by several clients would send their requests down the last client's pipeline.
        return client_kwargs(cloud, retry, transport)

    location = spec.location

    def locations() -> list[Region]:
        with SubscriptionClient(credential, **kwargs()) as client:
            out = []
            for loc in bounded_pages(client.subscriptions.list_locations(subscription_id), "the regions"):
                meta = getattr(loc, "metadata", None)
                out.append(
                    Region(
                        name=loc.name or "",
                        display_name=loc.display_name or "",
                        region_type=wire_text(getattr(meta, "region_type", None)),
                    )
                )
            return out

    def compute_skus() -> list[Sku]:
        with ComputeManagementClient(credential, subscription_id, **kwargs()) as client:
            return [
                sku_from_model(s)
                for s in bounded_pages(client.resource_skus.list(filter=f"location eq '{location}'"), "the VM sizes")
                if (s.resource_type or "").lower() == "virtualmachines"
            ]

    def usages() -> list[Usage]:
        with ComputeManagementClient(credential, subscription_id, **kwargs()) as client:
            return [
                Usage(
                    name=u.name.value or "",
                    localized_name=u.name.localized_value or "",
                    current=int(u.current_value),
                    limit=int(u.limit),
                )
                for u in bounded_pages(client.usage.list(location), "the usages")
            ]

    image = spec.image

    def image_versions() -> ImageVersions:
        from azure.core.exceptions import ResourceNotFoundError

        with ComputeManagementClient(credential, subscription_id, **kwargs()) as client:
            try:
                if image.pinned:
                    client.virtual_machine_images.get(location, image.publisher, image.offer, image.sku, image.version)
                    return ImageVersions((image.version,))
                listed = client.virtual_machine_images.list(location, image.publisher, image.offer, image.sku)
                return ImageVersions(tuple(v.name for v in listed if v.name))
            except ResourceNotFoundError:  # not published there (Resource Manager's 404, NotFound)
                return ImageVersions(())

    def lustre_skus() -> list[Sku]:
        from azure.mgmt.storagecache import StorageCacheManagementClient

        with StorageCacheManagementClient(credential, subscription_id, **kwargs()) as client:
            return [sku_from_model(s) for s in bounded_pages(client.skus.list(), "the Managed Lustre SKUs")]

    scope = deployment_scope(spec, subscription_id)

    def permissions_at(at: str) -> list[RolePermission]:
        with ArmReader(credential, cloud, retry, transport) as arm:
            return [
                RolePermission(
                    actions=tuple(str(a) for a in entry.get("actions") or []),
                    not_actions=tuple(str(a) for a in entry.get("notActions") or []),
                )
                for entry in arm.list(f"{at}/providers/Microsoft.Authorization/permissions", PERMISSIONS_API)
            ]

    def permissions() -> list[RolePermission]:
        return permissions_at(scope)

    def subscription_permissions() -> list[RolePermission]:
        return permissions_at(subscription_scope(subscription_id))

    def impact_provider() -> ProviderRegistration:
        with ArmReader(credential, cloud, retry, transport) as arm:
            doc = arm.get(f"{subscription_scope(subscription_id)}/providers/{IMPACT_NAMESPACE}", PROVIDERS_API)
        return ProviderRegistration(IMPACT_NAMESPACE, str(doc.get("registrationState") or "NotRegistered"))

    def trusted_launch_default() -> FeatureRegistration:
        from azure.core.exceptions import ResourceNotFoundError

        namespace, name = TRUSTED_LAUNCH_DEFAULT_FEATURE
        path = f"/subscriptions/{subscription_id}/providers/Microsoft.Features/providers/{namespace}/features/{name}"
        with ArmReader(credential, cloud, retry, transport) as arm:
            try:
                doc = arm.get(path, FEATURES_API)
            except ResourceNotFoundError:  # a cloud without the preview: nothing registered
                return FeatureRegistration(namespace, name, "NotFound")
        state = (doc.get("properties") or {}).get("state")
        return FeatureRegistration(namespace, name, str(state or "NotRegistered"))

    jobs: dict[str, tuple[Callable[[], Any], str]] = {
        "locations": (locations, "the subscription's locations"),
        "compute_skus": (compute_skus, f"Microsoft.Compute resource SKUs in {location}"),
        "usages": (usages, f"Microsoft.Compute usages (quota) in {location}"),
    }
    if not image.from_gallery:  # a gallery image is no marketplace image: checks.images.check_image_version says so
        jobs["image_versions"] = (image_versions, f"the versions of image {image.urn} in {location}")
    if spec.storage.lustre is not None:
        jobs["lustre_skus"] = (lustre_skus, "Microsoft.StorageCache SKUs")
    jobs["permissions"] = (permissions, f"the caller's permissions on {scope}")
    jobs["trusted_launch_default"] = (
        trusted_launch_default,
        f"the {'/'.join(TRUSTED_LAUNCH_DEFAULT_FEATURE)} preview feature",
    )

    # Impact reporting: the Impact Reporter role goes on the subscription, whatever the deployment scope.
    impact = spec.health.impact_reporting
    if impact and scope != subscription_scope(subscription_id):
        jobs["subscription_permissions"] = (
            subscription_permissions,
            f"the caller's permissions on {subscription_scope(subscription_id)}",
        )
    if impact:
        jobs["impact_provider"] = (impact_provider, f"the {IMPACT_NAMESPACE} resource provider's registration")

    def run(job: tuple[Callable[[], Any], str]) -> Any:
        fn, what = job
        try:
            return fn()
        except AzureError as exc:
            return Unavailable(describe_error(exc, what, cloud, retry))

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = dict(zip(jobs, pool.map(run, jobs.values()), strict=True))
    return Facts(
        locations=results["locations"],
        compute_skus=results["compute_skus"],
        usages=results["usages"],
        lustre_skus=results.get("lustre_skus"),
        permissions=results["permissions"],
        trusted_launch_default=results["trusted_launch_default"],
        # At subscription scope already when the stack names no resource group: the same read.
        subscription_permissions=results.get("subscription_permissions", results["permissions"]) if impact else None,
        impact_provider=results.get("impact_provider"),
        image_versions=results.get("image_versions"),
    )


