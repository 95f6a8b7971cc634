"""`ndfleet preflight` against recorded Resource Manager responses.

The real SDK clients (azure-mgmt-compute, azure-mgmt-resource-subscriptions, azure-mgmt-storagecache) run with
their full pipeline: bearer-token policy, retry policy (Retry-After, backoff), paging, error mapping and
deserialisation. Only the last hop is replaced: `ReplayTransport` (an azure-core `HttpTransport`) answers each
request from tests/data/arm/ instead of opening a socket, and records what the SDK sent and how long the retry
policy asked to sleep (without sleeping). A socket guard makes any attempt to reach a non-loopback address fail.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from azure.core.credentials import AccessToken
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest._http_response_impl import HttpResponseImpl
from azure.core.utils import case_insensitive_dict

from ndfleet import preflight
from ndfleet.cli import build_parser
from ndfleet.stackconfig.stackfile import load_stack

ARM = Path(__file__).parent / "data" / "arm"
SUB = "8f3c2a1e-5b7d-4c9e-a2f1-6d0b9e4c7a31"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP+b1JhUMmgkXjP+vnWEddFy2Nj+UDCgz8bOVy15P9P4 test"
TINY_RETRY = preflight.RetrySettings(total=4, backoff_factor=0.001, backoff_max=0.01)


# ----------------------------------------------------------------------------------------------------------
# Network guard: nothing but loopback


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    attempts: list[str] = []
    loopback = ("127.0.0.1", "::1", "localhost")
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else str(address)
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in loopback:
            attempts.append(f"connect {address}")
            raise OSError(101, "Network is unreachable (blocked by test)")
        return real_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in loopback and host is not None:
            attempts.append(f"resolve {host}")
            raise socket.gaierror(socket.EAI_NONAME, "name resolution blocked by test")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield attempts
    assert attempts == [], f"a test tried to reach the network: {attempts}"


# ----------------------------------------------------------------------------------------------------------
# Recorded Resource Manager


@dataclass
class Reply:
    status: int
    file: str
    headers: dict[str, str] = field(default_factory=dict)


class _Recorded(HttpResponseImpl):
    def __init__(self, request: Any, status: int, headers: dict[str, str], body: bytes):
        super().__init__(
            request=request,
            internal_response=None,
            status_code=status,
            reason={200: "OK", 403: "Forbidden", 429: "Too Many Requests", 500: "Internal Server Error"}.get(
                status, ""
            ),
            content_type=headers.get("Content-Type"),
            headers=case_insensitive_dict(headers),
            stream_download_generator=None,
        )
        self._content = body

    def close(self) -> None:
        self._is_closed = True


class ReplayTransport(HttpTransport):
    """Answers requests from recordings, route by route; the last reply of a route repeats."""

    def __init__(self, routes: list[tuple[str, list[Reply]]], root: Path = ARM):
        self._routes = [(re.compile(pattern), list(replies)) for pattern, replies in routes]
        self._root = root  # where the reply files are
        self._lock = threading.Lock()
        self.requests: list[Any] = []
        self.sleeps: list[float] = []

    def __enter__(self) -> ReplayTransport:
        return self

    def __exit__(self, *args: Any) -> None:
        pass

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def sleep(self, duration: float) -> None:
        with self._lock:
            self.sleeps.append(duration)

    def send(self, request: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.requests.append(request)
            for pattern, replies in self._routes:
                if pattern.search(request.url):
                    reply = replies.pop(0) if len(replies) > 1 else replies[0]
                    break
            else:
                raise AssertionError(f"no recording for {request.method} {request.url}")
        parts = urlsplit(request.url)
        # Resource Manager writes nextLink on its own host: keep recordings cloud-neutral.
        body = (
            (self._root / reply.file).read_text().replace("https://management.azure.com", f"{parts.scheme}://{parts.netloc}")
        )
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "x-ms-request-id": "3c1b7d2e-8a4f-4e6b-9d0c-5f2a1b7e9c84",
            **reply.headers,
        }
        return _Recorded(request, reply.status, headers, body.encode())

    def calls(self, fragment: str) -> list[Any]:
        return [r for r in self.requests if fragment in r.url]


LOCATIONS = r"/subscriptions/[^/]+/locations\?"
SKUS_PAGE2 = r"/providers/Microsoft\.Compute/skus\?.*skiptoken"
SKUS = r"/providers/Microsoft\.Compute/skus\?"
USAGES = r"/providers/Microsoft\.Compute/locations/[^/]+/usages\?"
LUSTRE = r"/providers/Microsoft\.StorageCache/skus\?"
PERMISSIONS_PAGE2 = r"/providers/Microsoft\.Authorization/permissions\?.*skiptoken"
PERMISSIONS = r"/providers/Microsoft\.Authorization/permissions\?"
FEATURE = r"/providers/Microsoft\.Features/providers/Microsoft\.Compute/features/TrustedLaunchByDefaultPreview\?"
IMPACT_PROVIDER = r"/subscriptions/[^/]+/providers/Microsoft\.Impact\?"
# Compute's VirtualMachineImages: one version (a pinned image), or the list of versions (`latest`).
IMAGE_VERSION = r"/artifacttypes/vmimage/offers/[^/]+/skus/[^/]+/versions/[^/?]+\?"
IMAGE_VERSIONS = r"/artifacttypes/vmimage/offers/[^/]+/skus/[^/]+/versions\?"
# The caller's permissions at subscription scope only (not a resource group's).
SUBSCRIPTION_PERMISSIONS = r"/subscriptions/[^/]+/providers/Microsoft\.Authorization/permissions\?"


def ok(file: str) -> list[Reply]:
    return [Reply(200, file)]


def arm(first: Sequence[tuple[str, list[Reply]]] = (), **override: list[Reply]) -> ReplayTransport:
    """Everything available, with any route replaced; `first`: (pattern, replies) routes tried before the others."""
    routes = {
        "locations": ok("subscription-locations.json"),
        "skus_page2": ok("compute-skus-eastus-page2.json"),
        "skus": ok("compute-skus-eastus-page1.json"),
        "usages": ok("usages-eastus.json"),
        "lustre": ok("storagecache-skus.json"),
        "permissions_page2": ok("authorization-permissions-contributor-uaa-page2.json"),
        "permissions": ok("authorization-permissions-owner.json"),
        "feature": ok("feature-trusted-launch-default-not-registered.json"),
        "impact_provider": ok("provider-microsoft-impact-registered.json"),
        "image_version": ok("compute-image-version-ubuntu-hpc-2204.json"),
        "image_versions": ok("compute-image-versions-ubuntu-hpc-2204.json"),
    }
    routes.update(override)
    patterns = {
        "locations": LOCATIONS,
        "skus_page2": SKUS_PAGE2,
        "skus": SKUS,
        "usages": USAGES,
        "lustre": LUSTRE,
        "permissions_page2": PERMISSIONS_PAGE2,
        "permissions": PERMISSIONS,
        "feature": FEATURE,
        "impact_provider": IMPACT_PROVIDER,
        "image_version": IMAGE_VERSION,
        "image_versions": IMAGE_VERSIONS,
    }
    return ReplayTransport([*first, *((patterns[k], v) for k, v in routes.items())])


class FakeCredential:
    def __init__(self) -> None:
        self.scopes: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        self.scopes.append(scopes)
        return AccessToken("fake-arm-token", int(time.time()) + 3600)


def stack_file(tmp_path: Path, **config: Any) -> Path:
    values: dict[str, Any] = {
        "ndfleet:location": "eastus",
        "ndfleet:vmSize": "Standard_ND96isr_H100_v5",
        "ndfleet:nodes": 2,
        "ndfleet:sshPublicKey": KEY,
        "ndfleet:subscriptionId": SUB,
    }
    for key, value in config.items():
        full = key if ":" in key else f"ndfleet:{key}"
        if value is None:
            values.pop(full, None)
        else:
            values[full] = value
    path = tmp_path / "Pulumi.pf.yaml"
    path.write_text(json.dumps({"config": values}))  # JSON is YAML
    return path


@dataclass
class Run:
    code: int
    out: str
    err: str
    transport: ReplayTransport
    credential: FakeCredential

    def json(self) -> dict[str, Any]:
        return json.loads(self.out)

    def check(self, check_id: str) -> dict[str, Any]:
        return next(c for c in self.json()["checks"] if c["id"] == check_id)


def preflight_run(
    capsys: pytest.CaptureFixture[str],
    path: Path,
    transport: ReplayTransport,
    *,
    fmt: str = "json",
    env: dict[str, str] | None = None,
) -> Run:
    credential = FakeCredential()
    args = build_parser().parse_args(["preflight", "--stack-file", str(path), "--format", fmt])
    code = preflight.run_cli(args, env=env or {}, credential=credential, transport=transport, retry=TINY_RETRY)
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err, transport, credential)


# ----------------------------------------------------------------------------------------------------------
# Everything available


def test_everything_available_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm())
    assert run.code == 0
    statuses = {c["id"]: c["status"] for c in run.json()["checks"]}
    assert statuses == {
        "location": "pass",
        "vm-size-region": "pass",
        "vm-size-zone": "skip",
        "vm-restrictions": "pass",
        "image-version": "pass",
        "quota-family": "pass",
        "quota-regional": "pass",
        "lustre-sku": "skip",
        "permissions": "pass",
        "trusted-launch-default": "pass",
    }


def test_quota_figures_come_from_the_usages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm())
    assert run.check("quota-family")["figures"] == {
        "quotaName": "standardNDSH100v5Family",
        "limit": 384,
        "used": 0,
        "available": 384,
        "needed": 192,
        "missing": 0,
    }


def test_sdk_sends_token_filter_and_follows_next_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm()
    preflight_run(capsys, stack_file(tmp_path), transport)
    skus = transport.calls("/providers/Microsoft.Compute/skus")
    assert len(skus) == 2  # first page and its nextLink
    assert parse_qs(urlsplit(skus[0].url).query)["$filter"] == ["location eq 'eastus'"]
    assert all(r.headers["Authorization"] == "Bearer fake-arm-token" for r in transport.requests)
    assert all(r.method == "GET" for r in transport.requests)


def test_table_output_lists_each_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(), fmt="table")
    lines = run.out.splitlines()
    assert any(re.match(r"PASS\s+quota-family\s+standardNDSH100v5Family: limit 384, in use 0", x) for x in lines)
    assert lines[-1].startswith("preflight passed")


def test_lustre_sku_offered_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = stack_file(tmp_path, zone="2", storage={"lustre": {"sku": "AMLFS-Durable-Premium-250", "capacityTiB": 16}})
    run = preflight_run(capsys, path, arm())
    assert run.code == 0
    assert run.check("lustre-sku")["status"] == "pass"


def test_zone_offered_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path, zone="2"), arm())
    assert run.code == 0
    assert run.check("vm-size-zone")["status"] == "pass"


# ----------------------------------------------------------------------------------------------------------
# Failures (exit 1)


def test_family_quota_shortfall_gives_missing_vcpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(usages=ok("usages-eastus-family-short.json")))
    check = run.check("quota-family")
    assert run.code == 1
    assert check["status"] == "fail"
    # limit 200, in use 96: 104 free, 2 x 96 = 192 needed.
    assert check["figures"]["missing"] == 88
    assert "88 vCPUs missing" in check["detail"]


def test_family_quota_shortfall_says_how_to_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(usages=ok("usages-eastus-family-short.json")))
    fix = run.check("quota-family")["fix"]
    assert "https://portal.azure.com/#view/Microsoft_Azure_Capacity/QuotaMenuBlade/~/myQuotas" in fix
    assert (
        f"az quota update --resource-name standardNDSH100v5Family --scope /subscriptions/{SUB}/providers/"
        "Microsoft.Compute/locations/eastus --limit-object value=288 --resource-type dedicated"
    ) in fix


def test_regional_quota_shortfall(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(usages=ok("usages-eastus-regional-short.json")))
    check = run.check("quota-regional")
    assert run.code == 1
    assert (check["status"], check["figures"]["quotaName"], check["figures"]["missing"]) == ("fail", "cores", 88)


def test_spot_checks_the_low_priority_quota(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path, priority="Spot"), arm())
    check = run.check("quota-regional")
    # lowPriorityCores: limit 100, none in use, 192 needed.
    assert (check["status"], check["figures"]["quotaName"], check["figures"]["missing"]) == (
        "fail",
        "lowPriorityCores",
        92,
    )
    assert "--resource-type lowPriority" in check["fix"]


def test_size_absent_from_region(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(skus_page2=ok("compute-skus-eastus-page2-no-h100.json")))
    check = run.check("vm-size-region")
    assert run.code == 1
    assert check["status"] == "fail"
    assert check["detail"] == "Standard_ND96isr_H100_v5 is not offered in eastus"


def test_size_absent_from_zone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm(skus_page2=ok("compute-skus-eastus-page2-zones-1-3.json"))
    run = preflight_run(capsys, stack_file(tmp_path, zone="2"), transport)
    check = run.check("vm-size-zone")
    assert run.code == 1
    assert check["status"] == "fail"
    assert "not offered in zone 2 of eastus; it is offered in zones 1, 3" in check["detail"]
    assert check["fix"] == "set ndfleet:zone to one of 1, 3"


def test_restricted_for_subscription_shows_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(skus_page2=ok("compute-skus-eastus-page2-restricted.json")))
    check = run.check("vm-restrictions")
    assert run.code == 1
    assert check["status"] == "fail"
    assert check["detail"] == "restricted in eastus: NotAvailableForSubscription"


def test_zone_restriction_fails_the_zone_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm(skus_page2=ok("compute-skus-eastus-page2-zone-2-restricted.json"))
    run = preflight_run(capsys, stack_file(tmp_path, zone="2"), transport)
    check = run.check("vm-restrictions")
    assert run.code == 1
    assert check["detail"] == "restricted in zone 2 of eastus: NotAvailableForSubscription"


def test_zone_restriction_only_warns_a_regional_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm(skus_page2=ok("compute-skus-eastus-page2-zone-2-restricted.json"))
    run = preflight_run(capsys, stack_file(tmp_path), transport)
    assert run.code == 0
    assert run.check("vm-restrictions")["status"] == "warn"


def test_unknown_family_name_lists_the_subscriptions_families(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(usages=ok("usages-eastus-other-family-name.json")))
    check = run.check("quota-family")
    assert run.code == 1
    assert check["figures"]["families"] == [
        "standardNDAMSv4_A100Family",
        "standardNDISRH200V5Family",
        "standardNDv5H100Family",
    ]


def test_family_name_is_matched_case_insensitively(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = json.loads((ARM / "usages-eastus.json").read_text())
    for entry in raw["value"]:
        if entry["name"]["value"] == "standardNDSH100v5Family":
            entry["name"]["value"] = "StandardNDSH100v5Family"
    (tmp_path / "usages.json").write_text(json.dumps(raw))
    run = preflight_run(capsys, stack_file(tmp_path), arm(usages=ok(str(tmp_path / "usages.json"))))
    assert run.check("quota-family")["status"] == "pass"


def test_lustre_sku_not_offered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = stack_file(tmp_path, zone="2", storage={"lustre": {"sku": "AMLFS-Durable-Premium-250", "capacityTiB": 16}})
    run = preflight_run(capsys, path, arm(lustre=ok("storagecache-skus-no-250-in-eastus.json")))
    check = run.check("lustre-sku")
    assert run.code == 1
    assert check["figures"]["offered"] == ["AMLFS-Durable-Premium-125", "AMLFS-Durable-Premium-40"]


def test_unknown_location_suggests_a_close_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A name outside ndfleet's table is refused offline unless the stack says it is new (newRegion); then preflight
    # asks Azure's list.
    run = preflight_run(capsys, stack_file(tmp_path, location="eastsu", newRegion=True), arm())
    check = run.check("location")
    assert run.code == 1
    assert check["figures"]["suggestions"][0] == "eastus"


def test_logical_region_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path, location="unitedstates", newRegion=True), arm())
    assert "is a logical region" in run.check("location")["detail"]


# ----------------------------------------------------------------------------------------------------------
# Throttling and server errors


def test_throttling_is_retried_after_retry_after(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    throttled = Reply(429, "error-429-throttled.json", {"Retry-After": "7"})
    transport = arm(usages=[throttled, Reply(200, "usages-eastus.json")])
    run = preflight_run(capsys, stack_file(tmp_path), transport)
    assert run.code == 0
    assert len(transport.calls("/usages")) == 2
    assert transport.sleeps == [7]  # the SDK's retry policy honoured Retry-After (the fake does not sleep)


def test_throttling_exhausted_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    throttled = Reply(429, "error-429-throttled.json", {"Retry-After": "7"})
    run = preflight_run(capsys, stack_file(tmp_path), arm(usages=[throttled]))
    assert run.code == 2
    assert run.check("quota-family")["detail"].startswith(
        "could not check: throttled: Resource Manager still answered 429"
    )


def test_persistent_server_error_is_exit_2_with_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transport = arm(skus=[Reply(500, "error-500-internal.json")])
    run = preflight_run(capsys, stack_file(tmp_path), transport, fmt="table")
    assert run.code == 2
    assert len(transport.calls("/Microsoft.Compute/skus")) == TINY_RETRY.total + 1
    assert (
        "[1] Resource Manager failed reading Microsoft.Compute resource SKUs in eastus after 5 attempts: "
        "HTTP 500 InternalServerError: Encountered internal server error." in run.out
    )
    assert "Traceback" not in run.out + run.err


def test_no_permission_is_exit_2_naming_reader(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(skus=[Reply(403, "error-403-authorization-failed.json")]))
    assert run.code == 2
    detail = run.check("vm-size-region")["detail"]
    assert "no permission to read Microsoft.Compute resource SKUs in eastus (HTTP 403 AuthorizationFailed" in detail
    assert "Reader role" in detail


def test_a_failed_check_outranks_one_that_could_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm(skus=[Reply(500, "error-500-internal.json")], usages=ok("usages-eastus-family-short.json"))
    run = preflight_run(capsys, stack_file(tmp_path), transport)
    assert run.code == 1


# ----------------------------------------------------------------------------------------------------------
# Credentials, subscription, clouds


def _bare_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith(("AZURE_", "ARM_", "MSI_", "IDENTITY_", "NDFLEET_")):
            monkeypatch.delenv(name)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(empty))  # no az, azd, pwsh


def test_no_credentials_exits_2_within_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _bare_environment(monkeypatch, tmp_path)
    args = build_parser().parse_args(["preflight", "--stack-file", str(stack_file(tmp_path))])
    started = time.monotonic()
    code = preflight.run_cli(args, transport=arm())  # real DefaultAzureCredential; the transport stays unused
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2
    assert elapsed < 5
    assert err.startswith("ndfleet preflight: error: could not check: no usable Azure credentials for AzureCloud")


def test_managed_identity_is_left_out_unless_wanted() -> None:
    from azure.identity import ManagedIdentityCredential

    cloud = preflight.CLOUDS["AzureCloud"]
    bare = preflight.build_credential(cloud, {})
    wanted = preflight.build_credential(cloud, {"NDFLEET_MANAGED_IDENTITY": "true"})
    has_mi = [any(isinstance(c, ManagedIdentityCredential) for c in cred.credentials) for cred in (bare, wanted)]
    assert has_mi == [False, True]


def test_no_subscription_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path, subscriptionId=None), arm())
    assert run.code == 2
    assert run.json()["error"].startswith("could not check: no Azure subscription given")
    assert run.transport.requests == []


def test_subscription_from_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path, subscriptionId=None), arm(), env={"AZURE_SUBSCRIPTION_ID": SUB})
    assert run.code == 0
    assert all(f"/subscriptions/{SUB}/" in r.url for r in run.transport.requests)


def test_us_government_cloud(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(), env={"AZURE_CLOUD": "AzureUSGovernment"})
    assert run.code == 0
    assert {urlsplit(r.url).netloc for r in run.transport.requests} == {"management.usgovcloudapi.net"}
    assert run.credential.scopes == [("https://management.core.usgovcloudapi.net/.default",)]


def test_cloud_from_the_stacks_azure_native_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path, **{"azure-native:environment": "china"}), arm())
    assert {urlsplit(r.url).netloc for r in run.transport.requests} == {"management.chinacloudapi.cn"}


def test_custom_resource_manager_endpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {"AZURE_RESOURCE_MANAGER_ENDPOINT": "https://management.local.azurestack.external/"}
    run = preflight_run(capsys, stack_file(tmp_path), arm(), env=env)
    assert {urlsplit(r.url).netloc for r in run.transport.requests} == {"management.local.azurestack.external"}
    assert run.credential.scopes == [("https://management.local.azurestack.external/.default",)]


def test_unknown_cloud_name_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(), env={"AZURE_CLOUD": "AzureGermanCloud"})
    assert run.code == 2
    assert run.json()["error"].startswith("AZURE_CLOUD = 'AzureGermanCloud' is not a known Azure cloud; valid:")


def test_invalid_stack_is_exit_2_with_the_spec_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path, nodes=0), arm(), fmt="table")
    assert run.code == 2
    assert "ndfleet:nodes = 0: input should be greater than or equal to 1" in run.err
    assert run.transport.requests == []


# ----------------------------------------------------------------------------------------------------------
# JSON form and the Pulumi hook


def test_json_document_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = preflight_run(capsys, stack_file(tmp_path), arm()).json()
    assert {k: doc[k] for k in ("schemaVersion", "result", "exitCode", "error", "subscriptionId", "cloud")} == {
        "schemaVersion": 1,
        "result": "pass",
        "exitCode": 0,
        "error": None,
        "subscriptionId": SUB,
        "cloud": "AzureCloud",
    }
    assert set(doc["checks"][0]) == {"id", "title", "status", "detail", "fix", "figures"}


def test_enforce_preflight_raises_the_cli_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = stack_file(tmp_path)
    table = preflight_run(capsys, path, arm(usages=ok("usages-eastus-family-short.json")), fmt="table").out
    spec = preflight.load_spec(load_stack(path=path).ndfleet_config, "pf")
    with pytest.raises(preflight.PreflightFailed) as raised:
        preflight.enforce_preflight(
            spec,
            env={},
            credential=FakeCredential(),
            transport=arm(usages=ok("usages-eastus-family-short.json")),
            retry=TINY_RETRY,
        )
    assert (str(raised.value), raised.value.exit_code) == (table.strip(), 1)


def test_enforce_preflight_passes_quietly(tmp_path: Path) -> None:
    spec = preflight.load_spec(load_stack(path=stack_file(tmp_path)).ndfleet_config, "pf")
    assert preflight.enforce_preflight(spec, env={}, credential=FakeCredential(), transport=arm()) is None


def test_network_unreachable_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_network: list[str]
) -> None:
    credential = FakeCredential()
    args = build_parser().parse_args(["preflight", "--stack-file", str(stack_file(tmp_path)), "--format", "json"])
    code = preflight.run_cli(args, env={}, credential=credential, retry=TINY_RETRY)  # the SDK's own HTTP transport
    doc = json.loads(capsys.readouterr().out)
    assert code == 2
    assert doc["checks"][0]["detail"].startswith(
        "could not check: network: could not reach https://management.azure.com reading the subscription's locations"
    )
    # Every attempt was stopped by the guard before a packet left; nothing but Resource Manager was tried.
    assert set(no_network) == {"resolve management.azure.com"}
    no_network.clear()


def test_encrypted_ssh_key_does_not_stop_preflight(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = stack_file(tmp_path, sshPublicKey={"secure": "v1:4Bq3pLh0Yw==:AAABAGNpcGhlcnRleHQ="})
    run = preflight_run(capsys, path, arm())
    assert run.code == 0


# ----------------------------------------------------------------------------------------------------------
# Permissions on the deployment scope (Microsoft.Authorization/permissions)


@pytest.mark.parametrize(
    ("recording", "mode", "status", "code", "roles"),
    [
        ("authorization-permissions-owner.json", "up", "pass", 0, []),
        ("authorization-permissions-contributor.json", "up", "fail", 1, ["User Access Administrator"]),
        ("authorization-permissions-contributor.json", "preview", "warn", 0, ["User Access Administrator"]),
        ("authorization-permissions-reader.json", "up", "fail", 1, ["Contributor", "User Access Administrator"]),
        ("authorization-permissions-reader.json", "preview", "warn", 0, ["Contributor", "User Access Administrator"]),
        ("authorization-permissions-contributor-rbac-admin.json", "up", "fail", 1, ["User Access Administrator"]),
    ],
)
def test_permissions_by_role(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    recording: str,
    mode: str,
    status: str,
    code: int,
    roles: list[str],
) -> None:
    credential = FakeCredential()
    transport = arm(permissions=ok(recording))
    args = build_parser().parse_args(
        ["preflight", "--stack-file", str(stack_file(tmp_path)), "--format", "json", "--for", mode]
    )
    code_seen = preflight.run_cli(args, env={}, credential=credential, transport=transport, retry=TINY_RETRY)
    check = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["id"] == "permissions")
    assert (check["status"], code_seen, check["figures"]["missingRoles"]) == (status, code, roles)


def test_contributor_alone_misses_role_assignments_and_locks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(permissions=ok("authorization-permissions-contributor.json")))
    check = run.check("permissions")
    assert check["figures"]["missingActions"] == [
        "Microsoft.Authorization/roleAssignments/write",
        "Microsoft.Authorization/locks/write",
    ]
    assert "stops half-way" in check["detail"]
    assert 'az role assignment create --assignee <your object id> --role "User Access Administrator"' in check["fix"]


def test_rbac_administrator_gives_role_assignments_but_not_locks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transport = arm(permissions=ok("authorization-permissions-contributor-rbac-admin.json"))
    check = preflight_run(capsys, stack_file(tmp_path), transport).check("permissions")
    assert check["figures"]["missingActions"] == ["Microsoft.Authorization/locks/write"]
    assert "Role Based Access Control Administrator would allow the role assignment but not the locks" in check["fix"]


def test_reader_lacks_every_write_the_stack_needs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lustre = {"lustre": {"sku": "AMLFS-Durable-Premium-250", "capacityTiB": 16}}
    path = stack_file(tmp_path, zone="2", bastion=True, storage=lustre)
    check = preflight_run(capsys, path, arm(permissions=ok("authorization-permissions-reader.json"))).check(
        "permissions"
    )
    missing = check["figures"]["missingActions"]
    assert missing[0] == "Microsoft.Resources/subscriptions/resourceGroups/write"
    assert {"Microsoft.Network/bastionHosts/write", "Microsoft.StorageCache/amlFilesystems/write"} <= set(missing)
    assert not [a for a in missing if a.endswith("/read")]
    assert "half-way" not in check["detail"]  # nothing would be created at all


def test_permissions_follow_next_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm(permissions=ok("authorization-permissions-contributor-uaa-page1.json"))
    run = preflight_run(capsys, stack_file(tmp_path), transport)
    assert run.check("permissions")["status"] == "pass"  # Contributor on page 1, User Access Administrator on 2
    assert len(transport.calls("/providers/Microsoft.Authorization/permissions")) == 2


def test_permission_scope_is_the_subscription_or_the_named_resource_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scopes = []
    for config in ({}, {"resourceGroupName": "gpu-rg"}):
        transport = arm()
        run = preflight_run(capsys, stack_file(tmp_path, **config), transport)
        [request] = transport.calls("/providers/Microsoft.Authorization/permissions")
        scopes.append(urlsplit(request.url).path)
        assert request.headers["Authorization"] == "Bearer fake-arm-token"
        assert parse_qs(urlsplit(request.url).query)["api-version"] == ["2022-04-01"]
        assert run.check("permissions")["figures"]["scope"] + "/providers/Microsoft.Authorization/permissions" == (
            scopes[-1]
        )
    assert scopes == [
        f"/subscriptions/{SUB}/providers/Microsoft.Authorization/permissions",
        f"/subscriptions/{SUB}/resourceGroups/gpu-rg/providers/Microsoft.Authorization/permissions",
    ]


def test_an_existing_resource_group_needs_no_resource_group_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = stack_file(tmp_path, resourceGroupName="gpu-rg")
    check = preflight_run(capsys, path, arm(permissions=ok("authorization-permissions-reader.json"))).check(
        "permissions"
    )
    assert "Microsoft.Resources/subscriptions/resourceGroups/write" not in check["figures"]["missingActions"]


def test_permissions_unreadable_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm(permissions=[Reply(403, "error-403-authorization-failed.json")])
    run = preflight_run(capsys, stack_file(tmp_path), transport)
    assert run.code == 2
    assert run.check("permissions")["detail"].startswith("could not check: no permission to read the caller's")


@pytest.mark.parametrize(
    ("wildcard", "action", "matches"),
    [
        ("*", "Microsoft.Authorization/locks/write", True),
        ("*/read", "Microsoft.Compute/virtualMachineScaleSets/read", True),
        ("*/read", "Microsoft.Compute/virtualMachineScaleSets/write", False),
        ("Microsoft.Authorization/*/Write", "Microsoft.Authorization/roleAssignments/write", True),
        ("Microsoft.Authorization/*", "Microsoft.Authorization/locks/write", True),
        ("Microsoft.Storage/storageAccounts/*", "Microsoft.Storage/storageAccounts/blobServices/containers/read", True),
        ("Microsoft.Storage/*", "Microsoft.StorageCache/amlFilesystems/write", False),
        ("microsoft.network/virtualnetworks/write", "Microsoft.Network/virtualNetworks/write", True),
        ("Microsoft.Network/virtualNetworks/write", "Microsoft.Network/virtualNetworks/writeX", False),
    ],
)
def test_action_wildcards(wildcard: str, action: str, matches: bool) -> None:
    from ndfleet.preflight.permissions import action_matches

    assert action_matches(wildcard, action) is matches


# ----------------------------------------------------------------------------------------------------------
# Trusted Launch as default (Microsoft.Features)


def test_trusted_launch_default_registered_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm(feature=ok("feature-trusted-launch-default-registered.json"))
    run = preflight_run(capsys, stack_file(tmp_path), transport, fmt="table")
    assert run.code == 0  # a warning
    assert re.search(r"^WARN\s+trusted-launch-default\s+Microsoft.Compute/TrustedLaunchByDefaultPreview is Registered",
                     run.out, re.MULTILINE)
    assert "az feature unregister --namespace Microsoft.Compute --name TrustedLaunchByDefaultPreview" in run.out
    [request] = transport.calls("/features/TrustedLaunchByDefaultPreview")
    assert urlsplit(request.url).path == (
        f"/subscriptions/{SUB}/providers/Microsoft.Features/providers/Microsoft.Compute/features/"
        "TrustedLaunchByDefaultPreview"
    )


@pytest.mark.parametrize(
    ("reply", "state"),
    [
        (Reply(200, "feature-trusted-launch-default-not-registered.json"), "NotRegistered"),
        (Reply(404, "error-404-feature-not-found.json"), "NotFound"),
    ],
)
def test_trusted_launch_default_absent_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reply: Reply, state: str
) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm(feature=[reply]))
    check = run.check("trusted-launch-default")
    assert (check["status"], check["figures"]["state"], run.code) == ("pass", state, 0)


def test_enforce_preflight_in_preview_only_warns_about_up_permissions(tmp_path: Path) -> None:
    spec = preflight.load_spec(load_stack(path=stack_file(tmp_path)).ndfleet_config, "pf")
    transport = arm(permissions=ok("authorization-permissions-reader.json"))
    kwargs: dict[str, Any] = {"env": {}, "credential": FakeCredential(), "transport": transport, "retry": TINY_RETRY}
    assert preflight.enforce_preflight(spec, mode="preview", **kwargs) is None
    with pytest.raises(preflight.PreflightFailed) as raised:
        preflight.enforce_preflight(spec, mode="up", **kwargs)
    assert raised.value.exit_code == 1
    assert "FAIL    permissions" in str(raised.value)


# ----------------------------------------------------------------------------------------------------------
# Impact reporting (issue 17): the Impact Reporter role goes on the subscription; Microsoft.Impact is registered

IMPACT = {"health": {"impactReporting": True}}
SUB_SCOPE_PERMISSIONS = f"/subscriptions/{SUB}/providers/Microsoft.Authorization/permissions"


def _impact_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *, on_subscription: str, on_group: str = "", **config: Any
) -> Run:
    """Owner-like rights on the resource group (`on_group`), `on_subscription` on the subscription itself."""
    group_scope = [(r"/resourceGroups/[^/]+/providers/Microsoft\.Authorization/permissions\?", ok(on_group))]
    first = [*(group_scope if on_group else []), (SUBSCRIPTION_PERMISSIONS, ok(on_subscription))]
    return preflight_run(capsys, stack_file(tmp_path, **IMPACT, **config), arm(first=first))


def test_impact_reporter_needs_role_assignment_rights_on_the_subscription_not_only_the_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _impact_run(
        tmp_path, capsys, resourceGroupName="gpu-rg",
        on_group="authorization-permissions-owner.json", on_subscription="authorization-permissions-reader.json",
    )
    assert run.check("permissions")["status"] == "pass"  # everything on the group
    check = run.check("impact-reporter-permission")
    assert (check["status"], run.code) == ("fail", 1)
    assert check["figures"]["scope"] == f"/subscriptions/{SUB}"
    assert f"--scope /subscriptions/{SUB}" in check["fix"]


def test_impact_reporter_permission_reads_the_subscription_scope(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _impact_run(
        tmp_path, capsys, resourceGroupName="gpu-rg",
        on_group="authorization-permissions-owner.json", on_subscription="authorization-permissions-owner.json",
    )
    assert run.check("impact-reporter-permission")["status"] == "pass"
    paths = sorted(urlsplit(r.url).path for r in run.transport.calls("/providers/Microsoft.Authorization/permissions"))
    assert paths == [SUB_SCOPE_PERMISSIONS, f"/subscriptions/{SUB}/resourceGroups/gpu-rg/providers/"
                     "Microsoft.Authorization/permissions"]


def test_without_a_resource_group_the_subscription_permissions_are_read_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _impact_run(tmp_path, capsys, on_subscription="authorization-permissions-contributor.json")
    assert run.check("impact-reporter-permission")["status"] == "fail"  # Contributor cannot assign roles
    assert [urlsplit(r.url).path for r in run.transport.calls("/Microsoft.Authorization/permissions")] == [
        SUB_SCOPE_PERMISSIONS
    ]


def test_impact_provider_not_registered_fails_with_the_register_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transport = arm(impact_provider=ok("provider-microsoft-impact-not-registered.json"))
    run = preflight_run(capsys, stack_file(tmp_path, **IMPACT), transport)
    check = run.check("impact-provider")
    assert (check["status"], check["figures"]["state"], run.code) == ("fail", "NotRegistered", 1)
    assert "az provider register --namespace Microsoft.Impact" in check["fix"]
    [request] = transport.calls("/providers/Microsoft.Impact")
    assert urlsplit(request.url).path == f"/subscriptions/{SUB}/providers/Microsoft.Impact"


def test_impact_provider_registered_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path, **IMPACT), arm())
    assert run.check("impact-provider")["status"] == "pass" and run.code == 0


def test_impact_provider_unreadable_is_an_error_not_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm(impact_provider=[Reply(403, "error-403-authorization-failed.json")])
    run = preflight_run(capsys, stack_file(tmp_path, **IMPACT), transport)
    assert run.check("impact-provider")["status"] == "error" and run.code == 2


def test_impact_checks_are_absent_without_impact_reporting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path), arm())
    ids = {c["id"] for c in run.json()["checks"]}
    assert not ids & {"impact-provider", "impact-reporter-permission"}
    assert not run.transport.calls("/providers/Microsoft.Impact")


# ----------------------------------------------------------------------------------------------------------
# The Slurm machines count too: their own family's quota, and the regional total


def slurm_stack(tmp_path: Path, **config: Any) -> Path:
    return stack_file(tmp_path, scheduler="slurm", **config)


def test_slurm_machines_get_a_check_for_their_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, slurm_stack(tmp_path), arm())
    # Controller and one login node, Standard_D8s_v5 each (8 vCPUs): 16 of standardDSv5Family (24 of 100 in use).
    check = run.check("quota-family-standardDSv5Family")
    assert (check["status"], check["figures"]["needed"], check["figures"]["available"]) == ("pass", 16, 76)


def test_regional_total_counts_the_slurm_machines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, slurm_stack(tmp_path), arm())
    assert run.check("quota-regional")["figures"]["needed"] == 2 * 96 + 16


def test_slurm_machines_can_break_the_regional_total(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # cores: limit 200, none in use (usages-eastus-regional-short.json with cores' currentValue 0); two GPU nodes
    # (192, the fewest a Slurm island has) fit alone, not with the two Slurm VMs (16).
    path = slurm_stack(tmp_path, nodes=2)
    run = preflight_run(capsys, path, arm(usages=ok("usages-eastus-regional-200-free.json")))
    check = run.check("quota-regional")
    assert (run.code, check["status"], check["figures"]["missing"]) == (1, "fail", 8)


def test_slurm_family_shortfall_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Ten login nodes (80) and the controller (8) need 88 of standardDSv5Family; 76 are free.
    run = preflight_run(capsys, slurm_stack(tmp_path, slurm={"loginCount": 10}), arm())
    check = run.check("quota-family-standardDSv5Family")
    assert (run.code, check["status"], check["figures"]["missing"]) == (1, "fail", 12)


def test_slurm_size_vcpus_come_from_azure_sku(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Standard_D16s_v5's SKU entry (16 vCPUs, standardDSv5Family) plus a D8s_v5 login node.
    run = preflight_run(capsys, slurm_stack(tmp_path, slurm={"controllerVmSize": "Standard_D16s_v5"}), arm())
    assert run.check("quota-family-standardDSv5Family")["figures"]["needed"] == 24


def test_slurm_size_unknown_everywhere_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, slurm_stack(tmp_path, slurm={"controllerVmSize": "Standard_F8s_v2"}), arm())
    check = run.check("quota-family-Standard_F8s_v2")
    assert (run.code, check["status"]) == (1, "fail")
    assert "not offered there" in check["detail"]


def test_spot_gpu_nodes_leave_the_slurm_machines_on_cores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, slurm_stack(tmp_path, priority="Spot"), arm())
    spot, dedicated = run.check("quota-regional"), run.check("quota-regional-cores")
    assert (spot["figures"]["quotaName"], spot["figures"]["needed"]) == ("lowPriorityCores", 192)
    assert (dedicated["figures"]["quotaName"], dedicated["figures"]["needed"]) == ("cores", 16)


# ----------------------------------------------------------------------------------------------------------
# The image (issue 25): a pinned version is published in the stack's region; `latest` has at least one version.
# Recordings in the documented shapes of "Virtual Machine Images - Get" / "- List" (azure-rest-api-specs,
# VirtualMachineImages_Get / _List examples) and Resource Manager's 404 for an absent image (code NotFound,
# "Artifact: VMImage was not found.", as Azure/vagrant-azure issue 147 shows it).

PINNED = "microsoft-dsvm:ubuntu-hpc:2204:22.04.2024102301"
IMAGE_PATH = (
    f"/subscriptions/{SUB}/providers/Microsoft.Compute/locations/eastus/publishers/microsoft-dsvm/artifacttypes/"
    "vmimage/offers/ubuntu-hpc/skus/2204/versions"
)


def test_a_published_pinned_version_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm()
    run = preflight_run(capsys, stack_file(tmp_path, image=PINNED), transport)
    check = run.check("image-version")
    assert (check["status"], check["figures"]["published"], run.code) == ("pass", True, 0)
    [request] = transport.calls("/artifacttypes/vmimage/")
    assert urlsplit(request.url).path == f"{IMAGE_PATH}/22.04.2024102301"
    assert request.method == "GET" and request.headers["Authorization"] == "Bearer fake-arm-token"


def test_a_pinned_version_not_published_fails_naming_it_and_how_to_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transport = arm(image_version=[Reply(404, "error-404-vmimage-not-found.json")])
    run = preflight_run(capsys, stack_file(tmp_path, image=PINNED), transport, fmt="table")
    assert run.code == 1
    assert re.search(r"^FAIL\s+image-version\s+microsoft-dsvm:ubuntu-hpc:2204:22\.04\.2024102301 is not published in "
                     r"eastus \(Resource Manager answered 404\)", run.out, re.MULTILINE)
    assert ("az vm image list --location eastus --publisher microsoft-dsvm --offer ubuntu-hpc --sku 2204 --all "
            "--output table") in run.out
    assert len(transport.calls("/artifacttypes/vmimage/")) == 1  # a 404 is an answer, not retried


def test_latest_passes_with_the_newest_version_to_pin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transport = arm()
    check = preflight_run(capsys, stack_file(tmp_path), transport).check("image-version")  # the default, latest
    assert check["status"] == "pass"
    assert (check["figures"]["versions"], check["figures"]["newest"]) == (2, "22.04.2024102301")
    assert check["detail"].endswith("pin it to keep every node of an island on one image: " + PINNED)
    [request] = transport.calls("/artifacttypes/vmimage/")
    assert urlsplit(request.url).path == IMAGE_PATH  # the list, not a version called "latest"


@pytest.mark.parametrize(
    "reply", [Reply(200, "compute-image-versions-empty.json"), Reply(404, "error-404-vmimage-not-found.json")]
)
def test_latest_of_an_image_without_versions_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reply: Reply
) -> None:
    path = stack_file(tmp_path, image="microsoft-dsvm:ubuntu-hpc:2205:latest")
    run = preflight_run(capsys, path, arm(image_versions=[reply]))
    check = run.check("image-version")
    assert (check["status"], check["figures"]["published"], run.code) == ("fail", False, 1)
    assert check["detail"] == (
        "microsoft-dsvm:ubuntu-hpc:2205 has no version published in eastus, so 'latest' resolves to nothing"
    )
    assert "--sku 2205 --all" in check["fix"]


def test_image_versions_unreadable_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = preflight_run(capsys, stack_file(tmp_path, image=PINNED),
                        arm(image_version=[Reply(403, "error-403-authorization-failed.json")]))  # fmt: skip
    check = run.check("image-version")
    assert (check["status"], run.code) == ("error", 2)
    assert check["detail"].startswith(f"could not check: no permission to read the versions of image {PINNED}")


def test_newest_version_compares_numbers_as_numbers() -> None:
    from ndfleet.preflight.images import newest_version

    assert newest_version(("22.04.2024102301", "22.04.999", "22.04.2024043001")) == "22.04.2024102301"
    assert newest_version(("1.9.0", "1.10.0")) == "1.10.0"
