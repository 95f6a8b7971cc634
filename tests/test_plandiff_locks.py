"""Diff consequences of issue 13: the automatic repair action, role assignments, and changes a lock blocks.

Plans: tests/data/plans/dev-small-locked.json (dev-small.json plus the storage account's CanNotDelete lock, its
private endpoint and the nodes' role assignment, shaped as `ndfleet plan --format json` writes them), edited per
test.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ndfleet.plans import plandiff

PLANS = Path(__file__).parent / "data" / "plans"
ACCOUNT_ID = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/dev-rg/providers/Microsoft.Storage/"
    "storageAccounts/devdata"
)
LOCK_ID = ACCOUNT_ID + "/providers/Microsoft.Authorization/locks/ndfleet-data-cannot-delete"


@pytest.fixture
def base() -> dict[str, Any]:
    return json.loads((PLANS / "dev-small-locked.json").read_text())


@pytest.fixture
def head(base: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(base)


def resource(plan: dict[str, Any], rtype: str) -> dict[str, Any]:
    return next(r for r in plan["resources"] if r["type"] == rtype)


def drop(plan: dict[str, Any], rtype: str) -> None:
    plan["resources"] = [r for r in plan["resources"] if r["type"] != rtype]


def by_rule(diff: plandiff.StackDiff) -> dict[str, list[plandiff.Consequence]]:
    out: dict[str, list[plandiff.Consequence]] = {}
    for c in diff.consequences:
        out.setdefault(c.rule, []).append(c)
    return out


def test_the_locked_plan_diffs_clean_against_itself(base: dict[str, Any], head: dict[str, Any]) -> None:
    diff = plandiff.diff_plans(base, head)
    assert diff.empty and diff.consequences == ()


# --- automatic repairs


def test_changing_the_repair_action_says_to_disable_repairs_first(base: dict[str, Any], head: dict[str, Any]) -> None:
    resource(head, plandiff.VMSS_TYPE)["inputs"]["automaticRepairsPolicy"]["repairAction"] = "Reimage"
    (cons,) = plandiff.diff_plans(base, head).consequences
    assert (cons.rule, cons.severity) == ("vmss-repair-action", "warning")
    assert "--enable-automatic-repairs false" in cons.message
    assert cons.message.startswith("automaticRepairsPolicy.repairAction: Replace -> Reimage: ")


@pytest.mark.parametrize(("path", "value"), [("gracePeriod", "PT45M"), ("enabled", False)])
def test_other_repair_settings_change_without_that_warning(
    base: dict[str, Any], head: dict[str, Any], path: str, value: Any
) -> None:
    resource(head, plandiff.VMSS_TYPE)["inputs"]["automaticRepairsPolicy"][path] = value
    diff = plandiff.diff_plans(base, head)
    assert diff.count("update") == 1
    assert "vmss-repair-action" not in by_rule(diff)


# --- changes a CanNotDelete lock blocks


def test_moving_the_private_endpoint_is_blocked_by_the_account_lock(base: dict[str, Any], head: dict[str, Any]) -> None:
    resource(head, plandiff.PRIVATE_ENDPOINT_TYPE)["inputs"]["privateEndpointName"] = "dev-data-blob-pe2"
    rules = by_rule(plandiff.diff_plans(base, head))
    (locked,) = rules["locked-replace"]
    assert (locked.severity, locked.resource_type) == ("danger", plandiff.PRIVATE_ENDPOINT_TYPE)
    assert "ScopeLocked" in locked.message
    assert f"az lock delete --ids {LOCK_ID}" in locked.message
    assert "`pulumi refresh`" in locked.message
    assert "azure-name" in rules  # the replace itself is flagged too


def test_renaming_a_container_is_blocked_and_loses_its_data(base: dict[str, Any], head: dict[str, Any]) -> None:
    resource(head, plandiff.BLOB_CONTAINER_TYPE)["inputs"]["containerName"] = "ckpt"
    rules = by_rule(plandiff.diff_plans(base, head))
    assert {"locked-replace", "data-replaced", "azure-name"} <= set(rules)
    assert rules["locked-replace"][0].resource_name == "dev-checkpoints"


@pytest.mark.parametrize(
    ("path", "value", "rule"),
    [
        ("principalId", "0b6e1c2a-7f3d-4e59-9a8b-1c2d3e4f5a6b", "role-assignment-principal"),
        ("scope", ACCOUNT_ID + "/blobServices/default/containers/checkpoints", "role-assignment-scope"),
    ],
)
def test_a_changed_role_assignment_is_replaced_under_the_lock(
    base: dict[str, Any], head: dict[str, Any], path: str, value: str, rule: str
) -> None:
    resource(head, plandiff.ROLE_ASSIGNMENT_TYPE)["inputs"][path] = value
    rules = by_rule(plandiff.diff_plans(base, head))
    assert set(rules) == {rule, "locked-replace"}
    assert rules[rule][0].severity == "warning"


def test_deleting_a_locked_resource_is_flagged(base: dict[str, Any], head: dict[str, Any]) -> None:
    drop(head, plandiff.ROLE_ASSIGNMENT_TYPE)
    (cons,) = plandiff.diff_plans(base, head).consequences
    assert cons.rule == "locked-replace" and " deleted under the CanNotDelete lock" in cons.message


def test_without_a_lock_nothing_is_blocked(base: dict[str, Any], head: dict[str, Any]) -> None:
    for plan in (base, head):
        drop(plan, "azure-native:authorization:ManagementLockByScope")
    resource(head, plandiff.PRIVATE_ENDPOINT_TYPE)["inputs"]["privateEndpointName"] = "dev-data-blob-pe2"
    assert "locked-replace" not in by_rule(plandiff.diff_plans(base, head))


def test_a_lock_on_another_account_does_not_block(base: dict[str, Any], head: dict[str, Any]) -> None:
    for plan in (base, head):
        resource(plan, "azure-native:authorization:ManagementLockByScope")["inputs"]["scope"] = ACCOUNT_ID + "2"
    resource(head, plandiff.BLOB_CONTAINER_TYPE)["inputs"]["containerName"] = "ckpt"
    assert "locked-replace" not in by_rule(plandiff.diff_plans(base, head))


def test_an_in_place_update_under_the_lock_is_not_flagged(base: dict[str, Any], head: dict[str, Any]) -> None:
    resource(head, plandiff.PRIVATE_ENDPOINT_TYPE)["inputs"]["tags"] = {"owner": "ml-platform"}
    assert plandiff.diff_plans(base, head).consequences == ()


def test_the_lock_consequence_is_in_the_markdown(base: dict[str, Any], head: dict[str, Any]) -> None:
    resource(head, plandiff.PRIVATE_ENDPOINT_TYPE)["inputs"]["privateEndpointName"] = "dev-data-blob-pe2"
    text = plandiff.render_markdown([plandiff.diff_plans(base, head, "dev")])
    assert "`locked-replace`" in text and ":stop_sign: danger" in text


def test_a_lock_deleted_in_the_same_change_does_not_block(base: dict[str, Any]) -> None:
    empty = {"schemaVersion": 1, "stack": "dev", "resources": []}
    rules = by_rule(plandiff.diff_plans(base, empty))
    assert "locked-replace" not in rules
    assert {"lock-removed", "data-deleted", "island-removed"} <= set(rules)
