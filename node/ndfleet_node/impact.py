"""`ndfleet-node impact report`: tell Azure this node's host is bad (Guest Health Reporting), then go Unhealthy.

    ndfleet-node impact report [--validator-report /run/ndfleet/report.json] [--check ID --detail TEXT]

For each failed check with a hardware category (`impact_categories.py`) the node files one impact,
`PUT {arm}/subscriptions/{sub}/providers/Microsoft.Impact/workloadImpacts/{name}?api-version=...` with body

    {"properties": {"startDateTime", "impactCategory", "impactDescription",
                    "impactedResourceId", "additionalProperties": {"PhysicalHostName", "VmUniqueId"}}}

(Microsoft Learn, "Report guest health status": PhysicalHostName or VmUniqueId required, PhysicalHostName
preferred; `reportedTimeUtc` is set by Azure, read-only in the Microsoft.Impact API, so it is not sent). The token
comes from the instance metadata service for the node's managed identity (it needs the Impact Reporter role); the
subscription, resource id and VM id from IMDS compute metadata; PhysicalHostName from Hyper-V's KVP pool 3, the
key/value pairs the host gives the guest. A 429 is retried after its Retry-After; a 403 means the subscription is
not onboarded or the identity lacks the role, said plainly.

Every answer is bounded (`net.fetch`: IMPACT_CAP and IMDS_CAP bytes, HTTP_DEADLINE_S for the whole answer), so a
server that drips a byte a second cannot hold the node; an error body of any shape and a Retry-After of any value
(`nan`, negative, huge, a date) are handled, never a crash. Whatever happens with Azure, the node is
then marked Unhealthy in the same report file, its mode and owner kept (the health endpoint reads it as another
user).

Only when the stack opted in (`ndfleet:health.impactReporting`, node JSON `impact.enabled`): otherwise the
node logs the exact request it would have sent. Either way it then marks itself Unhealthy (a failed check in
the validator report the health endpoint serves), so automatic repairs act: after the report, Azure moves the
replacement off the bad host.

Exit 0 reported (or logged), 1 Azure refused or could not be reached, 2 could not run (no node JSON, no KVP).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ndfleet_node import config as node_config
from ndfleet_node.impact_categories import category_for
from ndfleet_node.names import TAG_IDENTITY_CLIENT_ID
from ndfleet_node.net import (
    ARM,
    IMDS,
    IMDS_CAP,
    IMPACT_CAP,
    MAX_RETRY_AFTER_S,  # noqa: F401 - part of this module's bounds (tests read it here)
    FetchError,
    Http,
    Reply,
    Service,
    fetch,
    retry_after_s,
)
from ndfleet_node.report import MAX_REPORT_BYTES, read_regular, write_atomic
from ndfleet_node.text import clip, decode

KVP_POOL_3 = Path("/var/lib/hyperv/.kvp_pool_3")
KVP_KEY_BYTES = 512  # HV_KVP_EXCHANGE_MAX_KEY_SIZE (Linux include/uapi/linux/hyperv.h)
KVP_VALUE_BYTES = 2048  # HV_KVP_EXCHANGE_MAX_VALUE_SIZE
IMDS_TOKEN_API = "2018-02-01"
IMDS_INSTANCE_API = "2021-02-01"
DEFAULT_API_VERSION = "2023-02-01-preview"  # the version the Guest Health Reporting page gives
VALIDATOR_REPORT = Path("/run/ndfleet/report.json")
MAX_ATTEMPTS = 4


class ImpactError(Exception):
    """Could not report: the message says why and what to do."""


# ------------------------------------------------------------------------------------------------ KVP


def parse_kvp(data: bytes) -> dict[str, str]:
    """Hyper-V KVP pool file: fixed records of a 512-byte key and a 2048-byte value, UTF-8, NUL-padded."""
    size = KVP_KEY_BYTES + KVP_VALUE_BYTES
    pairs: dict[str, str] = {}
    for offset in range(0, len(data) - size + 1, size):
        key = data[offset : offset + KVP_KEY_BYTES].split(b"\0", 1)[0].decode("utf-8", "replace")
        value = data[offset + KVP_KEY_BYTES : offset + size].split(b"\0", 1)[0].decode("utf-8", "replace")
        if key:
            pairs[key] = value
    return pairs


def physical_host_name(pool: Path = KVP_POOL_3) -> str:
    try:
        pairs = parse_kvp(pool.read_bytes())
    except OSError as exc:
        why = exc.strerror or exc
        raise ImpactError(f"cannot read Hyper-V KVP pool {pool}: {why} (is hv_kvp_daemon running?)") from None
    name = pairs.get("PhysicalHostName") or pairs.get("PhysicalHostNameFullyQualified", "").split(".")[0]
    if not name:
        raise ImpactError(f"no PhysicalHostName in {pool} (keys: {', '.join(sorted(pairs)) or 'none'})")
    return name


# ------------------------------------------------------------------------------------------------ IMDS


@dataclass(frozen=True)
class Instance:
    subscription_id: str
    resource_id: str
    vm_id: str
    name: str
    tags: dict[str, str] = field(default_factory=dict)


def _imds_get(imds: str, url: str) -> Reply:
    try:
        return fetch(Service("imds", imds, IMDS_CAP), "GET", url, {})
    except FetchError as exc:
        raise ImpactError(f"instance metadata: {exc}") from None


def imds_instance(imds: str = IMDS) -> Instance:
    reply = _imds_get(imds, f"{imds}/metadata/instance/compute?api-version={IMDS_INSTANCE_API}")
    doc = reply.json()
    if reply.status != 200 or not isinstance(doc, dict):
        raise ImpactError(f"instance metadata answered HTTP {reply.status}")
    tags = {t.get("name", ""): t.get("value", "") for t in doc.get("tagsList") or [] if isinstance(t, dict)}
    try:
        return Instance(doc["subscriptionId"], doc["resourceId"], doc["vmId"], doc.get("name", ""), tags)
    except KeyError as exc:
        raise ImpactError(f"instance metadata lacks {exc}") from None


def imds_token(imds: str = IMDS, client_id: str = "", resource: str = ARM + "/") -> str:
    query = {"api-version": IMDS_TOKEN_API, "resource": resource}
    if client_id:
        query["client_id"] = client_id
    url = f"{imds}/metadata/identity/oauth2/token?{urllib.parse.urlencode(query)}"
    reply = _imds_get(imds, url)
    doc = reply.json()
    if reply.status != 200 or not isinstance(doc, dict) or not doc.get("access_token"):
        detail = doc.get("error_description", "") if isinstance(doc, dict) else ""
        raise ImpactError(f"no managed-identity token from instance metadata (HTTP {reply.status}) {detail}".strip())
    return str(doc["access_token"])


# ------------------------------------------------------------------------------------------------ the impact


def impact_body(category: str, description: str, instance: Instance, host: str, now: datetime) -> dict[str, Any]:
    return {
        "properties": {
            "startDateTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "impactCategory": category,
            "impactDescription": description[:1000],
            "impactedResourceId": instance.resource_id,
            "additionalProperties": {"PhysicalHostName": host, "VmUniqueId": instance.vm_id},
        }
    }


@dataclass
class Filed:
    category: str
    name: str
    url: str
    body: dict[str, Any]
    sent: bool = False
    status: int | None = None
    attempts: int = 0
    error: str = ""
    waits_s: list[float] = field(default_factory=list)


def _one_line(value: object, limit: int = 300) -> str:
    """A value from the server, as one printable line for the log."""
    text = value if isinstance(value, str) else json.dumps(value) if value is not None else ""
    return clip(" ".join(decode(text).split()), limit)


def _error_text(reply: Reply) -> str:
    """`code: message` from Resource Manager's error body {"error": {"code", "message"}}, whatever shape the body
    really has (a string, numbers, nothing): never raises."""
    doc = reply.json()
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        code, message = _one_line(error.get("code")), _one_line(error.get("message"))
    else:
        code, message = "", _one_line(error if error is not None else doc.get("message") if isinstance(doc, dict)
                                      else None)  # fmt: skip
    return f"{code}: {message}" if code and message else code or message or "no error details"


def send_impact(filed: Filed, token: str, send: Http, sleep: Callable[[float], None] = time.sleep) -> Filed:
    """PUT the impact; retry 429 and 5xx after Retry-After (bounded); explain 401/403."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    data = json.dumps(filed.body).encode()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        filed.attempts = attempt
        try:
            reply = send("PUT", filed.url, headers, data)
        except FetchError as exc:  # unreachable, or no whole answer within the deadline or the cap
            filed.error = str(exc)
            return filed
        filed.status = reply.status
        if reply.status in (200, 201, 202):
            filed.sent = True
            return filed
        if reply.status == 429 or reply.status >= 500:
            if attempt < MAX_ATTEMPTS:
                wait = retry_after_s(reply, attempt)
                filed.waits_s.append(wait)
                sleep(wait)
                continue
            filed.error = f"still HTTP {reply.status} after {attempt} attempts ({_error_text(reply)})"
            return filed
        if reply.status == 403:
            filed.error = (
                f"refused (HTTP 403 {_error_text(reply)}): the subscription must be onboarded to Guest Health "
                "Reporting (register Microsoft.Impact and the 'Allow Impact Reporting' preview feature, then ask "
                "Azure to allow-list it) and the node identity needs the Impact Reporter role (docs/burnin.md)"
            )
        else:
            filed.error = f"refused (HTTP {reply.status} {_error_text(reply)})"
        return filed
    return filed


# ------------------------------------------------------------------------------------------------ unhealthy


def read_report(path: Path) -> dict[str, Any]:
    """A validator report as an object, read within MAX_REPORT_BYTES. Raises ImpactError saying why not."""
    try:
        raw = read_regular(str(path))
    except OSError as exc:
        raise ImpactError(f"cannot read validator report {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_REPORT_BYTES:
        raise ImpactError(f"validator report {path} is over {MAX_REPORT_BYTES} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ImpactError(f"validator report {path} is not JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise ImpactError(f"validator report {path} is not a JSON object")
    return doc


def _checks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    checks = doc.get("checks")
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []


def mark_unhealthy(report: Path, check_id: str, message: str) -> None:
    """Add a failed check to the validator report the health endpoint serves (atomically, keeping the file's mode
    and owner, so the endpoint, another user, can still read it): it answers Unhealthy."""
    try:
        doc = read_report(report)
    except ImpactError:
        doc = {}
    checks = [c for c in _checks(doc) if c.get("id") != check_id]
    checks.append({"id": check_id, "status": "fail", "value": message, "expected": "healthy", "message": message})
    doc.update(status="unhealthy", checks=checks)
    report.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(str(report), json.dumps(doc, indent=2, ensure_ascii=True) + "\n", keep_owner=True)


def failed_marker_path(config: Path | None) -> Path | None:
    """The failure marker the health endpoint reads (node JSON paths.failed_marker); None when the JSON has none."""
    try:
        paths = node_config.load(str(config) if config is not None else None).data.get("paths")
    except node_config.ConfigError:
        return None
    marker = paths.get("failed_marker") if isinstance(paths, dict) else None
    return Path(marker) if isinstance(marker, str) and marker.startswith("/") else None


def mark_failed(marker: Path | None, check_id: str, message: str, log: Callable[[str], None]) -> None:
    """Append the failed check to the failure marker (the endpoint answers Unhealthy while it exists)."""
    if marker is None:
        log(f"{check_id}: no failure marker in the node JSON; the next health check may turn the node Healthy")
        return
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        with marker.open("a", encoding="utf-8") as f:
            f.write(f"impact: {_one_line(check_id, 200)}: {_one_line(message, 1000)}\n")
    except OSError as exc:
        log(f"{check_id}: cannot write the failure marker {marker}: {exc.strerror or exc}")


# ------------------------------------------------------------------------------------------------ CLI


def failed_checks(args: argparse.Namespace) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if args.validator_report is not None:
        doc = read_report(Path(args.validator_report))
        out += [(_one_line(c["id"], 200), _one_line(c.get("message", ""), 1000)) for c in _checks(doc)
                if c.get("status") == "fail" and "id" in c]  # fmt: skip
    # A check both in the report and on the command line (the Epilog's measured floor) is filed once, as reported.
    out += [(check, args.detail or check) for check in args.check or [] if check not in {c for c, _ in out}]
    return out


def load_impact_settings(path: str | Path | None) -> dict[str, Any]:
    try:
        cfg = node_config.load(str(path) if path is not None else None)
    except node_config.ConfigError as exc:
        raise ImpactError(str(exc)) from None
    section = cfg.data.get("impact")
    if not isinstance(section, dict) or not isinstance(section.get("enabled"), bool):
        raise ImpactError(f"node JSON {cfg.path}: 'impact.enabled' must be true or false")
    return section


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("impact", help="report this node's bad host to Azure (Guest Health Reporting)")
    sub = p.add_subparsers(dest="impact_command", metavar="ACTION", required=True)
    r = sub.add_parser("report", help="file impacts for the failed checks, then mark the node Unhealthy")
    r.add_argument("--validator-report", type=Path, default=None, help="failed checks from this validator report")
    r.add_argument("--check", action="append", help="a failed check id (e.g. burnin.busbw-below-floor)")
    r.add_argument("--detail", default="", help="what was measured, for --check")
    r.add_argument("--config", type=Path, default=None, help="node JSON (default: /etc/ndfleet/node.json)")
    r.add_argument("--health-report", type=Path, default=VALIDATOR_REPORT, help="report the endpoint serves")
    r.add_argument("--kvp-pool", type=Path, default=KVP_POOL_3)
    r.set_defaults(handler=run_report)


def run_report(
    args: argparse.Namespace, *, sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
) -> int:  # fmt: skip
    def log(line: str) -> None:
        print(f"impact: {line}", file=sys.stderr, flush=True)

    try:
        settings = load_impact_settings(args.config)
        failed = failed_checks(args)
    except ImpactError as exc:
        log(str(exc))
        return 2
    reportable = [(c, m, cat) for c, m in failed if (cat := category_for(c, m)) is not None]
    for check, message in failed:
        if category_for(check, message) is None:
            log(f"{check}: not a host fault Azure takes reports for; not reported")
    code = 0
    try:
        if reportable:
            code = _file_all(reportable, settings, args.kvp_pool, sleep, now(), log)
    finally:
        # Checks given on the command line (the burn-in's) are not in the report the endpoint serves yet: add them,
        # whatever happened with Azure (even an error nobody foresaw), so automatic repairs still act.
        explicit = [(c, m) for c, m in failed if c in (args.check or [])]
        for check, message in explicit:
            mark_unhealthy(args.health_report, check, message)
            # The health check's next quick validation rewrites that report, and passes (a bad cable shows only
            # in the burn-in's tests): the failure marker, which the endpoint also reads and only a new boot's
            # set-up clears, keeps the node Unhealthy until automatic repairs act (seen in the twin's repair loop).
            mark_failed(failed_marker_path(args.config), check, message, log)
        if explicit:
            log(f"marked Unhealthy in {args.health_report}: {', '.join(c for c, _ in explicit)}")
    return code


def _file_all(
    reportable: list[tuple[str, str, str]], settings: dict[str, Any], kvp_pool: Path,
    sleep: Callable[[float], None], now: datetime, log: Callable[[str], None],
) -> int:  # fmt: skip
    """File (or, opted out, log) one impact per reportable failed check. Exit code: 0, 1 refused, 2 no facts."""
    imds = str(settings.get("imds_endpoint", IMDS))
    arm = str(settings.get("arm_endpoint", ARM)).rstrip("/")
    api = str(settings.get("api_version", DEFAULT_API_VERSION))
    enabled = bool(settings["enabled"])
    try:
        host = physical_host_name(kvp_pool)
        send = Service("arm", arm, IMPACT_CAP).send  # the token below is for this host, and goes to no other
        instance = imds_instance(imds)
        # Which identity: the node JSON's, else the scale set's tag (set when a VM carries several identities).
        client_id = str(settings.get("identity_client_id") or instance.tags.get(TAG_IDENTITY_CLIENT_ID, ""))
        token = imds_token(imds, client_id, arm + "/") if enabled else ""
    except (ImpactError, FetchError) as exc:
        log(str(exc))
        return 2
    code = 0
    for check, message, category in reportable:
        name = str(uuid.uuid4())
        url = f"{arm}/subscriptions/{instance.subscription_id}/providers/Microsoft.Impact/workloadImpacts/{name}"
        body = impact_body(category, f"{check}: {message}", instance, host, now)
        filed = Filed(category, name, f"{url}?api-version={api}", body)
        if not enabled:
            log(f"impact reporting is off for this stack (ndfleet:health.impactReporting); would send PUT "
                f"{filed.url} {json.dumps(filed.body, sort_keys=True)}")  # fmt: skip
            continue
        send_impact(filed, token, send, sleep)
        if filed.sent:
            log(f"{check}: filed {category} as {name} (HTTP {filed.status}, {filed.attempts} attempt(s))")
        else:
            log(f"{check}: {category} not filed: {filed.error}")
            code = 1
    return code
