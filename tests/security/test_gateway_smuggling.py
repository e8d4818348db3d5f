"""Issue 32, finding 1: no header value reaches an upstream with CR, LF or NUL, whatever a body or a caller says.

Legacy SSE copies a message's `method` and `_meta` protocol version into upstream headers; a CRLF there used to end
the head early and smuggle a request of the attacker's choosing onto a pooled connection. The real gateway runs in
front of a real fixture MCP server (whose `whoami` tool shows the headers it received) on loopback.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import GatewayError
from gateway.messages import PROTOCOL_VERSION_META_KEY, envelope_headers, parse_message
from tests.gateway.raw import SseStream
from tests.support.gateway import ACCEPT, INIT, GatewayProc, Upstream, fixtures, gateway_config, running_gateway
from toolkit.mcpwire.http import Pool, Timeouts

MODERN = "2026-07-28"
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""What no header value may hold on the wire (HTAB is allowed)."""
HTTP = settings(
    max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
PURE = settings(max_examples=200, deadline=None, database=None)
NASTY = st.text(alphabet=st.sampled_from("\r\n\x00\t :/aZ-\x7f\u00e9\u2028"), max_size=12)
"""Short strings built mostly of the characters that split or bend an HTTP head."""


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with fixtures("r1") as ups:
        yield ups[0]


@pytest.fixture(scope="module")
def gw(upstream: Upstream) -> Iterator[GatewayProc]:
    with running_gateway(gateway_config({"fixture": [upstream.url]})) as proc:
        yield proc


@pytest.fixture(scope="module")
def stream(gw: GatewayProc) -> Iterator[SseStream]:
    """One initialized legacy SSE session, shared by the module's SSE examples."""
    sse = SseStream(gw.port, "fixture")
    post(gw, sse, INIT)
    assert sse.message()["id"] == INIT["id"]
    post(gw, sse, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield sse
    sse.close()


def post(gw: GatewayProc, sse: SseStream, msg: dict[str, Any]) -> httpx.Response:
    return httpx.post(gw.base + sse.endpoint, content=json.dumps(msg), headers=ACCEPT, trust_env=False, timeout=30)


def call(rid: int, method: str, version: str | None = MODERN, name: str = "count") -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": {}}
    if version is not None:
        params["_meta"] = {PROTOCOL_VERSION_META_KEY: version}
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def victim_count(gw: GatewayProc) -> int:
    """The victim's counter after one more call of its own (x-session-id `victim`, over streamable HTTP)."""
    with httpx.Client(base_url=gw.base, trust_env=False, timeout=30, headers=ACCEPT) as http:
        init = http.post("/fixture/mcp", json=INIT, headers={"x-session-id": "victim"})
        sid = {"mcp-session-id": init.headers["mcp-session-id"], "x-session-id": "victim"}
        http.post("/fixture/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=sid)
        answer = http.post("/fixture/mcp", json=call(2, "tools/call", None), headers=sid)
        http.delete("/fixture/mcp", headers=sid)
    found = re.search(r"r1:victim:(\d+)", answer.text)
    assert found, answer.text
    return int(found.group(1))


def test_a_crlf_in_a_legacy_method_is_refused_before_anything_is_sent(gw: GatewayProc, stream: SseStream) -> None:
    before = victim_count(gw)
    smuggled = call(5, "tools/call\r\nx-session-id: victim")
    answer = post(gw, stream, smuggled)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == -32600 and '"method"' in answer.json()["error"]["message"]
    assert victim_count(gw) == before + 1  # only the victim's own calls ran in its session


def test_a_crlf_in_a_legacy_protocol_version_is_refused_naming_the_field(gw: GatewayProc, stream: SseStream) -> None:
    answer = post(gw, stream, call(6, "tools/call", f"{MODERN}\r\nx-session-id: victim"))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == -32602 and PROTOCOL_VERSION_META_KEY in error["message"]


def test_a_crlf_method_is_refused_on_streamable_http_too(gw: GatewayProc) -> None:
    body = json.dumps(call(7, "tools/call\r\nx-session-id: victim", None))
    answer = httpx.post(gw.url("fixture"), content=body, headers=ACCEPT, trust_env=False, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == -32600 and "RFC 9110" in answer.json()["error"]["message"]


async def test_the_upstream_client_refuses_a_crlf_header_from_any_caller_and_stays_in_step(upstream: Upstream) -> None:
    pool = Pool()
    healthz = upstream.url.removesuffix("/mcp") + "/healthz"
    try:
        for headers in ({"x-session-id": "a\r\nx-evil: 1"}, {"x-a\nb": "1"}, {"x-nul": "a\x00b"}):
            with pytest.raises(ValueError, match=r"RFC 9110|not allowed"):
                await pool.request("GET", healthz, headers, None, Timeouts())
        response = await pool.request("GET", healthz, {}, None, Timeouts())
        assert response.status_code == 200 and b"ok" in await response.aread()
        await response.aclose()
    finally:
        pool.close()


@PURE
@given(method=st.text(max_size=12) | NASTY, version=st.text(max_size=12) | NASTY | st.sampled_from([MODERN]))
def test_header_values_derived_from_a_body_are_clean_or_refused_precisely(method: str, version: str) -> None:
    body = json.dumps(call(1, method, version, name=version)).encode()
    try:
        headers = envelope_headers(parse_message(body))
    except GatewayError as exc:
        assert exc.code in (-32700, -32600, -32602) and exc.status == 400
        return
    assert all(not CONTROL.search(v) and "\r" not in v for v in headers.values()), headers


async def _sent(method: str, headers: dict[str, str]) -> bytes | None:
    """What a real loopback server received for one request of the pool (None: the pool refused it)."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    pool = Pool()
    try:
        port = server.sockets[0].getsockname()[1]
        try:
            response = await pool.request(method, f"http://127.0.0.1:{port}/mcp", headers, None, Timeouts())
        except ValueError:
            return None
        await response.aclose()
    finally:
        pool.close()
        server.close()
    return received[0]


@PURE
@given(
    method=st.sampled_from(["GET", "DELETE"]) | NASTY,
    headers=st.dictionaries(st.text(max_size=8) | NASTY, st.text(max_size=12) | NASTY, max_size=4),
)
def test_a_request_head_says_exactly_its_headers_or_nothing_is_sent(method: str, headers: dict[str, str]) -> None:
    head = asyncio.run(_sent(method, headers))
    if head is None:
        return
    lines = head.decode("latin-1").removesuffix("\r\n\r\n").split("\r\n")
    assert not any(CONTROL.search(line) for line in lines), lines
    assert [line.split(":", 1)[0] for line in lines[2:]] == list(headers)  # the request line and host come first
    assert [line.split(": ", 1)[1] for line in lines[2:]] == list(headers.values())


@HTTP
@given(method=NASTY | st.sampled_from(["tools/call", "ping"]), version=NASTY | st.sampled_from([MODERN]))
def test_any_method_or_version_over_legacy_sse_is_refused_or_leaves_the_stream_in_step(
    gw: GatewayProc, stream: SseStream, method: str, version: str
) -> None:
    answer = post(gw, stream, call(100, method, version))
    if answer.status_code != 202:
        assert answer.status_code == 400 and answer.json()["error"]["code"] in (-32700, -32600, -32602)
        return
    assert stream.message()["id"] == 100  # its answer, whatever it is
    # the next call gets its own answer, and its replica saw no header the body wrote
    assert post(gw, stream, call(101, "tools/call", None, name="whoami")).status_code == 202
    mine = stream.message()
    assert mine["id"] == 101, mine
    seen = json.loads(mine["result"]["content"][0]["text"])["headers"]
    assert not any(CONTROL.search(k) or CONTROL.search(v) for k, v in seen.items()), seen
    assert "x-session-id" not in seen
