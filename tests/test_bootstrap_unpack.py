"""The boot step (templates/node/ndfleet-unpack.py) as the node runs it: python3, the manifest customData carries,
the userData from an instance-metadata stand-in on 127.0.0.1, and a fake systemctl that records what it is asked."""

from __future__ import annotations

import ast
import base64
import contextlib
import dataclasses
import hashlib
import http.server
import json
import lzma
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ndfleet.nodefiles import bootstrap, nodebundle
from ndfleet.nodefiles.machinefile import MachineFile
from ndfleet.prepare import bootstrap_extensions, prepare
from ndfleet.stackconfig.config import load_spec
from ndfleet.stackconfig.stackfile import load_stack
from tests.impact.arm_server import Reply as ArmReply
from tests.impact.arm_server import serve as serve_arm
from tests.test_health_endpoint import loopback_up

UNPACK = bootstrap.UNPACK_SOURCE
TIMEOUT_S = 120  # generous: a loaded 2-core machine


def rendered(stack: str, *, vault: bool = False) -> bootstrap.RenderedBootstrap:
    """The stack's first island; its bundle in userData (as a stack without Slurm's vault has it) unless `vault`."""
    spec = load_spec(load_stack(stack).ndfleet_config, stack)
    ext = bootstrap_extensions(spec, spec.islands[0])
    if ext is not None and not vault:
        ext = dataclasses.replace(ext, bundle_vault=None)
    return bootstrap.render_bootstrap(spec, spec.islands[0], ext)


@pytest.fixture(scope="module")
def dev() -> bootstrap.RenderedBootstrap:
    return rendered("dev")


@pytest.fixture(autouse=True)
def _loopback() -> None:
    loopback_up()


@dataclass
class Imds:
    """Serves `answers` in turn (then the last one again): (status, body). Records each request's Metadata header."""

    answers: list[tuple[int, bytes]]
    headers: list[str | None] = field(default_factory=list)
    url: str = ""


@contextlib.contextmanager
def imds(answers: list[tuple[int, bytes]]) -> Iterator[Imds]:
    state = Imds(answers)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.headers.append(self.headers.get("Metadata"))
            status, body = state.answers[min(len(state.headers), len(state.answers)) - 1]
            if self.headers.get("Metadata") != "true":
                status, body = 400, b'{"error": "Bad request. Required metadata header not specified"}'
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/metadata/instance/compute/userData"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Node:
    root: Path
    manifest: Path
    calls: Path  # what the fake systemctl was asked, one line per call
    bin: Path

    def run(self, *extra: str, systemctl_rc: int = 0) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}", "FAKE_SYSTEMCTL_RC": str(systemctl_rc)}
        argv = [sys.executable, str(UNPACK), "--manifest", str(self.manifest), "--root", str(self.root), *extra]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)

    def activated(self) -> list[list[str]]:
        return [line.split(" ") for line in self.calls.read_text().splitlines()] if self.calls.exists() else []

    def marker(self) -> str:
        path = self.root / "run/ndfleet/failed"
        return path.read_text() if path.exists() else ""


def node(tmp_path: Path, r: bootstrap.RenderedBootstrap, url: str, **overrides: Any) -> Node:
    """A node's disk with the boot step's manifest as customData wrote it, pointed at the IMDS stand-in."""
    manifest = {**json.loads(r.files["bundle.json"]), "url": url, "backoff_max_s": 1, **overrides}
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(manifest))
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "systemctl.calls"
    (fake / "systemctl").write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexit "${{FAKE_SYSTEMCTL_RC:-0}}"\n')
    (fake / "systemctl").chmod(0o755)
    root = tmp_path / "root"
    root.mkdir()
    return Node(root, path, calls, fake)


def test_first_boot_writes_every_bundle_file_with_its_mode_and_activates(tmp_path, dev):
    with imds([(200, dev.vm_user_data.encode())]) as service:
        n = node(tmp_path, dev, service.url)
        done = n.run()
    assert done.returncode == 0, done.stderr
    manifest = json.loads(dev.files["bundle.json"])
    files, activate = nodebundle.unpack(dev.vm_user_data, manifest["island"], manifest["boot_version"])
    for f in files:
        on_disk = n.root / f.path.lstrip("/")
        assert on_disk.read_bytes() == f.data, f.path
        assert stat.S_IMODE(on_disk.stat().st_mode) == f.mode, f.path
    assert [["systemctl", *c] for c in n.activated()] == activate
    stamp = (n.root / "var/lib/ndfleet/bundle.sha256").read_text().strip()
    assert stamp == json.loads(dev.files["bundle.json"])["sha256"]
    assert service.headers == ["true"]


def test_a_later_boot_finds_the_stamp_and_fetches_nothing(tmp_path, dev):
    with imds([(200, dev.vm_user_data.encode())]) as service:
        n = node(tmp_path, dev, service.url)
        assert n.run().returncode == 0
        calls = n.activated()
        again = n.run()
    assert again.returncode == 0, again.stderr
    assert len(service.headers) == 1  # no second request
    assert n.activated() == calls  # nothing activated twice
    assert "nothing to do" in again.stderr


def test_a_user_data_from_another_deployment_is_refused(tmp_path, dev):
    other = rendered("h200")
    with imds([(200, other.vm_user_data.encode())]) as service:
        n = node(tmp_path, dev, service.url)
        done = n.run()
    assert done.returncode == 1
    assert "different deployments" in done.stderr and "different deployments" in n.marker()
    assert not (n.root / "opt").exists() and n.activated() == []
    assert not (n.root / "var/lib/ndfleet/bundle.sha256").exists()


def test_answers_the_metadata_service_asks_to_retry_are_retried(tmp_path, dev):
    with imds([(503, b"busy"), (429, b"slow down"), (200, dev.vm_user_data.encode())]) as service:
        n = node(tmp_path, dev, service.url)
        done = n.run()
    assert done.returncode == 0, done.stderr
    assert len(service.headers) == 3


def test_an_unreachable_metadata_service_fails_after_the_bounded_attempts(tmp_path, dev):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    n = node(tmp_path, dev, f"http://127.0.0.1:{port}/userData", attempts=3, timeout_s=2)
    done = n.run()
    assert done.returncode == 1
    assert "after 3 attempts" in n.marker()


def test_an_oversized_user_data_is_refused_without_retrying(tmp_path, dev):
    with imds([(200, b"A" * 90_000)]) as service:
        n = node(tmp_path, dev, service.url)
        done = n.run()
    assert done.returncode == 1
    assert "longer than Azure's 87,384 characters" in n.marker()
    assert len(service.headers) == 1


def test_a_failed_activation_leaves_no_stamp_so_the_next_boot_redoes_it(tmp_path, dev):
    with imds([(200, dev.vm_user_data.encode())]) as service:
        n = node(tmp_path, dev, service.url)
        failed = n.run(systemctl_rc=1)
        assert failed.returncode == 1
        assert "activation step 'systemctl daemon-reload' exited 1" in n.marker()
        assert not (n.root / "var/lib/ndfleet/bundle.sha256").exists()
        assert n.run().returncode == 0
    assert len(service.headers) == 2


def test_a_bundle_path_outside_the_normal_form_is_refused(tmp_path, dev):
    bad = nodebundle.pack([MachineFile("/etc/../root/x", 0o644, b"x")], [])
    with imds([(200, base64.b64encode(bad))]) as service:
        n = node(tmp_path, dev, service.url, size=len(bad), sha256=hashlib.sha256(bad).hexdigest())
        done = n.run()
    assert done.returncode == 1
    assert "invalid file '/etc/../root/x'" in n.marker()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_node_whose_bundle_failed_answers_the_health_probe_unhealthy_with_the_reason(tmp_path, dev):
    port = _free_port()
    n = node(tmp_path, dev, "http://127.0.0.1:9/unused", health_port=port)
    (n.root / "run/ndfleet").mkdir(parents=True)
    (n.root / "run/ndfleet/failed").write_text("ndfleet-bundle: userData is not this node's bundle\r\n")
    argv = [sys.executable, str(UNPACK), "--manifest", str(n.manifest), "--root", str(n.root), "--serve-unhealthy"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:
                    body, reason = json.loads(reply.read()), reply.headers["X-Ndfleet-Reason"]
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=TIMEOUT_S)
    assert body == {"ApplicationHealthState": "Unhealthy"}
    assert reason == "ndfleet-bundle: userData is not this node's bundle"


def test_the_boot_step_is_python_3_10_and_standard_library_only():
    tree = ast.parse(UNPACK.read_text(), feature_version=(3, 10))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


# ---------------------------------------------------------------------------------------------- hostile bundles
# The contract (module docstring of ndfleet-unpack): any failure exits 1 with its reason in the journal and in the
# failure marker, never a traceback.

HOSTILE_BUNDLES = {
    "NUL in a path": ([MachineFile("/etc/ndfleet/x\0y", 0o644, b"x")], [], "invalid file"),
    "NUL in an argument": ([], [["systemctl", "start", "a\0b"]], "invalid activation command"),
    "empty activation command": ([], [[]], "invalid activation command"),
}


@pytest.mark.parametrize("case", HOSTILE_BUNDLES)
def test_a_hostile_bundle_is_a_named_failure_with_its_reason_written(case, tmp_path, dev):
    files, activate, reason = HOSTILE_BUNDLES[case]
    bad = nodebundle.pack(files, activate)
    with imds([(200, base64.b64encode(bad))]) as service:
        n = node(tmp_path, dev, service.url, size=len(bad), sha256=hashlib.sha256(bad).hexdigest())
        done = n.run()
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert reason in n.marker() and reason in done.stderr
    assert n.activated() == []


def test_a_metadata_service_that_drips_user_data_is_cut_off_at_each_attempts_deadline(tmp_path, dev):
    # IMDS answers userData as base64 text (https://learn.microsoft.com/en-us/azure/virtual-machines/
    # instance-metadata-service, "Get user data"); this one sends its head, then the body a byte every 0.1 s.
    dripping = ArmReply(200, raw=dev.vm_user_data.encode(), drip="body", drip_s=0.1)
    with serve_arm({("GET", "/metadata"): [dripping]}) as service:
        n = node(tmp_path, dev, f"{service.base}/metadata/instance/compute/userData", attempts=2, timeout_s=2)
        done = n.run()
        outlasted = service.drips_outlasted
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "after 2 attempts: no whole answer within 2 s" in n.marker()
    assert outlasted == 0  # the boot step hung up each time; the stand-in never had to stop on its own


# ------------------------------------------------------------------------------------------ one bundle, many islands
# Every island of one shape gets the same userData; customData's manifest names the island and the boot step puts it
# where the bundle's island files hold the placeholder (ndfleet/nodefiles/nodebundle.py, docs/bootstrap.md).


def test_the_boot_step_writes_its_own_island_into_the_bundle_every_island_shares(tmp_path):
    spec = load_spec(load_stack("prod").ndfleet_config, "prod")
    first, second = (p.bootstrap for p in prepare(spec).islands[:2])
    assert first.bundle_parts == second.bundle_parts and first.bundle_parts  # one bundle for both islands
    n, done, service = boot_from_vault(tmp_path, second, second.bundle_parts)
    assert done.returncode == 0, done.stderr
    node_json = json.loads((n.root / "etc/ndfleet/node.json").read_text())
    assert (node_json["island"], node_json["boot_version"]) == ("ib01", second.boot_version)
    # Its own island's boot version, beside its island (each island's customData names its own: issue 42)
    assert first.boot_version != second.boot_version
    setup = (n.root / "usr/local/sbin/ndfleet-slurm-setup").read_text()
    assert f"Feature=island-ib01,boot-{second.boot_version} " in setup
    on_disk = [p for p in n.root.rglob("*") if p.is_file()]
    assert len(on_disk) > 10
    for placeholder in (nodebundle.ISLAND_PLACEHOLDER, nodebundle.BOOT_VERSION_PLACEHOLDER):
        assert not [p for p in on_disk if placeholder.encode() in p.read_bytes()]
    assert {str(p.relative_to(n.root)): p.read_bytes() for p in on_disk if "ndfleet/bundle.sha256" not in str(p)} == {
        path.lstrip("/"): data for path, data in second.node_files().items() if path != nodebundle.MANIFEST_PATH
        and path not in {second.node_paths[name] for name in second.custom_data_names}
    }


@pytest.mark.parametrize("island", ["", "ib00'; reboot; '", "IB00", "x" * 65])
def test_a_manifest_naming_an_invalid_island_is_refused_before_anything_is_fetched(island, tmp_path, dev):
    with imds([(200, dev.vm_user_data.encode())]) as service:
        n = node(tmp_path, dev, service.url, island=island)
        done = n.run()
    assert done.returncode == 1
    assert "invalid island" in done.stderr and "Traceback" not in done.stderr
    assert service.headers == [] and not any(n.root.iterdir())


def test_a_bundle_naming_an_island_file_it_does_not_hold_is_refused(tmp_path, dev):
    doc = {"format": nodebundle.FORMAT, "files": [], "activate": [],
           "island": {"placeholder": nodebundle.ISLAND_PLACEHOLDER, "paths": ["/etc/ndfleet/node.json"]}}  # fmt: skip
    bad = lzma.compress(json.dumps(doc).encode(), format=lzma.FORMAT_XZ)
    with imds([(200, base64.b64encode(bad))]) as service:
        n = node(tmp_path, dev, service.url, size=len(bad), sha256=hashlib.sha256(bad).hexdigest())
        done = n.run()
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "island part is not valid" in n.marker()


# ------------------------------------------------------------------------------------------ the Slurm controller
# Its userData is its library bundle followed by its Slurm configuration (ndfleet/slurm/userdata.py); the manifest
# says so (more_follows) and names no island and no health port. `pulumi up` rewrites the configuration in place.


def _controller(stack: str) -> tuple[bootstrap.RenderedBootstrap, str]:
    from ndfleet.slurm.machines import machine_bootstrap, machine_user_data

    spec = load_spec(load_stack(stack).ndfleet_config, stack)
    return machine_bootstrap(spec, "controller"), machine_user_data(spec, "controller")


def test_the_controller_boot_step_unpacks_its_library_and_leaves_the_configuration_after_it(tmp_path):
    from ndfleet.slurm.machines import NODE_LIBRARY
    from ndfleet.slurm.userdata import compose, decompose

    boot, user_data = _controller("prod")
    library, config = decompose(user_data)
    config["files"]["/etc/slurm/slurm.conf"] += "# changed in place by a later pulumi up\n"
    changed = compose(config, library)  # what IMDS serves after a configuration change: the bundle is the same
    with imds([(200, changed.encode())]) as service:
        n = node(tmp_path, boot, service.url)
        done = n.run()
    assert done.returncode == 0, done.stderr
    assert (n.root / NODE_LIBRARY.lstrip("/")).read_bytes() == boot.binary_files["ndfleet-node.zip"]
    assert not (n.root / "etc/slurm").exists()  # the configuration is ndfleet-slurm-config's, not the boot step's
    assert n.activated() == []  # the set-up unit requires the boot step's unit: nothing to start from here


def test_the_controller_boot_step_refuses_another_library(tmp_path):
    from ndfleet.slurm.userdata import compose, decompose

    boot, user_data = _controller("prod")
    _, config = decompose(user_data)
    other = nodebundle.pack([MachineFile("/usr/local/lib/ndfleet/ndfleet-node.zip", 0o644, b"PK other")], [])
    with imds([(200, compose(config, other).encode())]) as service:
        n = node(tmp_path, boot, service.url)
        done = n.run()
    assert done.returncode == 1 and "different deployments" in done.stderr and "Traceback" not in done.stderr
    assert not (n.root / "usr/local/lib/ndfleet").exists() and "different deployments" in n.marker()


def test_a_manifest_naming_no_island_refuses_a_bundle_with_island_files(tmp_path, dev):
    # The controller's manifest names no island: a compute bundle (island files) under it is not written half-named.
    manifest = json.loads(dev.files["bundle.json"])
    del manifest["island"]
    with imds([(200, dev.vm_user_data.encode())]) as service:
        n = node(tmp_path, dev, service.url)
        n.manifest.write_text(json.dumps({**manifest, "url": service.url, "backoff_max_s": 1}))
        done = n.run()
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "names no island" in n.marker() and not (n.root / "etc").exists()


@pytest.mark.parametrize(("key", "value"), [("more_follows", "yes"), ("health_port", "8080"), ("island", 7)])
def test_a_manifest_with_an_optional_key_of_the_wrong_kind_is_refused(key, value, tmp_path, dev):
    with imds([(200, dev.vm_user_data.encode())]) as service:
        n = node(tmp_path, dev, service.url, **{key: value})
        done = n.run()
    assert done.returncode == 1 and repr(key) in done.stderr and "Traceback" not in done.stderr
    assert service.headers == []


def test_answering_unhealthy_needs_a_health_port(tmp_path):
    boot, _ = _controller("prod")  # no health probe watches the controller: its manifest names no port
    n = node(tmp_path, boot, "http://127.0.0.1:9/unused")
    done = n.run("--serve-unhealthy")
    assert done.returncode == 1 and "names no health_port" in done.stderr and "Traceback" not in done.stderr
    assert "ndfleet-bundle-failed.service" not in boot.files and "OnFailure" not in boot.files["ndfleet-bundle.service"]


# ------------------------------------------------------------------------------------ the bundle in Key Vault parts
# A Slurm stack's compute bundle travels in its vault (docs/bootstrap.md, "When the bundle outgrows userData"). The
# stand-ins answer as the services document: IMDS's tagsList (a JSON list of {name, value}) and managed-identity token
# (Microsoft Learn, "Azure Instance Metadata Service"; "How to use managed identities on a VM to acquire an access
# token": JSON with access_token; Metadata: true required, 400 without), Key Vault's Get Secret (Microsoft Learn, Key
# Vault REST "Get Secret": 200 {"value", "id", "attributes"}; 401 without a bearer token, 403 for a caller without a
# role, 404 SecretNotFound; Azure RBAC's assignments reach the vault after minutes, answered 403 until then).

VAULT = "kvtwinabc123"
CLIENT_ID = "11111111-2222-3333-4444-555555555555"


@dataclass
class VaultService:
    parts: dict[str, str]
    tags: list[dict[str, str]]
    refusals: int = 0  # answer 403 to the first this many secret reads (a role assignment on its way)
    answer: tuple[int, bytes] | None = None  # answer every secret read this instead
    reads: list[str] = field(default_factory=list)
    # A slot's earlier values, oldest first (state.parts holds the current one), served the way Key Vault REST 7.4
    # documents "Get Secret Versions" (items with `id`, no value; `nextLink` while more follow; maxresults <= 25)
    # and "Get Secret" of /secrets/{name}/{version} (Microsoft Learn, Key Vault REST API reference, 7.4).
    versions: dict[str, list[str]] = field(default_factory=dict)
    next_link_base: str | None = None  # serve nextLink on this base instead of our own (an off-host link)
    tokens: list[str] = field(default_factory=list)  # the token requests' queries
    base: str = ""


@contextlib.contextmanager
def vault_service(parts: dict[str, str], **kwargs: Any) -> Iterator[VaultService]:
    tags = kwargs.pop("tags", None)
    if tags is None:
        tags = [{"name": "ndfleet:slurm-vault", "value": VAULT},
                {"name": "ndfleet:identity-client-id", "value": CLIENT_ID}]
    state = VaultService(parts, tags, **kwargs)

    class Handler(http.server.BaseHTTPRequestHandler):
        def reply(self, status: int, doc: Any) -> None:
            body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path, _, query = self.path.partition("?")
            if path.startswith("/metadata/"):
                if self.headers.get("Metadata") != "true":
                    return self.reply(400, {"error": "Bad request. Required metadata header not specified"})
                if path.endswith("/tagsList"):
                    return self.reply(200, state.tags)
                state.tokens.append(query)
                return self.reply(200, {"access_token": "token-for-vault", "resource": "https://vault.azure.net"})
            vault, _, name = path.strip("/").partition("/secrets/")
            name, _, version = name.partition("/")
            state.reads.append(name + (f"/{version}" if version else ""))
            if self.headers.get("Authorization") != "Bearer token-for-vault" or vault != VAULT:
                return self.reply(401, {"error": {"code": "Unauthorized"}})
            if state.answer is not None:
                return self.reply(*state.answer)
            if len(state.reads) <= state.refusals:
                return self.reply(403, {"error": {"code": "Forbidden", "message": "Caller is not authorized"}})
            if name not in state.parts:
                return self.reply(404, {"error": {"code": "SecretNotFound"}})
            values = [*state.versions.get(name, []), state.parts[name]]  # oldest first
            ids = [f"{state.base}/{VAULT}/secrets/{name}/v{i}" for i in range(len(values))]
            if version == "versions":
                q = dict(item.split("=", 1) for item in query.split("&") if "=" in item)
                size, skip = min(int(q.get("maxresults", 25)), 25), int(q.get("$skiptoken", 0))
                items = [{"id": i, "attributes": {"enabled": True, "created": 1_700_000_000 + n}}
                         for n, i in enumerate(ids)][skip : skip + size]  # fmt: skip
                doc: dict[str, Any] = {"value": items, "nextLink": None}
                if skip + size < len(ids):
                    base = state.next_link_base or state.base
                    doc["nextLink"] = (
                        f"{base}/{VAULT}/secrets/{name}/versions?api-version=7.4&maxresults={size}"
                        f"&$skiptoken={skip + size}"
                    )
                return self.reply(200, doc)
            if version:
                n = int(version[1:]) if version[1:].isdigit() else -1
                if not 0 <= n < len(values):
                    return self.reply(404, {"error": {"code": "SecretNotFound"}})
                return self.reply(200, {"value": values[n], "id": ids[n]})
            return self.reply(200, {"value": state.parts[name], "id": f"https://{VAULT}.vault.azure.net/secrets/{name}"})

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def boot_from_vault(
    tmp_path: Path, r: bootstrap.RenderedBootstrap, parts: dict[str, str], **service: Any
) -> tuple[Node, subprocess.CompletedProcess[str], VaultService]:
    """Run the boot step of `r` against a vault stand-in serving `parts`: (the node, its run, the stand-in)."""
    with vault_service(parts, **service) as state:
        n = vault_node(tmp_path, r, state)
        done = n.run()
    return n, done, state


def vault_node(tmp_path: Path, r: bootstrap.RenderedBootstrap, service: VaultService, **vault: Any) -> Node:
    """A node whose manifest reads its bundle from the vault stand-in (plain http on loopback: the seam)."""
    m = json.loads(r.files["bundle.json"])
    v = {**m["vault"], "tags_url": f"{service.base}/metadata/instance/compute/tagsList?api-version=2021-02-01",
         "token_url": f"{service.base}/metadata/identity/oauth2/token?api-version=2018-02-01&resource=x",
         "secret_url": service.base + "/{vault}/secrets/{name}?api-version=7.4",
         "versions_url": service.base + "/{vault}/secrets/{name}/versions?api-version=7.4&maxresults=2",
         "retry_s": 1, "wait_s": 30, **vault}
    return node(tmp_path, r, "http://127.0.0.1:9/unused", vault=v, attempts=2, timeout_s=5)


@pytest.fixture(scope="module")
def dev_vault() -> bootstrap.RenderedBootstrap:
    return rendered("dev", vault=True)


def test_a_slurm_stacks_compute_bundle_travels_in_vault_parts_not_user_data(dev_vault):
    m = json.loads(dev_vault.files["bundle.json"])
    assert dev_vault.vm_user_data == "" and "vm-user-data.b64" not in dev_vault.output_files()
    slots = [p["slot"] for p in m["vault"]["parts"]]
    assert list(dev_vault.bundle_parts) == slots == nodebundle.part_names(dev_vault.bundle)
    assert [p["sha256"] for p in m["vault"]["parts"]] == [
        hashlib.sha256(v.encode()).hexdigest() for v in dev_vault.bundle_parts.values()
    ]
    assert all(len(v) <= nodebundle.PART_CHARS for v in dev_vault.bundle_parts.values())
    assert base64.b64decode("".join(dev_vault.bundle_parts.values())) == dev_vault.bundle
    assert hashlib.sha256(dev_vault.bundle).hexdigest() == m["sha256"]
    assert (m["vault"]["tag"], m["vault"]["client_id_tag"]) == ("ndfleet:slurm-vault", "ndfleet:identity-client-id")


def test_the_boot_step_reads_the_parts_with_the_tagged_identity_and_unpacks(tmp_path, dev_vault):
    n, done, service = boot_from_vault(tmp_path, dev_vault, dev_vault.bundle_parts)
    assert done.returncode == 0, done.stderr
    assert service.reads == list(dev_vault.bundle_parts)
    assert all(f"client_id={CLIENT_ID}" in q for q in service.tokens)
    files, activate = nodebundle.unpack(dev_vault.bundle, "ib00", dev_vault.boot_version)
    assert len(files) > 10
    for f in files:
        assert (n.root / f.path.lstrip("/")).read_bytes() == f.data, f.path
    assert [["systemctl", *c] for c in n.activated()] == activate


def test_a_vault_that_refuses_until_the_role_arrives_is_asked_again(tmp_path, dev_vault):
    n, done, service = boot_from_vault(tmp_path, dev_vault, dev_vault.bundle_parts, refusals=2)
    assert done.returncode == 0, done.stderr
    assert service.reads[:3] == [next(iter(dev_vault.bundle_parts))] * 3
    assert "HTTP 403; asking again in 1 s" in done.stderr


def test_a_role_that_never_arrives_fails_the_boot_step_after_its_wait_with_the_reason(tmp_path, dev_vault):
    with vault_service(dev_vault.bundle_parts, refusals=10**6) as service:
        n = vault_node(tmp_path, dev_vault, service, wait_s=2)
        done = n.run()
    assert done.returncode == 1
    assert "still HTTP 403 after 2 s (the node's role assignment on it missing?)" in n.marker()
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ((400, b'{"error": {"code": "BadParameter"}}'), "HTTP 400"),
        ((200, b"<html>captive portal</html>"), "the answer is not a JSON object"),
        ((200, b'{"value": 17}'), "the answer is not a secret (no string value)"),
        ((200, b'{"value": "' + b"A" * 70000 + b'"}'), "an answer over 65,536 bytes"),
        ((301, b""), "HTTP 301"),
    ],
    ids=["refused", "not JSON", "no string value", "oversized", "redirect"],
)
def test_an_answer_that_is_not_a_secret_is_a_named_failure(tmp_path, dev_vault, answer, reason):
    n, done, service = boot_from_vault(tmp_path, dev_vault, dev_vault.bundle_parts, answer=answer)
    assert done.returncode == 1
    assert reason in n.marker()
    assert "Traceback" not in done.stderr


def test_parts_of_another_bundle_are_refused_by_the_manifests_sha256(tmp_path, dev_vault):
    other = nodebundle.parts(lzma.compress(b"{}"))
    values = [*other.values(), *[""] * (len(dev_vault.bundle_parts) - len(other))]
    swapped = dict(zip(dev_vault.bundle_parts, values, strict=True))
    n, done, service = boot_from_vault(tmp_path, dev_vault, swapped)
    assert done.returncode == 1
    assert "no version holds this VM's part" in n.marker()  # each part's own sha256 refuses it first


@pytest.mark.parametrize(
    ("tags", "reason"),
    [
        ([], "tag ndfleet:slurm-vault is not a Key Vault name: 'None'"),
        ([{"name": "ndfleet:slurm-vault", "value": "evil.example.com/x"}], "is not a Key Vault name"),
        ([{"name": "ndfleet:slurm-vault", "value": VAULT}, {"name": "ndfleet:identity-client-id", "value": "x&y=1"}],
         "tag ndfleet:identity-client-id is not a client id"),
    ],
    ids=["no vault tag", "vault tag not a name", "client id not a GUID"],
)
def test_a_tag_that_could_send_the_token_elsewhere_is_refused(tmp_path, dev_vault, tags, reason):
    n, done, service = boot_from_vault(tmp_path, dev_vault, dev_vault.bundle_parts, tags=tags)
    assert done.returncode == 1
    assert reason in n.marker()
    assert service.reads == []


def test_a_slot_rewritten_by_a_later_deployment_is_read_from_its_earlier_version(tmp_path, dev_vault):
    # A VM on an earlier model (a reimage) finds newer bundles' parts in its slots: it reads its own from the
    # slots' versions, newest first, paged two to a page.
    newer = {name: "B" * len(value) for name, value in dev_vault.bundle_parts.items()}
    older = {name: ["C", value, "D", "E"] for name, value in dev_vault.bundle_parts.items()}
    n, done, service = boot_from_vault(tmp_path, dev_vault, newer, versions=older)
    assert done.returncode == 0, (done.stdout, done.stderr, n.marker())
    assert any(r.endswith("/versions") for r in service.reads) and any(r.endswith("/v1") for r in service.reads)


def test_a_slot_without_this_vms_part_is_a_named_failure(tmp_path, dev_vault):
    newer = {name: "B" for name in dev_vault.bundle_parts}
    n, done, _ = boot_from_vault(tmp_path, dev_vault, newer, versions={name: ["C"] * 3 for name in newer})
    assert done.returncode == 1
    assert "no version holds this VM's part" in n.marker()


def test_a_next_link_off_the_vaults_host_is_refused(tmp_path, dev_vault):
    newer = {name: "B" for name in dev_vault.bundle_parts}
    older = {name: ["C", "D", value] for name, value in dev_vault.bundle_parts.items()}  # on the second page
    n, done, _ = boot_from_vault(tmp_path, dev_vault, newer, versions=older, next_link_base="https://evil.example")
    assert done.returncode == 1
    assert "refused a link off" in n.marker()
