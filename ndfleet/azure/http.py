"""The one bounded way the tool talks HTTP: every Resource Manager, workspace query and Retail Prices call goes
through `BoundedTransport` (an azure-core transport over http.client) with the policies below.

- Each answer has an overall deadline (headers and body together; connect and TLS handshake within
  CONNECT_TIMEOUT_S): every read of the socket waits at most until the deadline and none starts after it, so an
  answer dripped a byte at a time, before or after its headers, is cut off, not read for ever.
- Each answer has a byte cap: the body is read in pieces and refused past the cap, never read whole first.
- `Retry-After` is honoured up to MAX_RETRY_AFTER_S (docs/operations.md promises 120 s per request at most); a
  longer, infinite, unparseable or overflowing one ends the retries with the answer as it is (a named 429).
- A bearer token goes only to the host it was issued for: the transport refuses a request carrying
  Authorization to any other host, and `endpoint_of` is the one parser deciding the host both for that check and
  for the connection (`https://evil.example:1\\@ws...` cannot be one host for the check and another on the wire).
- HTTPS_PROXY / NO_PROXY are honoured for https as azure-core's default transport (requests) does: a CONNECT
  tunnel, so the TLS name checked is still the service's.
- Bounds travel with each request (`BoundsPolicy`, a per-retry hook), so one transport serves readers whose answers
  differ in size (a Prometheus answer, an ARM page, a price page).
"""

from __future__ import annotations

import http.client
import io
import math
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any

from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.policies import RetryPolicy, SansIOHTTPPolicy
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest._http_response_impl import HttpResponseImpl
from azure.core.utils import case_insensitive_dict

MAX_RETRY_AFTER_S = 120.0  # docs/operations.md: at most 120 s per request
BOUNDS_OPTION = "ndfleet_bounds"
CONNECT_TIMEOUT_S = 10.0  # TCP connect and TLS handshake
_PIECE = 65536


@dataclass(frozen=True)
class Bounds:
    """What one answer may cost: `deadline_s` for connect, headers and body together, `max_bytes` of body."""

    deadline_s: float
    max_bytes: int
    token_host: str | None = None  # the one host an Authorization header may go to


DEFAULT_BOUNDS = Bounds(deadline_s=60.0, max_bytes=8 * 1024 * 1024)


class AnswerRefused(ServiceResponseError):
    """An answer refused by a bound (too big, past its deadline) or a request refused by the host rule; never
    retried. str() is one line naming the bound."""


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    target: str  # path and query, as sent on the request line


def endpoint_of(url: str) -> Endpoint:
    """The one parser for where a URL goes. Refuses what parsers disagree on (user info, a backslash in the
    authority), control characters, anything but http(s); so the host checked is the host connected to. The
    path and query are sent percent-encoded where they hold characters a request line cannot carry."""
    from urllib.parse import quote, urlsplit

    shown = repr(url[:200])
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise AnswerRefused(f"refused URL {shown}: control characters are not sent")
    scheme, sep, rest = url.partition("://")
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if not sep or "@" in authority or "\\" in authority:
        raise AnswerRefused(f"refused URL {shown}: user info and backslashes in the host part are not sent")
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.netloc != authority:
        raise AnswerRefused(f"refused URL {shown}: not an http(s) URL with a host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise AnswerRefused(f"refused URL {shown}: the port is not a number") from None
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Endpoint(parts.scheme, parts.hostname.lower(), port, quote(target, safe="/?&=%:@!$'()*+,;~-._"))


def https_proxy_for(where: Endpoint) -> tuple[str, int, dict[str, str]] | None:
    """The proxy for an https request, from HTTPS_PROXY / NO_PROXY as requests (azure-core's default transport)
    read them: (host, port, CONNECT headers), or None to connect directly."""
    import base64
    import urllib.request
    from urllib.parse import unquote, urlsplit

    if where.scheme != "https" or urllib.request.proxy_bypass(where.host):
        return None
    url = urllib.request.getproxies().get("https")
    if not url:
        return None
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if not parts.hostname:
        return None
    headers = {}
    if parts.username:
        token = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        headers["Proxy-Authorization"] = "Basic " + base64.b64encode(token).decode()
    return parts.hostname, parts.port or 8080, headers


def same_host(url: str, host: str) -> bool:
    try:
        return endpoint_of(url).host == host.lower()
    except AnswerRefused:
        return False


class BoundsPolicy(SansIOHTTPPolicy):
    """Puts a reader's bounds on each request; sits after the authentication policy (per retry)."""

    def __init__(self, bounds: Bounds):
        self.bounds = bounds

    def on_request(self, request: Any) -> None:
        request.context.options[BOUNDS_OPTION] = self.bounds


def retry_after_s(response: Any) -> float | None:
    """The Retry-After of an answer in seconds (azure-core's reading: -ms headers, seconds or an HTTP date), or
    math.inf when it is there but unusable (infinite, overflowing, a year-9999 date, garbage)."""
    from azure.core.pipeline.policies import _utils

    try:
        wait = _utils.get_retry_after(response)
    except (ValueError, OverflowError, TypeError, IndexError):
        return math.inf
    if wait is None:
        return None
    return wait if math.isfinite(wait) and wait >= 0 else math.inf


class CappedRetryPolicy(RetryPolicy):
    """azure-core's RetryPolicy with Retry-After capped at MAX_RETRY_AFTER_S, and bounds refusals not retried."""

    def __init__(self, max_retry_after_s: float = MAX_RETRY_AFTER_S, **kwargs: Any):
        super().__init__(**kwargs)
        self.max_retry_after_s = max_retry_after_s

    def increment(self, settings: Any, response: Any = None, error: Any = None) -> bool:
        if isinstance(error, AnswerRefused):
            return False
        if response is not None and error is None and hasattr(response, "http_response"):
            wait = retry_after_s(response)
            if wait is not None and wait > self.max_retry_after_s:
                # The answer stands: the caller reports the 429 and the wait it refused.
                response.http_response.ndfleet_refused_wait = wait
                return False
        return bool(super().increment(settings, response=response, error=error))

    def get_retry_after(self, response: Any) -> float | None:
        wait = retry_after_s(response)
        return None if wait is None else min(wait, self.max_retry_after_s)


class _Response(HttpResponseImpl):
    def __init__(self, request: Any, status: int, reason: str, headers: Any, body: bytes):
        super().__init__(
            request=request, internal_response=None, status_code=status, reason=reason,
            content_type=headers.get("Content-Type"), headers=headers, stream_download_generator=None,
        )  # fmt: skip
        self._content = body

    def close(self) -> None:
        self._is_closed = True


class _PastDeadline(TimeoutError):
    pass


class _Guarded:
    """A connected socket whose every read waits at most until the answer's deadline and is refused after it:
    a drip returns a byte per read, so the deadline is checked between bytes (headers and body alike)."""

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock, self._deadline = sock, deadline

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise _PastDeadline()
        self._sock.settimeout(left)
        try:
            return self._sock.recv_into(buffer, nbytes, flags)
        except TimeoutError:
            raise _PastDeadline() from None

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        # As socket.makefile does: the response's reader holds the socket open after the connection's close().
        self._sock._io_refs += 1  # type: ignore[attr-defined]
        return io.BufferedReader(socket.SocketIO(self, "rb"))  # type: ignore[arg-type]

    def _decref_socketios(self) -> None:
        self._sock._decref_socketios()  # type: ignore[attr-defined]


class _DeadlineConnection:
    """Mixed in before http.client's connection class: the connected socket (after TLS, for https) reads only
    until the answer's deadline."""

    sock: Any

    def __init__(self, deadline: float, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self.sock = _Guarded(self.sock, self._deadline)


class _HTTP(_DeadlineConnection, http.client.HTTPConnection):
    pass


class _HTTPS(_DeadlineConnection, http.client.HTTPSConnection):
    pass


class BoundedTransport(HttpTransport):
    """One request per connection over http.client, within the request's Bounds (module doc)."""

    def __init__(self, bounds: Bounds = DEFAULT_BOUNDS, tls: ssl.SSLContext | None = None,
                 connect_to: dict[str, tuple[str, int]] | None = None):  # fmt: skip
        self.bounds = bounds
        self.tls = tls or ssl.create_default_context()
        self.connect_to = connect_to or {}  # tests: a host name served on loopback (like curl --connect-to)

    def __enter__(self) -> BoundedTransport:
        return self

    def __exit__(self, *args: Any) -> None:
        pass

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def sleep(self, duration: float) -> None:
        time.sleep(min(max(duration, 0.0), MAX_RETRY_AFTER_S))

    def send(self, request: Any, **kwargs: Any) -> Any:
        bounds: Bounds = kwargs.get(BOUNDS_OPTION) or self.bounds
        where = endpoint_of(request.url)
        headers = dict(request.headers)
        if any(k.lower() == "authorization" for k in headers) and where.host != (bounds.token_host or "").lower():
            raise AnswerRefused(f"refused to send a bearer token to {where.host}: it was issued for "
                                f"{bounds.token_host or 'another host'}")  # fmt: skip
        connect_host, connect_port = self.connect_to.get(where.host, (where.host, where.port))
        deadline = time.monotonic() + bounds.deadline_s
        connect_s = min(CONNECT_TIMEOUT_S, bounds.deadline_s)
        proxy = None if where.host in self.connect_to else https_proxy_for(where)
        if where.scheme == "https":
            if proxy is not None:  # CONNECT through the proxy; TLS and the host name still those of `where`
                connect_host, connect_port = proxy[0], proxy[1]
            conn: http.client.HTTPConnection = _HTTPS(deadline, connect_host, connect_port, timeout=connect_s,
                                                      context=self.tls)  # fmt: skip
            if proxy is not None:
                conn.set_tunnel(where.host, where.port, headers=proxy[2])
        else:
            conn = _HTTP(deadline, connect_host, connect_port, timeout=connect_s)
        answer: http.client.HTTPResponse | None = None
        try:
            body = getattr(request, "content", None) or getattr(request, "body", None)
            headers.setdefault("Host", where.host if where.port in (80, 443) else f"{where.host}:{where.port}")
            conn.request(request.method, where.target, body=body, headers=headers)
            answer = conn.getresponse()
            data = bytearray()
            while piece := answer.read1(_PIECE):
                data += piece
                if len(data) > bounds.max_bytes:
                    raise AnswerRefused(f"{where.host} answered more than {bounds.max_bytes:,} bytes: refused")
            reply = _Response(request, answer.status, answer.reason, case_insensitive_dict(answer.getheaders()),
                              bytes(data))  # fmt: skip
        except AnswerRefused:
            raise
        except _PastDeadline:
            raise AnswerRefused(f"{where.host} did not finish its answer within {bounds.deadline_s:g} s") from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if isinstance(exc, socket.gaierror):
                raise ServiceRequestError(f"network: cannot resolve {where.host} ({exc.strerror})") from None
            if answer is None and (conn.sock is None or isinstance(exc, ssl.SSLError)):
                raise ServiceRequestError(f"network: cannot connect to {where.host}:{where.port} ({exc})") from None
            raise ServiceResponseError(f"network: {where.host} broke off its answer ({type(exc).__name__})") from None
        finally:
            if answer is not None:
                answer.close()
            conn.close()
        return reply
