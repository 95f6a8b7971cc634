"""The twin's stand-ins for what Azure provides around a VM, each answering as the real service documents.

- Instance metadata service (http://169.254.169.254, Microsoft Learn "Azure Instance Metadata Service"): the caller
  is known by its address; `Metadata: true` is required (400 without it, as IMDS answers); tagsList, userData (base64),
  compute, and managed-identity tokens (`/metadata/identity/oauth2/token`) for the machine's own identity only.
- Key Vault (`https://<vault>.vault.azure.net/secrets/<name>?api-version=7.4`, Microsoft Learn "Get Secret"): 401
  without a bearer token issued for `https://vault.azure.net`, 403 for an identity without a role on the vault
  (RBAC propagation is simulated by `vault_denied`), 404 for an unknown secret, else {"value": ...}. A secret keeps
  its versions (`set_secret`: a deployment writing a new value makes a new version, the latest is the current one):
  `GET .../secrets/<name>/<version>` is that version (Learn, "Get Secret": the `secret-version` path parameter),
  `GET .../secrets/<name>/versions` lists them without values, `{"value": [{"id", "attributes": {"enabled",
  "created", "updated"}}], "nextLink": null}` (Learn, Key Vault REST 7.4 "Get Secret Versions"; one page, at most
  `maxresults` items, 25 when not given): what a node on an older model reads its bundle part from.
- Microsoft's package repository (https://packages.microsoft.com: `/keys/microsoft.asc` and `/repos/<name>/`), and
  the distribution archive the image's apt uses (http): static files the twin built (tests/twin/aptrepo.py).
- A Prometheus remote-write receiver (the Azure Monitor ingestion endpoint): counts accepted POSTs per node.
- Resource Manager (`https://management.azure.com`): the elastic islands' scale sets, in tests/twin/arm.py; the
  Impact API (Guest Health Reporting), in tests/twin/repairs.py; the reads of `ndfleet status` (scale sets, instance
  views with `vmHealth`, the monitoring workspace), in tests/twin/status_arm.py.
- The Azure Monitor workspace's query endpoint, a real Prometheus behind a token check: tests/twin/workspace.py.

All servers run in the twin's own network namespace; nothing here can reach or be reached from outside it.
"""

from __future__ import annotations

import json
import secrets
import ssl
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

VAULT_AUDIENCE = "https://vault.azure.net"
MONITOR_AUDIENCE = "https://monitor.azure.com"


@dataclass
class CloudState:
    """What the stand-ins know: the machines by address, the vault's secrets, the tokens they issued."""

    machines_by_ip: dict[str, Any] = field(default_factory=dict)
    vault_name: str | None = None
    secrets: dict[str, str] = field(default_factory=dict)
    # secret name -> its versions, oldest first: (version id, value, created as Unix time); see `set_secret`
    secret_versions: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)
    vault_denied: set[str] = field(default_factory=set)  # client ids whose role assignment has not propagated yet
    tokens: dict[str, tuple[str, str]] = field(default_factory=dict)  # token -> (client id, audience)
    repo_dirs: dict[str, Path] = field(default_factory=dict)  # host -> folder served as static files
    remote_writes: Counter = field(default_factory=Counter)
    arm: Any = None  # the Resource Manager stand-in (tests/twin/arm.py), when the plan has elastic islands
    impact: Any = None  # the Impact API stand-in (tests/twin/repairs.py)
    status_reads: Any = None  # the reads of `ndfleet status` (tests/twin/status_arm.py)
    requests: list[tuple[str, str, str, int]] = field(default_factory=list)  # (client, host, path, status)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def versions(self, name: str) -> list[tuple[str, str, int]]:
        """The secret's versions, oldest first (a value set before any `set_secret` is its first version)."""
        with self.lock:
            if name not in self.secret_versions and name in self.secrets:
                self.secret_versions[name] = [(secrets.token_hex(16), self.secrets[name], int(time.time()) - 1)]
            return list(self.secret_versions.get(name, ()))

    def set_secret(self, name: str, value: str) -> None:
        """A deployment's write of the secret: a new version when the value changed, which is now the current one."""
        versions = self.versions(name)
        with self.lock:
            if versions and versions[-1][1] == value:
                return
            self.secret_versions.setdefault(name, []).append((secrets.token_hex(16), value, int(time.time())))
            self.secrets[name] = value

    def log(self, client: str, host: str, path: str, status: int) -> None:
        with self.lock:
            self.requests.append((client, host, path.split("?")[0], status))


class _Handler(BaseHTTPRequestHandler):
    state: CloudState
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, status: int, body: bytes | str | Any, ctype: str = "application/json") -> None:
        if not isinstance(body, bytes | str):
            body = json.dumps(body)
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        host = (self.headers.get("Host") or "").split(":")[0]
        self.state.log(self.client_address[0], host, self.path, status)

    def _static(self, root: Path, path: str) -> None:
        target = (root / urllib.parse.unquote(path).lstrip("/")).resolve()
        if not str(target).startswith(str(root.resolve())) or not target.is_file():
            self._send(404, "not found\n", "text/plain")
            return
        self._send(200, target.read_bytes(), "application/octet-stream")


class ImdsHandler(_Handler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.headers.get("Metadata", "").lower() != "true":
            self._send(400, {"error": "Bad request. Required metadata header not specified"})
            return
        machine = self.state.machines_by_ip.get(self.client_address[0])
        if machine is None:
            self._send(404, {"error": "unknown caller"})
            return
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if "api-version" not in query:
            self._send(400, {"error": "Bad request. api-version was not specified in the request"})
            return
        tags = [{"name": k, "value": v} for k, v in sorted(machine.tags.items())]
        group = machine.extra.get("resource_group") or "twin"
        compute = {
            # A scale-set instance is named and addressed as its scale set's instance (tests/twin/arm.py).
            "name": machine.extra.get("vm_name", machine.name),
            "vmId": f"00000000-0000-4000-8000-{abs(hash(machine.name)) % 10**12:012d}",
            "resourceId": machine.extra.get("resource_id")
            or f"/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/{group}/providers/"
            f"Microsoft.Compute/virtualMachines/{machine.name}",
            "subscriptionId": "00000000-0000-0000-0000-000000000000",
            "location": "eastus",
            "tagsList": tags,
        }
        if url.path == "/metadata/instance/compute/tagsList":
            self._send(200, tags)
        elif url.path == "/metadata/instance/compute/userData":
            self._send(200, machine.user_data or "", "text/plain")
        elif url.path == "/metadata/instance/compute":
            self._send(200, compute)
        elif url.path == "/metadata/instance":
            self._send(200, {"compute": compute, "network": {}})
        elif url.path == "/metadata/identity/oauth2/token":
            client_id = query.get("client_id", machine.identity_client_id)
            if client_id != machine.identity_client_id:
                self._send(400, {"error": "invalid_request", "error_description": "Identity not found"})
                return
            resource = query.get("resource", "").rstrip("/").removesuffix("/.default")
            token = secrets.token_urlsafe(24)
            with self.state.lock:
                self.state.tokens[token] = (client_id, resource)
            self._send(
                200,
                {
                    "access_token": token,
                    "expires_in": "86399",
                    "expires_on": str(int(time.time()) + 86399),
                    "resource": query.get("resource", ""),
                    "token_type": "Bearer",
                    "client_id": client_id,
                },
            )
        else:
            self._send(404, {"error": "not found"})


class ServicesHandler(_Handler):
    """Key Vault, Microsoft's package repository, the archive and the ingestion endpoint, told apart by Host."""

    def _arm(self) -> bool:
        """Resource Manager's requests go to its stand-in; True when this was one."""
        host = (self.headers.get("Host") or "").split(":")[0]
        if host != "management.azure.com":
            return False
        reads = self.state.status_reads
        if reads is not None and reads.handles(self.command, self.path):
            status_code, answer = reads.handle(self.command, self.path, self.headers)
            self._send(status_code, answer)
            return True
        if self.state.arm is None:
            return False
        length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
        body = self.rfile.read(length) if length else b""
        status, doc, headers = self.state.arm.handle(self.command, self.path, self.headers, body)
        data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        self.send_response(status)
        for key, value in {**headers, "Content-Type": "application/json", "Content-Length": str(len(data))}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.state.log(self.client_address[0], host, self.path, status)
        return True

    def _impact(self) -> bool:
        """Guest Health Reporting's PUTs go to the Impact API stand-in; True when this was one."""
        host = (self.headers.get("Host") or "").split(":")[0]
        if self.state.impact is None or host != "management.azure.com" or not self.state.impact.handles(self.path):
            return False
        length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
        body = self.rfile.read(length) if length else b""
        status, doc = self.state.impact.handle(self.command, self.path, self.headers, body)
        self._send(status, doc)
        return True

    def do_PATCH(self) -> None:  # noqa: N802
        if not self._impact() and not self._arm():
            self._send(405, {"error": "method not allowed"})

    do_PUT = do_PATCH

    def do_GET(self) -> None:  # noqa: N802
        if self.command == "GET" and self._arm():
            return
        host = (self.headers.get("Host") or "").split(":")[0]
        url = urllib.parse.urlsplit(self.path)
        if host in self.state.repo_dirs:
            self._static(self.state.repo_dirs[host], url.path)
        elif self.state.vault_name and host == f"{self.state.vault_name}.vault.azure.net":
            self._vault(url)
        else:
            self._send(404, {"error": f"no stand-in for {host}"})

    do_HEAD = do_GET

    def _vault(self, url: urllib.parse.SplitResult) -> None:
        auth = self.headers.get("Authorization", "")
        issued = self.state.tokens.get(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if issued is None or issued[1] != VAULT_AUDIENCE:
            self._send(401, {"error": {"code": "Unauthorized", "message": "AKV10000: Request is missing a Bearer"}})
            return
        if issued[0] in self.state.vault_denied:
            self._send(403, {"error": {"code": "Forbidden", "message": "Caller is not authorized to perform action"}})
            return
        parts = url.path.strip("/").split("/")
        missing = {"error": {"code": "SecretNotFound", "message": "A secret with (name/id) was not found"}}
        if len(parts) not in (2, 3) or parts[0] != "secrets" or parts[1] not in self.state.secrets:
            self._send(404, missing)
            return
        host = self.headers.get("Host") or url.netloc
        versions = self.state.versions(parts[1])
        if len(parts) == 3 and parts[2] == "versions":
            query = dict(urllib.parse.parse_qsl(url.query))
            try:
                most = int(query.get("maxresults", "25"))
            except ValueError:
                most = 0
            if not 1 <= most <= 25:
                self._send(400, {"error": {"code": "BadParameter", "message": "maxresults must be 1 to 25"}})
                return
            items = [{"id": f"https://{host}/secrets/{parts[1]}/{vid}",
                      "attributes": {"enabled": True, "created": created, "updated": created}}
                     for vid, _, created in reversed(versions)][:most]  # fmt: skip
            self._send(200, {"value": items, "nextLink": None})
            return
        if len(parts) == 3:
            found = next((value for vid, value, _ in versions if vid == parts[2]), None)
            if found is None:
                self._send(404, missing)
                return
            self._send(200, {"value": found, "id": f"https://{host}/secrets/{parts[1]}/{parts[2]}"})
            return
        current = versions[-1][0] if versions else ""
        self._send(200, {"value": self.state.secrets[parts[1]], "id": f"https://{host}/secrets/{parts[1]}/{current}"})

    def do_POST(self) -> None:  # noqa: N802
        if self._arm():
            return
        length = min(int(self.headers.get("Content-Length") or 0), 16 << 20)
        self.rfile.read(length)
        if "/api/v1/write" in self.path:
            # Azure Monitor's ingestion takes an Entra token for https://monitor.azure.com (the identity's role on the
            # data collection rule is the plan's business, checked under the mocks).
            auth = self.headers.get("Authorization", "")
            issued = self.state.tokens.get(auth.removeprefix("Bearer ").strip())
            if issued is None or issued[1] != MONITOR_AUDIENCE:
                self._send(401, {"error": {"code": "InvalidToken", "message": "no token for Azure Monitor"}})
                return
            with self.state.lock:
                self.state.remote_writes[self.client_address[0]] += 1
            self._send(200, b"", "text/plain")
        else:
            self._send(404, {"error": "not found"})


def serve(handler: type[_Handler], state: CloudState, address: str, port: int, tls: ssl.SSLContext | None = None):
    cls = type(f"{handler.__name__}Bound", (handler,), {"state": state})
    server = ThreadingHTTPServer((address, port), cls)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, name=f"standin-{address}:{port}", daemon=True).start()
    return server
