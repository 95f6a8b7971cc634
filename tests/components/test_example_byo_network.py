"""examples/bring-your-own-network under Pulumi's mocks: an island and locked-down storage in an existing VNet."""

from __future__ import annotations

import functools
import runpy
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from ndfleet.plans.build import PlannedResource, execute_program
from ndfleet.stackconfig.stackfile import StackFile
from tests.conftest import (
    ACCOUNT,
    BLOB_SERVICE,
    CONTAINER,
    IDENTITY,
    LOCK,
    NAT,
    NSG,
    PIP,
    PRIVATE_ENDPOINT,
    RESOURCE_GROUP,
    ROLE,
    SUBNET,
    VMSS,
    VNET,
    dig,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bring-your-own-network"
BASTION = "azure-native:network:BastionHost"
DNS_LINK = "azure-native:privatedns:VirtualNetworkLink"


def _config() -> dict[str, Any]:
    return dict(yaml.safe_load((EXAMPLE / "Pulumi.example.yaml").read_text())["config"])


def _run(config: dict[str, Any]) -> list[PlannedResource]:
    program = runpy.run_path(str(EXAMPLE / "__main__.py"), run_name="byo_network_example")["main"]
    stack = StackFile.from_config("example", EXAMPLE / "Pulumi.example.yaml", config)
    return execute_program(stack, program=program, project="byo-network").resources


@functools.cache
def _resources() -> tuple[PlannedResource, ...]:
    return tuple(_run(_config()))


def _one(typ: str) -> PlannedResource:
    found = [r for r in _resources() if r.type == typ]
    assert len(found) == 1, [r.name for r in found]
    return found[0]


def test_example_project_file_is_a_python_program() -> None:
    project = yaml.safe_load((EXAMPLE / "Pulumi.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    # ndfleet by name, as a user installs it (not a path into this checkout): tests/components/test_example_readme.py
    assert "ndfleet>=0.1,<0.2" in (EXAMPLE / "requirements.txt").read_text().split()


@pytest.mark.parametrize("typ", [VNET, SUBNET, NSG, NAT, PIP, BASTION, RESOURCE_GROUP])
def test_no_network_is_created(typ: str) -> None:
    assert [r.name for r in _resources() if r.type == typ] == []


def test_island_has_its_infiniband_properties_in_the_given_subnet() -> None:
    inputs = _one(VMSS).inputs
    config = _config()
    assert inputs["singlePlacementGroup"] is True
    assert inputs["platformFaultDomainCount"] == 1
    assert inputs["overprovision"] is False
    assert inputs["orchestrationMode"] == "Uniform"
    assert inputs["sku"] == {"name": "Standard_ND96isr_H100_v5", "tier": "Standard", "capacity": 4}
    assert inputs["resourceGroupName"] == config["byon:resourceGroupName"]
    nic = dig(inputs, "virtualMachineProfile.networkProfile.networkInterfaceConfigurations.0")
    assert nic["enableAcceleratedNetworking"] is True
    ipconfig = nic["ipConfigurations"][0]
    assert ipconfig["subnet"]["id"] == config["byon:computeSubnetId"]
    assert "publicIPAddressConfiguration" not in ipconfig
    assert dig(inputs, "virtualMachineProfile.osProfile.linuxConfiguration.disablePasswordAuthentication") is True
    assert dig(inputs, "virtualMachineProfile.osProfile.customData")
    assert dig(inputs, "virtualMachineProfile.userData")  # the node bundle the boot step fetches
    assert inputs["automaticRepairsPolicy"]["enabled"] is True


def test_storage_is_locked_down_with_its_endpoint_in_the_given_subnet() -> None:
    config = _config()
    account = _one(ACCOUNT)
    assert account.protect
    assert account.inputs["publicNetworkAccess"] == "Disabled"
    assert account.inputs["allowSharedKeyAccess"] is False
    assert account.inputs["allowBlobPublicAccess"] is False
    assert _one(PRIVATE_ENDPOINT).inputs["subnet"]["id"] == config["byon:storageSubnetId"]
    assert _one(DNS_LINK).inputs["virtualNetwork"]["id"] == config["byon:vnetId"]
    assert _one(LOCK).inputs["level"] == "CanNotDelete"
    assert all(r.protect for r in _resources() if r.type == CONTAINER)
    assert _one(BLOB_SERVICE).inputs["isVersioningEnabled"] is True


def test_node_identity_gets_data_access_on_the_account_only() -> None:
    role = _one(ROLE)
    assert role.inputs["scope"].endswith("/storageAccounts/" + _one(ACCOUNT).inputs["accountName"])
    assert _one(IDENTITY).name in role.depends_on


def test_island_waits_for_storage_the_nodes_need_at_boot() -> None:
    assert {_one(PRIVATE_ENDPOINT).name, _one(ROLE).name} <= set(_one(VMSS).depends_on)


def test_bad_example_config_is_refused_before_any_resource() -> None:
    config = _config()
    config["byon:sshPublicKey"] = "not a key"
    with pytest.raises(pulumi.RunError, match="sshPublicKey"):
        _run(config)
    from pulumi.runtime.settings import get_monitor

    assert get_monitor().order == []  # type: ignore[attr-defined]


def test_example_refuses_the_placeholder_key_outside_the_mock_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    import ndfleet.program as program

    monkeypatch.setattr(program, "under_mocks", lambda: False)
    with pytest.raises(pulumi.RunError, match="example key"):
        _run(_config())
