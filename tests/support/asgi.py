"""Serve an ASGI app with uvicorn on an ephemeral loopback port, in a background thread.

    with serve_asgi(app) as base_url:      # "http://127.0.0.1:PORT"
        ...

The socket is bound before the thread starts, so the URL is valid at once; the server's lifespan
has run when the block is entered, and the server shuts down (lifespan included) when it is left.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (for servers that must be told their port up front)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextmanager
def serve_asgi(
    app: Any, *, host: str = "127.0.0.1", port: int = 0, startup_timeout: float = 15.0, **options: Any
) -> Iterator[str]:
    """`port`: a given one (a client told it before the server is up), else an ephemeral one. `options`: more
    `uvicorn.Config` settings (a test's own keep-alive or protocol class)."""
    # With the protocol named, asyncio sets TCP_NODELAY (else streamed replies wait ~40 ms on Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=3, **options
    )
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as exc:  # surfaced to the caller below
            failure.append(exc)

    thread = threading.Thread(target=target, name=f"asgi-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if failure or not thread.is_alive():
            sock.close()
            raise RuntimeError(f"ASGI server on port {port} failed to start: {failure[:1]!r}")
        if time.monotonic() > deadline:
            server.should_exit = True
            thread.join(5)
            sock.close()
            raise TimeoutError(f"ASGI server on port {port} not started after {startup_timeout} s")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5)
        sock.close()
