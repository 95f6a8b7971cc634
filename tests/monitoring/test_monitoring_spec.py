"""`ndfleet:monitoring`: defaults, and bad values refused with the setting's name, all problems at once."""

from __future__ import annotations

from typing import Any

import pytest

from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.problems import SpecError
from tests.conftest import base_config
from tests.monitoring.conftest import monitoring_config


def problems(config: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as err:
        load_spec(config, "test")
    return err.value.problems


def test_monitoring_is_off_by_default() -> None:
    spec = load_spec(base_config(), "test")
    assert spec.monitoring.enabled is False
    assert spec.monitoring.island_capacity_alert_fraction == 0.9
    assert spec.monitoring.scrape_interval_seconds == 30


def test_enabled_without_receivers_is_refused() -> None:
    (problem,) = problems(monitoring_config(emails=[]))
    assert problem.startswith("ndfleet:monitoring.emails / ndfleet:monitoring.webhooks:")
    assert "no one would be notified" in problem


@pytest.mark.parametrize(
    ("override", "setting"),
    [
        ({"emails": ["not-an-address"]}, "ndfleet:monitoring.emails"),
        ({"webhooks": ["http://hooks.example.com/x"]}, "ndfleet:monitoring.webhooks"),
        ({"scrapeIntervalSeconds": 5}, "ndfleet:monitoring.scrapeIntervalSeconds"),
        ({"islandCapacityAlertFraction": 0}, "ndfleet:monitoring.islandCapacityAlertFraction"),
        ({"retention": 30}, "ndfleet:monitoring.retention"),
    ],
)
def test_bad_values_name_the_setting(override: dict[str, Any], setting: str) -> None:
    found = problems(monitoring_config(**override))
    assert any(p.startswith(setting) for p in found), found


def test_all_problems_at_once() -> None:
    found = problems(monitoring_config(emails=["x"], scrapeIntervalSeconds=1))
    assert {p.split(" ")[0] for p in found} == {"ndfleet:monitoring.emails", "ndfleet:monitoring.scrapeIntervalSeconds"}


def test_a_webhook_url_is_never_echoed() -> None:
    secret = "http://hooks.example.com/services/T000/B000/SECRETTOKEN"
    found = problems(monitoring_config(webhooks=[secret]))
    text = "\n".join(found)
    assert "SECRETTOKEN" not in text and "entries [0]" in text


def test_unknown_monitoring_key_lists_the_known_ones() -> None:
    (problem,) = problems(monitoring_config(emial=["a@b.c"]))
    assert problem.startswith("ndfleet:monitoring.emial is not a known setting")
    assert "emails" in problem and "islandCapacityAlertFraction" in problem


def test_an_encrypted_webhook_plans_offline_as_a_secret() -> None:
    from tests.conftest import one, plan_of

    config = monitoring_config(emails=[], webhooks=[{"secure": "v1:AAAAencryptedAAAA"}])
    spec = load_spec(config, "test")
    assert spec.monitoring.webhooks == ["[secret]"]
    plan = plan_of(config)
    assert one(plan, "azure-native:monitor:ActionGroup").inputs["webhookReceivers"] == "[secret]"


def test_monitoring_outside_azure_public_is_refused_before_anything_exists() -> None:
    from ndfleet.prepare import PrepareError, prepare
    from ndfleet.stackconfig.clouds import STORAGE_CLOUDS

    spec = load_spec(monitoring_config(), "test")
    prepare(spec, STORAGE_CLOUDS["AzureCloud"])
    with pytest.raises(PrepareError) as err:
        prepare(spec, STORAGE_CLOUDS["AzureUSGovernment"])
    assert err.value.problems[0].startswith("ndfleet:monitoring.enabled = true: monitoring supports Azure public")
