"""Unit tables for the gateway's pure parts: config, header rules, message checks, error mapping, SSE parsing."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types import CallToolResult
from pydantic import ValidationError

from gateway.config import HeaderPolicy, parse_config
from gateway.errors import (
    BadUpstream,
    BodyTooLarge,
    GatewayError,
    InvalidRequest,
    ParseError,
    RateLimited,
    SessionLost,
    Unauthorized,
    Unavailable,
    UnknownHandle,
    UnknownNamespace,
    UnknownSession,
    UpstreamTimeout,
    error_body,
    to_error,
)
from gateway.headers import HeaderRules
from gateway.messages import Rewriter, envelope_headers, parse_message
from gateway.paths import canonical
from gateway.routing import Namespace
from gateway.store import MemoryStore
from gateway.upstream import Replica, upstream_errors
from toolkit.mcpwire.http import InvalidHeader
from toolkit.mcpwire.sse import SseParser, event_data


def test_config_expands_env_and_rejects_bad_namespaces_and_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_TOKEN", "s3cret")
    cfg = parse_config("namespaces: {python: {replicas: ['http://p:8802/mcp']}}\nsecurity: {tokens: ['${GW_TOKEN}']}")
    assert cfg.security.tokens == ("s3cret",) and cfg.namespaces["python"].tool_pinning == "refuse"
    for bad in (
        "namespaces: {metrics: {replicas: ['http://p/mcp']}}",
        "namespaces: {'a/b': {replicas: ['http://p/mcp']}}",
        "namespaces: {x: {replicas: []}}",
        "namespaces: {x: {replicas: ['ftp://p/mcp']}}",
        "namespaces: {x: {replicas: ['http://user:pw@p/mcp']}}",
        "namespaces: {x: {replicas: ['http://p/mcp'], typo: 1}}",
        "namespaces: {x: {}}",  # neither replicas nor discover
        "namespaces: {x: {replicas: ['http://p/mcp'], discover: {dns: p, port: 8802}}}",  # both
        "namespaces: {x: {discover: {dns: 'not a name', port: 8802}}}",
        "namespaces: {x: {discover: {dns: p, port: 0}}}",
        "namespaces: {x: {discover: {dns: p, port: 8802, path: mcp}}}",
        "namespaces: {x: {discover: {dns: p}}}",
    ):
        with pytest.raises(ValidationError):
            parse_config(bad)


def test_header_rules_allow_rename_add_and_never_pass_hop_by_hop() -> None:
    rules = HeaderRules(
        HeaderPolicy(
            forward=("X-Session-Id", "traceparent"), rename={"X-Up-Auth": "Authorization"}, static={"X-A": "1"}
        )
    )
    raw = [
        (b"x-session-id", b"resp_1"),
        (b"traceparent", b"00-aa-bb-01"),
        (b"x-up-auth", b"Bearer up"),
        (b"authorization", b"Bearer gateway-token"),
        (b"connection", b"keep-alive, traceparent"),
        (b"transfer-encoding", b"chunked"),
        (b"host", b"gw:8800"),
        (b"mcp-session-id", b"gateway-sid"),
        (b"mcp-protocol-version", b"2025-11-25"),
        (b"accept", b"application/json, text/event-stream"),
        (b"cookie", b"c=1"),
    ]
    assert rules.apply(raw) == {
        "x-session-id": "resp_1",
        "authorization": "Bearer up",
        "mcp-protocol-version": "2025-11-25",
        "accept": "application/json, text/event-stream",
        "x-a": "1",
    }  # traceparent was named hop-by-hop by `connection`, so it is dropped too


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{", ParseError),
        (b"\xff", ParseError),
        (b"[]", InvalidRequest),
        (b"3", InvalidRequest),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', InvalidRequest),
        (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', InvalidRequest),
        (b'{"jsonrpc": "2.0", "id": 1}', InvalidRequest),
        (b'{"jsonrpc": "2.0", "method": "x", "params": "no"}', InvalidRequest),
    ],
)
def test_malformed_messages_are_refused_precisely(body: bytes, error: type[GatewayError]) -> None:
    with pytest.raises(error):
        parse_message(body)


def test_wellformed_messages_pass() -> None:
    assert parse_message(b'{"jsonrpc": "2.0", "id": "a", "result": {}}')["id"] == "a"
    assert parse_message(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')["method"]


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (ParseError("x"), 400, -32700),
        (InvalidRequest("x"), 400, -32600),
        (BodyTooLarge("x"), 413, -32600),
        (UnknownNamespace("x"), 404, -32601),
        (UnknownSession("x"), 404, -32001),
        (SessionLost("x"), 200, -32002),
        (Unavailable("x"), 200, -32003),
        (UpstreamTimeout("x"), 200, -32004),
        (BadUpstream("x"), 200, -32005),
        (Unauthorized("x"), 401, -32010),
        (RateLimited("x"), 429, -32029),
        (json.JSONDecodeError("x", "", 0), 400, -32700),
        (RuntimeError("secret detail"), 200, -32603),
    ],
)
def test_every_exception_maps_to_one_jsonrpc_error(exc: BaseException, status: int, code: int) -> None:
    got_status, body = error_body(7, exc)
    answer = json.loads(body)
    assert (got_status, answer["error"]["code"], answer["id"]) == (status, code, 7)
    assert "secret detail" not in answer["error"]["message"]
    assert to_error(exc).code == code


def test_a_handle_the_gateway_cannot_route_is_the_tools_error_result_not_a_jsonrpc_error() -> None:
    status, body = error_body(7, UnknownHandle("unknown session handle 'x'", data={"session": "x"}))
    answer = json.loads(body)
    assert status == 200 and answer["id"] == 7 and "error" not in answer
    result = CallToolResult.model_validate(answer["result"])
    assert result.is_error and result.content[0].text == "unknown session handle 'x'"  # type: ignore[union-attr]


def test_sse_parser_handles_crlf_split_across_chunks() -> None:
    parser = SseParser()
    events = parser.feed(b'event: message\r\ndata: {"a":') + parser.feed(b"1}\r") + parser.feed(b"\n\r\n: c\r\n\r\n")
    assert events == [b'event: message\ndata: {"a":1}', b": c"]
    assert event_data(events[0]) == b'{"a":1}' and event_data(events[1]) is None


async def test_rewriter_names_the_namespace_everywhere_serverinfo_appears() -> None:
    msg = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "serverInfo": {"name": "upstream"},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "upstream", "version": "1"}},
        },
    }
    data, _ = await Rewriter("python", "initialize").apply(json.dumps(msg).encode())
    out = json.loads(data)
    assert out["result"]["serverInfo"]["name"] == "python"
    assert out["result"]["_meta"]["io.modelcontextprotocol/serverInfo"] == {"name": "python", "version": "1"}
    untouched = b'{"jsonrpc":"2.0","id":2,"result":{"content":[]}}'
    assert (await Rewriter("python", "tools/call").apply(untouched))[0] is untouched


def _listing(**hints: object) -> bytes:
    handle = {"type": "string", "x-mcp-header": "Session-Handle"}
    schema = {"type": "object", "properties": {"code": {"type": "string"}, "session_handle": handle}}
    tools = [{"name": "python", "inputSchema": schema}, {"name": "pending", "inputSchema": {"type": "object"}}]
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools, "resultType": "complete", **hints}}
    ).encode()


async def test_a_reviewed_listing_keeps_the_upstreams_cache_hints() -> None:
    async def review(tools: list[Any]) -> list[Any]:
        return [t for t in tools if t["name"] != "pending"]

    data, _ = await Rewriter("python", "tools/list", review).apply(_listing(ttlMs=60000, cacheScope="public"))
    result = json.loads(data)["result"]
    assert [t["name"] for t in result["tools"]] == ["python"]
    assert (result["ttlMs"], result["cacheScope"], result["resultType"]) == (60000, "public", "complete")


async def test_the_legacy_sse_listing_depends_on_the_transport_so_it_is_private() -> None:
    data, _ = await Rewriter("python", "tools/list", legacy=True).apply(_listing(ttlMs=60000, cacheScope="public"))
    result = json.loads(data)["result"]
    assert "session_handle" not in result["tools"][0]["inputSchema"]["properties"]
    assert (result["ttlMs"], result["cacheScope"]) == (60000, "private")
    data, _ = await Rewriter("python", "tools/list", legacy=True).apply(_listing())  # 2025 era: no hints added
    assert "cacheScope" not in json.loads(data)["result"]


def test_modern_requests_carry_their_envelope_as_routing_headers() -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "añadir", "_meta": meta}}
    headers = envelope_headers(msg)
    assert headers["mcp-protocol-version"] == "2026-07-28" and headers["mcp-method"] == "tools/call"
    assert headers["mcp-name"].startswith("=?base64?")
    assert envelope_headers({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}) == {}


def _namespace(*urls: str) -> Namespace:
    cfg = parse_config(json.dumps({"namespaces": {"python": {"replicas": list(urls)}}}))
    return Namespace("python", cfg.namespaces["python"], cfg, MemoryStore())


def test_a_new_session_goes_to_the_replica_with_the_most_room_and_never_to_one_that_drains() -> None:
    a, b, c = "http://a:1/mcp", "http://b:1/mcp", "http://c:1/mcp"
    ns = _namespace(a, b, c)
    # Nothing reported yet: the fewest pinned sessions.
    assert ns.pick({a: 3, b: 1, c: 2}).url == b
    ns.replicas[a].room, ns.replicas[b].room, ns.replicas[c].room = 6, 1, 3
    # Reported room wins over the pin counts, and is counted down as sessions are placed (then a tie).
    picks = [ns.pick({a: 3, b: 1, c: 2}).url for _ in range(5)]
    assert picks[:3] == [a, a, a] and sorted(picks[3:]) == [a, c]
    ns.replicas[a].said_draining = True
    assert a not in {ns.pick({}).url for _ in range(8)}
    ns.replicas[b].said_draining = ns.replicas[c].said_draining = True
    with pytest.raises(Unavailable, match="takes new sessions"):
        ns.pick({})


def test_a_replica_that_leaves_discovery_while_up_stays_draining_until_it_is_down() -> None:
    a, b = "http://a:1/mcp", "http://b:1/mcp"
    ns = _namespace(a, b)
    ns.replicas[b].record_failure(decisive=True)
    added, removed = ns.adopt({"http://c:1/mcp"})
    # b was down: dropped at once; a is up: it stays, draining, for the sessions it holds.
    assert [r.url for r in removed] == [b] and [r.url for r in added] == ["http://c:1/mcp"]
    assert ns.replicas[a].vanished and ns.replicas[a].draining and not ns.replicas[a].said_draining
    ns.adopt({a, "http://c:1/mcp"})  # back in the name: taking sessions again
    assert not ns.replicas[a].vanished and not ns.replicas[a].draining


@pytest.mark.parametrize(
    ("header", "error"), [("mcp-session-id", BadUpstream), ("x-session-id", InvalidRequest), (None, InvalidRequest)]
)
def test_a_refused_request_head_blames_whoever_chose_the_header(header: str | None, error: type[GatewayError]) -> None:
    """A client's `mcp-session-id` never goes upstream (the gateway sends the replica's own), so a bad one there is
    the replica's; any other header, or the method, is the request's. Neither counts toward the replica's health."""
    replica = Replica("python", "http://p:8802/mcp", failures_to_open=1, open_s=5)
    with pytest.raises(error) as refused, upstream_errors(replica):
        raise InvalidHeader("refused", header)
    assert "http://p" not in refused.value.message and replica.failures == 0


@settings(max_examples=200, deadline=None, database=None)
@given(st.text(alphabet=st.sampled_from("/.%2Fa5Cb\\\x00"), max_size=24))
def test_a_canonical_path_is_plain_and_canonical_again(raw: str) -> None:
    """Whatever was sent, the path every later layer reads has no empty, `.` or `..` segment, or it was refused."""
    path = "/" + raw
    try:
        canon = canonical(unquote(path), path.encode("latin-1"))
    except InvalidRequest:
        return
    assert "//" not in canon and not (canon != "/" and canon.endswith("/"))
    assert all(s not in (".", "..") for s in canon.split("/")[1:])
    assert canonical(canon, canon.encode()) == canon
