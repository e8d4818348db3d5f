"""Issue 32, finding 15 (the gateway's side): deep JSON and unpaired surrogates are client errors, never -32603.

A body nested deeper than `messages.MAX_DEPTH` (64) is a parse error (-32700) naming the limit, and so is a string
holding an unpaired `\\uD800`-`\\uDFFF` escape; bodies past `security.max_body_bytes` get 413. Both transports of
the real gateway, in front of a real fixture MCP server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.raw import SseStream
from tests.support.gateway import ACCEPT, GatewayProc, fixtures, gateway_config, running_gateway

LIMIT = 8192
MAX_DEPTH = 64
HTTP = settings(
    max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewayProc]:
    cfg = {"security": {"max_body_bytes": LIMIT}}
    with fixtures("r1") as ups, running_gateway(gateway_config({"fixture": [ups[0].url]}, **cfg)) as proc:
        yield proc


@pytest.fixture(scope="module")
def sse(gw: GatewayProc) -> Iterator[SseStream]:
    stream = SseStream(gw.port, "fixture")
    yield stream
    stream.close()


def nested(depth: int) -> bytes:
    """A `ping` whose params nest arrays so that the whole message is `depth` levels deep."""
    inner = "[" * (depth - 2) + "]" * (depth - 2)
    return b'{"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"deep": ' + inner.encode() + b"}}"


def post(gw: GatewayProc, sse: SseStream, transport: str, body: bytes) -> httpx.Response:
    """POST `body` on one transport; on legacy SSE an accepted message's answer is read off the stream."""
    path = "/fixture/mcp" if transport == "streamable-http" else sse.endpoint
    answer = httpx.post(gw.base + path, content=body, headers=ACCEPT, trust_env=False, timeout=30)
    if transport == "sse" and answer.status_code == 202:
        sse.message()
    return answer


def assert_parse_error(answer: httpx.Response, words: str) -> None:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == -32700 and words in error["message"], error


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 4000])
def test_json_nested_too_deep_is_a_parse_error_naming_the_limit(
    gw: GatewayProc, sse: SseStream, transport: str, depth: int
) -> None:
    body = nested(depth) if depth < LIMIT // 2 else b"[" * depth + b"]" * depth
    assert_parse_error(post(gw, sse, transport, body), f"nests deeper than {MAX_DEPTH} levels")


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
@pytest.mark.parametrize("text", ["\\ud800", "a\\udfff", "\\ud800\\u0041", "\\\\\\ud83d"])
def test_an_unpaired_surrogate_is_a_parse_error(gw: GatewayProc, sse: SseStream, transport: str, text: str) -> None:
    body = '{"jsonrpc": "2.0", "id": 8, "method": "ping", "params": {"t": "' + text + '"}}'
    assert_parse_error(post(gw, sse, transport, body.encode()), "unpaired surrogate")


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_a_surrogate_pair_is_text_and_goes_through(gw: GatewayProc, sse: SseStream, transport: str) -> None:
    body = b'{"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"t": "\\ud83d\\ude00"}}'
    answer = post(gw, sse, transport, body)  # the replica answers it (a ping outside a session: its own error)
    assert answer.status_code < 500 and "surrogate" not in answer.text and "-32700" not in answer.text


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
@pytest.mark.parametrize(
    ("where", "number", "words"),
    [
        ("params", "NaN", "not a JSON number"),
        ("params", "-Infinity", "not a JSON number"),
        ("params", "1e999", "out of range"),
        ("params", "9" * 5000, "digits"),  # was -32603 "internal gateway error" (a ValueError)
        ("id", "9" * 5000, "digits"),
    ],
)
def test_a_number_json_has_not_is_a_parse_error(
    gw: GatewayProc, sse: SseStream, transport: str, where: str, number: str, words: str
) -> None:
    """Python reads them, JSON has no such number: relayed, the replica would read NaN as a float."""
    params = f'{{"n": {number}}}' if where == "params" else "{}"
    rid = number if where == "id" else "10"
    body = f'{{"jsonrpc": "2.0", "id": {rid}, "method": "ping", "params": {params}}}'
    assert_parse_error(post(gw, sse, transport, body.encode()), words)


@HTTP
@given(depth=st.integers(2, 130), transport=st.sampled_from(["streamable-http", "sse"]))
def test_nesting_is_refused_exactly_past_the_limit(gw: GatewayProc, sse: SseStream, depth: int, transport: str) -> None:
    answer = post(gw, sse, transport, nested(depth))
    if depth > MAX_DEPTH:
        assert_parse_error(answer, "nests deeper")
    else:
        assert answer.status_code < 500 and "nests deeper" not in answer.text


@HTTP
@given(size=st.integers(0, 2 * LIMIT), transport=st.sampled_from(["streamable-http", "sse"]))
def test_a_body_is_refused_exactly_past_the_limit(gw: GatewayProc, sse: SseStream, size: int, transport: str) -> None:
    head = b'{"jsonrpc": "2.0", "id": 10, "method": "ping", "params": {"pad": "'
    body = (head + b"p" * max(0, size - len(head) - 3) + b'"}}')[: max(size, len(head) + 3)]
    answer = post(gw, sse, transport, body)
    if len(body) > LIMIT:
        assert answer.status_code == 413 and answer.json()["error"]["code"] == -32600
    else:
        assert answer.status_code < 500 and answer.status_code != 413, answer.text


def test_the_gateway_answers_json_errors_not_internal_ones(gw: GatewayProc) -> None:
    """What the battery found: deep JSON answered -32603 "internal gateway error"."""
    answer = httpx.post(gw.url("fixture"), content=b"[" * 5000, headers=ACCEPT, trust_env=False, timeout=30)
    assert answer.json()["error"]["code"] != -32603
    assert "internal" not in json.dumps(answer.json())
