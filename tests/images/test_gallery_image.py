"""A team's own image: `image` takes an Azure Compute Gallery image version's resource id (or its definition's, with
the `latest` warning), planned into the island scale sets' image reference as `id` alone; the image's contract is the
one the stack declares (`imageContract`: one of ndfleet's, or a contract file checked as ndfleet's own are)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ndfleet import images
from ndfleet.images import COMPUTE_IMAGE
from ndfleet.nodefiles.bootstrap import setup_after
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.problems import SpecError
from tests.conftest import VMSS, base_config, dig, of_type, plan_of

IMAGES = Path(images.__file__).resolve().parent
DEFINITION = (
    "/subscriptions/00000000-1111-2222-3333-444444444444/resourceGroups/images-rg/providers/Microsoft.Compute"
    "/galleries/team_gallery/images/ndv5-train"
)
VERSION_ID = f"{DEFINITION}/versions/1.4.2"
PINNED = f"{COMPUTE_IMAGE}@22.04.2024102301"


def errors_of(config: dict[str, object]) -> str:
    with pytest.raises(SpecError) as raised:
        load_spec(config, "test")
    return str(raised.value)


def test_a_gallery_version_is_planned_as_the_scale_sets_image_id() -> None:
    plan = plan_of(base_config(image=VERSION_ID, imageContract=PINNED, nodes=2, maxNodesPerIsland=1))
    scale_sets = of_type(plan, VMSS)
    assert len(scale_sets) == 2
    for vmss in scale_sets:
        # `id` alone: publisher/offer/sku/version are a marketplace image's, and there is no marketplace plan.
        assert dig(vmss.inputs, "virtualMachineProfile.storageProfile.imageReference") == {"id": VERSION_ID}
        assert "plan" not in vmss.inputs
    assert plan.spec.image.pinned and plan.spec.image.version == "1.4.2"
    assert not any("latest" in w and "imageContract" not in w and VERSION_ID in w for w in plan.spec.warnings)


def test_a_gallery_definition_boots_its_latest_version_and_warns_so() -> None:
    spec = load_spec(base_config(image=DEFINITION, imageContract=COMPUTE_IMAGE), "test")
    assert not spec.image.pinned
    warning = next(w for w in spec.warnings if "resolves 'latest'" in w)
    assert f"{DEFINITION}/versions/<major.minor.patch>" in warning
    assert "az sig image-version list" in warning and "--gallery-name team_gallery" in warning


@pytest.mark.parametrize(
    ("bad", "fault"),
    [
        (DEFINITION.replace("00000000-1111", "not-a-guid"), "subscription id 'not-a-guid-2222-3333-444444444444'"),
        (f"{DEFINITION}/versions/latest", "version 'latest'"),
        (f"{DEFINITION}/versions/1.4", "version '1.4'"),
        (DEFINITION.replace("galleries", "images"), "'images' where 'galleries' belongs"),
        (DEFINITION.replace("team_gallery", "team-gallery"), "gallery name 'team-gallery'"),
        ("/subscriptions/x", "2 parts, not 10 (a definition) or 12 (a version)"),
    ],
)
def test_a_bad_gallery_id_is_refused_naming_the_setting_the_value_and_the_form(bad: str, fault: str) -> None:
    message = errors_of(base_config(image=bad, imageContract=COMPUTE_IMAGE))
    # The value is shown shortened (problems.show_value), so the message names the part that is wrong.
    assert f"ndfleet:image = {bad[:40]!r}"[:-1] in message
    assert f"Azure Compute Gallery image id ({fault})" in message and "/versions/<major.minor.patch>" in message


def test_a_gallery_image_without_a_contract_is_a_plan_error_naming_the_setting() -> None:
    message = errors_of(base_config(image=VERSION_ID))
    assert "ndfleet:imageContract" in message and VERSION_ID in message
    for name in images.contract_names():
        assert name in message


def test_a_contract_is_for_gallery_images_only() -> None:
    assert "applies only to a gallery image" in errors_of(base_config(imageContract=COMPUTE_IMAGE))


def test_a_named_contract_must_be_ndfleets() -> None:
    message = errors_of(base_config(image=VERSION_ID, imageContract=f"{COMPUTE_IMAGE}@22.04.2099010101"))
    assert "ndfleet:imageContract = 'ubuntu-hpc-2204@22.04.2099010101'" in message and PINNED in message


def test_a_declared_contract_is_the_nodes_contract() -> None:
    spec = load_spec(base_config(image=VERSION_ID, imageContract=PINNED), "test")
    contract, why = spec.image.contract_of()
    assert (contract, why) == (images.load(COMPUTE_IMAGE, "22.04.2024102301"), "")
    assert setup_after(spec) == ["network-online.target", *contract.writers_of("/etc/nccl.conf")]


def _team_contract(tmp_path: Path, change: str = "") -> Path:
    doc = json.loads((IMAGES / "ubuntu-hpc-2204.json").read_text())
    doc.update(name="team-ndv5", image="team_gallery/ndv5-train", version="1.4.2")
    doc["tools"].append({"name": "enroot", "path": "/usr/bin/enroot", "source": "https://github.com/NVIDIA/enroot"})
    if change == "tool without path":
        del doc["tools"][0]["path"]
    elif change == "nccl-tests elsewhere":
        next(t for t in doc["tools"] if t["name"] == "all_reduce_perf")["path"] = "/opt/team/nccl-tests/all_reduce_perf"
    path = tmp_path / "images" / "team-ndv5.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    return path


def test_a_contract_file_is_read_and_becomes_the_nodes_contract(tmp_path: Path) -> None:
    path = _team_contract(tmp_path)
    spec = load_spec(base_config(image=VERSION_ID, imageContract=str(path)), "test")
    contract, why = spec.image.contract_of()
    assert why == "" and contract.name == "team-ndv5" and "enroot" in contract.tool_names
    # Relative to the stack file's folder, which the commands and the program pass (ndfleet.prepare.prepare_config).
    relative = load_spec(base_config(image=VERSION_ID, imageContract="images/team-ndv5.json"), "test", tmp_path)
    assert relative.image.contract == str(path) and relative.image.contract_of()[0] == contract
    unplaced = errors_of(base_config(image=VERSION_ID, imageContract="images/team-ndv5.json"))
    assert "ndfleet:imageContract = 'images/team-ndv5.json': a relative contract file" in unplaced


def test_a_contract_file_of_the_wrong_shape_is_refused_with_the_contracts_own_check(tmp_path: Path) -> None:
    path = _team_contract(tmp_path, "tool without path")
    message = errors_of(base_config(image=VERSION_ID, imageContract=str(path)))
    # The loader's message for ndfleet's own contracts (tests/images/test_contract_loader.py), behind the setting.
    assert re.search(rf"ndfleet:imageContract = '{re.escape(str(path))}': .*tools\[0\]\.path: expected", message)


def test_a_contract_file_must_agree_on_what_ndfleet_renders_for_every_node(tmp_path: Path) -> None:
    path = _team_contract(tmp_path, "nccl-tests elsewhere")
    message = errors_of(base_config(image=VERSION_ID, imageContract=str(path)))
    assert "tools[name=all_reduce_perf].path: expected '/opt/nccl-tests/build/all_reduce_perf'" in message
    assert "got '/opt/team/nccl-tests/all_reduce_perf'" in message


def test_a_missing_or_huge_contract_file_is_refused(tmp_path: Path) -> None:
    missing = errors_of(base_config(image=VERSION_ID, imageContract=str(tmp_path / "none.json")))
    assert "ndfleet:imageContract" in missing and "cannot be read" in missing
    huge = tmp_path / "huge.json"
    huge.write_text(" " * (images.CONTRACT_FILE_LIMIT + 1))
    assert "larger than" in errors_of(base_config(image=VERSION_ID, imageContract=str(huge)))


def test_preflight_does_not_look_a_gallery_image_up_as_a_marketplace_one() -> None:
    from ndfleet.preflight.facts import ImageVersions
    from ndfleet.preflight.images import check_image_version

    spec = load_spec(base_config(image=VERSION_ID, imageContract=PINNED), "test")
    check = check_image_version(spec, ImageVersions(()))
    assert check.status == "skip" and "az sig image-version show" in check.detail


def test_moving_an_island_to_a_gallery_image_is_an_image_change_in_the_plan_diff() -> None:
    from ndfleet.plans import plandiff
    from tests.test_plandiff import load, rules_fired, vmss_inputs

    base = load("dev-small.json")
    head = json.loads(json.dumps(base))
    vmss_inputs(head)["virtualMachineProfile"]["storageProfile"]["imageReference"] = {"id": VERSION_ID}
    diff = plandiff.diff_plans(base, head)
    assert "vmss-image" in rules_fired(diff) and "island-replaced" not in rules_fired(diff)
    (cons,) = [c for c in diff.consequences if c.rule == "vmss-image"]
    # The rule is the marketplace one's (plandiff reads the whole imageReference): it holds for the `id` shape too.
    assert "imageReference.id: (absent) -> /subscriptions/00000000-1111-2222-3333-444444444444/" in cons.message
