"""The island's boot version (ndfleet/boot_version.py, issue 42): what a node boots from, and only that."""

from __future__ import annotations

from typing import Any

import pytest

from ndfleet.boot_version import boot_version
from ndfleet.prepare import prepare
from ndfleet.stackconfig.config import load_spec
from tests.conftest import base_config

PINNED = "microsoft-dsvm:ubuntu-hpc:2204:22.04.2024102301"
OTHER = "microsoft-dsvm:ubuntu-hpc:2204:22.04.2025010101"


def _config(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"nodes": None, "scheduler": "slurm", "image": PINNED,
                              "islands": [{"name": "a", "nodes": 2}, {"name": "b", "nodes": 2}]}  # fmt: skip
    config.update(overrides)
    return base_config(**config)


def _versions(**overrides: Any) -> dict[str, str]:
    prepared = prepare(load_spec(_config(**overrides), "t"))
    return {p.island.name: p.boot_version for p in prepared.islands}


def test_a_version_is_twelve_hex_digits_one_per_island_and_the_same_for_the_same_stack() -> None:
    first, again = _versions(), _versions()
    assert first == again
    assert all(len(v) == 12 and set(v) <= set("0123456789abcdef") for v in first.values())
    assert first["a"] != first["b"]  # each customData names its island


@pytest.mark.parametrize(
    "change",
    [
        {"image": OTHER},  # the image
        {"health": {"validationLevel": "quick"}},  # the boot data (node.json)
        {"slurm": {"version": "25.05.3"}},  # the Slurm release the nodes install
    ],
    ids=["image", "boot-data", "slurm-release"],
)
def test_each_kind_of_change_changes_every_island_version(change: dict[str, Any]) -> None:
    before, after = _versions(), _versions(**change)
    assert all(before[name] != after[name] for name in before)


@pytest.mark.parametrize(
    "change",
    [
        {"islands": [{"name": "a", "nodes": 5}, {"name": "b", "nodes": 3}]},  # capacity
        {"tags": {"team": "research"}},  # tags
        {"health": {"repairAction": "Reimage", "repairGracePeriodMinutes": 60}},  # repair policy
    ],
    ids=["capacity", "tags", "repair-policy"],
)
def test_capacity_tags_and_repair_policy_leave_the_version_alone(change: dict[str, Any]) -> None:
    assert _versions(**change) == _versions()


def test_the_version_is_over_its_inputs_each_length_prefixed() -> None:
    base = boot_version("img", "cloud-config", b"bundle", "25.11.5")
    assert base == boot_version("img", "cloud-config", b"bundle", "25.11.5")
    assert base != boot_version("img2", "cloud-config", b"bundle", "25.11.5")
    assert base != boot_version("img", "cloud-config2", b"bundle", "25.11.5")
    assert base != boot_version("img", "cloud-config", b"bundle2", "25.11.5")
    assert base != boot_version("img", "cloud-config", b"bundle", "25.11.6")
    assert boot_version("ab", "c", b"", "") != boot_version("a", "bc", b"", "")  # no two inputs run together


def test_custom_data_carries_the_version_it_was_computed_without() -> None:
    prepared = prepare(load_spec(_config(), "t"))
    for p in prepared.islands:
        assert f'"boot_version": "{p.boot_version}"' in p.bootstrap.files["bundle.json"]


def test_each_scale_set_is_tagged_with_its_island_version_and_slurm_release() -> None:
    from ndfleet_node.names import TAG_BOOT_VERSION, TAG_SLURM_RELEASE

    from tests.conftest import of_type, plan_of

    config = _config()
    versions = _versions()
    scale_sets = of_type(plan_of(config, "t"), "azure-native:compute:VirtualMachineScaleSet")
    tagged = {r.inputs["tags"]["ndfleet:island"]: r.inputs["tags"] for r in scale_sets}
    assert {name: tags[TAG_BOOT_VERSION] for name, tags in tagged.items()} == versions
    assert {tags[TAG_SLURM_RELEASE] for tags in tagged.values()} == {"25.11.5"}
    # tags sit beside the model, not in it: the VM profile holds no version tag
    for r in scale_sets:
        assert TAG_BOOT_VERSION not in str(r.inputs["virtualMachineProfile"].get("tags", ""))
