"""The cluster spec: island splitting, subnets, quota, and a clear message for every bad configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulumi
import pytest

from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.derive import EXAMPLE_KEY_WARNING, split_islands
from ndfleet.stackconfig.problems import SpecError
from ndfleet.stackconfig.settings import AZURE_MAX_PRIVATE_IPS_PER_VNET, MAX_NODES, node_headroom
from ndfleet.stackconfig.sshkeys import is_example_key
from ndfleet.stackconfig.summary import vcpu_quota
from tests.conftest import base_config, dev_ssh_key, stack_from

PINNED_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:22.04.2024102301"


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
    assert spec_of(nodes=100, image=PINNED_IMAGE, bastion=True).warnings == (EXAMPLE_KEY_WARNING,)


def test_vcpu_quota_is_nodes_times_vcpus_per_family() -> None:
    assert vcpu_quota(spec_of(nodes=10)) == {"standardNDSH100v5Family": 960}
    assert vcpu_quota(spec_of(nodes=3, vmSize="Standard_ND96isr_H200_v5")) == {"standardNDISRH200V5Family": 288}


def test_compute_subnet_has_room_for_nodes_and_headroom() -> None:
    import ipaddress

    spec = spec_of(nodes=1280)
    subnet = ipaddress.IPv4Network(spec.network.compute.cidr)
    assert subnet.num_addresses - 5 >= 1280 * 1.2


def test_subnets_do_not_overlap_each_other() -> None:
    import ipaddress

    spec = spec_of(nodes=500, bastion=True, zone="1", storage={"lustre": {"capacityTiB": 16}})
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
    ({"sshPublicKey": "not a key"}, "ndfleet:sshPublicKey = 'not a key': key type 'not' is not accepted; use an RSA"),
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
    ({"nodes": None, "islands": [{"name": "a"}]}, "ndfleet:islands[0].nodes: missing"),
    (
        {"nodes": None, "scheduler": "slurm", "islands": [{"name": "a", "elastic": {"minNodes": 5, "maxNodes": 2}}]},
        "ndfleet:islands[0].elastic.minNodes = 5: more than elastic.maxNodes = 2",
    ),
    (
        {"nodes": None, "scheduler": "slurm", "islands": [{"name": "a", "elastic": {"maxNodes": 150}}]},
        "ndfleet:islands[0].elastic.maxNodes = 150: an InfiniBand island is one scale set",
    ),
    (
        {"nodes": None, "scheduler": "slurm", "islands": [{"name": "a", "nodes": 2, "elastic": {"maxNodes": 2}}]},
        "ndfleet:islands[0].nodes = 2: an elastic island's size is elastic.maxNodes = 2",
    ),
    (
        {"nodes": None, "islands": [{"name": "a", "elastic": {"maxNodes": 2}}]},
        "ndfleet:islands[0].elastic: elastic islands are run by Slurm's power saving, and ndfleet:scheduler = 'none'",
    ),
    (
        {"nodes": None, "scheduler": "slurm", "islands": [{"name": "a", "elastic": {"maxNodes": 2, "idleMinutes": 0}}]},
        "ndfleet:islands[0].elastic.idleMinutes = 0: input should be greater than or equal to 1",
    ),
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
    ({"nodez": 2}, "ndfleet:nodez is not a known setting; did you mean 'ndfleet:nodes'? known settings here:"),
    ({"storage": {"lustre": {"capacityTiB": 8}, "sizeTiB": 1}}, "ndfleet:storage.sizeTiB is not a known setting"),
    ({"location": None}, "ndfleet:location is required: the Azure region's name, e.g. `ndfleet:location: eastus`"),
    ({"tags": {"ndfleet:island": "x"}}, "names starting with 'ndfleet:' are set by ndfleet itself"),
    ({"subscriptionId": "not-a-guid"}, "ndfleet:subscriptionId = 'not-a-guid'"),
    ({"image": "ubuntu-hpc"}, "ndfleet:image = 'ubuntu-hpc': must be a marketplace image URN"),
    ({"priority": "Spot", "spotMaxPrice": 0}, "ndfleet:spotMaxPrice = 0"),
    # Booleans are never numbers, numbers never booleans, strings never numbers.
    ({"nodes": True}, "ndfleet:nodes = true: must be a whole number, not a boolean"),
    ({"nodes": 2.5}, "ndfleet:nodes = 2.5: must be a whole number, not a fraction"),
    ({"bastion": 1}, "ndfleet:bastion = 1: must be true or false, not a number"),
    ({"health": {"dcgmLevel": True}}, "ndfleet:health.dcgmLevel = true: must be a whole number, not a boolean"),
    ({"storage": {"softDeleteDays": False}}, "ndfleet:storage.softDeleteDays = false: must be a whole number"),
    ({"tags": {"owner": 7}}, "ndfleet:tags.owner = 7: must be a string, not a number"),
    ({"spotMaxPrice": True, "priority": "Spot"}, "ndfleet:spotMaxPrice = true: must be a number, not a boolean"),
    # `nodes` is bounded by Azure's 65,536 private IP addresses per VNet; every bad value answers at once.
    ({"nodes": 1_000_000_000}, "ndfleet:nodes = 1000000000: at most 54,613: Azure allows 65,536 private IP"),
    ({"nodes": 54_614}, "ndfleet:nodes = 54614: at most 54,613"),
    ({"nodes": 10**30}, "ndfleet:nodes = 1000000000000000000000000000000: at most 54,613"),
    ({"nodes": -1}, "ndfleet:nodes = -1: input should be greater than or equal to 1"),
    (
        {"nodes": None, "islands": [{"name": "a", "nodes": 10**9}]},
        "ndfleet:islands: 1,000,000,000 nodes in all; at most 54,613",
    ),
    # SSH keys: one line, RSA >= 2048 bits or ED25519 only, a private key named as such.
    (
        {"sshPublicKey": "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY= me"},
        "ndfleet:sshPublicKey = 'ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTY= me': ECDSA keys "
        "(ecdsa-sha2-nistp256) are not accepted by Azure for Linux VMs",
    ),
    ({"sshPublicKey": "ssh-dss AAAAB3NzaC1kc3M= me"}, "DSA keys (ssh-dss) are not accepted by Azure"),
    (
        {"sshPublicKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=\n-----END OPENSSH PRIVATE KEY"},
        "ndfleet:sshPublicKey (value not shown): this is a PRIVATE key: give the public key",
    ),
    ({"sshPublicKey": f"{dev_ssh_key()}\n{dev_ssh_key()}"}, "holds 2 lines: give exactly one public key"),
    # Settings that only mean something together.
    (
        {"spotMaxPrice": 0.5},
        "ndfleet:spotMaxPrice = 0.5: applies only to Spot VMs, and ndfleet:priority is 'Regular'",
    ),
    (
        {"storage": {"lustre": {"capacityTiB": 8}}},
        "ndfleet:zone is not set, but eastus has availability zones and Azure Managed Lustre",
    ),
    ({"health": {"probeGracePeriodSeconds": 300}}, "ndfleet:health.probeGracePeriodSeconds = 300: input should be"),
    # A zone where the region has none (the region table, ndfleet/stackconfig/regions.py): Azure would refuse the
    # zonal resources only at `pulumi up`, after the network and storage exist.
    (
        {"location": "northcentralus", "zone": "1"},
        "ndfleet:zone = '1': northcentralus (North Central US) has no availability zones",
    ),
    ({"location": "westus", "zone": "2"}, "remove ndfleet:zone (a regional cluster), or choose a region with zones, "
                                          "e.g. 'westus3' or 'westus2'"),
    # Typos and display names.
    ({"node": 2}, "ndfleet:node is not a known setting; did you mean 'ndfleet:nodes'?"),
    ({"VMSize": "x"}, "ndfleet:VMSize is not a known setting; did you mean 'ndfleet:vmSize'?"),
    (
        {"health": {"dcgmlevel": 2}},
        "ndfleet:health.dcgmlevel is not a known setting; did you mean 'ndfleet:health.dcgmLevel'?",
    ),
    (
        {"location": "West Europe"},
        "ndfleet:location = 'West Europe': write the region's name, not its display name: 'westeurope'",
    ),
    ({"location": "east us 2"}, "'eastus2'"),
    ({"location": "eu/west!"}, "ndfleet:location = 'eu/west!': must be an Azure region's name"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_CONFIGS, ids=[m[:40] for _, m in BAD_CONFIGS])
def test_bad_configuration_names_the_setting(overrides: dict[str, Any], message: str) -> None:
    config = {k: v for k, v in base_config(**overrides).items() if v is not None}
    assert message in problems_of(config)


@pytest.mark.parametrize(("overrides", "message"), BAD_CONFIGS, ids=[m[:40] for _, m in BAD_CONFIGS])
def test_bad_configuration_stops_the_program_before_any_resource(overrides: dict[str, Any], message: str) -> None:
    """The real program (`__main__.py`, as `pulumi up` runs it) fails with the message and registers nothing."""
    from pulumi.runtime.settings import get_monitor

    from ndfleet.plans.build import execute_program

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


def test_checks_across_settings_run_alongside_the_per_setting_ones() -> None:
    """A bad boolean, an unknown key, a VNet overlapping the RDMA range and a zoneless Lustre: four problems in one
    run, the cross-setting ones (VNet, Lustre zone) included although per-setting checks failed."""
    text = problems_of(
        base_config(
            bastion="yes", nodez=3, vnetAddressSpace="172.16.0.0/12", storage={"lustre": {"capacityTiB": 8}}
        )
    )
    assert "4 problem(s)" in text
    for expected in (
        "ndfleet:bastion = 'yes': must be true or false, not a string",
        "ndfleet:nodez is not a known setting",
        "ndfleet:vnetAddressSpace = '172.16.0.0/12': overlaps",
        "ndfleet:zone is not set",
    ):
        assert expected in text


def test_vnet_too_small_is_reported_with_a_bad_setting_elsewhere() -> None:
    text = problems_of(base_config(nodes=50, vnetAddressSpace="10.0.0.0/26", adminUsername="root"))
    assert "2 problem(s)" in text
    assert "ndfleet:vnetAddressSpace = '10.0.0.0/26': too small for 50" in text


def test_a_check_that_reads_a_failed_setting_is_skipped() -> None:
    """`nodes` invalid: no 'set exactly one of nodes/islands', no VNet sizing from a value the user did not write;
    `location` missing: no Lustre-zone verdict about a stand-in region."""
    text = problems_of({"nodes": True, "sshPublicKey": dev_ssh_key(), "storage": {"lustre": {"capacityTiB": 8}}})
    assert "2 problem(s)" in text
    assert "set exactly one" not in text and "zone is not set" not in text


def test_nodes_bound_is_the_largest_count_whose_headroom_fits_the_vnet_ip_limit() -> None:
    assert MAX_NODES + node_headroom(MAX_NODES) <= AZURE_MAX_PRIVATE_IPS_PER_VNET
    assert MAX_NODES + 1 + node_headroom(MAX_NODES + 1) > AZURE_MAX_PRIVATE_IPS_PER_VNET
    spec = spec_of(nodes=MAX_NODES, vnetAddressSpace="10.0.0.0/14")
    assert spec.total_nodes == MAX_NODES


def test_a_private_key_is_never_echoed() -> None:
    body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ"
    text = problems_of(base_config(sshPublicKey=f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH"))
    assert "PRIVATE key" in text
    assert body[:12] not in text and "BEGIN" not in text


def test_an_rsa_key_message_keeps_its_capitals() -> None:
    import base64
    import struct

    def field(b: bytes) -> bytes:
        return struct.pack(">I", len(b)) + b

    tiny = base64.b64encode(field(b"ssh-rsa") + field(b"\x01\x00\x01") + field(b"\x00" + b"\xff" * 128)).decode()
    assert ": RSA keys must be at least 2048 bits (Azure's minimum); this one has 1024" in problems_of(
        base_config(sshPublicKey=f"ssh-rsa {tiny} x")
    )


def test_lustre_without_zone_is_fine_where_the_region_has_no_zones() -> None:
    spec = spec_of(location="northcentralus", storage={"lustre": {"capacityTiB": 8}})
    assert spec.storage.lustre is not None and spec.zone is None


def test_a_zone_is_accepted_where_the_region_has_zones_or_the_table_does_not_know_it() -> None:
    assert spec_of(location="eastus", zone="1").zone == "1"
    assert spec_of(location="usgovvirginia", zone="1").zone == "1"


def test_a_zone_where_there_are_none_is_one_problem_among_the_others() -> None:
    lustre = {"lustre": {"capacityTiB": 8}}
    text = problems_of(base_config(location="northcentralus", zone="1", nodes=0, storage=lustre))
    assert "2 problem(s)" in text and text.count("has no availability zones") == 1


def test_lustre_in_a_region_the_table_does_not_know_warns() -> None:
    spec = spec_of(location="usgovvirginia", storage={"lustre": {"capacityTiB": 8}})
    assert any("needs one; set zone" in w for w in spec.warnings)
    assert any("not in ndfleet's region table" in w for w in spec.warnings)


@pytest.mark.parametrize(("location", "first_guess"), [("eastu2", "eastus2"), ("useast", "eastus"),
                                                       ("eastus3", "eastus"), ("uswest2", "westus2")])
def test_an_unknown_region_is_refused_with_a_suggestion(location: str, first_guess: str) -> None:
    lines = problems_of(base_config(location=location)).splitlines()
    found = [line for line in lines if f"ndfleet:location = '{location}'" in line]
    assert len(found) == 1 and f"did you mean '{first_guess}'" in found[0] and "ndfleet:newRegion: true" in found[0]


def test_a_region_said_to_be_new_is_accepted_with_a_warning() -> None:
    spec = spec_of(location="eastus3", newRegion=True)
    assert spec.location == "eastus3"
    assert any("not in ndfleet's region table" in w and "taken as given" in w for w in spec.warnings)


def test_spot_max_price_with_spot_is_accepted() -> None:
    assert spec_of(priority="Spot", spotMaxPrice=2.5).spot_max_price == 2.5


def test_probe_grace_period_is_none_unless_set() -> None:
    assert spec_of().health.probe_grace_period_seconds is None
    assert spec_of(health={"probeGracePeriodSeconds": 3600}).health.probe_grace_period_seconds == 3600


def test_dcgm_level_3_with_the_default_grace_period_is_accepted_by_the_program() -> None:
    """The default grace period follows the node's budget: only an explicit, too short value is an error."""
    from ndfleet.plans.build import execute_program

    run = execute_program(stack_from(base_config(health={"dcgmLevel": 3})))
    assert run.monitor.order


def test_example_key_warns_in_the_plan() -> None:
    spec = spec_of()
    assert EXAMPLE_KEY_WARNING in spec.warnings


def test_example_key_is_refused_by_pulumi_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the mock runtime (a real `pulumi up`) the program stops before any resource."""
    from pulumi.runtime.settings import get_monitor

    import ndfleet.program
    from ndfleet.plans.build import execute_program

    monkeypatch.setattr(ndfleet.program, "under_mocks", lambda: False)
    with pytest.raises(pulumi.RunError, match="example key of ndfleet's stacks"):
        execute_program(stack_from(base_config()))
    assert get_monitor().order == []  # type: ignore[attr-defined]


def example_keys_problems(stacks_dir: Path) -> list[str]:
    """The example stacks in `stacks_dir` that do not carry the one known example key (user stacks are not read)."""
    import yaml

    from tests.conftest import example_stack_files

    return [str(path) for path in example_stack_files(stacks_dir)
            if not is_example_key(yaml.safe_load(path.read_text())["config"]["ndfleet:sshPublicKey"])]  # fmt: skip


def test_every_example_stack_carries_the_one_known_example_key() -> None:
    """The fingerprint in ndfleet/stackconfig/sshkeys.py is the only place that knows the example key."""
    from tests.conftest import STACKS_DIR

    assert example_keys_problems(STACKS_DIR) == []
    assert not is_example_key(load_spec(base_config(), "t").ssh_public_key.replace("P9P4", "P9P5"))


def test_a_users_own_stack_beside_the_examples_is_not_held_to_example_rules(tmp_path: Path) -> None:
    """README: `cp stacks/Pulumi.dev.yaml stacks/Pulumi.mine.yaml`, then set your own key: the examples still pass."""
    import shutil

    import yaml

    from tests.conftest import STACKS_DIR

    stacks = tmp_path / "stacks"
    shutil.copytree(STACKS_DIR, stacks)
    doc = yaml.safe_load((stacks / "Pulumi.dev.yaml").read_text())
    doc["config"]["ndfleet:sshPublicKey"] = base_config()["sshPublicKey"].replace("P9P4", "P9P5")
    (stacks / "Pulumi.mine.yaml").write_text(yaml.safe_dump(doc))
    assert example_keys_problems(stacks) == []
    # ... and an example that lost the key is still caught.
    (stacks / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc))
    assert example_keys_problems(stacks) == [str(stacks / "Pulumi.dev.yaml")]


def test_every_listed_example_stack_is_in_stacks() -> None:
    from tests.conftest import example_stack_files

    assert [p.name for p in example_stack_files() if p.is_file()] == [
        "Pulumi.dev.yaml", "Pulumi.elastic.yaml", "Pulumi.h200.yaml", "Pulumi.prod.yaml"]


@pytest.mark.parametrize("name", ["a\nb", "x y", "../etc", "", "n" * 101, "é"])
def test_stack_names_are_checked_as_pulumi_does(name: str) -> None:
    with pytest.raises(SpecError, match="is not valid: 1-100 characters: letters, digits, '-', '_' or '.'"):
        load_spec(base_config(), name)


@pytest.mark.parametrize("name", ["dev", "prod.eu-1", "A_b", "n" * 100])
def test_valid_stack_names_pass(name: str) -> None:
    # A name longer than a resource-name prefix may be (20) needs its own namePrefix: it is never cut.
    config = base_config(**({"namePrefix": "long-name"} if len(name) > 20 else {}))
    assert load_spec(config, name).stack == name


def test_rsa_keys_below_2048_bits_are_refused() -> None:
    import base64
    import struct

    def field(b: bytes) -> bytes:
        return struct.pack(">I", len(b)) + b

    tiny = base64.b64encode(field(b"ssh-rsa") + field(b"\x01\x00\x01") + field(b"\x00" + b"\xff" * 64)).decode()
    assert "at least 2048 bits" in problems_of(base_config(sshPublicKey=f"ssh-rsa {tiny} x"))


def test_example_key_is_accepted() -> None:
    assert spec_of(sshPublicKey=dev_ssh_key()).ssh_public_key.startswith("ssh-ed25519 ")


def test_a_one_node_elastic_island_is_refused() -> None:
    config = base_config(scheduler="slurm", islands=[{"name": "solo", "elastic": {"maxNodes": 1}}])
    del config["nodes"]
    assert "ndfleet:islands[0].elastic.maxNodes = 1: with Slurm an island's nodes take jobs only once they pass the " \
        "fabric burn-in" in problems_of(config)
