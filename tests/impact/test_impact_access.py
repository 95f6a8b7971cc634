"""The node identity gets Impact Reporter on the subscription only when the stack opts in to impact reporting."""

from __future__ import annotations

import pytest

from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.problems import SpecError
from ndfleet.stackconfig.profiles import IMPACT_REPORTER_ROLE_ID, STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID
from tests.conftest import IDENTITY, ROLE, base_config, of_type, plan_of


def test_opted_in_stack_grants_impact_reporter_on_the_subscription() -> None:
    plan = plan_of(base_config(health={"impactReporting": True}), "impact")
    roles = {r.inputs["roleDefinitionId"].rsplit("/", 1)[-1]: r for r in of_type(plan, ROLE)}
    assert set(roles) == {STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID, IMPACT_REPORTER_ROLE_ID}
    reporter = roles[IMPACT_REPORTER_ROLE_ID]
    scope = reporter.inputs["scope"]
    assert scope.startswith("/subscriptions/") and scope.count("/") == 2  # the subscription, nothing wider
    assert reporter.inputs["principalType"] == "ServicePrincipal"
    # The same principal as the node identity's storage role: the nodes' identity, no other.
    assert reporter.inputs.get("principalId") == roles[STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID].inputs.get("principalId")
    assert len(of_type(plan, IDENTITY)) == 1


def test_default_stack_grants_nothing_for_impacts() -> None:
    plan = plan_of(base_config(), "impact-off")
    assert [r.inputs["roleDefinitionId"].rsplit("/", 1)[-1] for r in of_type(plan, ROLE)] == [
        STORAGE_BLOB_DATA_CONTRIBUTOR_ROLE_ID
    ]


def test_impact_reporting_must_be_a_boolean() -> None:
    with pytest.raises(SpecError, match="health.impactReporting"):
        load_spec(base_config(health={"impactReporting": "maybe"}), "bad")
