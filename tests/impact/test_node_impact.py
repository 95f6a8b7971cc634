"""The node's impact report: KVP parsing, the category table, and the PUT against recorded Resource Manager
responses served from 127.0.0.1 (accepted, 429 with Retry-After, 403 not onboarded), plus opt-out logging."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from ndfleet_node.impact import KVP_KEY_BYTES, KVP_VALUE_BYTES, ImpactError, parse_kvp, physical_host_name, run_report
from ndfleet_node.impact_categories import category_for, check_categories

from tests.fakes.fleet import node_json_data
from tests.impact.arm_server import Reply, serve

SUB = "8f3c2a1e-5b7d-4c9e-a2f1-6d0b9e4c7a31"
NOW = datetime(2026, 12, 3, 8, 0, tzinfo=timezone.utc)


def kvp_record(key: str, value: str) -> bytes:
    return key.encode().ljust(KVP_KEY_BYTES, b"\0") + value.encode().ljust(KVP_VALUE_BYTES, b"\0")


POOL = (
    kvp_record("HostName", "GGBB90904476.cloudapp.net")
    + kvp_record("PhysicalHostName", "GGBB90904476")
    + kvp_record("PhysicalHostNameFullyQualified", "GGBB90904476.phx.gbl")
    + kvp_record("VirtualMachineDynamicID", "b4d8c1e2-0f3a-4d5b-8c6e-7f9a0b1c2d3e")
)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (POOL, "GGBB90904476"),
        (kvp_record("PhysicalHostNameFullyQualified", "GGBB90911802.phx.gbl"), "GGBB90911802"),
        (POOL + b"\0" * 100, "GGBB90904476"),  # a partial trailing record is ignored
    ],
)
def test_physical_host_name_from_kvp(data: bytes, expected: str, tmp_path: Path) -> None:
    pool = tmp_path / ".kvp_pool_3"
    pool.write_bytes(data)
    assert physical_host_name(pool) == expected


def test_kvp_records_are_fixed_size() -> None:
    pairs = parse_kvp(POOL)
    assert pairs["VirtualMachineDynamicID"] == "b4d8c1e2-0f3a-4d5b-8c6e-7f9a0b1c2d3e"
    assert len(pairs) == 4 and len(POOL) == 4 * (512 + 2048)


@pytest.mark.parametrize("data", [b"", kvp_record("HostName", "x")])
def test_missing_physical_host_name_is_an_error(data: bytes, tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    pool.write_bytes(data)
    with pytest.raises(ImpactError, match="no PhysicalHostName"):
        physical_host_name(pool)
    with pytest.raises(ImpactError, match="cannot read Hyper-V KVP pool"):
        physical_host_name(tmp_path / "absent")


@pytest.mark.parametrize(
    ("check", "message", "category"),
    [
        ("gpu.count", "7 x NVIDIA H100 80GB HBM3, expected 8", "HpcMissingGpu"),
        ("gpu.count", "nvidia-smi timed out after 20 s", "UnhealthyGPUNvidiasmi"),
        ("gpu.xid", "Xid 79 on GPU 4", "XID79FallenOffBus"),
        ("gpu.xid", "Xid 48, Xid 13", "XID48DoubleBitECC"),
        ("gpu.xid", "Xid 119", "GpuXIDError"),
        ("gpu.xid", "Xid 95 on PCI:000A:00:00 (GPU 5): Uncontained: FB DED", "XID95UncontainedECCError"),
        ("gpu.xid", "Xid 94 on PCI:0009:00:00 (GPU 4): Contained: FB DED", "XID94ContainedECCError"),
        ("gpu.row_remap", "GPU 2: row remap pending", "HpcRowRemapFailure"),
        ("gpu.nvlink", "GPU 3 link 7 inactive", "NvLink"),
        ("ib.ports", "mlx5_ib5 port 1: Down / Polling", "IBPortDown"),
        ("ib.ports", "mlx5_ib6 missing", "MissingIB"),
        ("ib.rate", "mlx5_ib4 port 1: 200 Gb/s", "IBPerformance"),
        ("ib.flap", "9 link-down events", "IBPortFlapping"),
        ("perf.dcgm", "dcgmi diag -r 1: Fail", "HpcGpuDcgmDiagFailure"),
        ("burnin.busbw-below-floor", "187 GB/s", "IBPerformance"),
        ("burnin.hang", "no result within 300 s", "HpcGenericFailure"),
        ("burnin.wrong-results", "2048 wrong", "HpcGenericFailure"),
    ],
)
def test_category_table(check: str, message: str, category: str) -> None:
    assert category_for(check, message) == "Resource.Hpc.Unhealthy." + category


@pytest.mark.parametrize("check", ["ib.peermem", "host.mounts", "gpu.fabricmanager", "burnin.launch-error", "x.y"])
def test_software_faults_are_not_reported(check: str) -> None:
    assert category_for(check, "whatever") is None


def test_every_xid_with_a_category_fails_the_node() -> None:
    # A category for an Xid the check never fails on is never filed: each one is in every size's fail list.
    from ndfleet_node.impact_categories import XID_CATEGORIES

    from ndfleet.stackconfig.profiles import PROFILES

    for profile in PROFILES.values():
        assert set(XID_CATEGORIES) <= set(profile.thresholds.xid_fail_codes), profile.name


def test_every_category_is_one_azure_lists() -> None:
    # Microsoft Learn, guest-health-impact-categories: the Resource.Hpc.Unhealthy.* names.
    azure = set(
        "HpcMissingGpu MissingIB IBPerformance IBPortDown IBPortFlapping HpcGpuDcgmDiagFailure HpcRowRemapFailure "
        "HpcInforomCorruption HpcGenericFailure ManualInvestigation XID95UncontainedECCError XID94ContainedECCError "
        "XID79FallenOffBus XID48DoubleBitECC UnhealthyGPUNvidiasmi NvLink HpcDcgmiThermalReport "
        "ECCPageRetirementTableFull DBEOverLimit GpuXIDError AmdGpuResetFailed EROTFailure GPUMemoryBWFailure "
        "CPUPerformance".split()
    )
    assert {c for c in check_categories().values() if c} <= azure


# ------------------------------------------------------------------------------------------ against 127.0.0.1


def node_files(tmp_path: Path, base: str, enabled: bool = True) -> argparse.Namespace:
    (tmp_path / "pool").write_bytes(POOL)
    impact = {"enabled": enabled, "api_version": "2023-02-01-preview", "imds_endpoint": base, "arm_endpoint": base,
              "identity_client_id": "0c7e5a3b-2f14-4d8e-9b6a-5e1f3c2d7a90"}  # fmt: skip
    config = node_json_data(impact=impact)
    (tmp_path / "node.json").write_text(json.dumps(config))
    health = tmp_path / "report.json"
    passed = [{"id": "gpu.count", "status": "pass"}]
    health.write_text(json.dumps({"status": "healthy", "level": "full", "checks": passed}))
    return argparse.Namespace(
        validator_report=None, check=["burnin.busbw-below-floor"], detail="busbw 187.44 GB/s < floor 340 GB/s",
        config=tmp_path / "node.json", health_report=health, kvp_pool=tmp_path / "pool",
    )  # fmt: skip


IMDS_ROUTES = {
    ("GET", "/metadata/instance/compute"): [Reply(200, "impact-imds-compute.json")],
    ("GET", "/metadata/identity/oauth2/token"): [Reply(200, "impact-imds-token.json")],
}


def run(args: argparse.Namespace, waits: list[float]) -> int:
    return run_report(args, sleep=waits.append, now=lambda: NOW)


def test_accepted_report_then_unhealthy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    accepted = [Reply(200, "impact-accepted.json")]
    routes = IMDS_ROUTES | {("PUT", f"/subscriptions/{SUB}/providers/Microsoft.Impact"): accepted}
    with serve(routes) as arm:
        args = node_files(tmp_path, arm.base)
        waits: list[float] = []
        assert run(args, waits) == 0
    put = arm.calls("PUT", "/workloadImpacts/")
    assert len(put) == 1 and waits == []
    assert put[0].path.endswith("?api-version=2023-02-01-preview")
    assert put[0].headers["Authorization"] == "Bearer fake-node-token"
    assert put[0].json() == {
        "properties": {
            "startDateTime": "2026-12-03T08:00:00Z",
            "impactCategory": "Resource.Hpc.Unhealthy.IBPerformance",
            "impactDescription": "burnin.busbw-below-floor: busbw 187.44 GB/s < floor 340 GB/s",
            "impactedResourceId": f"/subscriptions/{SUB}/resourceGroups/prod-rg/providers/Microsoft.Compute/"
            "virtualMachineScaleSets/prod-ib00-vmss/virtualMachines/3",
            "additionalProperties": {
                "PhysicalHostName": "GGBB90904476",
                "VmUniqueId": "6b2b6c0e-0a55-4c1f-9a73-1f1de2b2f0d4",
            },
        }
    }
    token = arm.calls("GET", "/metadata/identity/oauth2/token")[0]
    assert token.headers["Metadata"] == "true" and "client_id=0c7e5a3b" in token.path
    assert "resource=https%3A%2F%2F127.0.0.1" in token.path or "resource=http%3A%2F%2F127.0.0.1" in token.path
    health = json.loads(args.health_report.read_text())
    assert health["status"] == "unhealthy"
    assert [c["id"] for c in health["checks"] if c["status"] == "fail"] == ["burnin.busbw-below-floor"]
    assert "filed Resource.Hpc.Unhealthy.IBPerformance" in capsys.readouterr().err


def test_429_is_retried_after_retry_after(tmp_path: Path) -> None:
    throttled = Reply(429, "impact-429-throttled.json", {"Retry-After": "17"})
    routes = IMDS_ROUTES | {("PUT", "/subscriptions/"): [throttled, throttled, Reply(200, "impact-accepted.json")]}
    with serve(routes) as arm:
        args = node_files(tmp_path, arm.base)
        waits: list[float] = []
        assert run(args, waits) == 0
    assert len(arm.calls("PUT", "/workloadImpacts/")) == 3
    assert waits == [17.0, 17.0]
    # The same impact (same name) each time: a retry never files a second report.
    assert len({c.path for c in arm.calls("PUT", "/workloadImpacts/")}) == 1


def test_429_for_ever_gives_up_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    throttled = Reply(429, "impact-429-throttled.json", {"Retry-After": "600"})
    routes = IMDS_ROUTES | {("PUT", "/subscriptions/"): [throttled]}
    with serve(routes) as arm:
        args = node_files(tmp_path, arm.base)
        waits: list[float] = []
        assert run(args, waits) == 1
    assert len(arm.calls("PUT", "/workloadImpacts/")) == 4
    assert waits == [120.0, 120.0, 120.0]  # Retry-After honoured up to the cap
    assert "still HTTP 429 after 4 attempts (TooManyRequests" in capsys.readouterr().err
    assert json.loads(args.health_report.read_text())["status"] == "unhealthy"  # still goes Unhealthy


def test_403_not_onboarded_says_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    routes = IMDS_ROUTES | {("PUT", "/subscriptions/"): [Reply(403, "impact-403-not-onboarded.json")]}
    with serve(routes) as arm:
        args = node_files(tmp_path, arm.base)
        assert run(args, []) == 1
    err = capsys.readouterr().err
    assert "HTTP 403 AuthorizationFailed" in err and "onboarded" in err and "Impact Reporter" in err
    assert len(arm.calls("PUT", "/workloadImpacts/")) == 1
    assert "fake-node-token" not in err


def test_opted_out_logs_the_request_and_sends_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serve(IMDS_ROUTES) as arm:
        args = node_files(tmp_path, arm.base, enabled=False)
        assert run(args, []) == 0
    assert arm.calls("PUT", "/") == [] and arm.calls("GET", "/metadata/identity") == []
    err = capsys.readouterr().err
    assert "impact reporting is off" in err and "would send PUT" in err
    assert '"impactCategory": "Resource.Hpc.Unhealthy.IBPerformance"' in err and "GGBB90904476" in err
    assert json.loads(args.health_report.read_text())["status"] == "unhealthy"


def test_validator_report_files_only_hardware_faults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    routes = IMDS_ROUTES | {("PUT", "/subscriptions/"): [Reply(200, "impact-accepted.json")]}
    with serve(routes) as arm:
        args = node_files(tmp_path, arm.base)
        report = tmp_path / "validator.json"
        report.write_text(json.dumps({"status": "unhealthy", "checks": [
            {"id": "gpu.count", "status": "pass", "message": "8 GPUs"},
            {"id": "ib.ports", "status": "fail", "message": "mlx5_ib3 port 1: Down"},
            {"id": "ib.peermem", "status": "fail", "message": "nvidia_peermem not loaded"},
        ]}))  # fmt: skip
        args.validator_report, args.check = report, None
        assert run(args, []) == 0
    bodies = [c.json()["properties"]["impactCategory"] for c in arm.calls("PUT", "/workloadImpacts/")]
    assert bodies == ["Resource.Hpc.Unhealthy.IBPortDown"]
    assert "ib.peermem: not a host fault" in capsys.readouterr().err


def test_identity_from_the_scale_set_tag_when_the_node_json_names_none(tmp_path: Path) -> None:
    routes = IMDS_ROUTES | {("PUT", "/subscriptions/"): [Reply(200, "impact-accepted.json")]}
    with serve(routes) as arm:
        args = node_files(tmp_path, arm.base)
        doc = json.loads(args.config.read_text())
        del doc["impact"]["identity_client_id"]
        args.config.write_text(json.dumps(doc))
        assert run(args, []) == 0
    token = arm.calls("GET", "/metadata/identity/oauth2/token")[0]
    assert "client_id=5a1e9c3b-7d2f-4e6a-8b0c-1d2e3f4a5b6c" in token.path


def test_unreachable_metadata_service_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serve({}) as arm:
        args = node_files(tmp_path, arm.base)
        assert run(args, []) == 2
    assert "instance metadata answered HTTP 404" in capsys.readouterr().err


@pytest.mark.parametrize("enabled", [True, False])
def test_node_json_impact_section_drives_the_node(enabled: bool, tmp_path: Path) -> None:
    from ndfleet_node.impact import load_impact_settings

    from ndfleet.nodefiles.burnin_node_config import impact_node_section
    from ndfleet.stackconfig.config import load_spec
    from tests.conftest import base_config

    spec = load_spec(base_config(health={"impactReporting": enabled}), "sec")
    (tmp_path / "node.json").write_text(json.dumps(node_json_data(impact=impact_node_section(spec))))
    settings = load_impact_settings(tmp_path / "node.json")
    assert settings["enabled"] is enabled and settings["api_version"] == "2023-02-01-preview"


def test_node_json_without_impact_section_is_refused(tmp_path: Path) -> None:
    from ndfleet_node.impact import load_impact_settings

    doc = node_json_data()
    del doc["impact"]
    (tmp_path / "node.json").write_text(json.dumps(doc))
    with pytest.raises(ImpactError, match="'impact.enabled' must be true or false"):
        load_impact_settings(tmp_path / "node.json")


def test_every_validator_check_has_a_row() -> None:
    from ndfleet_node.checks import level_ids

    categories = check_categories()
    assert set(level_ids("full")) <= set(categories)
    # A few rows pinned (Azure's NHC mapping, triggerGHR.sh): the category now rides on each @check.
    assert categories["gpu.count"] == "HpcMissingGpu" and categories["ib.flap"] == "IBPortFlapping"
    assert categories["perf.dcgm"] == "HpcGpuDcgmDiagFailure" and categories["host.mounts"] is None
    assert categories["burnin.launch-error"] is None


def test_a_burn_in_failure_stays_unhealthy_after_the_health_check_rewrites_the_report(tmp_path: Path) -> None:
    """The burn-in's --check goes to the failure marker too: the health check's next quick validation rewrites the
    report (passing: a bad cable shows only in the burn-in's tests), and the endpoint must still answer Unhealthy
    so that automatic repairs replace the node (the twin's repair loop found it turning Healthy again)."""
    from ndfleet_node.health import health_state

    accepted = [Reply(200, "impact-accepted.json")]
    routes = IMDS_ROUTES | {("PUT", f"/subscriptions/{SUB}/providers/Microsoft.Impact"): accepted}
    marker = tmp_path / "state" / "failed"
    with serve(routes) as arm:
        args = node_files(tmp_path, arm.base)
        config = json.loads(args.config.read_text())
        config["paths"]["failed_marker"] = str(marker)
        args.config.write_text(json.dumps(config))
        assert run(args, []) == 0
    assert "burnin.busbw-below-floor" in marker.read_text()
    passing = {"status": "healthy", "level": "quick", "checks": [{"id": "gpu.count", "status": "pass"}]}
    args.health_report.write_text(json.dumps(passing))  # the health check's next pass
    assert health_state(str(args.health_report), str(marker))[0] == "Unhealthy"


def test_a_check_both_reported_and_named_is_filed_once_with_the_reports_message(tmp_path: Path) -> None:
    """The Epilog's measured floor: the validator's report has the failed all-reduce, and the health check names it
    on the command line so that the report also writes the failure marker: one impact, with the measured figure."""
    from ndfleet_node.impact import failed_checks

    report = tmp_path / "report.json"
    report.write_text(json.dumps({"status": "unhealthy", "checks": [
        {"id": "perf.nccl_allreduce", "status": "fail", "message": "busbw 312.4 GB/s"}]}))  # fmt: skip
    args = argparse.Namespace(validator_report=report, check=["perf.nccl_allreduce", "burnin.hang"], detail="")
    assert failed_checks(args) == [("perf.nccl_allreduce", "busbw 312.4 GB/s"), ("burnin.hang", "burnin.hang")]
