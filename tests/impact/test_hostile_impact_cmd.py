"""`ndfleet impact list|show` against a hostile Resource Manager (a loopback HTTPS stand-in, tests/impact/arm_server.py
with TLS; answers are tests/data/arm's recordings of Microsoft.Impact workloadImpacts and insights, Microsoft Learn
"View impact reports and insights"): fields of the wrong shape, text that forges lines, a list that never ends, and
a sign-in that fails for want of a network. Each is one named line (exit 2) or clean output; never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

import pytest

from ndfleet.azure.http import BoundedTransport
from ndfleet.cli import build_parser
from ndfleet.commands import impact as impact_cmd
from tests.impact.arm_server import ARM_DATA, FakeArm, Reply, serve
from tests.impact.test_impact_cmd import ISLANDS, TINY
from tests.status.standin import Tls, assert_clean
from tests.test_preflight import SUB, FakeCredential, stack_file

IMPACTS = f"/subscriptions/{SUB}/providers/Microsoft.Impact/workloadImpacts"
NAME = "3f0c9d8e-1b2a-4c5d-8e7f-6a5b4c3d2e1f"
FORGED = "no impacts filed for the nodes of stack prod"


def routes(listing: bytes, insights: bytes | None = None) -> dict[tuple[str, str], list[Reply]]:
    return {
        ("GET", f"{IMPACTS}?"): [Reply(200, raw=listing)],
        ("GET", f"{IMPACTS}/{NAME}/insights"): [
            Reply(200, raw=insights or (ARM_DATA / "impact-insights.json").read_bytes())],
        ("GET", f"{IMPACTS}/"): [Reply(200, raw=(ARM_DATA / "impact-insights-empty.json").read_bytes())],
    }  # fmt: skip


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], arm: FakeArm, tls: Tls, *argv: str,
        env: dict[str, str] | None = None, credential: object = None) -> tuple[int, str, str]:  # fmt: skip
    path = stack_file(tmp_path, namePrefix="prod", islands=ISLANDS, nodes=None)
    args = build_parser().parse_args(["impact", *(argv or ("list",)), "--stack-file", str(path)])
    code = impact_cmd.run_cli(args, env=env or {"AZURE_RESOURCE_MANAGER_ENDPOINT": arm.base},
                              credential=credential or FakeCredential(), transport=BoundedTransport(tls=tls.client),
                              retry=TINY)  # fmt: skip
    out = capsys.readouterr()
    return code, out.out, out.err


def listing_with(**props: object) -> bytes:
    doc = json.loads((ARM_DATA / "impact-list.json").read_text())
    doc["value"][0]["properties"].update(props)
    return json.dumps(doc).encode()


WRONG = {
    "properties a string": (b'{"value": [{"name": "x", "properties": "p"}]}', "'properties' is str, not an object"),
    "value an object": (b'{"value": {"a": 1}}', "'value' is dict, not a list"),
    "an item a number": (b'{"value": [5]}', "an item that is int, not an object"),
    "an integer nextLink": (b'{"value": [], "nextLink": 3}', "'nextLink' is int, not a URL"),
    "a nextLink to another host": (b'{"value": [], "nextLink": "https://evil.example/x"}', "leads to another host"),
    "a description a list": (listing_with(impactDescription=["x"]), "'impactDescription' is list, not text"),
    "not UTF-8": (b'{"value": ["\xff"]}', "not UTF-8"),
    "deeply nested": (b'{"value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
}


@pytest.mark.parametrize("case", WRONG)
def test_a_list_of_the_wrong_shape_is_one_named_line(
    case: str, tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body, named = WRONG[case]
    with serve(routes(body), tls=tls.server) as arm:
        code, out, err = run(tmp_path, capsys, arm, tls)
    assert code == 2
    assert out == ""
    assert named in err and len(err.strip().split("\n")) == 1, err
    assert_clean(err)


def test_an_insight_whose_content_is_not_an_object_is_named(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    insights = b'{"value": [{"properties": {"category": "x", "content": "title"}}]}'
    with serve(routes((ARM_DATA / "impact-list.json").read_bytes(), insights), tls=tls.server) as arm:
        code, _, err = run(tmp_path, capsys, arm, tls)
    assert code == 2
    assert "'content' is str, not an object" in err


def test_server_text_cannot_forge_a_line(tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostile = listing_with(impactCategory=f"Resource.Hpc.Unhealthy.GpuXid\n{FORGED}\x1b[2J\u2028\u0085",
                           additionalProperties={"PhysicalHostName": "host\r\x1b]0;t\x07"})  # fmt: skip
    with serve(routes(hostile), tls=tls.server) as arm:
        code, out, err = run(tmp_path, capsys, arm, tls)
        code_show, out_show, _ = run(tmp_path, capsys, arm, tls, "show", NAME)
    assert code == 0 and code_show == 0
    assert_clean(out + err + out_show)
    assert not any(line.startswith(FORGED) for line in out.split("\n"))


def test_a_network_failure_at_sign_in_is_named_as_one_and_said_once(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29: with a service principal set and no route to Microsoft Entra ID, the message is about the
    network, not missing credentials, and azure-identity's chain is not printed (it was, twice). The tests run
    without a network (unshare -rn): azure-identity's own sign-in request fails to resolve or connect."""
    from ndfleet.azure.auth import build_credential
    from ndfleet.azure.clouds import resolve_cloud

    env = {"AZURE_TENANT_ID": "72f988bf-86f1-41af-91ab-2d7cd011db47", "AZURE_CLIENT_ID": SUB,
           "AZURE_CLIENT_SECRET": "not-a-secret"}  # fmt: skip
    with serve(routes(b'{"value": []}'), tls=tls.server) as arm, mock.patch.dict(os.environ, env):
        env["AZURE_RESOURCE_MANAGER_ENDPOINT"] = arm.base
        credential = build_credential(resolve_cloud(env), env)  # reads the service principal from os.environ
        code, out, err = run(tmp_path, capsys, arm, tls, env=env, credential=credential)
    assert code == 2
    assert err.startswith(
        "ndfleet impact list: error: could not check: network: could not reach Microsoft Entra ID to sign in ("
    ), err
    assert "no usable Azure credentials" not in err
    assert "Failed to resolve 'login.microsoftonline.com'" in err
    assert "Attempted credentials" not in err and len(err.strip().split("\n")) == 1, err
