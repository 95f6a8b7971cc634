"""A local stand-in for Resource Manager and the instance metadata service: a real HTTP server on 127.0.0.1.

Routes map (method, path prefix) to a queue of replies (status, headers, recorded body file); the last reply of
a queue repeats. Every request is recorded (method, path with query, headers, body) for the assertions.

A reply can also be hostile: `raw` bytes as the body (any shape), `stream_bytes` of zeros after a matching
Content-Length (a huge body, written until the client hangs up), or `drip_s` seconds between single bytes of the
body (`drip="body"`) or of the whole answer from its status line on (`drip="head"`). A drip stops by itself after
DRIP_LIMIT_S, so a client without a deadline fails its test instead of hanging it.
"""

from __future__ import annotations

import fcntl
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ARM_DATA = Path(__file__).resolve().parent.parent / "data" / "arm"
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
DRIP_LIMIT_S = 60


def loopback_up() -> None:
    """Bring `lo` up when down: under `unshare -rn` the namespace's loopback starts down (its root may raise it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, SIOCGIFFLAGS, ifreq))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


@dataclass(frozen=True)
class Reply:
    status: int
    file: str | None = None  # under tests/data/arm
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # the body as given, instead of a file
    stream_bytes: int = 0  # a body of this many zeros, streamed
    drip: str = ""  # "body" or "head": one byte every drip_s seconds
    drip_s: float = 0.1

    def body(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return (ARM_DATA / self.file).read_bytes() if self.file else b""


def _client_gone(sock: socket.socket) -> bool:
    """The client hung up (it shut its side down): a peek at the socket reads end-of-file."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ValueError:  # a TLS socket refuses recv flags: the next write tells instead (it raises when gone)
        return False
    except OSError:
        return True


def _drip(out: Any, data: bytes, every_s: float, sock: socket.socket) -> bool:
    """Drip `data`; False when the client hung up first, True when the drip ran to its limit or its end."""
    stop = time.monotonic() + DRIP_LIMIT_S
    for i in range(len(data)):
        if _client_gone(sock):
            return False
        if time.monotonic() > stop:
            return True
        out.write(data[i : i + 1])
        out.flush()
        time.sleep(every_s)
    return True


def _stream_zeros(out: Any, count: int) -> None:
    chunk = bytes(1 << 16)
    while count > 0:
        out.write(chunk[: min(count, len(chunk))])
        count -= len(chunk)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class FakeArm:
    def __init__(self, routes: dict[tuple[str, str], list[Reply]]):
        self.routes = {k: list(v) for k, v in routes.items()}
        self.requests: list[Seen] = []
        self.drips_outlasted = 0  # drips that ran to DRIP_LIMIT_S: their client never hung up
        self.base = ""
        self._lock = threading.Lock()

    def calls(self, method: str, fragment: str) -> list[Seen]:
        return [r for r in self.requests if r.method == method and fragment in r.path]

    def reply_for(self, method: str, path: str) -> Reply:
        with self._lock:
            for (m, prefix), queue in self.routes.items():
                if m == method and path.startswith(prefix):
                    return queue.pop(0) if len(queue) > 1 else queue[0]
        return Reply(404)


@contextmanager
def serve(routes: dict[tuple[str, str], list[Reply]], tls: ssl.SSLContext | None = None) -> Iterator[FakeArm]:
    """`tls`: serve HTTPS with this server context (Resource Manager and the workspace are https only)."""
    loopback_up()
    arm = FakeArm(routes)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            arm.requests.append(Seen(self.command, self.path, dict(self.headers), body))
            reply = arm.reply_for(self.command, self.path)
            payload = reply.body()
            length = reply.stream_bytes or (1 << 20 if reply.drip else len(payload))
            head = (f"HTTP/1.1 {reply.status} Reply\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {length}\r\nConnection: close\r\n"
                    + "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items()) + "\r\n").encode()  # fmt: skip
            self.close_connection = True
            try:
                if reply.drip == "head":
                    arm.drips_outlasted += _drip(self.wfile, head + payload.ljust(length, b" "), reply.drip_s,
                                                 self.connection)
                elif reply.drip == "body":
                    self.wfile.write(head)
                    self.wfile.flush()
                    arm.drips_outlasted += _drip(self.wfile, payload.ljust(length, b" "), reply.drip_s, self.connection)
                elif reply.stream_bytes:
                    self.wfile.write(head)
                    _stream_zeros(self.wfile, reply.stream_bytes)
                else:
                    self.wfile.write(head + payload)
            except OSError:
                pass  # the client hung up: what a bounded client does to a hostile answer

        do_GET = do_PUT = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    arm.base = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()  # the socket is bound and listening already: clients cannot race the start
    try:
        yield arm
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
