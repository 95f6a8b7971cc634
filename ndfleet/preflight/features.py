"""Subscription preview features that change what `pulumi up` creates.

Trusted Launch as default: with the Microsoft.Compute feature `TrustedLaunchByDefaultPreview` registered, a new
Gen2 VM or scale set whose deployment does not set `securityProfile` gets Trusted Launch, i.e. Secure Boot and
vTPM on (Microsoft Learn, "Trusted Launch for Azure virtual machines", section "Trusted Launch as default";
docs/sources.md). ndfleet's scale sets set no `securityProfile`. Under Secure Boot every kernel module must be
signed by a key the firmware trusts, and Microsoft Learn says the CUDA driver on Secure Boot Linux VMs needs
extra steps or Secure Boot disabled ("Install NVIDIA GPU drivers on N-series VMs running Linux"). If the HPC
image's GPU or InfiniBand modules do not load, nodes fail validation and automatic repairs replace them over and
over. A warning, not a failure: an explicit `securityType: Standard`, an older compute API version or an image
with signed modules avoids it, and only a real deployment shows which applies.
"""

from __future__ import annotations

from ndfleet.preflight.facts import FeatureRegistration, Unavailable
from ndfleet.preflight.outcome import Check, unavailable_check

FEATURES_API = "2021-07-01"
TRUSTED_LAUNCH_DEFAULT_FEATURE = ("Microsoft.Compute", "TrustedLaunchByDefaultPreview")
# States in which Azure applies (or is about to apply) the feature to new deployments.
_ACTIVE_STATES = ("registered", "registering", "pending")


def check_trusted_launch_default(feature: FeatureRegistration | Unavailable | None) -> Check:
    namespace, name = TRUSTED_LAUNCH_DEFAULT_FEATURE
    check_id = "trusted-launch-default"
    title = "Trusted Launch is not the default for new scale sets"
    if feature is None:
        return Check(check_id, title, "skip", "the feature registration was not read")
    if isinstance(feature, Unavailable):
        return unavailable_check(check_id, title, feature)
    figures = {"feature": f"{namespace}/{name}", "state": feature.state}
    if feature.state.lower() not in _ACTIVE_STATES:
        return Check(check_id, title, "pass", f"{namespace}/{name}: {feature.state}", figures=figures)
    return Check(
        check_id,
        title,
        "warn",
        f"{namespace}/{name} is {feature.state} for the subscription: new Gen2 scale sets that do not set "
        "securityProfile get Trusted Launch with Secure Boot, under which the HPC image's GPU and InfiniBand "
        "kernel modules load only if signed with a key the firmware trusts; if they do not load, nodes fail "
        "validation and automatic repairs replace them in a loop",
        fix=(
            f"unregister it before `pulumi up`: az feature unregister --namespace {namespace} --name {name} && "
            f"az provider register --namespace {namespace}; or give the scale sets securityProfile.securityType "
            "Standard (Microsoft Learn: Trusted Launch as default, 'Disable TLaD')"
        ),
        figures=figures,
    )
