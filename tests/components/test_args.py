"""Each component's own Args: plain values with defaults, no stack spec; bad values named before registration."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from ndfleet.components import ib_island, identity, network, storage
from ndfleet.components.ib_island import IbIslandArgs, _check


@pytest.mark.parametrize(
    "args_class",
    [ib_island.IbIslandArgs, ib_island.HealthArgs, ib_island.ImageArgs, identity.NodeIdentityArgs,
     network.NetworkArgs, storage.StorageArgs, storage.LustreArgs],
)
def test_component_args_never_take_the_stack_spec(args_class: type) -> None:
    assert dataclasses.is_dataclass(args_class)
    fields = dataclasses.fields(args_class)
    assert fields
    # Annotations are strings (postponed evaluation): no field names the spec or a spec type.
    assert all("Spec" not in str(f.type) and f.name != "spec" for f in fields)


def _island(**overrides: typing.Any) -> IbIslandArgs:
    values: dict[str, typing.Any] = {
        "resource_group_name": "rg",
        "location": "eastus",
        "subnet_id": "/subnets/x",
        "identity_id": "/identities/x",
        "ssh_public_key": "ssh-ed25519 AAAA",
        "custom_data": "H4sIAAAAAAAAA0tMSQUAnAcjJgQAAAA=",
        "node_count": 2,
    }
    values.update(overrides)
    return IbIslandArgs(**values)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"vm_size": "Standard_D4s_v5"}, "vm_size = 'Standard_D4s_v5': no VM-size profile"),
        ({"node_count": 0}, "node_count = 0: at least 1"),
        ({"node_count": 0, "elastic": True}, "scale_set_name: required when elastic"),
        ({"custom_data": "not base64!"}, "custom_data: not base64"),
        ({"custom_data": "A" * 90_000}, "over Azure's limit of 65,535"),
        ({"user_data": "not base64!"}, "user_data: not base64"),
        ({"user_data": "A" * 90_000}, "user_data: 67,500 bytes decoded, over Azure's limit of 65,535"),
    ],
)
def test_island_args_refuse_bad_values(overrides: dict[str, typing.Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _check(_island(**overrides))


def test_island_args_defaults_are_an_h100_island() -> None:
    args = _island()
    _check(args)
    assert args.vm_size == "Standard_ND96isr_H100_v5" and args.proximity_placement_group
    assert args.image.offer == "ubuntu-hpc" and args.health.repair_action == "Replace"


def test_health_args_default_grace_is_what_prepare_derives_for_the_default_stack() -> None:
    from ndfleet.components.ib_island import HealthArgs
    from ndfleet.prepare import prepare
    from ndfleet.stackconfig.config import load_spec
    from tests.conftest import base_config

    prepared = prepare(load_spec(base_config(), "t"))
    assert HealthArgs().probe_grace_period_seconds == prepared.probe_grace_period_s
