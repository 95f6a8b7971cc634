"""ndfleet/plans/plandiff/ over a small hand-made plan (tests/data/plans/dev-small.json) and edits of it."""

from __future__ import annotations

import base64
import copy
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from ndfleet.plans import plandiff

PLANS = Path(__file__).parent / "data" / "plans"
VMSS = plandiff.VMSS_TYPE


def load(name: str = "dev-small.json") -> dict[str, Any]:
    return json.loads((PLANS / name).read_text())


def resource(plan: dict[str, Any], rtype: str, name: str | None = None) -> dict[str, Any]:
    return next(r for r in plan["resources"] if r["type"] == rtype and (name is None or r["name"] == name))


def vmss_inputs(plan: dict[str, Any]) -> dict[str, Any]:
    return resource(plan, VMSS)["inputs"]


def encode_bootstrap(text: str) -> str:
    return base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()


def bootstrap_text(plan: dict[str, Any]) -> str:
    text = plandiff.decode_bootstrap(vmss_inputs(plan)["virtualMachineProfile"]["osProfile"]["customData"])
    assert text is not None
    return text


def rules_fired(diff: plandiff.StackDiff) -> set[str]:
    return {c.rule for c in diff.consequences}


@pytest.fixture
def base() -> dict[str, Any]:
    return load()


@pytest.fixture
def head(base: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(base)


# --- property paths


def test_identical_plans_have_no_changes(base: dict[str, Any], head: dict[str, Any]) -> None:
    diff = plandiff.diff_plans(base, head)
    assert diff.empty and diff.consequences == ()


def test_changed_property_reports_path_and_both_values(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["upgradePolicy"]["mode"] = "Automatic"
    (change,) = plandiff.diff_plans(base, head).changes
    assert (change.op, change.name) == ("update", "dev-ib00")
    assert change.properties == (plandiff.PropertyChange("upgradePolicy.mode", "Manual", "Automatic"),)


def test_added_and_removed_properties_use_missing(base: dict[str, Any], head: dict[str, Any]) -> None:
    inputs = vmss_inputs(head)
    del inputs["overprovision"]
    inputs["zones"] = ["1"]
    props = {p.path: p for p in plandiff.diff_plans(base, head).changes[0].properties}
    assert props["overprovision"].new is plandiff.MISSING and props["overprovision"].old is False
    assert props["zones"].old is plandiff.MISSING and props["zones"].new == ["1"]


def test_named_list_items_are_keyed_by_name_not_position() -> None:
    old = {"nics": [{"name": "a", "x": 1}, {"name": "b", "x": 2}]}
    new = {"nics": [{"name": "b", "x": 2}, {"name": "a", "x": 3}]}
    assert plandiff.diff_values(old, new) == (plandiff.PropertyChange("nics[a].x", 1, 3),)


def test_keys_with_odd_characters_are_quoted() -> None:
    changes = plandiff.diff_values({"tags": {"ndfleet:island": "a"}}, {"tags": {"ndfleet:island": "b"}})
    assert changes[0].path == 'tags["ndfleet:island"]'


def test_type_change_of_equal_value_counts_as_change() -> None:
    assert plandiff.diff_values({"n": 1}, {"n": True}) != ()


def test_resources_added_and_removed(base: dict[str, Any], head: dict[str, Any]) -> None:
    head["resources"] = [r for r in head["resources"] if r["type"] != "azure-native:network:Subnet"]
    head["resources"].append({"type": "azure-native:network:NatGateway", "name": "dev-nat", "inputs": {}})
    ops = {(c.op, c.name) for c in plandiff.diff_plans(base, head).changes}
    assert ops == {("delete", "dev-compute"), ("create", "dev-nat")}


def test_stack_on_one_side_is_all_added() -> None:
    diff = plandiff.diff_stacks({}, {"dev": load()})[0]
    assert not diff.in_base and {c.op for c in diff.changes} == {"create"}
    assert len(diff.changes) == len(load()["resources"])


def test_stack_on_one_side_is_all_removed() -> None:
    diff = plandiff.diff_stacks({"dev": load()}, {})[0]
    assert not diff.in_head and {c.op for c in diff.changes} == {"delete"}


# --- long values and the bootstrap


def test_long_value_is_shown_as_size_and_hash() -> None:
    value = "x" * (plandiff.LONG_VALUE_CHARS + 1)
    shown = plandiff.format_value(value)
    assert value not in shown
    assert re.fullmatch(r"<201 bytes, sha256 [0-9a-f]{12}>", shown)


def test_short_value_is_shown_verbatim() -> None:
    assert plandiff.format_value("Standard_ND96isr_H100_v5") == "Standard_ND96isr_H100_v5"


def test_bootstrap_change_lists_changed_lines(base: dict[str, Any], head: dict[str, Any]) -> None:
    text = bootstrap_text(head).replace("NCCL_IGNORE_CPU_AFFINITY=1", "NCCL_IGNORE_CPU_AFFINITY=0")
    vmss_inputs(head)["virtualMachineProfile"]["osProfile"]["customData"] = encode_bootstrap(text)
    prop = plandiff.diff_plans(base, head).changes[0].properties[0]
    lines = plandiff.bootstrap_diff(prop.old, prop.new)
    assert "-      NCCL_IGNORE_CPU_AFFINITY=1" in lines and "+      NCCL_IGNORE_CPU_AFFINITY=0" in lines
    assert not any("NCCL_TOPO_FILE" in line for line in lines)  # unchanged lines are left out


def test_decode_bootstrap_rejects_non_base64() -> None:
    assert plandiff.decode_bootstrap("not base64 !!") is None


def test_decode_bootstrap_reads_plain_base64() -> None:
    assert plandiff.decode_bootstrap(base64.b64encode(b"#cloud-config\n").decode()) == "#cloud-config\n"


# --- consequences


def test_vm_size_change_flags_replacement_of_every_node(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["sku"]["name"] = "Standard_ND96isr_H200_v5"
    assert {"vmss-vm-size", "island-replaced"} <= rules_fired(plandiff.diff_plans(base, head))


@pytest.mark.parametrize(
    ("path", "value", "rule"),
    [
        (("zones",), ["2"], "vmss-zones"),
        (("orchestrationMode",), "Flexible", "vmss-orchestration"),
        (("platformFaultDomainCount",), 5, "vmss-fault-domains"),
        (("proximityPlacementGroup", "id"), "/other-ppg", "vmss-ppg"),
        (("location",), "westus3", "azure-location"),
        (("vmScaleSetName",), "other", "azure-name"),
    ],
)
def test_scale_set_property_flags_its_rule(
    base: dict[str, Any], head: dict[str, Any], path: tuple[str, ...], value: Any, rule: str
) -> None:
    target = vmss_inputs(head)
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert rule in rules_fired(plandiff.diff_plans(base, head))


def test_single_placement_group_off_flags_infiniband_loss(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["singlePlacementGroup"] = False
    diff = plandiff.diff_plans(base, head)
    (cons,) = [c for c in diff.consequences if c.rule == "vmss-spg-off"]
    assert cons.severity == "danger" and "InfiniBand" in cons.message


def test_single_placement_group_on_is_a_different_rule(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(base)["singlePlacementGroup"] = False
    assert rules_fired(plandiff.diff_plans(base, head)) >= {"vmss-spg-on"}
    assert "vmss-spg-off" not in rules_fired(plandiff.diff_plans(base, head))


def test_bootstrap_change_needs_reimage_but_no_replacement(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["virtualMachineProfile"]["osProfile"]["customData"] = encode_bootstrap("#cloud-config\n")
    fired = rules_fired(plandiff.diff_plans(base, head))
    assert "vmss-bootstrap" in fired and "island-replaced" not in fired and "vmss-model" not in fired


def test_other_model_change_is_a_model_update(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["virtualMachineProfile"]["storageProfile"]["osDisk"]["diskSizeGB"] = 512
    assert rules_fired(plandiff.diff_plans(base, head)) == {"vmss-model"}


def image_reference(plan: dict[str, Any]) -> dict[str, Any]:
    reference: dict[str, Any] = vmss_inputs(plan)["virtualMachineProfile"]["storageProfile"]["imageReference"]
    return reference


def test_image_version_change_is_a_rolling_replacement_of_the_island(
    base: dict[str, Any], head: dict[str, Any]
) -> None:
    image_reference(base)["version"] = "22.04.2024102301"
    image_reference(head)["version"] = "22.04.2099010101"  # a later version (made up)
    diff = plandiff.diff_plans(base, head)
    (change,) = diff.changes  # the two plans differ in the image version only
    assert [p.path for p in change.properties] == [f"{plandiff.IMAGE_REFERENCE_PATH}.version"]
    (cons,) = diff.consequences
    assert (cons.rule, cons.severity, cons.resource_name) == ("vmss-image", "danger", "dev-ib00")
    assert cons.message.startswith(
        "virtualMachineProfile.storageProfile.imageReference.version: 22.04.2024102301 -> 22.04.2099010101: "
        "changes the island's image: a rolling replacement of its nodes."
    )
    assert "az vmss update-instances" in cons.message and "reimages it" in cons.message
    assert "island-replaced" not in rules_fired(diff)  # the scale set stays; its nodes are reimaged


def test_latest_to_a_pinned_version_is_an_image_change(base: dict[str, Any], head: dict[str, Any]) -> None:
    image_reference(head)["version"] = "22.04.2024102301"
    assert rules_fired(plandiff.diff_plans(base, head)) == {"vmss-image"}


def test_an_image_change_of_several_properties_is_one_consequence(
    base: dict[str, Any], head: dict[str, Any]
) -> None:
    image_reference(head).update(sku="2404", version="24.04.2099010101")  # made up
    (cons,) = plandiff.diff_plans(base, head).consequences
    assert cons.rule == "vmss-image" and cons.path == plandiff.IMAGE_REFERENCE_PATH
    assert "imageReference.sku: 2204 -> 2404; " in cons.message and "imageReference.version: latest -> " in cons.message


def test_tag_change_has_no_consequence(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["tags"]["environment"] = "staging"
    diff = plandiff.diff_plans(base, head)
    assert diff.changes and diff.consequences == ()


def test_scale_out_counts_nodes_and_gpus(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["sku"]["capacity"] = 5
    diff = plandiff.diff_plans(base, head)
    (cap,) = diff.capacity
    assert (cap.island, cap.old_nodes, cap.new_nodes, cap.old_gpus, cap.new_gpus) == ("ib00", 2, 5, 16, 40)
    assert rules_fired(diff) == {"island-scale-out"}


def test_scale_in_is_a_warning(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(base)["sku"]["capacity"] = 4
    (cons,) = plandiff.diff_plans(base, head).consequences
    assert (cons.rule, cons.severity) == ("island-scale-in", "warning")


def test_gpus_per_node_come_from_the_summary_first(base: dict[str, Any], head: dict[str, Any]) -> None:
    head["summary"]["islands"][0].update(nodes=2, gpus=4)  # a made-up 2-GPU size, as the summary says
    (cap,) = plandiff.diff_plans(base, head).capacity
    assert (cap.old_gpus, cap.new_gpus) == (16, 4)


def test_gpus_per_node_fall_back_to_the_profile(base: dict[str, Any], head: dict[str, Any]) -> None:
    del base["summary"]
    (cap,) = plandiff.diff_plans(base, head).capacity
    assert cap.old_gpus == 16  # 2 nodes x 8 GPUs of Standard_ND96isr_H100_v5


def test_removed_island_is_dangerous(base: dict[str, Any], head: dict[str, Any]) -> None:
    head["resources"] = [r for r in head["resources"] if r["type"] != VMSS]
    (cons,) = [c for c in plandiff.diff_plans(base, head).consequences if c.rule == "island-removed"]
    assert cons.severity == "danger" and "16 -> 0 GPUs" in cons.message


def test_added_island_is_info(base: dict[str, Any], head: dict[str, Any]) -> None:
    extra = copy.deepcopy(resource(head, VMSS))
    extra["name"] = "dev-ib01"
    extra["inputs"]["tags"]["ndfleet:island"] = "ib01"
    head["resources"].append(extra)
    diff = plandiff.diff_plans(base, head)
    assert [(c.rule, c.severity) for c in diff.consequences] == [("island-added", "info")]


@pytest.mark.parametrize("rtype", plandiff.DATA_HOLDING_TYPES)
def test_deleting_a_data_resource_is_data_loss(rtype: str) -> None:
    base = {"schemaVersion": 1, "resources": [{"type": rtype, "name": "data", "inputs": {}}]}
    head = {"schemaVersion": 1, "resources": []}
    assert rules_fired(plandiff.diff_plans(base, head, "s")) == {"data-deleted"}


def test_deleting_other_resources_is_not_data_loss(base: dict[str, Any], head: dict[str, Any]) -> None:
    head["resources"] = [r for r in head["resources"] if r["type"] != "azure-native:network:Subnet"]
    assert "data-deleted" not in rules_fired(plandiff.diff_plans(base, head))


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [("accountName", "other", "azure-name"), ("kind", "BlobStorage", "storage-kind"),
     ("isHnsEnabled", True, "storage-hns")],
)
def test_replacing_the_storage_account_is_data_loss(
    base: dict[str, Any], head: dict[str, Any], key: str, value: Any, rule: str
) -> None:
    resource(head, plandiff.STORAGE_ACCOUNT_TYPE)["inputs"][key] = value
    assert {rule, "data-replaced"} <= rules_fired(plandiff.diff_plans(base, head))


def test_in_place_storage_change_is_not_data_loss(base: dict[str, Any], head: dict[str, Any]) -> None:
    resource(head, plandiff.STORAGE_ACCOUNT_TYPE)["inputs"]["minimumTlsVersion"] = "TLS1_3"
    assert rules_fired(plandiff.diff_plans(base, head)) == set()


def test_turning_protect_off_is_flagged(base: dict[str, Any], head: dict[str, Any]) -> None:
    resource(head, plandiff.STORAGE_ACCOUNT_TYPE)["protect"] = False
    assert "protect-removed" in rules_fired(plandiff.diff_plans(base, head))


@pytest.mark.parametrize(
    ("rtype", "inputs_before", "key", "value", "rule"),
    [
        (plandiff.AML_FILESYSTEM_TYPE, {"sku": {"name": "AMLFS-Durable-Premium-125"}}, "sku",
         {"name": "AMLFS-Durable-Premium-250"}, "amlfs-sku"),
        (plandiff.AML_FILESYSTEM_TYPE, {"zones": ["1"]}, "zones", ["2"], "amlfs-zones"),
        (plandiff.AML_FILESYSTEM_TYPE, {"filesystemSubnet": "/a"}, "filesystemSubnet", "/b", "amlfs-subnet"),
        (plandiff.AML_FILESYSTEM_TYPE, {"storageCapacityTiB": 16}, "storageCapacityTiB", 32, "amlfs-capacity"),
    ],
)
def test_lustre_create_only_properties(
    rtype: str, inputs_before: dict[str, Any], key: str, value: Any, rule: str
) -> None:
    base = {"schemaVersion": 1, "resources": [{"type": rtype, "name": "lustre", "inputs": inputs_before}]}
    head = copy.deepcopy(base)
    head["resources"][0]["inputs"][key] = value
    assert rules_fired(plandiff.diff_plans(base, head, "s")) == {rule, "data-replaced"}


def test_subnet_range_change_is_refused_while_in_use(base: dict[str, Any], head: dict[str, Any]) -> None:
    resource(head, "azure-native:network:Subnet")["inputs"]["addressPrefix"] = "10.40.16.0/20"
    (cons,) = plandiff.diff_plans(base, head).consequences
    assert (cons.rule, cons.severity) == ("subnet-prefix", "danger")


def test_vnet_address_space_change_is_flagged(base: dict[str, Any], head: dict[str, Any]) -> None:
    resource(head, "azure-native:network:VirtualNetwork")["inputs"]["addressSpace"]["addressPrefixes"] = [
        "10.50.0.0/16"
    ]
    assert rules_fired(plandiff.diff_plans(base, head)) == {"vnet-address-space"}


def test_consequences_are_sorted_most_severe_first(base: dict[str, Any], head: dict[str, Any]) -> None:
    vmss_inputs(head)["sku"]["capacity"] = 3
    vmss_inputs(head)["virtualMachineProfile"]["osProfile"]["customData"] = encode_bootstrap("#cloud-config\n")
    vmss_inputs(head)["zones"] = ["1"]
    severities = [c.severity for c in plandiff.diff_plans(base, head).consequences]
    assert severities == sorted(severities, key=plandiff.SEVERITIES.index) and severities[0] == "danger"


def test_every_rule_names_a_source() -> None:
    assert all(r.source.strip() and r.what.strip() for r in plandiff.CONSEQUENCE_RULES)
    assert len({r.id for r in plandiff.CONSEQUENCE_RULES}) == len(plandiff.CONSEQUENCE_RULES)


# --- validation


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected a JSON object"),
        ({"schemaVersion": 2, "resources": []}, "schemaVersion is 2"),
        ({"schemaVersion": 1}, "'resources' must be a list"),
        ({"schemaVersion": 1, "resources": [{"type": "t"}]}, "resources[0].name: missing"),
        (
            {"schemaVersion": 1, "resources": [{"type": "t", "name": "n", "inputs": []}]},
            "resources[0].inputs: must be an object, got a list",
        ),
        ({"schemaVersion": 1, "resources": [{"type": "t", "name": "n"}, {"type": "t", "name": "n"}]}, "appears twice"),
    ],
)
def test_validate_plan_names_the_problem(doc: Any, message: str) -> None:
    with pytest.raises(plandiff.PlanFormatError, match=re.escape(message)):
        plandiff.validate_plan(doc, "x.json")


def test_removing_a_management_lock_is_a_warning() -> None:
    lock = "azure-native:authorization:ManagementLockByScope"
    base = {"schemaVersion": 1, "resources": [{"type": lock, "name": "lock", "inputs": {"level": "CanNotDelete"}}]}
    (cons,) = plandiff.diff_plans(base, {"schemaVersion": 1, "resources": []}, "s").consequences
    assert (cons.rule, cons.severity) == ("lock-removed", "warning")


def test_multiline_values_are_shown_escaped() -> None:
    assert plandiff.format_value("a\nb") == '"a\\nb"'


def test_docs_carry_the_consequences_table() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "plan-diff.md").read_text()
    assert plandiff.rules_table_markdown() in doc
    assert all(f"| `{rule_id}` |" in doc for rule_id, *_ in plandiff.BUILTIN_CONSEQUENCES)


def test_bootstrap_consequence_counts_changed_lines(base: dict[str, Any], head: dict[str, Any]) -> None:
    text = bootstrap_text(head).replace("NCCL_IGNORE_CPU_AFFINITY=1", "NCCL_IGNORE_CPU_AFFINITY=0") + "bootcmd: []\n"
    vmss_inputs(head)["virtualMachineProfile"]["osProfile"]["customData"] = encode_bootstrap(text)
    (cons,) = plandiff.diff_plans(base, head).consequences
    assert "bootstrap 2 lines added, 1 removed" in cons.message


def test_an_elastic_island_says_slurm_manages_its_capacity_instead_of_a_scale_in(
    base: dict[str, Any], head: dict[str, Any]
) -> None:
    vmss_inputs(base)["sku"]["capacity"] = 4
    vmss_inputs(base)["tags"]["ndfleet:elastic"] = vmss_inputs(head)["tags"]["ndfleet:elastic"] = "slurm"
    (cons,) = plandiff.diff_plans(base, head).consequences
    assert (cons.rule, cons.severity) == ("island-elastic", "info")
    assert "Slurm manages its capacity" in cons.message


SLURM_PLAN = Path(__file__).parent / "data" / "plans" / "slurm-services.json"


def test_a_fixed_address_that_moves_names_what_it_breaks() -> None:
    """The controller's NIC address is in slurm.conf (SlurmctldHost, AccountingStorageHost) and in every node's
    `--conf-server`: moving it is a danger row naming those, not a bare NIC property (issue 44 item 4)."""
    old = json.loads(SLURM_PLAN.read_text())
    new = copy.deepcopy(old)
    nic = resource(new, "azure-native:network:NetworkInterface")
    nic["inputs"]["ipConfigurations"][0]["privateIPAddress"] = "10.40.255.254"
    diff = plandiff.diff_plans(old, new)
    (row,) = [c for c in diff.consequences if c.rule == "nic-fixed-address"]
    assert row.severity == "danger"
    assert "10.40.0.62 -> 10.40.255.254" in row.message
    # What ndfleet renders from the address (ndfleet.slurm.conf, templates/slurm/*.j2), each named.
    for broken in ("SlurmctldHost", "AccountingStorageHost", "--conf-server", "ndfleet-slurm-name",
                   "slurm.loginAddresses", "--target-ip-address", "reimaged"):
        assert broken in row.message


def test_a_nic_change_that_is_no_address_is_not_called_a_moved_address() -> None:
    old = json.loads(SLURM_PLAN.read_text())
    new = copy.deepcopy(old)
    resource(new, "azure-native:network:NetworkInterface")["inputs"]["ipConfigurations"][0][
        "privateIPAllocationMethod"] = "Dynamic"
    assert "nic-fixed-address" not in rules_fired(plandiff.diff_plans(old, new))


def test_the_moved_address_rule_names_the_templates_that_write_the_address() -> None:
    """The rule's source lists where the controller's address is written; each of those templates does write it."""
    (rule,) = [r for r in plandiff.CONSEQUENCE_RULES if r.id == "nic-fixed-address"]
    templates = Path(__file__).resolve().parent.parent / "templates" / "slurm"
    named = re.findall(r"([\w.-]+\.j2)", rule.source)
    assert len(named) == 3
    for name in named:
        text = (templates / name).read_text()
        # slurmd_options: ndfleet.slurm.conf.slurmd_args, `--conf-server` + the controller's address.
        assert "{{ controller_addr" in text or "{{ slurmd_options" in text, name
