"""`ndfleet-node health`: the endpoint Azure's Application Health extension probes, on 127.0.0.1.

Every request, whatever its path or shape, is answered `HTTP 200` with one of the documented rich health states,
read afresh from the validator's report and the failure marker:

  {"ApplicationHealthState": "Initializing"}  no report and no failure marker yet (set-up or validation running)
  {"ApplicationHealthState": "Healthy"}       the report says "healthy" (checks it skipped are named in the reason)
  {"ApplicationHealthState": "Unhealthy"}     the report says anything else, the marker exists, or the report is
                                              unreadable or malformed (not an object, checks not a list, ...)

The reason is in the `X-Ndfleet-Reason` header, printable ASCII only (no CR/LF can reach the header), at most
300 characters. The node's boot version (its island's, from the node JSON: ndfleet/boot_version.py) is in the
`X-Ndfleet-Boot-Version` header, `unknown` when the node JSON names none; the body stays the extension's documented
form alone (Microsoft Learn, "Using Application Health extension with Virtual Machine Scale Sets", rich health
states), so the version cannot change what Azure reads.
The server must never get a healthy node replaced by accident, and Azure's probe must always be
answered, so it is hardened against what any job on the node could do (tests/node/test_hostile_health.py): one
event loop (no thread per connection); a request is answered as soon as its head is complete, ready connections
before new ones are accepted; each connection must send its request within `idle_timeout_s` or is closed; at
`max_connections` open connections, room is made by closing the oldest that has sent nothing (never one whose
request has arrived: that one is answered, nor one younger than GRACE_S, whose request may still be on its way),
so a flood of connections cannot drop a probe's; when none may be closed, new ones wait in the listen backlog
(`backlog`) until one may; request heads over 8 KiB are cut off. The unit raises the file-handle limit
(LimitNOFILE) above the cap, and the process raises its soft limit to the hard one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import selectors
import socket
import sys
import time
from typing import Any

from ndfleet_node import config as node_config
from ndfleet_node.report import MAX_REPORT_BYTES, read_regular
from ndfleet_node.text import header_safe

MAX_REQUEST_HEAD = 8192
ACCEPT_BATCH = 64  # connections accepted per loop pass, so ready connections are never starved by new ones
POLL_S = 0.25  # the loop wakes at least this often to close connections past the idle timeout
# A new connection's request may not have arrived yet (the client was not scheduled since its connect): it is not
# closed to make room before it is this old. Azure's probe sends its request at once; 600 local clients flooding
# the endpoint once got about one probe in fifteen closed unanswered without it.
GRACE_S = 0.25
DEFAULTS = {"port": 18300, "max_connections": 256, "idle_timeout_s": 5.0, "backlog": 1024}


def _failed_ids(checks: object) -> list[str] | None:
    if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
        return None
    return [str(c.get("id", "?")) for c in checks if c.get("status") == "fail"]


def _skipped_ids(checks: object) -> list[str]:
    """Checks the report marks as not run (skip): named in the reason, so a healthy node says what was not checked."""
    if not isinstance(checks, list):
        return []
    return [str(c.get("id", "?")) for c in checks if isinstance(c, dict) and c.get("status") == "skip"]


def health_state(report: str, failed_marker: str) -> tuple[str, str]:
    """(state, reason) from the validator's report and the failure marker. Never raises."""
    try:
        raw: bytes | None = read_regular(report)
    except FileNotFoundError:
        raw = None
    except OSError as e:
        return "Unhealthy", f"unreadable validation report {report}: {e.strerror}"
    if raw is not None:
        if len(raw) > MAX_REPORT_BYTES:
            return "Unhealthy", f"malformed validation report {report}: over {MAX_REPORT_BYTES} bytes"
        try:
            data: Any = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:
            return "Unhealthy", f"malformed validation report {report}: {type(e).__name__}"
        if not isinstance(data, dict):
            return "Unhealthy", f"malformed validation report {report}: not a JSON object"
        ids = _failed_ids(data.get("checks", []))
        if ids is None:
            return "Unhealthy", f"malformed validation report {report}: checks is not a list of objects"
        status = data.get("status")
        if status == "healthy" and not ids and os.path.lexists(failed_marker):
            # A failure the report cannot show (the burn-in's, filed by `impact report`) outlives the health
            # check's next passing report: the marker goes only with a new boot's set-up.
            return "Unhealthy", _marker_reason(failed_marker)
        if status == "healthy" and not ids:
            skipped = _skipped_ids(data.get("checks", []))
            not_run = f"; not run: {', '.join(skipped)}" if skipped else ""
            return "Healthy", f"validate-node passed ({data.get('level', '?')}){not_run}"
        if status in ("healthy", "unhealthy"):
            return "Unhealthy", "validate-node failed: " + (", ".join(ids) or str(status))
        return "Unhealthy", f"validate-node could not run: {data.get('error', status)}"
    if os.path.lexists(failed_marker):
        return "Unhealthy", _marker_reason(failed_marker)
    return "Initializing", "set-up or validation in progress"


def _marker_reason(failed_marker: str) -> str:
    try:
        why = " ".join(read_regular(failed_marker, 4096)[:4096].decode("utf-8", "replace").split())
    except OSError:
        why = ""
    return why or "set-up or validation could not run"


BOOT_VERSION_HEADER = "X-Ndfleet-Boot-Version"
UNKNOWN_BOOT_VERSION = "unknown"


def response(report: str, failed_marker: str, boot_version: str = "") -> bytes:
    state, reason = health_state(report, failed_marker)
    body = json.dumps({"ApplicationHealthState": state}).encode()
    version = header_safe(boot_version or UNKNOWN_BOOT_VERSION)
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nX-Ndfleet-Reason: {header_safe(reason)}\r\n"
        f"{BOOT_VERSION_HEADER}: {version}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _Connection:
    __slots__ = ("sock", "since", "data", "out")

    def __init__(self, sock: socket.socket, since: float):
        self.sock, self.since, self.data, self.out = sock, since, b"", b""


class HealthServer:
    """One thread, one `selectors` loop, every socket non-blocking. Each request is answered the moment its head
    is complete, in the same loop pass that reads it, so answered connections never pile up. Ready connections are
    served before new ones are accepted, and at most ACCEPT_BATCH are accepted per pass. Beyond `max_connections`
    a connection is closed to make room. The rule: only a connection at least `grace_s` old; of those, the oldest
    that has sent nothing, after a look at its socket (MSG_PEEK) shows nothing arrived since (if a request did
    arrive, it is answered instead); only when no such connection is idle, the oldest with a partial request. A
    connection with a complete request is never dropped: it has been answered already. When none may be closed,
    the listener is left alone (new connections wait in the kernel's backlog) until the oldest is `grace_s` old.
    A probe's connection therefore survives any number of newer connections while its request is on its way."""

    def __init__(self, listener: socket.socket, report: str, failed_marker: str, max_connections: int,
                 idle_timeout_s: float, grace_s: float = GRACE_S, boot_version: str = ""):  # fmt: skip
        self.listener, self.report, self.failed_marker = listener, report, failed_marker
        self.boot_version = boot_version
        self.max_connections, self.idle_timeout_s = max(1, max_connections), idle_timeout_s
        self.grace_s, self.paused_until = grace_s, 0.0  # no accepting before paused_until: no room to make
        self.selector = selectors.DefaultSelector()
        self.open: dict[int, _Connection] = {}  # by file descriptor, oldest first (dicts keep insertion order)
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ, None)
        self.listening = True

    def serve_forever(self) -> None:
        while True:
            self.serve_once(POLL_S)

    def serve_once(self, timeout_s: float) -> None:
        now = time.monotonic()
        if self.listening != (now >= self.paused_until):  # an always-readable listener would spin the loop
            self.listening = not self.listening
            if self.listening:
                self.selector.register(self.listener, selectors.EVENT_READ, None)
            else:
                self.selector.unregister(self.listener)
        if not self.listening:
            timeout_s = min(timeout_s, self.paused_until - now)
        events = self.selector.select(timeout_s)
        accept = False
        for key, mask in events:
            if key.data is None:
                accept = True
            elif key.fd in self.open:
                self._ready(key.data, mask)
        if accept:
            self._accept()
        self._expire(time.monotonic())

    # -------------------------------------------------------------------------------------------- connections

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            if len(self.open) >= self.max_connections and not self._make_room():
                return  # every connection is mid-answer: the rest wait in the kernel's backlog
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of file handles, or the client gave up: try again next pass
                return
            sock.setblocking(False)
            conn = _Connection(sock, time.monotonic())
            self.open[sock.fileno()] = conn
            self.selector.register(sock, selectors.EVENT_READ, conn)
            self._read(conn)  # a probe sends its request at once: it may be here already

    def _make_room(self) -> bool:
        """Close one connection that is waiting for its request (see the class docstring); False if none may be."""
        partial: _Connection | None = None
        now = time.monotonic()
        for conn in list(self.open.values()):
            if now - conn.since < self.grace_s:  # this one and every later one (oldest first) may be on its way
                self.paused_until = conn.since + self.grace_s
                break
            if conn.out:
                continue
            if conn.data:
                partial = partial or conn
                continue
            try:
                arrived = conn.sock.recv(1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                self._close(conn)  # idle: nothing sent, nothing arrived
                return True
            except OSError:
                arrived = b""
            if arrived:
                self._read(conn)  # its request arrived: answer it rather than drop it
            else:
                self._close(conn)  # the client has gone
            if len(self.open) < self.max_connections:
                return True
        if partial is not None:
            self._close(partial)
            return True
        if len(self.open) >= self.max_connections and self.paused_until <= now:
            self.paused_until = now + POLL_S  # every connection is mid-answer: look again soon
        return len(self.open) < self.max_connections

    def _ready(self, conn: _Connection, mask: int) -> None:
        if conn.out and mask & selectors.EVENT_WRITE:
            self._send(conn)
        elif mask & selectors.EVENT_READ:
            self._read(conn)

    def _read(self, conn: _Connection) -> None:
        try:
            chunk = conn.sock.recv(MAX_REQUEST_HEAD - len(conn.data))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not chunk and not conn.data:
            self._close(conn)  # connected and left without a request: nothing to answer
            return
        conn.data += chunk
        head_done = b"\r\n\r\n" in conn.data or b"\n\n" in conn.data or len(conn.data) >= MAX_REQUEST_HEAD
        if head_done or not chunk:  # a whole head, the 8 KiB cut, or the client stopped sending: answer
            conn.out = response(self.report, self.failed_marker, self.boot_version)
            self._send(conn)

    def _send(self, conn: _Connection) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if conn.out:
            self.selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
            return
        # Answered. Say so (FIN after the answer), drop what the client sent beyond the head, then close.
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
            while conn.sock.recv(65536):
                pass
        self._close(conn)

    def _expire(self, now: float) -> None:
        """Close connections older than the idle timeout that are still open (no request, or not reading the
        answer). `open` is oldest first, so this stops at the first young one."""
        while self.open:
            conn = next(iter(self.open.values()))
            if now - conn.since < self.idle_timeout_s:
                return
            self._close(conn)

    def _close(self, conn: _Connection) -> None:
        fd = conn.sock.fileno()
        if self.open.pop(fd, None) is None:
            return
        self.paused_until = 0.0  # room again: accept
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn.sock)
        conn.sock.close()


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 65536 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            pass
    return soft


def serve(args: argparse.Namespace) -> None:
    listener = socket.create_server((args.host, args.port), backlog=args.backlog)
    server = HealthServer(listener, args.report, args.failed_marker, args.max_connections, args.idle_timeout,
                          boot_version=args.boot_version)
    host, port = listener.getsockname()[:2]
    print(f"ndfleet-health: listening on http://{host}:{port}{args.path}", flush=True)
    server.serve_forever()


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("health", help="serve the health endpoint", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--config", default=None, metavar="PATH", help=f"node JSON (default {node_config.DEFAULT_PATH})")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=None, help="0 picks a free port (printed on start)")
    p.add_argument("--report", default=None, help="validate-node's JSON report")
    p.add_argument("--failed-marker", default=None, help="written when set-up or validation could not run")
    p.add_argument("--max-connections", type=int, default=None)
    p.add_argument("--idle-timeout", type=float, default=None, help="seconds a connection may stay silent")
    p.add_argument("--backlog", type=int, default=None)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    cfg_health: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    args.boot_version = ""
    try:
        cfg = node_config.load(args.config)
        cfg_health, paths, args.boot_version = cfg.section("health"), cfg.paths, cfg.boot_version
    except node_config.ConfigError as e:
        # The endpoint still serves (from the default paths): a node without its figures must say Unhealthy, not
        # go silent and be judged by missed probes.
        print(f"ndfleet-health: {e}; serving from defaults", file=sys.stderr, flush=True)
    args.port = args.port if args.port is not None else int(cfg_health.get("port", DEFAULTS["port"]))
    args.path = str(cfg_health.get("path", "/health"))
    args.report = args.report or str(paths.get("report", "/run/ndfleet/report.json"))
    args.failed_marker = args.failed_marker or str(paths.get("failed_marker", "/run/ndfleet/failed"))
    for name, key in (("max_connections", "max_connections"), ("idle_timeout", "idle_timeout_s"),
                      ("backlog", "backlog")):  # fmt: skip
        if getattr(args, name) is None:
            setattr(args, name, type(DEFAULTS[key])(cfg_health.get(key, DEFAULTS[key])))
    raise_nofile()
    with contextlib.suppress(KeyboardInterrupt):
        serve(args)
    return 0
