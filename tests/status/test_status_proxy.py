"""Through an HTTPS proxy: the bounded transport honours HTTPS_PROXY with a CONNECT tunnel (as azure-core's default
transport, requests, does), so a site that reaches Azure only through its proxy still can. The proxy here is a
loopback stand-in that tunnels bytes (RFC 9110 9.3.6, CONNECT) and records what it was asked."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import pytest

from tests.status.standin import Tls, run_status, standin


def connect_proxy(seen: list[str]) -> tuple[socket.socket, threading.Thread]:
    listener = socket.create_server(("127.0.0.1", 0))

    def pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                byte = client.recv(1)
                if not byte:
                    break
                head += byte
            line = head.split(b"\r\n", 1)[0].decode()
            seen.append(line)
            host, port = line.split()[1].rsplit(":", 1)
            upstream = socket.create_connection((host, int(port)))
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_status_reads_azure_through_the_https_proxy(
    tls: Tls, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    listener, _ = connect_proxy(seen)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        with standin(tls) as arm:
            run = run_status(capsys, tmp_path, arm, tls)
    finally:
        listener.close()
    assert run.code == 0, run
    port = arm.base.rsplit(":", 1)[1]
    # Every Resource Manager request went through the tunnel (the workspace's is served by connect_to, no proxy).
    assert len(seen) == 6 and all(line.startswith(f"CONNECT 127.0.0.1:{port} HTTP/") for line in seen), seen
