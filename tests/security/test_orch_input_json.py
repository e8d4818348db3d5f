"""Issue 32, finding 15 (orchestrator): bad JSON is a 400 naming the field, never a 500, on every JSON route;
a bad WebSocket frame is an `error` event and the socket stays open.

Bodies nest at most `schema.MAX_DEPTH` levels (a tool's `parameters` schema included); a lone UTF-16
surrogate (`\\ud800`) or bytes that are not UTF-8 are refused where they are, before anything downstream
(validation, rendering, the store) meets them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from orchestrator.request.schema import MAX_DEPTH
from tests.security.input_stack import Stack, chunks, orchestrator, send

ROUTES = {  # route -> a field of its body that takes nested JSON
    "/v1/responses": "input",
    "/v1/responses/input_tokens": "input",
    "/v1/responses/compact": "input",
    "/v1/conversations": "items",
    "/v1/conversations/{conv}": "metadata",
    "/v1/conversations/{conv}/items": "items",
    "/v1/chat/completions": "messages",
    "/v1/containers": "file_ids",
}
LONE = "\\ud800"  # as JSON writes it: the escape of a high surrogate with no low one after it


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with orchestrator() as started:
        started.script([("", "<|channel|>final<|message|>Done.<|return|>")])
        yield started


@pytest.fixture(scope="module")
def conv(stack: Stack) -> str:
    return stack.client.conversations.create().id


def _post(stack: Stack, route: str, conv: str, body: bytes, chunked: bool = False):
    return send(stack.port, "POST", route.format(conv=conv), chunks(body, 4096) if chunked else body)


def _nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5_000, 100_000])
def test_deep_json_is_a_400_naming_its_field(stack: Stack, conv: str, route: str, depth: int):
    field = ROUTES[route]
    answer = _post(stack, route, conv, f'{{"{field}": {_nested(depth)}}}'.encode())
    assert answer.status == 400, answer.body[:300]
    assert answer.error["param"].startswith(field) and f"deeper than {MAX_DEPTH}" in answer.error["message"]


def test_a_deeply_nested_tool_schema_is_a_400_naming_the_tool(stack: Stack, conv: str):
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(40):
        schema = {"type": "object", "properties": {"a": schema}}
    tool = {"type": "function", "name": "f", "parameters": schema}
    answer = _post(stack, "/v1/responses", conv, json.dumps({"model": "m", "input": "hi", "tools": [tool]}).encode())
    assert answer.status == 400 and answer.error["param"].startswith("tools[0].parameters.properties.a")


def test_a_tool_schema_within_the_bound_still_runs(stack: Stack):
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(10):
        schema = {"type": "object", "properties": {"a": schema}}
    tool = {"type": "function", "name": "f", "parameters": schema}
    assert stack.client.responses.create(model="m", input="hi", tools=[tool]).status == "completed"


@pytest.mark.parametrize("route", ROUTES)
def test_a_lone_surrogate_is_a_400_naming_its_field(stack: Stack, conv: str, route: str):
    field = ROUTES[route]
    answer = _post(stack, route, conv, f'{{"{field}": [{{"content": "a{LONE}b"}}]}}'.encode())
    assert answer.status == 400 and answer.error["param"] == f"{field}[0].content", answer.body[:300]
    assert "surrogate" in answer.error["message"]


@pytest.mark.parametrize("route", ROUTES)
def test_bytes_that_are_not_utf8_are_a_400(stack: Stack, conv: str, route: str):
    answer = _post(stack, route, conv, b'{"' + ROUTES[route].encode() + b'": "\xed\xa0\x80"}')
    assert answer.status == 400 and "UTF-8" in answer.error["message"]


def test_a_surrogate_pair_is_text(stack: Stack):
    """The escape of an astral character is two surrogates that make one: it is kept, not refused."""
    resp = stack.client.responses.create(model="m", input="smile \U0001f600")
    assert resp.status == "completed"
    answer = send(stack.port, "POST", "/v1/responses", b'{"model": "m", "input": "\\ud83d\\ude00"}')
    assert answer.status == 200 and answer.json()["status"] == "completed"


JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))


def _json_with(leaf: str, trail: list[Any]) -> str:
    """A JSON text with `leaf` (raw JSON) at `trail` (keys and indices) inside a body."""
    text = leaf
    for step in reversed(trail):
        text = f"[{text}]" if isinstance(step, int) else f'{{"{step}": {text}}}'
    return text


TRAILS = st.lists(st.one_of(st.just(0), st.sampled_from(["a", "content", "b_c"])), max_size=8)


@settings(max_examples=60, deadline=None)
@given(
    route=st.sampled_from(list(ROUTES)), trail=TRAILS, chunked=st.booleans(), where=st.sampled_from(["value", "key"])
)
def test_a_lone_surrogate_anywhere_is_a_400_never_a_500(
    stack: Stack, conv: str, route: str, trail: list[Any], chunked: bool, where: str
):
    leaf = f'"x{LONE}"' if where == "value" else f'{{"k{LONE}": 1}}'
    body = f'{{"{ROUTES[route]}": {_json_with(leaf, trail)}}}'.encode()
    answer = _post(stack, route, conv, body, chunked)
    assert answer.status == 400 and "surrogate" in answer.error["message"], answer.body[:300]


@settings(max_examples=60, deadline=None)
@given(route=st.sampled_from(list(ROUTES)), depth=st.integers(1, 3 * MAX_DEPTH))
def test_nesting_past_the_bound_is_a_400_and_within_it_never_a_500(stack: Stack, conv: str, route: str, depth: int):
    body = f'{{"{ROUTES[route]}": {_nested(depth)}}}'.encode()
    answer = _post(stack, route, conv, body)
    if depth + 1 > MAX_DEPTH:
        assert answer.status == 400 and "deeper than" in answer.error["message"]
    else:
        assert answer.status < 500, answer.body[:300]


@settings(max_examples=40, deadline=None)
@given(route=st.sampled_from(list(ROUTES)), bad=st.binary(min_size=1, max_size=4), at=st.integers(0, 40))
def test_invalid_utf8_anywhere_is_a_400(stack: Stack, conv: str, route: str, bad: bytes, at: int):
    text = json.dumps({ROUTES[route]: [{"content": "y" * 40}]}).encode()
    where = text.index(b"y") + min(at, 39)
    body = text[:where] + b"\xff" + bad + text[where:]  # 0xff is never UTF-8
    answer = _post(stack, route, conv, body)
    assert answer.status == 400 and "UTF-8" in answer.error["message"], answer.body[:300]


NON_FINITE = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-2.5E+400", "1" + "0" * 400 + ".0"])
LONG_INTEGER = "9" * 5000  # past Python's bound on the digits it parses (4300): a ValueError, not a decode error


@settings(max_examples=60, deadline=None)
@given(route=st.sampled_from(list(ROUTES)), trail=TRAILS, leaf=NON_FINITE | st.just(LONG_INTEGER))
def test_a_number_python_reads_but_json_has_not_anywhere_is_a_400_never_a_500(
    stack: Stack, conv: str, route: str, trail: list[Any], leaf: str
):
    """Python's parser reads NaN and Infinity (and 1e999 as inf) though JSON has no such number, and no encoder
    writes them back: a NaN in a tool's schema or a chat `temperature` used to be a 500, as did an integer
    longer than Python parses."""
    body = f'{{"{ROUTES[route]}": {_json_with(leaf, trail)}}}'.encode()
    answer = _post(stack, route, conv, body)
    message = answer.error["message"] if answer.status == 400 else ""
    assert any(words in message for words in ("not a JSON number", "out of range", "digits")), answer.body[:300]


@pytest.mark.parametrize(
    ("route", "body", "bad", "good"),
    [
        (
            "/v1/chat/completions",
            '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": X}',
            "NaN",
            "0.5",
        ),
        (
            "/v1/responses",
            '{"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f", '
            '"parameters": {"type": "object", "properties": {"a": {"type": "number", "default": X}}}}]}',
            "NaN",
            "0.5",
        ),
        ("/v1/responses", '{"model": "m", "input": "hi", "max_output_tokens": X}', LONG_INTEGER, "100"),
    ],
)
def test_the_numbers_that_were_500s_are_400s(stack: Stack, conv: str, route: str, body: str, bad: str, good: str):
    assert _post(stack, route, conv, body.replace("X", bad).encode()).status == 400
    assert _post(stack, route, conv, body.replace("X", good).encode()).status == 200


def _socket(stack: Stack):
    return connect(f"ws://127.0.0.1:{stack.port}/v1/responses", open_timeout=10, close_timeout=2)


def _next(ws) -> dict[str, Any]:
    return json.loads(ws.recv(timeout=10))


def test_a_binary_frame_is_an_error_event_and_the_socket_stays_open(stack: Stack):
    with _socket(stack) as ws:
        ws.send(b'{"type": "response.create"}')
        event = _next(ws)
        assert event["type"] == "error" and event["status"] == 400 and "binary" in event["error"]["message"]
        ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
        events = [_next(ws)]
        while events[-1]["type"] not in ("response.completed", "response.failed", "error"):
            events.append(_next(ws))
        assert events[-1]["type"] == "response.completed"


@pytest.mark.parametrize("frame", [_nested(100_000), '{"type": "response.create", "input": "' + LONE + '"}'])
def test_a_deep_or_surrogate_frame_is_an_error_event_and_the_socket_stays_open(stack: Stack, frame: str):
    with _socket(stack) as ws:
        ws.send(frame)
        event = _next(ws)
        assert event["type"] == "error" and event["status"] == 400
        ws.send(json.dumps({"type": "nonsense"}))  # still open: the next frame is answered
        assert _next(ws)["error"]["param"] == "type"


def _shell_call(stack: Stack, arguments: str) -> dict[str, Any]:
    """The local_shell_call item of a response whose model calls `container.exec` with `arguments`."""
    stack.script([("", f"<|channel|>commentary to=container.exec <|constrain|>json<|message|>{arguments}<|call|>")])
    body = json.dumps({"model": "m", "input": "go", "tools": [{"type": "local_shell"}]}).encode()
    answer = send(stack.port, "POST", "/v1/responses", body)
    assert answer.status == 200, answer.body[:300]
    return answer.json()["output"][0]


@pytest.mark.parametrize("bad", ["1e999", "NaN", LONG_INTEGER, "[" * 3000 + "]" * 3000])
def test_a_model_call_holding_what_json_has_not_is_an_incomplete_call_not_a_crash(stack: Stack, bad: str):
    """The model writes anything: each of these used to fail its response with a 500 (OverflowError, ValueError,
    RecursionError); now the call's arguments are not JSON, as any malformed call's."""
    assert _shell_call(stack, f'{{"cmd": ["ls"], "timeout": {bad}}}')["status"] == "incomplete"


@settings(max_examples=30, deadline=None)
@given(seconds=st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**30), 10**30))
def test_a_model_shell_timeout_of_any_number_is_a_bounded_timeout_or_none(stack: Stack, seconds: float):
    item = _shell_call(stack, json.dumps({"cmd": ["ls"], "timeout": seconds}))
    assert item["status"] == "completed"
    timeout_ms = item["action"]["timeout_ms"]
    assert timeout_ms is None if not 0 < seconds <= 86_400 else timeout_ms == int(seconds * 1000)


def _replayed(stack: Stack, rid: str, starting_after: int) -> tuple[int, list[int]]:
    """The status and the sequence numbers of `GET /v1/responses/{rid}?stream=true&starting_after=...`."""
    answer = send(stack.port, "GET", f"/v1/responses/{rid}?stream=true&starting_after={starting_after}")
    data = [line[6:] for line in answer.body.decode().splitlines() if line.startswith("data: ")]
    return answer.status, [json.loads(d)["sequence_number"] for d in data] if answer.status == 200 else []


@pytest.fixture(scope="module")
def finished(stack: Stack) -> tuple[str, int]:
    """A stored background response and how many events it has."""
    stack.script([("", "<|channel|>final<|message|>Done.<|return|>")])
    rid = stack.client.responses.create(model="m", input="go", background=True).id
    status, seqs = _replayed(stack, rid, -1)  # follows it to its end
    assert status == 200 and seqs == list(range(len(seqs)))
    return rid, len(seqs)


@settings(max_examples=40, deadline=None)
@given(starting_after=st.integers(-(2**70), 2**70) | st.integers(-10, 20))
def test_any_starting_after_is_a_400_out_of_range_or_the_gapless_rest(
    stack: Stack, finished: tuple[str, int], starting_after: int
):
    """Below -1 the log was indexed from its end: a replay from the middle, then the whole log again."""
    rid, count = finished
    status, seqs = _replayed(stack, rid, starting_after)
    if not -1 <= starting_after < 2**53:
        assert status == 400
    else:
        assert status == 200 and seqs == list(range(starting_after + 1, count))


def test_a_negative_starting_after_on_a_running_response_is_a_400_not_a_broken_stream(stack: Stack):
    """On a response running here it was an IndexError mid-stream (the connection cut, no terminal event)."""
    stack.script([("", "<|channel|>final<|message|>" + "word " * 20 + "<|return|>")], delay_s=0.05)
    rid = stack.client.responses.create(model="m", input="go", background=True).id
    assert _replayed(stack, rid, -1_000_000)[0] == 400
    status, seqs = _replayed(stack, rid, -1)
    assert status == 200 and seqs == list(range(len(seqs)))


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=-5", "order=sideways"])
def test_input_items_paging_out_of_range_is_a_400_naming_it(stack: Stack, finished: tuple[str, int], query: str):
    """These were clamped, or (an unknown order) read as `asc`, rather than refused."""
    answer = send(stack.port, "GET", f"/v1/responses/{finished[0]}/input_items?{query}")
    assert answer.status == 400 and answer.error["param"] == query.split("=")[0], answer.body[:300]
