#!/usr/bin/python3
"""ndfleet boot step: fetch the node bundle (userData, or Key Vault parts), check it, unpack it, activate it.

Shipped verbatim in customData (ndfleet/nodefiles/bootstrap.py) as /usr/local/sbin/ndfleet-unpack, on the compute
nodes and on the Slurm controller (whose bundle is its node-program library, followed in userData by its Slurm
configuration: manifest `more_follows`); Python 3.10 standard library only. Run by ndfleet-bundle.service:

  ndfleet-unpack --manifest /etc/ndfleet/bundle.json                    fetch, check, unpack, activate (once)
  ndfleet-unpack --manifest /etc/ndfleet/bundle.json --serve-unhealthy  answer the health probe "Unhealthy"

The manifest (customData) names the bundle's size and sha256 and this node's island. When the stamp file already
holds that sha256 the bundle was unpacked and activated on this disk before: nothing is fetched (a reboot). Otherwise
the userData is read from the instance metadata service (header Metadata: true, no proxy, each attempt bounded,
retried with doubling pauses), or, when the manifest names a `vault` (a Slurm stack's compute node), the bundle's
Key Vault parts with this VM's managed identity (fetch_from_vault); it is refused unless its size and sha256 are
the manifest's, decompressed (bounded), the
island's name and boot version put where the bundle's files hold their placeholders (one bundle serves every
island), and every
file written atomically (temporary file, mode, fsync, rename); then the bundle's activation commands run (each
bounded) and the stamp is written last, so an interrupted run is redone whole at the next boot. Exit 0 done, 1
failed: the reason goes to the journal and to the failure marker the health endpoint reads. docs/bootstrap.md has
the whole story.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import http.client
import http.server
import json
import lzma
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

# Azure's limit on a userData value: 87,384 base64 characters.
MAX_USER_DATA_CHARS = 87_384
MAX_MANIFEST_BYTES = 64 << 10
# Retried answers of the instance metadata service (it asks for retries on 410, 429 and 5xx), and 404 while the
# VM's metadata is not yet there early in boot.
RETRY_STATUS = {404, 410, 429, 500, 502, 503, 504}
REASON_MAX = 300
FORMAT = 2
# The island's name lands in shell scripts and unit files: a bound on it (the stack's own rule is stricter,
# ndfleet/stackconfig/settings.py), so nothing a shell or systemd reads as syntax can come in through the manifest.
ISLAND_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")
ISLAND_MAX = 64
# The island's boot version (ndfleet/boot_version.py): 12 lower-case hex digits, placed like the island's name.
BOOT_VERSION = re.compile(r"[0-9a-f]{12}")
# The token goes only to <vault>.vault.azure.net: a vault name is 3-24 letters, digits and dashes, a secret's 1-127
# (Microsoft Learn, "Naming rules for Azure resources", Microsoft.KeyVault), so no tag or manifest can point it at
# another host or path; a client id is a GUID.
VAULT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{1,22}[A-Za-z0-9]")
SECRET_NAME = re.compile(r"[A-Za-z0-9-]{1,127}")
CLIENT_ID = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
# Key Vault answers while the node's role assignment has not reached it (Azure RBAC: minutes), or when busy: retried.
VAULT_RETRY_STATUS = {401, 403, 404, 429, 500, 502, 503, 504}
MAX_TAGS_BYTES = 64 << 10
MAX_TOKEN_BYTES = 16 << 10


class BundleError(Exception):
    pass


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error, not followed: urllib would send the Authorization header to wherever it points."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Late(BaseException):  # not an Exception: no handler inside urllib may take it for its own
    """An attempt's deadline passed: raised by the SIGALRM handler, which ends a blocked connect or read."""


def _late(signum: int, frame: Any) -> None:
    raise Late


def log(message: str) -> None:
    print(f"ndfleet-unpack: {message}", file=sys.stderr, flush=True)


def under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/")) if root != "/" else path


def read_bounded(path: str, limit: int) -> bytes:
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise BundleError(f"{path} is larger than {limit} bytes")
    return data


def load_manifest(path: str) -> dict[str, Any]:
    try:
        m = json.loads(read_bounded(path, MAX_MANIFEST_BYTES))
    except (OSError, ValueError) as e:
        raise BundleError(f"cannot read the manifest {path}: {e}") from None
    need = {"sha256": str, "size": int, "url": str, "stamp": str, "failed_marker": str, "attempts": int,
            "timeout_s": int, "backoff_max_s": int, "command_timeout_s": int, "max_unpacked_bytes": int}  # fmt: skip
    # A compute node's manifest names its island and health port; the Slurm controller's names neither (its bundle
    # holds no island file, no probe watches it) and says its userData has more after the bundle (more_follows).
    # A compute node's names its island's boot version too, which replaces the bundle's version placeholder.
    optional = {"health_port": int, "island": str, "more_follows": bool, "boot_version": str}
    if not isinstance(m, dict):
        raise BundleError(f"the manifest {path} is not a JSON object")
    for key, kind in need.items():
        if not isinstance(m.get(key), kind):
            raise BundleError(f"the manifest {path} has no {kind.__name__} {key!r}")
    for key, kind in optional.items():
        if key in m and not isinstance(m[key], kind):
            raise BundleError(f"the manifest {path} has a {key!r} that is no {kind.__name__}")
    vault = m.get("vault")
    if vault is not None:
        fields = {"tag": str, "client_id_tag": str, "parts": list, "tags_url": str, "token_url": str,
                  "secret_url": str, "versions_url": str, "max_pages": int, "max_versions": int,
                  "wait_s": int, "retry_s": int, "max_answer_bytes": int}  # fmt: skip
        if not isinstance(vault, dict) or any(not isinstance(vault.get(k), t) for k, t in fields.items()):
            raise BundleError(f"the manifest {path} has a 'vault' without {', '.join(fields)} of their types")
        if not vault["parts"] or not all(isinstance(p, dict) and isinstance(p.get("slot"), str)
                                         and SECRET_NAME.fullmatch(p["slot"]) and isinstance(p.get("sha256"), str)
                                         for p in vault["parts"]):  # fmt: skip
            raise BundleError(f"the manifest {path} names invalid Key Vault parts {str(vault['parts'])[:200]}")
    island = m.setdefault("island", None)
    if island is not None and (not 0 < len(island) <= ISLAND_MAX or not set(island) <= ISLAND_CHARS):
        raise BundleError(f"the manifest {path} names an invalid island {island[:ISLAND_MAX]!r}")
    version = m.setdefault("boot_version", None)
    if version is not None and not BOOT_VERSION.fullmatch(version):
        raise BundleError(f"the manifest {path} names an invalid boot version {version[:16]!r}")
    m.setdefault("more_follows", False)
    return m


def fetch(m: dict[str, Any]) -> bytes:
    """The userData text from the instance metadata service; BundleError after the last attempt."""
    return imds(m, m["url"], MAX_USER_DATA_CHARS, "userData", f"longer than Azure's {MAX_USER_DATA_CHARS:,} characters")


def imds(m: dict[str, Any], url: str, limit: int, what: str, too_long: str) -> bytes:
    """A non-empty answer of the instance metadata service at `url`; BundleError after the last attempt. Each
    attempt, answer and body included, ends within timeout_s (an interval timer: a service that drips its answer is
    cut off), so every attempt and pause fit in the unit's TimeoutStartSec (nodebundle.unit_timeout_s) and the
    reason is written before systemd would stop the unit."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # IMDS is never reached through a proxy
    last = "no attempt"
    signal.signal(signal.SIGALRM, _late)
    for attempt in range(1, m["attempts"] + 1):
        request = urllib.request.Request(url, headers={"Metadata": "true"})
        try:
            signal.setitimer(signal.ITIMER_REAL, m["timeout_s"])
            with opener.open(request, timeout=m["timeout_s"]) as reply:
                text = reply.read(limit + 1)
            signal.setitimer(signal.ITIMER_REAL, 0)
            if len(text) > limit:
                raise BundleError(f"{what} is {too_long}")
            if text.strip():
                return bytes(text)
            last = f"the VM has no {what}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
            if e.code not in RETRY_STATUS:
                raise BundleError(f"the instance metadata service answered {last} for {what}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:  # HTTPException: a cut answer
            last = str(getattr(e, "reason", e)) or type(e).__name__
        except Late:
            last = f"no whole answer within {m['timeout_s']} s"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if attempt < m["attempts"]:
            time.sleep(min(2 ** (attempt - 1), m["backoff_max_s"]))
    raise BundleError(f"no {what} from the instance metadata service after {m['attempts']} attempts: {last}")


def imds_json(m: dict[str, Any], url: str, limit: int, what: str) -> Any:
    try:
        return json.loads(imds(m, url, limit, what, f"larger than {limit:,} bytes"))
    except ValueError:
        raise BundleError(f"the instance metadata service's {what} is not JSON") from None


def fetch_from_vault(m: dict[str, Any]) -> bytes:
    """The bundle's base64 text from its Key Vault parts (the manifest's `vault`), read with this VM's managed
    identity through the vault's private endpoint: the vault's name and the identity from the scale set's tags, a
    token for https://vault.azure.net from the instance metadata service, then each part in order. A part that the
    vault refuses or does not have yet (the role assignment takes minutes to arrive), or a busy vault, is asked
    again every retry_s until wait_s has passed; any other answer, or one that is not what Key Vault answers (a JSON
    object with a string `value`, at most max_answer_bytes), fails the boot step with what came back."""
    v = m["vault"]
    tags = imds_json(m, v["tags_url"], MAX_TAGS_BYTES, "tags")
    tag = {t.get("name"): t.get("value") for t in tags if isinstance(t, dict)} if isinstance(tags, list) else {}
    vault, client_id = tag.get(v["tag"]), tag.get(v["client_id_tag"])
    if not isinstance(vault, str) or not VAULT_NAME.fullmatch(vault):
        raise BundleError(f"the scale set's tag {v['tag']} is not a Key Vault name: {str(vault)[:40]!r}")
    token_url = v["token_url"]
    if client_id is not None:
        if not isinstance(client_id, str) or not CLIENT_ID.fullmatch(client_id):
            raise BundleError(f"the scale set's tag {v['client_id_tag']} is not a client id: {str(client_id)[:40]!r}")
        token_url += f"&client_id={client_id}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect())
    deadline = time.monotonic() + v["wait_s"]
    # Every link followed (nextLink, a version's id) stays on the vault's own scheme, host and port.
    origin = urllib.parse.urlsplit(v["secret_url"].format(vault=vault, name="x"))[:2]

    def get(url: str, what: str) -> dict[str, Any]:
        """Key Vault's JSON object at `url` (on this vault's host only), retried as the docstring above says."""
        if urllib.parse.urlsplit(url)[:2] != origin:
            raise BundleError(f"Key Vault {what}: refused a link off {origin[1]}: {url[:120]!r}")
        while True:
            token = imds_json(m, token_url, MAX_TOKEN_BYTES, "managed identity token")
            access = token.get("access_token") if isinstance(token, dict) else None
            if not isinstance(access, str) or not access:
                raise BundleError("the instance metadata service's token answer has no access_token")
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {access}"})
            try:
                signal.setitimer(signal.ITIMER_REAL, m["timeout_s"])
                with opener.open(request, timeout=m["timeout_s"]) as reply:
                    body = reply.read(v["max_answer_bytes"] + 1)
                signal.setitimer(signal.ITIMER_REAL, 0)
                if len(body) > v["max_answer_bytes"]:
                    raise BundleError(f"Key Vault {what}: an answer over {v['max_answer_bytes']:,} bytes")
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = None
                if not isinstance(doc, dict):
                    raise BundleError(f"Key Vault {what}: the answer is not a JSON object")
                return doc
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
                if e.code not in VAULT_RETRY_STATUS:
                    raise BundleError(f"Key Vault {what}: {last}") from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
                last = str(getattr(e, "reason", e)) or type(e).__name__
            except Late:
                last = f"no whole answer within {m['timeout_s']} s"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            if time.monotonic() >= deadline:
                raise BundleError(f"Key Vault {what}: still {last} after {v['wait_s']} s "
                                  "(the node's role assignment on it missing?)")  # fmt: skip
            log(f"Key Vault {what}: {last}; asking again in {v['retry_s']} s")
            time.sleep(v["retry_s"])

    def value(doc: dict[str, Any], what: str) -> str:
        text = doc.get("value")
        if not isinstance(text, str):
            raise BundleError(f"Key Vault secret {what}: the answer is not a secret (no string value)")
        return text

    def matches(text: str, want: str) -> bool:
        return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest() == want

    text = []
    for part in v["parts"]:
        name, want = part["slot"], part["sha256"]
        current = value(get(v["secret_url"].format(vault=vault, name=name), f"secret {name}"), name)
        if matches(current, want):
            text.append(current)
            continue
        # A later deployment wrote a newer bundle into the slot: this VM's part is one of its versions. Key Vault
        # lists them without values, paged by nextLink (REST 7.4 "Get Secret Versions"); bounded in pages and reads.
        url, pages, tried, found = v["versions_url"].format(vault=vault, name=name), 0, 0, None
        while url and found is None:
            pages += 1
            if pages > v["max_pages"]:
                break
            page = get(url, f"secret {name} versions")
            items, url = page.get("value"), page.get("nextLink")
            if not isinstance(items, list) or not (url is None or isinstance(url, str)):
                raise BundleError(f"Key Vault secret {name}: the versions answer is not a list of versions")
            ids = [i.get("id") for i in items if isinstance(i, dict)]
            stamps = {i.get("id"): (i.get("attributes") or {}).get("created", 0) for i in items if isinstance(i, dict)}
            for vid in sorted((i for i in ids if isinstance(i, str)), key=lambda i: -int(stamps.get(i) or 0)):
                tried += 1
                if tried > v["max_versions"]:
                    break
                candidate = value(get(f"{vid}?api-version={v['secret_url'].rsplit('api-version=', 1)[1]}",
                                      f"secret {name} version"), name)  # fmt: skip
                if matches(candidate, want):
                    found = candidate
                    break
            if tried > v["max_versions"]:
                break
        if found is None:
            raise BundleError(f"Key Vault secret {name}: no version holds this VM's part (sha256 {want[:16]}), "
                              f"{pages} pages and {tried} versions read")  # fmt: skip
        log(f"Key Vault secret {name}: read this VM's part from an earlier version")
        text.append(found)
    return "".join(text).encode("ascii", "replace")


def check(text: bytes, m: dict[str, Any]) -> bytes:
    source = "the bundle read from Key Vault" if m.get("vault") else "userData"
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise BundleError(f"{source} is not base64") from None
    if m["more_follows"]:  # the Slurm controller: its bundle, then its Slurm configuration (not this step's)
        raw = raw[: m["size"]]
    digest = hashlib.sha256(raw).hexdigest()
    if len(raw) != m["size"] or digest != m["sha256"]:
        raise BundleError(
            f"{source} is not this node's bundle ({len(raw)} bytes, sha256 {digest[:16]}; customData expects "
            f"{m['size']} bytes, sha256 {m['sha256'][:16]}): customData and {source} come from different deployments"
        )
    return raw


def parse(
    raw: bytes, limit: int, island: str | None, boot_version: str | None = None
) -> tuple[list[tuple[str, int, bytes]], list[list[str]]]:
    """The bundle's files as this island's node writes them (the placeholder in its island files replaced by
    `island`, the one in its boot-version files by `boot_version`) and its activation commands."""
    decompressor = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    try:
        text = decompressor.decompress(raw, limit + 1)
    except lzma.LZMAError as e:
        raise BundleError(f"the bundle is not an xz stream: {e}") from None
    if len(text) > limit or not decompressor.eof:
        raise BundleError(f"the bundle decompresses to more than {limit} bytes or is truncated")
    try:
        doc = json.loads(text)
        if doc["format"] != FORMAT:
            raise BundleError(f"bundle format {doc['format']!r}, this boot step reads {FORMAT}")
        files = [(str(f["path"]), int(f["mode"], 8), f["data"].encode("latin-1")) for f in doc["files"]]
        activate = [[str(a) for a in argv] for argv in doc["activate"]]
        placeholder = str(doc["island"]["placeholder"]).encode()
        island_paths = {str(p) for p in doc["island"]["paths"]}
        # A bundle of an ndfleet before boot versions has no such part: nothing to replace.
        version_part = doc.get("boot_version", {"placeholder": "-", "paths": []})
        version_token = str(version_part["placeholder"]).encode()
        version_paths = {str(p) for p in version_part["paths"]}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise BundleError(f"the bundle is not valid: {e!r}") from None
    if not placeholder or island_paths - {path for path, _, _ in files}:
        raise BundleError(f"the bundle's island part is not valid: {sorted(island_paths)[:8]}")
    if island_paths and island is None:
        raise BundleError(f"the bundle holds island files but the manifest names no island: {sorted(island_paths)[:8]}")
    if not version_token or version_paths - {path for path, _, _ in files}:
        raise BundleError(f"the bundle's boot_version part is not valid: {sorted(version_paths)[:8]}")
    if version_paths and boot_version is None:
        raise BundleError(f"the bundle holds boot-version files but the manifest names no boot version: "
                          f"{sorted(version_paths)[:8]}")
    name = (island or "").encode()
    files = [(path, mode, data.replace(placeholder, name) if path in island_paths else data)
             for path, mode, data in files]  # fmt: skip
    version = (boot_version or "").encode()
    files = [(path, mode, data.replace(version_token, version) if path in version_paths else data)
             for path, mode, data in files]  # fmt: skip
    for path, mode, _ in files:
        if not path.startswith("/") or os.path.normpath(path) != path or mode & ~0o7777 or "\0" in path:
            raise BundleError(f"the bundle names an invalid file {path!r} (mode {mode:o})")
    for argv in activate:  # the OS takes no NUL in an argument, and an empty command is no command
        if not argv or any("\0" in a for a in argv):
            raise BundleError(f"the bundle names an invalid activation command {argv!r}")
    return files, activate


def write_atomic(path: str, data: bytes, mode: int) -> None:
    folder = os.path.dirname(path)
    os.makedirs(folder, 0o755, exist_ok=True)
    temporary = f"{path}.ndfleet-{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def activate(commands: list[list[str]], timeout_s: int) -> None:
    for argv in commands:
        shown = " ".join(argv)
        try:
            done = subprocess.run(argv, timeout=timeout_s, stdin=subprocess.DEVNULL, check=False)
        except (OSError, ValueError, subprocess.TimeoutExpired) as e:
            raise BundleError(f"activation step '{shown}' could not run: {e}") from None
        if done.returncode != 0:
            raise BundleError(f"activation step '{shown}' exited {done.returncode}")


def unpack(m: dict[str, Any], root: str) -> int:
    stamp = under(root, m["stamp"])
    try:
        if read_bounded(stamp, 128).decode(errors="replace").strip() == m["sha256"]:
            log(f"bundle {m['sha256'][:16]} is unpacked already; nothing to do")
            return 0
    except (OSError, BundleError):
        pass
    fetched = fetch_from_vault(m) if m.get("vault") else fetch(m)
    files, commands = parse(check(fetched, m), m["max_unpacked_bytes"], m["island"], m["boot_version"])
    for path, mode, data in files:
        write_atomic(under(root, path), data, mode)
    log(f"bundle {m['sha256'][:16]}: {len(files)} files written; activating")
    activate(commands, m["command_timeout_s"])
    write_atomic(stamp, (m["sha256"] + "\n").encode(), 0o644)
    log(f"bundle {m['sha256'][:16]} unpacked and activated")
    return 0


def mark_failed(m: dict[str, Any], root: str, reason: str) -> None:
    marker = under(root, m["failed_marker"])
    try:
        os.makedirs(os.path.dirname(marker), 0o755, exist_ok=True)
        with open(marker, "a", encoding="utf-8") as f:
            f.write(f"ndfleet-bundle: {reason}\n")
    except OSError as e:
        log(f"cannot write the failure marker {marker}: {e}")


def failure_reason(m: dict[str, Any], root: str) -> str:
    try:
        lines = read_bounded(under(root, m["failed_marker"]), 64 << 10).decode(errors="replace").splitlines()
    except (OSError, BundleError):
        lines = []
    text = lines[-1] if lines else "ndfleet-bundle: the node bundle was not unpacked"
    return "".join(c if " " <= c <= "~" else "?" for c in text)[:REASON_MAX]


def serve_unhealthy(m: dict[str, Any], root: str, host: str) -> int:
    """Answer every request Unhealthy (rich health states), so automatic repairs replace this node; without it the
    probe finds no endpoint and Azure reports Unknown, which is never repaired."""
    body = json.dumps({"ApplicationHealthState": "Unhealthy"}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = 5

        def answer(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Ndfleet-Reason", failure_reason(m, root))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = do_POST = answer

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

    server = http.server.ThreadingHTTPServer((host, m["health_port"]), Handler)
    server.daemon_threads = True
    log(f"answering Unhealthy on {host}:{m['health_port']}: {failure_reason(m, root)}")
    server.serve_forever()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ndfleet-unpack", description=__doc__.splitlines()[0])
    p.add_argument("--manifest", required=True, help="the manifest customData carries (/etc/ndfleet/bundle.json)")
    p.add_argument("--root", default="/", help="write under this folder instead of / (tests)")
    p.add_argument("--serve-unhealthy", action="store_true", help="answer the health probe Unhealthy, forever")
    p.add_argument("--host", default="127.0.0.1", help="address to answer on (with --serve-unhealthy)")
    args = p.parse_args(argv)
    try:
        m = load_manifest(args.manifest)
    except BundleError as e:
        log(str(e))
        return 1
    if args.serve_unhealthy:
        if not isinstance(m.get("health_port"), int):
            log(f"the manifest {args.manifest} names no health_port to answer on")
            return 1
        return serve_unhealthy(m, args.root, args.host)
    try:
        return unpack(m, args.root)
    except Exception as e:  # noqa: BLE001 - whatever went wrong, the contract: a reason in the journal and the marker
        if isinstance(e, BundleError):
            reason = str(e)
        elif isinstance(e, OSError):
            reason = f"cannot write the bundle's files: {e}"
        else:
            reason = f"unexpected {type(e).__name__}: {e}"
        log(reason)
        mark_failed(m, args.root, reason)
        return 1


if __name__ == "__main__":
    sys.exit(main())
