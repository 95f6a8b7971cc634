"""One contract per image version: each example stack's image, and the twin's, has the contract of the version it pins
(its `version` field agreeing); a version without one gets latest's with a plan warning naming the contracted ones;
the node set-up is ordered after the image's boot service that rewrites /etc/nccl.conf."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest
from ndfleet_node.names import NCCL_CONF_PATH

from ndfleet import images
from ndfleet.images import COMPUTE_IMAGE, LATEST, ImageContract, ImageContractError
from ndfleet.nodefiles.bootstrap import render_bootstrap
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.twin import image as twin_image

REPO = Path(__file__).resolve().parents[2]
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (REPO / "stacks").glob("Pulumi.*.yaml"))


def spec_of(stack: str):  # type: ignore[no-untyped-def]
    return load_spec(load_stack(stack).ndfleet_config, stack)


@pytest.mark.parametrize("stack", STACKS)
def test_each_stacks_pinned_version_has_its_own_contract(stack: str) -> None:
    image = spec_of(stack).image
    contract, why = images.for_image(image.urn)
    assert contract.version == (image.version if image.pinned else LATEST)
    assert contract.image.lower() == f"{image.publisher}:{image.offer}:{image.sku}".lower()
    assert not why, why


def test_the_pinned_stacks_pin_a_version_that_is_not_latest() -> None:
    pinned = {spec_of(s).image.version for s in STACKS if spec_of(s).image.pinned}
    assert pinned and pinned <= set(images.versions(COMPUTE_IMAGE)) - {LATEST}


def test_every_contract_names_the_version_of_its_file() -> None:
    for name in images.names():
        for version in images.versions(name):
            assert images.load(name, version).version == version


def test_a_contract_whose_version_is_not_its_files_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    real = images.load_text
    monkeypatch.setattr(images, "load_text", lambda text, where: real(text.replace("22.04.2024102301", "x", 1), where))
    with pytest.raises(ImageContractError, match=r"version: expected '22.04.2024102301'"):
        images.load(COMPUTE_IMAGE, "22.04.2024102301")


def test_the_twin_models_the_image_its_stack_pins() -> None:
    urn = twin_image.twin_image_urn()
    version = urn.rsplit(":", 1)[1]
    assert version != LATEST, "the twin's stack must pin its image"
    c = twin_image.twin_contract()
    assert c.version == version and c == images.load(COMPUTE_IMAGE, version)
    # ...which is the image prod boots.
    assert spec_of("prod").image.urn == urn


def test_an_uncontracted_version_gets_latest_with_a_warning_naming_the_contracted_ones() -> None:
    contract, why = images.for_image("microsoft-dsvm:ubuntu-hpc:2204:22.04.2099010101")
    assert contract.version == LATEST
    assert "'22.04.2099010101' has no image contract" in why
    for version in images.versions(COMPUTE_IMAGE):
        assert version in why
    other, why = images.for_image("Canonical:ubuntu-24_04-lts:server:latest")
    assert other.version == LATEST and "is not 'microsoft-dsvm:ubuntu-hpc:2204'" in why
    assert images.for_image("microsoft-dsvm:ubuntu-hpc:2204:latest") == (images.load(COMPUTE_IMAGE), "")


def test_the_plan_warns_of_an_uncontracted_version() -> None:
    config = load_stack("prod").ndfleet_config
    config["image"] = "microsoft-dsvm:ubuntu-hpc:2204:22.04.2099010101"
    spec = load_spec(config, "prod")
    assert any("has no image contract" in w and "22.04.2024102301" in w for w in spec.warnings)
    assert not any("has no image contract" in w for w in spec_of("prod").warnings)


def test_versions_that_disagree_on_a_rendered_fact_are_refused() -> None:
    with pytest.raises(ImageContractError, match="the contracted versions disagree"):
        images.agreed(COMPUTE_IMAGE, lambda c: c.environments["hpcx"].home)
    assert images.agreed(COMPUTE_IMAGE, lambda c: c.environments["hpcx"].init_glob) == "/opt/hpcx-*/hpcx-init.sh"


@pytest.mark.parametrize("version", images.versions(COMPUTE_IMAGE))
def test_the_image_rewrites_nccl_conf_at_boot(version: str) -> None:
    c: ImageContract = images.load(COMPUTE_IMAGE, version)
    assert c.writers_of(NCCL_CONF_PATH) == ("sku-customizations.service",)
    assert all(b.source.startswith("https://github.com/Azure/azhpc-images/blob/") for b in c.boot_services)


@pytest.mark.parametrize("stack", ["prod", "h200", "dev"])
def test_the_node_setup_starts_after_the_images_nccl_conf_writer(stack: str) -> None:
    spec = spec_of(stack)
    unit = render_bootstrap(spec, spec.islands[0]).files["ndfleet-setup.service"]
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string(unit)
    after = parser["Unit"]["After"].split()
    contract, _ = images.for_image(spec.image.urn)
    writers = contract.writers_of(NCCL_CONF_PATH)
    assert writers and set(writers) <= set(after), (after, writers)
    assert "network-online.target" in after
