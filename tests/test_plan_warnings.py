"""What `ndfleet plan` warns about, and that each warning is printed once (the table, or stderr beside JSON)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.derive import EXAMPLE_KEY_WARNING
from ndfleet.stackconfig.stackfile import load_stack
from tests.conftest import EXAMPLE_STACKS, REPO, base_config

NDFLEET = Path(sys.prefix) / "bin" / "ndfleet"
LATEST_IMAGE = "ndfleet:image = 'microsoft-dsvm:ubuntu-hpc:2204:latest': Azure resolves 'latest'"
SLURM_WITHOUT_BASTION = "ndfleet:scheduler = 'slurm' with ndfleet:bastion off: the login node has no public address"


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_example_key_and_latest_image_warnings_are_printed_once(fmt: str) -> None:
    proc = subprocess.run([str(NDFLEET), "plan", "--stack", "dev", "--format", fmt], cwd=REPO, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # JSON carries the warnings as data (docs/plan-json.md); what is printed for a person is the table or stderr.
    printed = proc.stdout + proc.stderr if fmt == "table" else proc.stderr
    assert printed.count(EXAMPLE_KEY_WARNING) == 1
    assert printed.count(LATEST_IMAGE) == 1  # dev keeps the default image, `latest`


def test_slurm_without_bastion_warns_that_the_login_node_is_unreachable() -> None:
    spec = load_spec(base_config(scheduler="slurm", bastion=False), "t")
    assert [w for w in spec.warnings if w.startswith(SLURM_WITHOUT_BASTION)] == [
        SLURM_WITHOUT_BASTION + ", so it is reachable only from inside the VNet (a peered network or VPN); set "
        "ndfleet:bastion: true to reach it through Azure Bastion"
    ]


@pytest.mark.parametrize("config", [{"scheduler": "slurm", "bastion": True}, {"bastion": False}])
def test_no_login_node_warning_with_bastion_or_without_slurm(config: dict[str, object]) -> None:
    spec = load_spec(base_config(**config), "t")
    assert not any(w.startswith(SLURM_WITHOUT_BASTION) for w in spec.warnings)


def test_latest_image_warns_what_a_repair_or_scale_out_may_boot() -> None:
    spec = load_spec(base_config(), "t")  # the default image is ...:latest
    assert [w for w in spec.warnings if w.startswith(LATEST_IMAGE)] == [
        LATEST_IMAGE + " each time it creates or reimages a VM, so each repair or scale-out may boot a newer image "
        "(GPU driver, OFED, NCCL) than the rest of its island; pin a version, image: "
        "microsoft-dsvm:ubuntu-hpc:2204:<version> (the versions: az vm image list --publisher microsoft-dsvm "
        "--offer ubuntu-hpc --sku 2204 --all --output table)"
    ]


@pytest.mark.parametrize("version", ["latest", "Latest", "LATEST"])
def test_latest_is_recognised_whatever_its_case(version: str) -> None:
    spec = load_spec(base_config(image=f"microsoft-dsvm:ubuntu-hpc:2204:{version}"), "t")
    assert sum("Azure resolves 'latest'" in w for w in spec.warnings) == 1


def test_a_pinned_image_gives_no_image_warning() -> None:
    spec = load_spec(base_config(image="microsoft-dsvm:ubuntu-hpc:2204:22.04.2024102301"), "t")
    assert not any(w.startswith("ndfleet:image") for w in spec.warnings)


def test_a_broken_image_setting_is_an_error_not_a_latest_warning() -> None:
    from ndfleet.stackconfig.problems import SpecError

    with pytest.raises(SpecError) as info:
        load_spec(base_config(image="ubuntu-hpc"), "t")
    assert "Azure resolves 'latest'" not in str(info.value)


def test_the_example_stacks_that_pin_their_image_plan_without_the_warning() -> None:
    pinned = {}
    for name in EXAMPLE_STACKS:
        stack = load_stack(name=name)
        spec = load_spec(stack.ndfleet_config, name)
        pinned[name] = (spec.image.pinned, any(w.startswith("ndfleet:image") for w in spec.warnings))
    assert pinned["prod"] == pinned["h200"] == (True, False)
    assert pinned["dev"] == (False, True)  # dev keeps the default, `latest`, and shows the warning

