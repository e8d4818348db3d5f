"""`--otlp-endpoint`: a real tool server process ships its spans to an OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import http.server
import shutil
import threading
from collections.abc import Iterator

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.service import running_service

pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the python server's local backend needs bwrap")


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    """A minimal OTLP/HTTP collector: keeps each POST's path, content type and protobuf body."""
    posts: list[tuple[str, str, bytes]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            posts.append((self.path, self.headers["content-type"], body))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1/traces", posts
    server.shutdown()
    thread.join()


async def test_a_tool_call_reaches_the_collector_by_the_time_the_server_has_stopped(receiver) -> None:
    endpoint, posts = receiver
    args = ["-m", "tools.python_sandbox", "--backend", "local", "--otlp-endpoint", endpoint]
    with running_service(args) as python:
        async with Client(streamable_http_client(f"{python.url}/mcp"), mode="legacy") as client:
            result = await client.call_tool("python", {"code": "print(6 * 7)"})
        assert result.content[0].text.strip() == "42"
        assert python.stop() in (0, -15)  # SIGTERM: the last spans are flushed before uvicorn re-raises it
    assert posts and all(p[:2] == ("/v1/traces", "application/x-protobuf") for p in posts)
    body = b"".join(p[2] for p in posts)
    assert b"python.python" in body and b"sandbox.run" in body and b"toolfleet.session_id" in body
