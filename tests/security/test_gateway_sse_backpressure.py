"""Issue 32, finding 12: a legacy SSE client that posts and never reads its stream is refused, not buffered.

The real gateway in front of a real fixture MCP server; the client's event stream is a raw socket with a small
receive window that the test reads only when it says, so the answers of its `echo` calls pile up in the gateway.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.gateway.raw import SseStream
from tests.support.gateway import ACCEPT, INIT, GatewayProc, fixtures, gateway_config, running_gateway

TEXT = "x" * (256 * 1024)
MOST_POSTS = 200
"""Far more answers than the default bounds hold (8 MiB queued, 64 pending): 50 MB of echo to hold unbounded."""


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewayProc]:
    with fixtures("r1") as ups, running_gateway(gateway_config({"fixture": [ups[0].url]})) as proc:
        yield proc


def echo(rid: int, text: str = TEXT) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}},
    }


def opened(gw: GatewayProc, http: httpx.Client) -> SseStream:
    sse = SseStream(gw.port, "fixture", rcvbuf=4096)
    assert http.post(sse.endpoint, json=INIT).status_code == 202
    assert sse.message()["id"] == INIT["id"]
    assert http.post(sse.endpoint, json={"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    return sse


def test_posts_to_a_stream_nobody_reads_are_refused_and_accepted_again_once_it_is_read(gw: GatewayProc) -> None:
    with httpx.Client(base_url=gw.base, headers=ACCEPT, trust_env=False, timeout=30) as http:
        sse = opened(gw, http)
        accepted = 0
        for rid in range(100, 100 + MOST_POSTS):
            answer = http.post(sse.endpoint, json=echo(rid))
            if answer.status_code != 202:
                break
            accepted += 1
        assert answer.status_code == 429, f"{accepted} posts accepted, none refused"
        error = answer.json()["error"]
        assert error["code"] == -32029 and "read its event stream" in error["message"]
        answered = {sse.message()["id"] for _ in range(accepted)}  # every accepted call is answered, in full
        assert answered == set(range(100, 100 + accepted))
        assert http.post(sse.endpoint, json=echo(1, "again")).status_code == 202
        assert sse.message()["result"]["content"][0]["text"] == "again"
        sse.close()


def test_a_legacy_post_body_is_bounded_like_a_streamable_one(gw: GatewayProc) -> None:
    with httpx.Client(base_url=gw.base, headers=ACCEPT, trust_env=False, timeout=30) as http:
        sse = opened(gw, http)
        big = json.dumps(echo(2, "y" * (5 * 1024 * 1024)))
        for path in (sse.endpoint, "/fixture/mcp"):
            answer = http.post(path, content=big)
            assert answer.status_code == 413 and "exceeds" in answer.json()["error"]["message"]
        sse.close()
