"""The address plan does not depend on the node count: growing a stack (or setting `plannedNodes` after deploying)
changes no subnet's range and no fixed address (issue 44 item 4; ndfleet/stackconfig/addressing.py)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from ndfleet.plans import plandiff
from ndfleet.plans.resource_types import NIC_TYPE, SUBNET_TYPE
from ndfleet.stackconfig.addressing import SUBNET_SLOTS, compute_subnet_capacity, machines_prefix
from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.problems import SpecError
from ndfleet.stackconfig.settings import AZURE_RESERVED_ADDRESSES_PER_SUBNET
from tests.conftest import base_config, plan_of

# The stack: Slurm with two login nodes, Bastion and 128 TiB of Managed Lustre in a /16.
SLURM_STACK: dict[str, Any] = base_config(
    location="swedencentral", zone="1", bastion=True, scheduler="slurm", slurm={"loginCount": 2},
    storage={"lustre": {"sku": "AMLFS-Durable-Premium-250", "capacityTiB": 128}},
    vnetAddressSpace="10.40.0.0/16",
)  # fmt: skip


def spec_with(**settings: Any) -> ClusterSpec:
    return load_spec({**SLURM_STACK, **settings}, "t")


def addresses(spec: ClusterSpec) -> dict[str, str | None]:
    from ndfleet.slurm.conf import slurm_addresses

    net = spec.network
    controller, logins = slurm_addresses(spec)
    return {
        "compute": net.compute.cidr,
        "storage": net.storage.cidr,
        "lustre": net.lustre.cidr if net.lustre else None,
        "bastion": net.bastion.cidr if net.bastion else None,
        "controller": controller,
        "logins": " ".join(logins),
    }


@pytest.mark.parametrize("settings", [{"nodes": 128}, {"nodes": 1024}, {"nodes": 64, "plannedNodes": 1024}])
def test_growing_moves_no_subnet_and_no_fixed_address(settings: dict[str, Any]) -> None:
    assert addresses(spec_with(**settings)) == addresses(spec_with(nodes=64))


def test_the_small_subnets_sit_at_fixed_offsets_in_the_lower_half_and_compute_is_the_upper_half() -> None:
    spec = spec_with(nodes=64)
    assert addresses(spec) == {
        "compute": "10.40.128.0/17",
        "storage": "10.40.0.0/27",
        "lustre": "10.40.2.0/23",
        "bastion": "10.40.0.64/26",
        # The top of the compute subnet (Azure keeps its last address): ndfleet.slurm.conf.slurm_addresses.
        "controller": "10.40.255.254",
        "logins": "10.40.255.253 10.40.255.252",
    }


def test_turning_lustre_and_bastion_off_moves_no_other_subnet() -> None:
    full, bare = spec_with(nodes=64), spec_with(nodes=64, bastion=False, storage={})
    assert (bare.network.lustre, bare.network.bastion) == (None, None)
    assert (bare.network.compute, bare.network.storage) == (full.network.compute, full.network.storage)


def test_the_slots_do_not_overlap_and_are_aligned() -> None:
    vnet = ipaddress.IPv4Network("10.40.0.0/16")
    nets = [s.network(vnet) for s in SUBNET_SLOTS]
    assert all(s.offset % 2 ** (32 - s.prefix) == 0 for s in SUBNET_SLOTS)
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])


def _danger_rows(base: dict[str, Any], head: dict[str, Any]) -> list[plandiff.Consequence]:
    diff = plandiff.diff_plans(base, head)
    return [c for c in diff.consequences if c.resource_type in (SUBNET_TYPE, NIC_TYPE) or "address" in c.rule]


def _network_inputs(plan: dict[str, Any]) -> dict[str, Any]:
    return {r["name"]: r["inputs"] for r in plan["resources"] if r["type"] in (SUBNET_TYPE, NIC_TYPE)}


@pytest.mark.parametrize("settings", [{"nodes": 128}, {"nodes": 1024}, {"nodes": 64, "plannedNodes": 1024}])
def test_the_diff_of_growth_has_no_subnet_or_address_row(settings: dict[str, Any]) -> None:
    """What `ndfleet diff` of the two plans shows: before, 4 subnet-prefix danger rows and the NICs' moved addresses."""
    base = plan_of(SLURM_STACK | {"nodes": 64}).as_json()
    head = plan_of(SLURM_STACK | settings).as_json()
    assert _network_inputs(head) == _network_inputs(base)
    assert _danger_rows(base, head) == []


def test_planned_nodes_the_vnet_cannot_hold_is_refused_naming_the_room_and_the_size_that_fits() -> None:
    with pytest.raises(SpecError) as refused:
        spec_with(nodes=64, vnetAddressSpace="10.40.0.0/20", plannedNodes=5000)
    text = str(refused.value)
    assert "ndfleet:vnetAddressSpace = '10.40.0.0/20': too small for 5,000 nodes plus headroom (plannedNodes)" in text
    assert "10.40.8.0/21, room for 1,699 nodes" in text
    assert "use a /18 or larger" in text
    spec_with(nodes=64, vnetAddressSpace="10.40.0.0/18", plannedNodes=5000)  # the size it names fits


def test_a_vnet_too_small_for_the_fixed_subnets_says_so() -> None:
    with pytest.raises(SpecError) as refused:
        spec_with(nodes=2, vnetAddressSpace="10.40.0.0/22")
    text = str(refused.value)
    assert "too small for its fixed subnets" in text and "lustre /23" in text and "use a /21 or larger" in text


def test_planned_nodes_below_the_node_count_is_refused_naming_both() -> None:
    with pytest.raises(SpecError) as refused:
        spec_with(nodes=64, plannedNodes=40)
    assert "ndfleet:plannedNodes = 40: below the stack's 64 nodes" in str(refused.value)
    assert "set it to 64 or more" in str(refused.value)


@pytest.mark.parametrize("planned", [0, -5, "many"])
def test_planned_nodes_must_be_a_positive_count(planned: Any) -> None:
    with pytest.raises(SpecError, match="plannedNodes"):
        spec_with(nodes=2, plannedNodes=planned)


@pytest.mark.parametrize("other", [0, 1, 3])
@pytest.mark.parametrize("nodes", [1, 47, 48, 100, 250, 1000, 5000])
def test_capacity_is_the_most_nodes_the_same_prefix_holds(nodes: int, other: int) -> None:
    prefix = machines_prefix(nodes + other)
    capacity = compute_subnet_capacity(prefix, other)
    assert capacity >= nodes
    assert machines_prefix(capacity + other) == prefix
    assert machines_prefix(capacity + 1 + other) < prefix


def test_the_spec_carries_the_compute_subnets_room() -> None:
    spec = spec_with(nodes=40)
    # A /17 less Azure's 5 addresses holds n nodes + 20 % headroom + the controller and 2 login VMs.
    room = 2**15 - AZURE_RESERVED_ADDRESSES_PER_SUBNET
    assert spec.network.compute_node_capacity == compute_subnet_capacity(17, 3)
    n = spec.network.compute_node_capacity + 3
    assert n + -(-n // 5) <= room < n + 1 + -(-(n + 1) // 5)


def test_plan_prints_the_compute_subnets_room(capsys: pytest.CaptureFixture[str]) -> None:
    from ndfleet.cli import main

    assert main(["plan", "--stack", "dev"]) == 0
    out = capsys.readouterr().out
    assert "compute subnet 10.40.128.0/17 (the VNet's upper half, for any node count): room for 27,300 nodes" in out


def test_the_deploying_page_quotes_the_dev_stacks_room() -> None:
    from pathlib import Path

    from ndfleet.stackconfig.stackfile import load_stack

    spec = load_spec(load_stack(name="dev").ndfleet_config, "dev")
    page = (Path(__file__).parent.parent / "docs" / "deploying.md").read_text()
    assert f"(`room for {spec.network.compute_node_capacity:,} nodes` for the dev stack)" in page


NETWORK_PAGE = Path(__file__).parent.parent / "docs" / "network.md"


def _figure(name: str) -> str:
    """The block after `<!-- figure: name -->` in docs/network.md."""
    text = NETWORK_PAGE.read_text()
    after = text.split(f"<!-- figure: {name} -->\n", 1)[1]
    return after.split("\n\n", 1)[0]


def test_the_network_page_quotes_the_dev_plans_room(capsys: pytest.CaptureFixture[str]) -> None:
    from ndfleet.cli import main

    assert main(["plan", "--stack", "dev"]) == 0
    line = next(x.strip() for x in capsys.readouterr().out.splitlines() if "compute subnet" in x)
    assert _figure("dev room") == f"```\n{line}\n```"


def test_the_network_pages_room_table_is_computed() -> None:
    rows = [r for r in _figure("room table").splitlines()[2:]]
    assert rows
    for row in rows:
        vnet, compute, room = (c.strip() for c in row.strip("|").split("|"))
        prefix = int(vnet.removeprefix("/"))
        assert compute == f"/{prefix + 1}"
        assert room == f"{compute_subnet_capacity(prefix + 1, 0):,}"


@pytest.mark.parametrize(
    ("settings", "smallest"),
    [({"bastion": False, "storage": {}}, 26), ({"storage": {}}, 24), ({"bastion": False}, 21)],
)
def test_the_smallest_vnet_the_network_page_names_is_the_smallest_accepted(
    settings: dict[str, Any], smallest: int
) -> None:
    page = NETWORK_PAGE.read_text()
    assert f"/{smallest} with" in page
    spec_with(nodes=2, vnetAddressSpace=f"10.40.0.0/{smallest}", **settings)
    with pytest.raises(SpecError, match=f"use a /{smallest} or larger"):
        spec_with(nodes=2, vnetAddressSpace=f"10.40.0.0/{smallest + 1}", **settings)


@pytest.mark.parametrize("prefix", range(2, 30))
def test_capacity_is_the_largest_count_that_fits_at_every_prefix(prefix: int) -> None:
    from ndfleet.stackconfig.settings import node_headroom

    room = 2 ** (32 - prefix) - AZURE_RESERVED_ADDRESSES_PER_SUBNET
    n = compute_subnet_capacity(prefix, 0)
    assert n == 0 or n + node_headroom(n) <= room
    assert n + 1 + node_headroom(n + 1) > room


def test_a_huge_vnet_gets_its_upper_half() -> None:
    # (Counting down from the room, as the capacity once did, took a billion steps at /2: the test above.)
    spec = spec_with(nodes=64, vnetAddressSpace="10.0.0.0/8")
    assert spec.network.compute.cidr == "10.128.0.0/9"
