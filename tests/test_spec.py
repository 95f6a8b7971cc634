"""The cluster spec: island splitting, subnets, quota, and a clear message for every bad configuration."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from ndfleet.spec.config import SpecError, load_spec, split_islands
from tests.conftest import base_config, dev_ssh_key, stack_from


def spec_of(**overrides: Any):
    return load_spec(base_config(**overrides), "test")


def problems_of(config: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(config, "test")
    return str(info.value)


def test_250_nodes_split_into_100_100_50() -> None:
    spec = spec_of(nodes=250)
    assert [(i.name, i.nodes) for i in spec.islands] == [("ib00", 100), ("ib01", 100), ("ib02", 50)]


def test_1280_nodes_make_13_islands_with_the_remainder_last() -> None:
    spec = spec_of(nodes=1280)
    assert len(spec.islands) == 13
    assert [i.nodes for i in spec.islands] == [100] * 12 + [80]
    assert spec.total_gpus == 10_240


def test_split_islands_never_exceeds_the_limit() -> None:
    for nodes in (1, 99, 100, 101, 299, 300, 301, 1000):
        parts = split_islands(nodes, 100)
        assert sum(parts) == nodes and max(parts) <= 100


def test_explicit_islands_keep_their_names_and_sizes() -> None:
    spec = spec_of(nodes=None, islands=[{"name": "alpha", "nodes": 64}, {"name": "beta", "nodes": 32}])
    assert [(i.name, i.nodes) for i in spec.islands] == [("alpha", 64), ("beta", 32)]


def test_island_limit_300_is_allowed_with_a_support_request_warning() -> None:
    spec = spec_of(nodes=300, maxNodesPerIsland=300)
    assert [i.nodes for i in spec.islands] == [300]
    assert any("support request" in w for w in spec.warnings)


def test_default_limit_gives_no_warning() -> None:
    assert spec_of(nodes=100).warnings == ()


def test_vcpu_quota_is_nodes_times_vcpus_per_family() -> None:
    assert spec_of(nodes=10).vcpu_quota == {"standardNDSH100v5Family": 960}
    assert spec_of(nodes=3, vmSize="Standard_ND96isr_H200_v5").vcpu_quota == {"standardNDISRH200V5Family": 288}


def test_compute_subnet_has_room_for_nodes_and_headroom() -> None:
    import ipaddress

    spec = spec_of(nodes=1280)
    subnet = ipaddress.IPv4Network(spec.network.compute.cidr)
    assert subnet.num_addresses - 5 >= 1280 * 1.2


def test_subnets_do_not_overlap_each_other() -> None:
    import ipaddress

    spec = spec_of(nodes=500, bastion=True, storage={"lustre": {"capacityTiB": 16}})
    nets = [
        ipaddress.IPv4Network(s.cidr)
        for s in (spec.network.compute, spec.network.storage, spec.network.lustre, spec.network.bastion)
        if s
    ]
    assert len(nets) == 4
    for i, a in enumerate(nets):
        for b in nets[i + 1 :]:
            assert not a.overlaps(b)


def test_default_image_is_the_ubuntu_hpc_gen2_image() -> None:
    image = spec_of().image
    assert (image.publisher, image.offer, image.sku, image.version) == (
        "microsoft-dsvm",
        "ubuntu-hpc",
        "2204",
        "latest",
    )


BAD_CONFIGS = [
    ({"vnetAddressSpace": "172.16.0.0/12"}, "ndfleet:vnetAddressSpace = '172.16.0.0/12': overlaps 172.16.0.0/16"),
    ({"vnetAddressSpace": "10.0.0.0/26", "nodes": 50}, "ndfleet:vnetAddressSpace = '10.0.0.0/26': too small for 50"),
    ({"vnetAddressSpace": "10.0.0.300/16"}, "ndfleet:vnetAddressSpace = '10.0.0.300/16': must be an IPv4 network"),
    ({"sshPublicKey": "ssh-rsa AAAA"}, "ndfleet:sshPublicKey = 'ssh-rsa AAAA': the key body is not valid base64"),
    ({"sshPublicKey": "not a key"}, "ndfleet:sshPublicKey = 'not a key': key type 'not' is not accepted"),
    (
        {"vmSize": "Standard_ND96asr_v4"},
        "ndfleet:vmSize = 'Standard_ND96asr_v4': unsupported VM size; valid: "
        "Standard_ND96isr_H100_v5, Standard_ND96isr_H200_v5",
    ),
    ({"nodes": 0}, "ndfleet:nodes = 0: input should be greater than or equal to 1"),
    ({"maxNodesPerIsland": 301}, "ndfleet:maxNodesPerIsland = 301: input should be less than or equal to 300"),
    ({"islands": [{"name": "a", "nodes": 1}]}, "set exactly one: 'nodes'"),
    ({"nodes": None}, "set exactly one: 'nodes'"),
    (
        {"nodes": None, "islands": [{"name": "a", "nodes": 150}]},
        "ndfleet:islands[0].nodes = 150: an InfiniBand island is one scale set",
    ),
    (
        {"nodes": None, "islands": [{"name": "a", "nodes": 1}, {"name": "a", "nodes": 2}]},
        "ndfleet:islands[1].name = 'a': island names must be unique",
    ),
    ({"nodes": None, "islands": [{"name": "Bad_Name", "nodes": 1}]}, "ndfleet:islands[0].name = 'Bad_Name'"),
    ({"zone": "4"}, "ndfleet:zone = '4': input should be '1', '2' or '3'"),
    ({"priority": "Low"}, "ndfleet:priority = 'Low': input should be 'Regular' or 'Spot'"),
    ({"adminUsername": "root"}, "ndfleet:adminUsername = 'root': is reserved by Azure"),
    (
        {"storage": {"lustre": {"sku": "AMLFS-Durable-Premium-250", "capacityTiB": 12}}},
        "ndfleet:storage.lustre.capacityTiB = 12: AMLFS-Durable-Premium-250 takes 8 to 128 TiB in steps of 8",
    ),
    (
        {"storage": {"lustre": {"sku": "Premium-9000", "capacityTiB": 8}}},
        "ndfleet:storage.lustre.sku = 'Premium-9000': unknown Managed Lustre SKU",
    ),
    ({"storage": {"softDeleteDays": 0}}, "ndfleet:storage.softDeleteDays = 0"),
    ({"health": {"repairAction": "Delete"}}, "ndfleet:health.repairAction = 'Delete': input should be 'Replace'"),
    ({"health": {"repairGracePeriodMinutes": 5}}, "ndfleet:health.repairGracePeriodMinutes = 5"),
    ({"nodez": 2}, "ndfleet:nodez is not a known setting; known settings here:"),
    ({"storage": {"lustre": {"capacityTiB": 8}, "sizeTiB": 1}}, "ndfleet:storage.sizeTiB is not a known setting"),
    ({"location": None}, "ndfleet:location"),
    ({"tags": {"ndfleet:island": "x"}}, "names starting with 'ndfleet:' are set by ndfleet itself"),
    ({"subscriptionId": "not-a-guid"}, "ndfleet:subscriptionId = 'not-a-guid'"),
    ({"image": "ubuntu-hpc"}, "ndfleet:image = 'ubuntu-hpc': must be a marketplace image URN"),
    ({"priority": "Spot", "spotMaxPrice": 0}, "ndfleet:spotMaxPrice = 0"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_CONFIGS, ids=[m[:40] for _, m in BAD_CONFIGS])
def test_bad_configuration_names_the_setting(overrides: dict[str, Any], message: str) -> None:
    config = {k: v for k, v in base_config(**overrides).items() if v is not None}
    assert message in problems_of(config)


@pytest.mark.parametrize(("overrides", "message"), BAD_CONFIGS, ids=[m[:40] for _, m in BAD_CONFIGS])
def test_bad_configuration_stops_the_program_before_any_resource(overrides: dict[str, Any], message: str) -> None:
    """The real program (`__main__.py`, as `pulumi up` runs it) fails with the message and registers nothing."""
    from pulumi.runtime.settings import get_monitor

    from ndfleet.plan import execute_program

    with pytest.raises(pulumi.RunError) as info:
        execute_program(stack_from(base_config(**overrides)))
    assert message in str(info.value)
    assert get_monitor().order == []  # type: ignore[attr-defined]


def test_missing_ssh_key_is_reported_as_required() -> None:
    config = base_config()
    del config["sshPublicKey"]
    assert "ndfleet:sshPublicKey is required" in problems_of(config)


def test_all_problems_are_reported_at_once() -> None:
    text = problems_of(base_config(nodes=0, zone="9", sshPublicKey="nope"))
    assert "3 problem(s)" in text


def test_rsa_keys_below_2048_bits_are_refused() -> None:
    import base64
    import struct

    def field(b: bytes) -> bytes:
        return struct.pack(">I", len(b)) + b

    tiny = base64.b64encode(field(b"ssh-rsa") + field(b"\x01\x00\x01") + field(b"\x00" + b"\xff" * 64)).decode()
    assert "at least 2048 bits" in problems_of(base_config(sshPublicKey=f"ssh-rsa {tiny} x"))


def test_example_key_is_accepted() -> None:
    assert spec_of(sshPublicKey=dev_ssh_key()).ssh_public_key.startswith("ssh-ed25519 ")
