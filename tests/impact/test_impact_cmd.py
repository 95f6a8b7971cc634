"""`ndfleet impact list|show` against recorded Resource Manager responses (network off, recorded transport)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ndfleet.cli import build_parser
from ndfleet.commands import impact as impact_cmd
from ndfleet.preflight import RetrySettings
from tests.test_preflight import SUB, FakeCredential, ReplayTransport, Reply, stack_file

TINY = RetrySettings(total=2, backoff_factor=0.01, backoff_max=0.01, timeout_s=30)
LIST = r"/providers/Microsoft\.Impact/workloadImpacts\?api-version=2024-05-01-preview"
INSIGHTS = r"/workloadImpacts/3f0c9d8e-1b2a-4c5d-8e7f-6a5b4c3d2e1f/insights\?"
OTHER_INSIGHTS = r"/workloadImpacts/[^/]+/insights\?"
ONE = r"/workloadImpacts/3f0c9d8e-1b2a-4c5d-8e7f-6a5b4c3d2e1f\?"


def transport(list_replies: list[Reply] | None = None) -> ReplayTransport:
    return ReplayTransport(
        [
            (LIST, list_replies or [Reply(200, "impact-list.json")]),
            (INSIGHTS, [Reply(200, "impact-insights.json")]),
            (OTHER_INSIGHTS, [Reply(200, "impact-insights-empty.json")]),
            (ONE, [Reply(200, "impact-accepted.json")]),
        ]
    )


ISLANDS = [{"name": "ib00", "nodes": 100}, {"name": "ib01", "nodes": 56}]


def run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], t: ReplayTransport
) -> tuple[int, str, str]:
    path = stack_file(tmp_path, namePrefix="prod", islands=ISLANDS, nodes=None)
    args = build_parser().parse_args(["impact", *argv, "--stack-file", str(path)])
    code = impact_cmd.run_cli(args, env={}, credential=FakeCredential(), transport=t, retry=TINY)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_keeps_the_stacks_nodes_with_their_insights(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t = transport()
    code, out, _ = run(tmp_path, capsys, ["list", "--format", "json"], t)
    assert code == 0
    doc: dict[str, Any] = json.loads(out)
    assert [i["name"] for i in doc["impacts"]] == [
        "3f0c9d8e-1b2a-4c5d-8e7f-6a5b4c3d2e1f",  # newest first; the web app's impact is not the stack's
        "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d",
    ]
    first = doc["impacts"][0]
    assert first["vm"] == "prod-ib00-vmss/3" and first["physicalHostName"] == "GGBB90904476"
    assert first["state"] == "NodeRemovedFromService"
    assert [i["category"] for i in first["insights"]] == ["AcknowledgedUnhealthy", "NodeRemovedFromService"]
    assert doc["impacts"][1]["state"] == "filed"
    assert all(r.headers["Authorization"] == "Bearer fake-arm-token" for r in t.requests)
    assert all(r.method == "GET" for r in t.requests)
    assert t.calls(f"/subscriptions/{SUB}/providers/Microsoft.Impact/workloadImpacts?")


def test_list_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(tmp_path, capsys, ["list"], transport())
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["reported", "vm", "physical"]
    assert "prod-ib00-vmss/3" in lines[1] and "IBPerformance" in lines[1] and "NodeRemovedFromService" in lines[1]
    assert "prod-ib01-vmss/41" in lines[2] and "XID79FallenOffBus" in lines[2]
    assert "shop" not in out


def test_show_one_impact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(tmp_path, capsys, ["show", "3f0c9d8e-1b2a-4c5d-8e7f-6a5b4c3d2e1f"], transport())
    assert code == 0
    assert "Resource.Hpc.Unhealthy.IBPerformance" in out and "GGBB90904476" in out
    assert out.startswith("impact 3f0c9d8e-1b2a-4c5d-8e7f-6a5b4c3d2e1f\n")
    assert "state         NodeRemovedFromService" in out
    assert out.index("08:02:30Z  AcknowledgedUnhealthy") < out.index("08:41:12Z  NodeRemovedFromService")


def test_throttling_is_retried_then_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    throttled = Reply(429, "impact-429-throttled.json", {"Retry-After": "3"})
    t = transport([throttled, Reply(200, "impact-list.json")])
    code, _, _ = run(tmp_path, capsys, ["list", "--format", "json"], t)
    assert code == 0 and t.sleeps[:1] == [3.0]
    code, _, err = run(tmp_path, capsys, ["list"], transport([throttled]))
    assert code == 2 and "HTTP 429 TooManyRequests" in err


def test_no_permission_says_which_role(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(tmp_path, capsys, ["list"], transport([Reply(403, "impact-403-not-onboarded.json")]))
    assert code == 2 and out == ""
    assert "HTTP 403 AuthorizationFailed" in err and "Impact Reader" in err
