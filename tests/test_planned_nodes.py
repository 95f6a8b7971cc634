"""`plannedNodes` sizes the compute subnet once: growing a stack up to it changes no subnet's address range."""

from __future__ import annotations

from typing import Any

import pytest

from ndfleet.stackconfig.clusterspec import ClusterSpec
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.derive import compute_subnet_capacity, compute_subnet_prefix
from ndfleet.stackconfig.problems import SpecError
from tests.conftest import base_config


def spec_with(**settings: Any) -> ClusterSpec:
    return load_spec({**base_config(), **settings}, "t")


def subnets(spec: ClusterSpec) -> dict[str, str | None]:
    net = spec.network
    return {
        "compute": net.compute.cidr,
        "storage": net.storage.cidr,
        "bastion": net.bastion.cidr if net.bastion else None,
    }


def test_growing_past_the_subnets_room_re_ranges_every_subnet_without_planned_nodes() -> None:
    small, grown = spec_with(nodes=40, bastion=True), spec_with(nodes=60, bastion=True)
    assert subnets(small)["compute"] != subnets(grown)["compute"]
    assert subnets(small)["storage"] != subnets(grown)["storage"]


def test_planned_nodes_keeps_every_subnet_as_the_stack_grows_to_it() -> None:
    sizes = [spec_with(nodes=n, plannedNodes=200, bastion=True) for n in (2, 40, 60, 199, 200)]
    assert len({tuple(subnets(s).items()) for s in sizes}) == 1


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
    prefix = compute_subnet_prefix(nodes + other)
    capacity = compute_subnet_capacity(prefix, other)
    assert capacity >= nodes
    assert compute_subnet_prefix(capacity + other) == prefix
    assert compute_subnet_prefix(capacity + 1 + other) < prefix


def test_the_spec_carries_the_compute_subnets_room() -> None:
    spec = spec_with(nodes=40)
    assert spec.network.compute_node_capacity == compute_subnet_capacity(
        int(spec.network.compute.cidr.split("/")[1]), 0
    )


def test_plan_prints_the_compute_subnets_room(capsys: pytest.CaptureFixture[str]) -> None:
    from ndfleet.cli import main

    assert main(["plan", "--stack", "dev"]) == 0
    out = capsys.readouterr().out
    assert "compute subnet 10.40.0.0/26: room for 47 nodes; growing past that re-ranges every subnet" in out


def test_the_deploying_page_quotes_the_dev_stacks_room() -> None:
    from pathlib import Path

    from ndfleet.stackconfig.stackfile import load_stack

    spec = load_spec(load_stack(name="dev").ndfleet_config, "dev")
    readme = (Path(__file__).parent.parent / "docs" / "deploying.md").read_text()
    assert f"(`room for {spec.network.compute_node_capacity} nodes` for a small stack)" in readme
