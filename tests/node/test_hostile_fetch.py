"""Hostile and realistic answers to the node's one HTTP reader (`ndfleet_node.net.fetch`), through the scale-set
API the elastic programs call (`ScaleSetApi.instances`) and the service policy every reader shares: a list of
realistic size, pages that loop, a nextLink to another host or of the wrong type, a body over the cap, a body
dripped a byte at a time, endpoints the node must not talk to. Stand-ins on 127.0.0.1 (tests/impact/arm_server.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ndfleet_node import net
from ndfleet_node.config import NodeConfig
from ndfleet_node.elastic import arm
from ndfleet_node.elastic.arm import ArmError, ScaleSetApi
from ndfleet_node.runner import Runner
from ndfleet_node.setup import SetupContext
from ndfleet_node.setup.storage import IMDS_TRIES, imds_tags

from tests.impact.arm_server import Reply, serve

SCALE_SET = "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/ss"
LIST = ("GET", f"{SCALE_SET}/virtualMachines")
SHORT_DEADLINE_S = 2.0
SSH_KEY = "ssh-rsa " + "A" * 716 + " azureuser@ndfleet"  # an RSA-4096 public key's length


def vm(i: int) -> dict[str, Any]:
    """One entry of `GET .../virtualMachineScaleSets/{name}/virtualMachines`, in the shape of the REST reference's
    example (https://learn.microsoft.com/en-us/rest/api/compute/virtual-machine-scale-set-vms/list): about 4 KiB."""
    rid = f"{SCALE_SET}/virtualMachines/{i}"
    disk = f"/subscriptions/sub/resourceGroups/RG/providers/Microsoft.Compute/disks/ss_ss_{i}_OsDisk_1_{i:032x}"
    nic = f"{rid}/networkInterfaces/ss-nic"
    return {
        "name": f"ss_{i}", "id": rid, "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
        "location": "eastus", "tags": {"ndfleet:stack": "prod", "ndfleet:island": "gpu"},
        "instanceId": str(i), "sku": {"name": "Standard_ND96isr_H100_v5", "tier": "Standard"},
        "zones": ["1"],
        "properties": {
            "latestModelApplied": True, "modelDefinitionApplied": "VirtualMachineScaleSet",
            "vmId": f"{i:08x}-0000-4000-8000-000000000000", "provisioningState": "Succeeded",
            "timeCreated": "2026-12-04T10:00:00.0000000+00:00",
            "hardwareProfile": {},
            "storageProfile": {
                "imageReference": {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204",
                                   "version": "22.04.2024102301", "exactVersion": "22.04.2024102301"},
                "osDisk": {"osType": "Linux", "name": disk.rsplit("/", 1)[1], "createOption": "FromImage",
                           "caching": "ReadWrite", "diskSizeGB": 256, "deleteOption": "Delete",
                           "managedDisk": {"storageAccountType": "Premium_LRS", "id": disk}},
                "dataDisks": [],
            },
            "osProfile": {
                "computerName": f"prod-gpu-{i:06x}", "adminUsername": "azureuser",
                "linuxConfiguration": {"disablePasswordAuthentication": True, "provisionVMAgent": True,
                                       "enableVMAgentPlatformUpdates": False,
                                       "ssh": {"publicKeys": [{"path": "/home/azureuser/.ssh/authorized_keys",
                                                               "keyData": SSH_KEY}]}},
                "secrets": [], "allowExtensionOperations": True, "requireGuestProvisionSignal": True,
            },
            "securityProfile": {"uefiSettings": {"secureBootEnabled": False, "vTpmEnabled": False},
                                "securityType": "TrustedLaunch"},
            "networkProfile": {"networkInterfaces": [{"id": nic}]},
            "networkProfileConfiguration": {"networkInterfaceConfigurations": [{"name": "ss-nic", "properties": {
                "primary": True, "enableAcceleratedNetworking": True, "disableTcpStateTracking": False,
                "enableIPForwarding": False, "deleteOption": "Delete",
                "ipConfigurations": [{"name": "ipconfig1", "properties": {
                    "subnet": {"id": "/subscriptions/sub/resourceGroups/rg/providers/Microsoft.Network/"
                                     "virtualNetworks/prod-vnet/subnets/compute"},
                    "privateIPAddressVersion": "IPv4"}}]}}]},
            "diagnosticsProfile": {"bootDiagnostics": {"enabled": True}},
        },
        "resources": [{"id": f"{rid}/extensions/{name}"} for name in ("HealthExtension", "NvidiaGpuDriverLinux")],
        "etag": f'"{i}"',
    }


def page(first: int, count: int, next_link: object = None) -> bytes:
    doc: dict[str, Any] = {"value": [vm(i) for i in range(first, first + count)]}
    if next_link is not None:
        doc["nextLink"] = next_link
    return json.dumps(doc, indent=1).encode()


def api(base: str) -> ScaleSetApi:
    return ScaleSetApi("sub", "rg", "ss", lambda: "arm-token", endpoint=base)


def test_a_realistic_instance_list_of_40_vms_is_read_whole() -> None:
    body = page(0, 40)
    assert 150 << 10 < len(body) < 170 << 10  # "about 160 KiB" (issue 31), more than the old 64 KiB cap
    with serve({LIST: [Reply(200, raw=body)]}) as resource_manager:
        found = api(resource_manager.base).instances()
    assert [f.computer_name for f in found] == [f"prod-gpu-{i:06x}" for i in range(40)]


def test_pages_on_the_same_host_are_followed() -> None:
    with serve({LIST: [Reply(200)]}) as resource_manager:
        link = f"{resource_manager.base}{LIST[1]}?api-version={arm.API_VERSION}&$skiptoken=2"
        resource_manager.routes[LIST] = [Reply(200, raw=page(0, 2, link)), Reply(200, raw=page(2, 2))]
        found = api(resource_manager.base).instances()
    assert [f.instance_id for f in found] == ["0", "1", "2", "3"]


def test_a_next_link_to_itself_is_refused_by_name_not_followed_for_ever() -> None:
    with serve({LIST: [Reply(200)]}) as resource_manager:
        link = f"{resource_manager.base}{LIST[1]}?api-version={arm.API_VERSION}"
        resource_manager.routes[LIST] = [Reply(200, raw=page(0, 1, link))]
        with pytest.raises(ArmError, match="is not a new page"):
            api(resource_manager.base).instances()
        assert len(resource_manager.requests) == 1


def test_two_pages_pointing_at_each_other_are_refused() -> None:
    with serve({LIST: [Reply(200)]}) as resource_manager:
        a = f"{resource_manager.base}{LIST[1]}?page=a"
        b = f"{resource_manager.base}{LIST[1]}?page=b"
        resource_manager.routes[LIST] = [Reply(200, raw=page(0, 1, a)), Reply(200, raw=page(1, 1, b)),
                                         Reply(200, raw=page(2, 1, a))]  # fmt: skip
        with pytest.raises(ArmError, match="is not a new page"):
            api(resource_manager.base).instances()
        assert len(resource_manager.requests) == 3


def test_a_next_link_to_another_host_never_gets_the_token() -> None:
    with serve({LIST: [Reply(200, raw=page(0, 1))]}) as other, serve({LIST: [Reply(200)]}) as resource_manager:
        resource_manager.routes[LIST] = [Reply(200, raw=page(0, 1, f"{other.base}{LIST[1]}"))]
        with pytest.raises(ArmError, match="is not a new page on"):
            api(resource_manager.base).instances()
        assert other.requests == []
    assert resource_manager.requests[0].headers["Authorization"] == "Bearer arm-token"


@pytest.mark.parametrize("link", [5, ["x"], {"href": "x"}])
def test_a_next_link_of_the_wrong_type_is_a_named_failure(link: object) -> None:
    with serve({LIST: [Reply(200, raw=page(0, 1, link))]}) as resource_manager, \
            pytest.raises(ArmError, match="nextLink .* refused"):
            api(resource_manager.base).instances()


def test_more_instances_than_a_scale_set_holds_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arm, "MAX_INSTANCES", 3)  # the same rule as at 1,000, with a small answer
    with serve({LIST: [Reply(200, raw=page(0, 4))]}) as resource_manager, \
            pytest.raises(ArmError, match="more than 3 instances"):
            api(resource_manager.base).instances()


def test_a_list_over_the_cap_is_refused_by_name_after_reading_only_the_cap() -> None:
    with serve({LIST: [Reply(200, stream_bytes=64 << 20)]}) as resource_manager, \
            pytest.raises(ArmError, match=f"over {arm.LIST_CAP:,} bytes"):
            api(resource_manager.base).instances()


def test_a_dripped_list_is_cut_off_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(net, "HTTP_DEADLINE_S", SHORT_DEADLINE_S)
    with serve({LIST: [Reply(200, raw=page(0, 1), drip="body", drip_s=0.1)]}) as resource_manager:
        with pytest.raises(ArmError, match=f"no complete answer .* within {SHORT_DEADLINE_S:g} s"):
            api(resource_manager.base).instances()
        assert resource_manager.drips_outlasted == 0


# ---------------------------------------------------------------------------------------------- the policy

REFUSED = {
    "imds not on its address": ("imds", "http://10.0.0.1"),
    "imds over https": ("imds", "https://169.254.169.254"),
    "arm over http": ("arm", "http://management.azure.com"),
    "arm under another suffix": ("arm", "https://management.azure.com.evil.example"),
    "arm behind a user part": ("arm", "https://evil.example:1\\@management.azure.com"),
    "arm with a user part": ("arm", "https://management.azure.com@evil.example"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_an_endpoint_the_node_must_not_talk_to_is_refused(case: str) -> None:
    kind, base = REFUSED[case]
    with pytest.raises(net.FetchError):
        net.Service(kind, base, net.IMDS_CAP)


def test_the_documented_endpoints_are_accepted() -> None:
    net.Service("imds", net.IMDS, net.IMDS_CAP)
    net.Service("arm", net.ARM, net.IMPACT_CAP)
    net.Service("arm", "https://management.usgovcloudapi.net", net.IMPACT_CAP)


def test_a_request_to_another_origin_is_refused_before_any_connection() -> None:
    with serve({("GET", "/"): [Reply(200, raw=b"{}")]}) as other, serve({("GET", "/"): [Reply(200)]}) as mine:
        service = net.Service("arm", mine.base, net.IMPACT_CAP)
        with pytest.raises(net.FetchError, match="refused"):
            service.send("GET", f"{other.base}/x", {"Authorization": "Bearer t"})
        assert other.requests == []


def test_the_metadata_service_always_gets_its_header() -> None:
    with serve({("GET", "/metadata"): [Reply(200, raw=b"[]")]}) as imds:
        net.Service("imds", imds.base, net.IMDS_CAP).send("GET", f"{imds.base}/metadata/x", {})
    assert imds.requests[0].headers["Metadata"] == "true"


# ---------------------------------------------------------------------------------------------- the tags reader

TAGS = ("GET", "/metadata/instance/compute/tagsList")
# IMDS answers the tags as a JSON list of {"name", "value"} (https://learn.microsoft.com/en-us/azure/virtual-machines/
# instance-metadata-service, "compute/tagsList").
TAGS_LIST = b'[{"name": "ndfleet:slurm-vault", "value": "kvprod1"}]'


def read_tags(base: str) -> tuple[dict[str, str], list[float]]:
    waits: list[float] = []
    ctx = SetupContext(NodeConfig({"imds": {"tags_url": f"{base}{TAGS[1]}"}}), Runner(), sleep=waits.append)
    return imds_tags(ctx), waits


def test_the_set_up_reads_the_tags_through_the_bounded_fetch() -> None:
    with serve({TAGS: [Reply(503), Reply(200, raw=TAGS_LIST)]}) as imds:
        tags, waits = read_tags(imds.base)
    assert tags == {"ndfleet:slurm-vault": "kvprod1"} and waits == [1]
    assert imds.requests[0].headers["Metadata"] == "true"


@pytest.mark.parametrize("hostile", ["drip", "over the cap"])
def test_hostile_tags_answers_end_in_no_tags_after_the_bounded_tries(hostile: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: E501
    monkeypatch.setattr(net, "HTTP_DEADLINE_S", SHORT_DEADLINE_S)
    drip = Reply(200, raw=TAGS_LIST, drip="body", drip_s=0.5)
    reply = drip if hostile == "drip" else Reply(200, stream_bytes=64 << 20)
    with serve({TAGS: [reply]}) as imds:
        tags, waits = read_tags(imds.base)
        assert imds.drips_outlasted == 0
    assert tags == {} and len(waits) == IMDS_TRIES
