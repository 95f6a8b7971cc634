"""The twin's repair stand-ins (tests/twin/repairs.py) on their own, without booting anything: the Application Health
extension's rich states, automatic repairs' grace period and service state, and the Impact API's answers, each as the
Microsoft Learn pages cited in that module describe them. The twin's repair loop (tests/twin/test_repair.py) relies
on them."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.twin.repairs import AutomaticRepairs, ImpactApi, kvp_pool

SETTINGS = {"port": 18300, "requestPath": "/health", "intervalInSeconds": 0, "numberOfProbes": 3, "gracePeriod": 600}
POLICY = {"enabled": True, "gracePeriod": "PT10M", "repairAction": "Replace"}


@dataclass
class Spec:
    extra: dict[str, Any]


@dataclass
class Machine:
    name: str
    settings: dict[str, Any] = field(default_factory=lambda: SETTINGS)

    @property
    def spec(self) -> Spec:
        return Spec({"app_health": self.settings, "automatic_repairs": POLICY})


def repairs(answers: dict[str, str | None], settings: dict[str, Any] = SETTINGS) -> tuple[AutomaticRepairs, list[str]]:
    replaced: list[str] = []
    machines = [Machine(n, settings) for n in answers]

    def replace(name: str) -> str:
        replaced.append(name)
        return name + "-new"

    r = AutomaticRepairs(machines=lambda: machines, probe=lambda n, port, path: answers[n], replace=replace)
    for m in machines:
        r.created(m.name, "ib00-vmss")
    return r, replaced


def state(answer: str) -> str:
    return json.dumps({"ApplicationHealthState": answer})


def probe(r: AutomaticRepairs, times: int) -> None:
    for _ in range(times):
        for inst in r.instances.values():
            inst.last_probe = 0.0
        r.step()


def age(r: AutomaticRepairs, name: str, seconds: float) -> None:
    r.instances[name].created = time.monotonic() - seconds


def test_a_state_changes_only_after_number_of_probes_agree() -> None:
    r, _ = repairs({"a": state("Healthy")})
    probe(r, 2)
    assert r.state("a") == "Initializing"
    probe(r, 1)
    assert r.state("a") == "Healthy"


def test_an_initializing_node_that_never_answers_healthy_waits_for_the_extensions_grace_period() -> None:
    r, _ = repairs({"a": state("Unhealthy")})
    probe(r, 5)
    assert r.state("a") == "Initializing"
    age(r, "a", 601)
    probe(r, 1)
    assert r.state("a") == "Unhealthy"


@pytest.mark.parametrize("answer", [None, "", "not json", json.dumps({"ApplicationHealthState": "Sick"})])
def test_no_answer_or_another_body_is_unknown(answer: str | None) -> None:
    r, _ = repairs({"a": answer})
    age(r, "a", 601)
    probe(r, 3)
    assert r.state("a") == "Unknown"


def test_repairs_wait_while_suspended_and_act_once_resumed() -> None:
    r, replaced = repairs({"a": state("Unhealthy")})
    age(r, "a", 3600)
    probe(r, 3)
    assert r.state("a") == "Unhealthy" and replaced == []
    r.resume("ib00-vmss")
    probe(r, 1)
    assert replaced == ["a"] and [(x.old, x.new, x.state) for x in r.done()] == [("a", "a-new", "Unhealthy")]


def test_no_repair_within_the_policys_grace_period_after_creation() -> None:
    r, replaced = repairs({"a": state("Unhealthy")}, {**SETTINGS, "gracePeriod": 300})
    r.resume("ib00-vmss")
    age(r, "a", 9 * 60)  # past the extension's grace (300 s here), not the policy's PT10M
    probe(r, 4)
    assert r.state("a") == "Unhealthy" and replaced == []
    age(r, "a", 10 * 60 + 1)
    probe(r, 1)
    assert replaced == ["a"]


def test_grace_left_is_what_remains_of_the_policys_grace_period() -> None:
    r, _ = repairs({"a": state("Healthy")})
    age(r, "a", 4 * 60)
    assert 5 * 60 < r.grace_left("a") <= 6 * 60  # PT10M, 4 minutes gone
    age(r, "a", 10 * 60 + 1)
    assert r.grace_left("a") == 0.0
    assert r.grace_left("not-an-instance") == 0.0


def test_a_healthy_node_is_never_repaired() -> None:
    r, replaced = repairs({"a": state("Healthy")})
    r.resume("ib00-vmss")
    age(r, "a", 3600)
    probe(r, 10)
    assert replaced == []


def test_kvp_records_are_the_daemons_fixed_size() -> None:
    pool = kvp_pool({"PhysicalHostName": "H1", "PhysicalHostNameFullyQualified": "H1.example"})
    assert len(pool) == 2 * (512 + 2048) and pool[512:514] == b"H1"


# --- the Impact API -----------------------------------------------------------------------------------------------
TOKENS = {"node": ("node-client", "https://management.azure.com"), "vault": ("node-client", "https://vault.azure.net")}
PATH = "/subscriptions/s/providers/Microsoft.Impact/workloadImpacts/i1?api-version=2023-02-01-preview"
BODY = {"properties": {"startDateTime": "2026-12-05T07:00:00Z", "impactCategory": "Resource.Hpc.Unhealthy.IBPortDown",
                       "impactedResourceId": "/subscriptions/s/x", "additionalProperties": {"PhysicalHostName": "H1"}}}


def put(api: ImpactApi, token: str, body: Any = BODY, path: str = PATH) -> int:
    return api.handle("PUT", path, {"Authorization": f"Bearer {token}"}, json.dumps(body).encode())[0]


@pytest.mark.parametrize(
    ("token", "reporters", "body", "status"),
    [
        ("node", {"node-client"}, BODY, 201),
        ("nope", {"node-client"}, BODY, 401),
        ("vault", {"node-client"}, BODY, 401),  # a token for another audience
        ("node", set(), BODY, 403),  # the plan gives nobody Impact Reporter
        ("node", {"node-client"}, {"properties": {**BODY["properties"], "additionalProperties": {}}}, 400),
        ("node", {"node-client"}, {"properties": {"impactCategory": "x"}}, 400),
    ],
)
def test_impact_api_answers(token: str, reporters: set[str], body: Any, status: int) -> None:
    api = ImpactApi(tokens=TOKENS.get, reporter_client_ids=reporters)
    assert api.handles(PATH)
    assert put(api, token, body) == status
    assert len(api.filed()) == (1 if status == 201 else 0)


def test_impact_api_put_of_an_existing_name_answers_200_and_needs_an_api_version() -> None:
    api = ImpactApi(tokens=TOKENS.get, reporter_client_ids={"node-client"})
    assert (put(api, "node"), put(api, "node")) == (201, 200)
    assert put(api, "node", path=PATH.split("?")[0]) == 400
