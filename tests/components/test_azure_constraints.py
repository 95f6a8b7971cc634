"""Properties Azure documents per case (issue 13): fault domains per zonal/regional island, no Flexible-only
properties on Uniform, Bastion and its IP in agreement, storage DNS names from the cloud."""

from __future__ import annotations

from typing import Any

import pytest

from ndfleet.components.ib_island import fault_domain_count
from ndfleet.nodefiles.nodebundle import unpack
from ndfleet.plans.build import Plan
from ndfleet.plans.policy_rules import RULES_BY_ID, evaluate_plan, has_mandatory
from ndfleet.stackconfig.clouds import STORAGE_CLOUDS, storage_cloud
from tests.conftest import BASTION, PIP, VMSS, base_config, dig, of_type, one, plan_of

PRIVATE_ZONE = "azure-native:privatedns:PrivateZone"


@pytest.mark.parametrize(("zone", "expected"), [(None, 1), ("1", 5), ("2", 5), ("3", 5)])
def test_fault_domains_per_zonal_or_regional_island(zone: str | None, expected: int) -> None:
    assert fault_domain_count(zone) == expected


def test_zonal_islands_use_five_fault_domains_in_one_placement_group(zonal_lustre_plan: Plan) -> None:
    for vmss in of_type(zonal_lustre_plan, VMSS):
        assert vmss.inputs["platformFaultDomainCount"] == 5 and vmss.inputs["singlePlacementGroup"] is True


def test_regional_island_uses_one_fault_domain(dev_plan: Plan) -> None:
    assert one(dev_plan, VMSS).inputs["platformFaultDomainCount"] == 1


@pytest.mark.parametrize(
    ("zones", "count", "violates"),
    [(None, 1, False), (None, 5, True), (["2"], 5, False), (["2"], 1, True), (["2"], 3, True)],
)
def test_policy_rule_agrees_with_the_component(zones: list[str] | None, count: int, violates: bool) -> None:
    props: dict[str, Any] = {"sku": {"name": "Standard_ND96isr_H100_v5"}, "platformFaultDomainCount": count}
    if zones:
        props["zones"] = zones
    assert bool(RULES_BY_ID["nd-fault-domain-count"].check(VMSS, props)) is violates


def test_zonal_plan_passes_the_mandatory_policies(zonal_lustre_plan: Plan) -> None:
    assert not has_mandatory(evaluate_plan(zonal_lustre_plan.as_json()))


def test_uniform_os_disk_has_no_delete_option(dev_plan: Plan) -> None:
    os_disk = dig(one(dev_plan, VMSS).inputs, "virtualMachineProfile.storageProfile.osDisk")
    assert "deleteOption" not in os_disk and os_disk["createOption"] == "FromImage"


def test_bastion_and_its_ip_are_both_non_zonal_in_a_zonal_stack() -> None:
    plan = plan_of(base_config(zone="2", bastion=True))
    bastion = one(plan, BASTION)
    ip = one(plan, PIP, "bastion-ip")
    assert "zones" not in bastion.inputs and "zones" not in ip.inputs
    # The NAT gateway keeps its IP in its own zone.
    assert one(plan, PIP, "nat-ip").inputs["zones"] == ["2"]


@pytest.mark.parametrize(
    ("environment", "zone", "suffix"),
    [
        (None, "privatelink.blob.core.windows.net", "blob.core.windows.net"),
        ("public", "privatelink.blob.core.windows.net", "blob.core.windows.net"),
        ("usgovernment", "privatelink.blob.core.usgovcloudapi.net", "blob.core.usgovcloudapi.net"),
        ("china", "privatelink.blob.core.chinacloudapi.cn", "blob.core.chinacloudapi.cn"),
    ],
)
def test_storage_dns_names_follow_the_cloud(
    environment: str | None, zone: str, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ARM_ENVIRONMENT", raising=False)
    config = base_config()
    if environment:
        config["azure-native:environment"] = environment
    plan = plan_of(config, f"cloud-{environment}")
    assert one(plan, PRIVATE_ZONE).inputs["privateZoneName"] == zone
    files, _ = unpack(dig(one(plan, VMSS).inputs, "virtualMachineProfile.userData"), "ib00")  # the node bundle
    user_data = {f.path: f.data for f in files}["/etc/ndfleet/node.json"].decode()
    assert f'"blob_endpoint_suffix": "{suffix}"' in user_data  # the node JSON: BlobFuse2 reaches https://<account>.<suffix>
    for other in {c.blob_endpoint_suffix for c in STORAGE_CLOUDS.values()} - {suffix}:
        assert other not in user_data


@pytest.mark.parametrize(
    ("name", "cloud"),
    [("AzureUSGovernment", "AzureUSGovernment"), ("usgovernment", "AzureUSGovernment"), ("AzureChinaCloud",
     "AzureChinaCloud"), ("AzureCloud", "AzureCloud"), ("", "AzureCloud")],
)
def test_cloud_names_accepted(name: str, cloud: str) -> None:
    assert storage_cloud(name).name == cloud
