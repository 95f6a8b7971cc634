"""The node program has one way to talk to a server, `ndfleet_node.net.fetch` (bounded in time and size, only to
the host a service names): no other node module imports an HTTP or TLS client or opens a connection itself, so a
new reader is bounded by construction. (The boot step, templates/node/ndfleet-unpack.py, runs before the package
is on disk and bounds its one request itself: tests/test_bootstrap_unpack.py.)"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "node" / "ndfleet_node"
THE_FETCH = PACKAGE / "net.py"
CLIENT_MODULES = ("http.client", "urllib.request", "ssl", "http", "xmlrpc.client", "ftplib", "smtplib")
CONNECTING_CALLS = ("create_connection", "connect", "connect_ex", "urlopen")


def connections(source: str) -> list[str]:
    """What in `source` imports a client or opens a connection, one line each."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name in CLIENT_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module in CLIENT_MODULES:
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CONNECTING_CALLS:
            found.append(f"line {node.lineno}: .{node.func.attr}(...)")
    return found


def test_no_node_module_but_the_fetch_talks_to_a_server() -> None:
    offenders = {
        str(path.relative_to(REPO)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != THE_FETCH and (found := connections(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_a_module_opening_its_own_connection_is_reported() -> None:
    assert connections("import urllib.request\n") == ["import urllib.request"]
    assert connections("from http.client import HTTPSConnection\n") == ["from http.client import ..."]
    assert connections("import socket\nsocket.create_connection(('h', 1))\n") == ["line 2: .create_connection(...)"]


def test_the_fetch_is_what_the_readers_import() -> None:
    for reader in ("impact.py", "elastic/arm.py", "setup/storage.py"):
        assert "from ndfleet_node.net import" in (PACKAGE / reader).read_text(encoding="utf-8"), reader
