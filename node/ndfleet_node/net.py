"""The node's one way to talk to a server: `fetch`, bounded in time and size, and only to the service it is for.

A `Service` names where a reader may go: one origin (scheme, host, port), the most bytes one answer may have,
and the longest one answer may take (connect, headers and body together: a timer shuts the socket down, which
ends a read in progress, so a body dripped a byte at a time is cut off). `fetch` refuses a URL of any other
origin, so a bearer token given for a service only reaches that service's host, and a `nextLink` to another host
is refused; the origin is parsed once (`origin`) and that parse is both what is checked and what is connected to.
An answer over the cap is a named failure, never silently cut. No proxy and no redirects are followed.

The origins themselves (`Service.__post_init__`): the instance metadata service is plain http to 169.254.169.254
with `Metadata: true` (Microsoft Learn, "Azure Instance Metadata Service": non-routable address, http only, the
header required); every other service https to a host under its documented suffixes. Plain http to 127.0.0.1 is
accepted for any service: nothing leaves the machine, and it is how the tests' stand-ins are reached.

Every node module that talks to a server calls `fetch` (tests/node/test_one_fetch.py: no other opens one).
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from typing import Any

IMDS = "http://169.254.169.254"
ARM = "https://management.azure.com"
HTTP_TIMEOUT_S = 20  # each connect, send or receive
HTTP_DEADLINE_S = 60  # one whole answer, however the server paces it
# Byte caps, from what each service documents it returns:
# IMDS compute metadata carries the tags twice (`tags` and `tagsList`); Azure allows 50 tags of at most 512 + 256
# characters (Microsoft Learn, "Tag resources": limitations), so under 80 KB; a token is a JWT of a few KB.
IMDS_CAP = 128 << 10
# Impact: the workloadImpact resource echoed back (impactDescription is cut at 1,000 characters) or an error body.
IMPACT_CAP = 64 << 10
ARM_SUFFIXES = ("management.azure.com", "management.usgovcloudapi.net", "management.chinacloudapi.cn")


class FetchError(Exception):
    """No whole, acceptable answer: the message says from where and why, in one line."""


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except (ValueError, RecursionError):
            return None


Http = Callable[[str, str, dict[str, str], bytes | None], Reply]

# The longest a Retry-After is honoured (the impact report and the elastic programs' deletes).
MAX_RETRY_AFTER_S = 120


def retry_after_s(reply: Reply, attempt: int, cap: float = MAX_RETRY_AFTER_S) -> float:
    """Seconds to wait before the next attempt: Retry-After in seconds (RFC 9110 10.2.3; Resource Manager sends
    seconds), capped at `cap`; anything else (absent, a date, `nan`, `inf`, negative, garbage) waits 2**attempt
    seconds instead, capped too."""
    try:
        wait = float(reply.headers.get("retry-after", ""))
    except ValueError:
        wait = math.nan
    if math.isnan(wait) or wait < 0:
        wait = 2.0**attempt
    return min(wait, cap)


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of `url`; FetchError for a URL that names a user, a fragment or no host."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise FetchError(f"not a URL: {url[:120]!r}") from None
    bad = "@" in parts.netloc or "\\" in url or parts.fragment or not parts.hostname or parts.scheme not in (
        "http", "https")  # fmt: skip
    if bad:
        raise FetchError(f"not a plain http(s) URL: {url[:120]!r}")
    return parts.scheme, parts.hostname or "", port


@dataclass(frozen=True)
class Service:
    kind: str  # "imds" or "arm" (Resource Manager, Impact)
    base: str
    cap: int
    deadline_s: float | None = None  # None: HTTP_DEADLINE_S

    def __post_init__(self) -> None:
        scheme, host, _ = origin(self.base)
        if self.kind == "imds":
            ok = f"{scheme}://{host}" == IMDS
        else:
            ok = scheme == "https" and any(host == s or host.endswith("." + s) for s in ARM_SUFFIXES)
        if not ok and f"{scheme}://{host}" != "http://127.0.0.1":
            raise FetchError(f"{self.base!r} is not a {self.kind} endpoint this node may talk to")

    def allows(self, url: str) -> bool:
        try:
            return origin(url) == origin(self.base)
        except FetchError:
            return False

    def send(self, method: str, url: str, headers: dict[str, str], body: bytes | None = None) -> Reply:
        return fetch(self, method, url, headers, body)


def fetch(service: Service, method: str, url: str, headers: dict[str, str], body: bytes | None = None) -> Reply:
    """One request to `service`, bounded (see the module docstring)."""
    scheme, host, port = origin(url)
    if not service.allows(url):
        raise FetchError(f"{host}:{port} is not {service.base}: refused")
    if service.kind == "imds":
        headers = {**headers, "Metadata": "true"}
    where = f"{host}:{port}"
    parts = urllib.parse.urlsplit(url)
    conn = (HTTPSConnection if scheme == "https" else HTTPConnection)(host, port, timeout=HTTP_TIMEOUT_S)
    deadline_s = service.deadline_s or HTTP_DEADLINE_S
    expired = threading.Event()
    sockets: list[socket.socket] = []  # kept: http.client lets go of its socket once an answer that closes the
    # connection has begun, while the body is still being read from it

    def expire() -> None:
        expired.set()
        for sock in [*sockets, *([conn.sock] if conn.sock is not None else [])]:
            with contextlib.suppress(OSError):  # the plain socket's shutdown, under TLS too
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    timer = threading.Timer(deadline_s, expire)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        if conn.sock is not None:
            sockets.append(conn.sock)
        if expired.is_set():  # the deadline passed while connecting, before there was a socket to shut down
            raise TimeoutError
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read(service.cap + 1)
        reply = Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    except (OSError, HTTPException, ValueError) as exc:
        if expired.is_set():
            raise FetchError(f"no complete answer from {where} within {deadline_s:g} s") from None
        raise FetchError(f"cannot reach {where}: {exc or type(exc).__name__}") from None
    finally:
        timer.cancel()
        conn.close()
    if expired.is_set():  # the body ended because the deadline shut the socket: not a whole answer
        raise FetchError(f"no complete answer from {where} within {deadline_s:g} s")
    if len(data) > service.cap:
        raise FetchError(f"the answer from {where} is over {service.cap:,} bytes: not read")
    return reply
