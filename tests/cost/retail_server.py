"""A stand-in for the Azure Retail Prices API on 127.0.0.1: answers from tests/data/retail/, by armSkuName and
$skip, with scripted misbehaviour (429, garbage, a huge body, a hang) per size; over HTTPS with `tls` (a server
context), for a client that reaches it as prices.azure.com (BoundedTransport's connect_to).

Built from the API's documented answer (Microsoft Learn, "Azure Retail Prices REST API overview",
https://learn.microsoft.com/rest/api/cost-management/retail-prices/azure-retail-prices, "API response pagination"
and its sample answers): `{BillingCurrency, CustomerEntityId, CustomerEntityType, Items, NextPageLink, Count}`, at
most 1,000 items a page (earlier revisions of the page said 100), `NextPageLink` the same query with `$skip` (null
on the last page), written with the port: `https://prices.azure.com:443/api/retail/prices?...&$skip=1000`, `Count`
the items on the page. The pages under tests/data/retail/ have that shape; the endpoint in their NextPageLink is
rewritten to ours (a Reply's `body` is served as given)."""

from __future__ import annotations

import re
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.impact.arm_server import loopback_up

RETAIL = Path(__file__).resolve().parent.parent / "data" / "retail"
# How long a "hang" reply holds the connection at most: well past the client's timeout in the tests, and bounded.
HANG_LIMIT_S = 30.0


@dataclass(frozen=True)
class Reply:
    status: int = 200
    file: str = ""
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    hang: bool = False


@dataclass
class RetailServer:
    # armSkuName -> {skip: replies}; the last reply of a list repeats
    routes: dict[str, dict[int, list[Reply]]] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    url: str = ""
    release: threading.Event = field(default_factory=threading.Event)

    def reply_for(self, path: str) -> Reply:
        query = parse_qs(urlsplit(path).query)
        match = re.search(r"armSkuName eq '([^']+)'", query.get("$filter", [""])[0])
        size = match.group(1) if match else ""
        skip = int(query.get("$skip", ["0"])[0])
        replies = self.routes.get(size, {}).get(skip) or [Reply(file="no-meter.json")]
        return replies.pop(0) if len(replies) > 1 else replies[0]


@contextmanager
def retail_server(
    routes: dict[str, dict[int, list[Reply]]], tls: ssl.SSLContext | None = None
) -> Iterator[RetailServer]:
    loopback_up()
    state = RetailServer(routes=routes)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            state.requests.append(self.path)
            reply = state.reply_for(self.path)
            if reply.hang:
                state.release.wait(HANG_LIMIT_S)
                return
            body = (
                reply.body
                or (RETAIL / reply.file)
                .read_text()
                .replace("https://prices.azure.com/api/retail/prices", state.url)
                .encode()
            )
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            for name, value in reply.headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    state.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}/api/retail/prices"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
