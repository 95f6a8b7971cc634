"""The Resource Manager stand-in's rolling-upgrade calls (tests/twin/arm.py) and the Key Vault stand-in's secret
versions (tests/twin/standins.py) on their own, without booting anything: Update Instances (`manualupgrade`) and
Reimage, their 202 with Azure-AsyncOperation and Location, the operation's InProgress -> Succeeded / Failed,
400 / 404 / 409 / 403, and `latestModelApplied`, as the Microsoft Learn pages cited in arm.py describe them. The twin's
roll by hand (the twin's roll case, branch roll-twin42) relies on them."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.twin import arm
from tests.twin.arm import MANUAL_UPGRADE, REIMAGE, Instance, ResourceManager, ScaleSet
from tests.twin.plan import ScaleSetTemplate
from tests.twin.standins import CloudState

GROUP = "rg"
NAME = "twin-ib01-vmss"
BODY = {"location": "eastus", "sku": {"name": "Standard_ND96isr_H100_v5", "capacity": 2},
        "properties": {"virtualMachineProfile": {"osProfile": {"customData": "b2xk"}}}}  # fmt: skip
CONTROLLER = "controller-client"
SCOPE = (f"/subscriptions/{arm.SUBSCRIPTION}/resourceGroups/{GROUP}/providers/Microsoft.Compute"
         f"/virtualMachineScaleSets/{NAME}")


class Azure:
    """The stand-in with a fixed scale set of two instances; reimages are finished by the test (`finish`)."""

    def __init__(self, actions: frozenset[str] = frozenset({MANUAL_UPGRADE, REIMAGE})) -> None:
        template = ScaleSetTemplate(NAME, GROUP, "twin-ib01-", b"old", None, {}, "ib01", body=copy.deepcopy(BODY))
        ss = ScaleSet(template, fixed=True)
        for i in range(2):
            ss.add(Instance(str(i), f"twin-ib01-00000{i}", "Succeeded"))
        self.tokens = {"tok": (CONTROLLER, arm.ARM_AUDIENCE), "other": ("someone", arm.ARM_AUDIENCE)}
        self.pending: list[tuple[ScaleSetTemplate, Instance, Callable[[str | None], None]]] = []
        self.rm = ResourceManager(
            scale_sets={NAME: ss}, grants={SCOPE: actions}, allowed_client_ids={CONTROLLER},
            tokens=self.tokens.get, boot=lambda t, i: None, remove=lambda n: None,
            reimage=lambda t, i, done: self.pending.append((t, i, done)),
        )  # fmt: skip

    def call(self, method: str, path: str, body: Any = None, token: str = "tok") -> tuple[int, Any, dict[str, str]]:
        data = b"" if body is None else json.dumps(body).encode()
        return self.rm.handle(method, path, {"Authorization": f"Bearer {token}"}, data)

    def post(self, action: str, body: Any, token: str = "tok") -> tuple[int, Any, dict[str, str]]:
        return self.call("POST", f"{SCOPE}/{action}?api-version=2024-07-01", body, token)

    def status(self, headers: dict[str, str]) -> dict[str, Any]:
        status, doc, _ = self.call("GET", headers["Azure-AsyncOperation"].split("management.azure.com", 1)[1])
        assert status == 200, doc
        return dict(doc)

    def finish(self, error: str | None = None) -> None:
        for _, _, done in self.pending:
            done(error)
        self.pending.clear()

    def listed(self) -> dict[str, bool]:
        _, doc, _ = self.rm.as_deployer("GET", f"{SCOPE}/virtualMachines?api-version=2024-07-01")
        return {i["instanceId"]: i["properties"]["latestModelApplied"] for i in doc["value"]}


def changed_model() -> dict[str, Any]:
    body = copy.deepcopy(BODY)
    body["properties"]["virtualMachineProfile"]["osProfile"]["customData"] = "bmV3"  # base64 of "new"
    return body


def test_a_deployment_leaves_every_instance_behind_the_latest_model_until_its_manual_upgrade(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(arm, "MANUAL_UPGRADE_S", 0.2)
    az = Azure()
    assert az.listed() == {"0": True, "1": True}
    assert az.rm.deploy(NAME, changed_model())[0] == 200
    assert az.listed() == {"0": False, "1": False}
    status, body, headers = az.post("manualupgrade", {"instanceIds": ["1"]})
    assert (status, body) == (202, b"")
    assert headers["Location"].startswith(headers["Azure-AsyncOperation"]) and "monitor=true" in headers["Location"]
    assert az.status(headers)["status"] == "InProgress"
    time.sleep(0.3)
    assert az.status(headers)["status"] == "Succeeded"
    assert az.listed() == {"0": False, "1": True}


def test_a_reimage_boots_the_model_the_instance_holds_and_is_in_progress_until_its_machine_started() -> None:
    az = Azure()
    az.rm.deploy(NAME, changed_model())
    status, _, headers = az.post("reimage", {"instanceIds": ["0"]})
    assert status == 202
    (template, inst, _), = az.pending
    assert (inst.computer_name, template.custom_data) == ("twin-ib01-000000", b"old")  # not upgraded: its old model
    assert az.status(headers)["status"] == "InProgress"
    assert az.post("reimage", {"instanceIds": ["0"]})[0] == 409  # held by the running reimage
    az.finish()
    assert az.status(headers)["status"] == "Succeeded"


def test_a_reimage_after_the_manual_upgrade_boots_the_new_model(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(arm, "MANUAL_UPGRADE_S", 0.0)
    az = Azure()
    az.rm.deploy(NAME, changed_model())
    assert az.post("manualupgrade", {"instanceIds": ["0"]})[0] == 202
    time.sleep(0.01)
    assert az.post("reimage", {"instanceIds": ["0"]})[0] == 202
    assert az.pending[0][0].custom_data == b"new"


def test_a_reimage_whose_machine_cannot_start_fails_with_an_error() -> None:
    az = Azure()
    _, _, headers = az.post("reimage", {"instanceIds": ["1"]})
    az.finish("no machine")
    doc = az.status(headers)
    assert doc["status"] == "Failed" and "no machine" in doc["error"]["message"], doc


def test_a_reimage_without_instance_ids_reimages_every_instance() -> None:
    az = Azure()
    assert az.post("reimage", {})[0] == 202
    assert sorted(i.instance_id for _, i, _ in az.pending) == ["0", "1"]


@pytest.mark.parametrize("body", [{}, {"instanceIds": []}, {"instanceIds": "0"}, {"instanceIds": [0]}])
def test_a_manual_upgrade_needs_a_list_of_instance_ids(body: Any) -> None:
    status, doc, _ = Azure().post("manualupgrade", body)
    assert status == 400 and doc["error"]["code"] == "InvalidParameter", doc


def test_an_unknown_instance_is_not_found_and_nothing_is_done() -> None:
    az = Azure()
    status, doc, _ = az.post("reimage", {"instanceIds": ["0", "7"]})
    assert status == 404 and "virtualMachines/7" in doc["error"]["message"], doc
    assert az.pending == []


def test_the_caller_needs_the_action_at_the_scale_set() -> None:
    az = Azure(actions=frozenset({MANUAL_UPGRADE}))
    status, doc, _ = az.post("reimage", {"instanceIds": ["0"]})
    assert status == 403 and REIMAGE in doc["error"]["message"], doc
    assert az.post("manualupgrade", {"instanceIds": ["0"]}, token="other")[0] == 403
    assert az.post("manualupgrade", {"instanceIds": ["0"]}, token="none")[0] == 401
    assert az.post("manualupgrade", {"instanceIds": ["0"]})[0] == 202


def test_an_unknown_operation_is_not_found() -> None:
    status, _, _ = Azure().call("GET", f"{arm.OPERATIONS_PATH}nope?api-version=2024-07-01")
    assert status == 404


def test_the_vault_keeps_each_value_a_deployment_wrote_as_a_version() -> None:
    state = CloudState(secrets={"ndfleet-bundle-0": "A"})
    state.set_secret("ndfleet-bundle-0", "B")
    state.set_secret("ndfleet-bundle-0", "B")  # the same value: no new version
    assert state.secrets["ndfleet-bundle-0"] == "B"
    assert [value for _, value, _ in state.versions("ndfleet-bundle-0")] == ["A", "B"]
