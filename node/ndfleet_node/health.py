"""`ndfleet-node health`: the endpoint Azure's Application Health extension probes, on 127.0.0.1.

Every request, whatever its path or shape, is answered `HTTP 200` with one of the documented rich health states,
read afresh from the validator's report and the failure marker:

  {"ApplicationHealthState": "Initializing"}  no report and no failure marker yet (set-up or validation running)
  {"ApplicationHealthState": "Healthy"}       the report says "healthy"
  {"ApplicationHealthState": "Unhealthy"}     the report says anything else, the marker exists, or the report is
                                              unreadable or malformed (not an object, checks not a list, ...)

The reason is in the `X-Ndfleet-Reason` header, printable ASCII only (no CR/LF can reach the header), at most
300 characters. The server must never get a healthy node replaced by accident, so it is hardened against what
any job on the node could do: one event loop (no thread per connection); each connection must send its request
within `idle_timeout_s` or is closed; beyond `max_connections` open connections the oldest is closed, so new
probes are always served; the listen backlog is `backlog`; request heads over 8 KiB are cut off. The unit raises
the file-handle limit (LimitNOFILE) above the cap, and the process raises its soft limit to the hard one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
from collections import OrderedDict
from typing import Any

from ndfleet_node import config as node_config
from ndfleet_node.text import header_safe

MAX_REQUEST_HEAD = 8192
MAX_REPORT_BYTES = 4 * 1024 * 1024
DEFAULTS = {"port": 18300, "max_connections": 256, "idle_timeout_s": 5.0, "backlog": 1024}


def _failed_ids(checks: object) -> list[str] | None:
    if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
        return None
    return [str(c.get("id", "?")) for c in checks if c.get("status") == "fail"]


def health_state(report: str, failed_marker: str) -> tuple[str, str]:
    """(state, reason) from the validator's report and the failure marker. Never raises."""
    try:
        with open(report, "rb") as f:
            raw = f.read(MAX_REPORT_BYTES + 1)
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
        if status == "healthy" and not ids:
            return "Healthy", f"validate-node passed ({data.get('level', '?')})"
        if status in ("healthy", "unhealthy"):
            return "Unhealthy", "validate-node failed: " + (", ".join(ids) or str(status))
        return "Unhealthy", f"validate-node could not run: {data.get('error', status)}"
    if os.path.exists(failed_marker):
        try:
            with open(failed_marker, "rb") as f:
                why = " ".join(f.read(4096).decode("utf-8", "replace").split())
        except OSError:
            why = ""
        return "Unhealthy", why or "set-up or validation could not run"
    return "Initializing", "set-up or validation in progress"


def response(report: str, failed_marker: str) -> bytes:
    state, reason = health_state(report, failed_marker)
    body = json.dumps({"ApplicationHealthState": state}).encode()
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nX-Ndfleet-Reason: {header_safe(reason)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class HealthServer:
    def __init__(self, report: str, failed_marker: str, max_connections: int, idle_timeout_s: float):
        self.report, self.failed_marker = report, failed_marker
        self.max_connections, self.idle_timeout_s = max_connections, idle_timeout_s
        self.open: OrderedDict[int, asyncio.StreamWriter] = OrderedDict()
        self._next = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        key = self._next
        self._next += 1
        self.open[key] = writer
        while len(self.open) > self.max_connections:
            _, oldest = self.open.popitem(last=False)
            oldest.transport.abort()
        try:
            try:
                await asyncio.wait_for(self._read_head(reader), self.idle_timeout_s)
            except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError):
                return  # an idle or broken connection gets nothing; a probe sends its request at once
            if writer.transport.is_closing():
                return
            writer.write(response(self.report, self.failed_marker))
            await asyncio.wait_for(writer.drain(), self.idle_timeout_s)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            self.open.pop(key, None)
            writer.transport.abort()

    @staticmethod
    async def _read_head(reader: asyncio.StreamReader) -> None:
        """Up to the blank line after the request head, or 8 KiB, or EOF: whatever comes first."""
        data = b""
        while b"\r\n\r\n" not in data and b"\n\n" not in data and len(data) < MAX_REQUEST_HEAD:
            chunk = await reader.read(MAX_REQUEST_HEAD - len(data))
            if not chunk:
                return
            data += chunk


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


async def serve(args: argparse.Namespace) -> None:
    server = HealthServer(args.report, args.failed_marker, args.max_connections, args.idle_timeout)
    srv = await asyncio.start_server(server.handle, args.host, args.port, backlog=args.backlog, reuse_address=True)
    host, port = srv.sockets[0].getsockname()[:2]
    print(f"ndfleet-health: listening on http://{host}:{port}{args.path}", flush=True)
    async with srv:
        await srv.serve_forever()


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
    try:
        cfg = node_config.load(args.config)
        cfg_health, paths = cfg.section("health"), cfg.paths
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
        asyncio.run(serve(args))
    return 0
