"""Issue 32, finding 8: per-key limits hold under concurrency, on every route that runs a model turn.

Bursts go out at once (asyncio.gather over real HTTP / WebSocket on loopback) while the worker holds every
generation it receives (`Gate`), so a request the orchestrator admits is still running when the rest of the
burst arrives: exactly the key's limit may reach the worker, the others are a 429 at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import websockets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.orch_bounds_support import KEYS, MODEL, Gate, bearer, burst, gated_worker, orchestrator

LIMIT = 2
SOCKETS = 4
N = 8


@pytest.fixture(scope="module")
def worker() -> Iterator[tuple[str, Gate]]:
    with gated_worker() as (url, gate, _):
        yield url, gate


@pytest.fixture(scope="module")
def limited(worker) -> Iterator[str]:
    """Every key may run LIMIT model turns and hold SOCKETS WebSocket connections; no rate limit."""
    with orchestrator(worker[0], max_concurrent_per_key=LIMIT, max_sockets_per_key=SOCKETS) as url:
        yield url


@pytest.fixture(scope="module")
def rated(worker) -> Iterator[str]:
    """Every key may send 3 requests, and then (practically) no more: 0.001 per second."""
    with orchestrator(worker[0], rate_limit_rps=0.001, rate_limit_burst=3) as url:
        yield url


_keys = iter(KEYS)


def fresh_key() -> str:
    """A key no other test used, so no slot or bucket of another test is counted."""
    return next(_keys)


def is_429(answer: Any) -> bool:
    return isinstance(answer, httpx.Response) and answer.status_code == 429


def refusal_of(answer: httpx.Response) -> dict[str, Any]:
    return answer.json()["error"]


ROUTES = {
    "responses": ("/v1/responses", {"model": MODEL, "input": "hello"}),
    "responses-stream": ("/v1/responses", {"model": MODEL, "input": "hello", "stream": True}),
    "responses-background": ("/v1/responses", {"model": MODEL, "input": "hello", "background": True}),
    "compact": ("/v1/responses/compact", {"model": MODEL, "input": "hello"}),
    "chat-completions": ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
    "chat-completions-stream": (
        "/v1/chat/completions",
        {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    ),
}


async def continued(http: httpx.AsyncClient, route: str) -> tuple[str, dict[str, Any]]:
    """The route's request continuing a stored response of the client's key, made first with the gate open:
    reading it is a store read, so every request of the burst awaits before it can run, as a request with
    a history or tools does (a bare one may get through `create` without ever yielding the loop)."""
    path, body = ROUTES[route]
    if path == "/v1/chat/completions":
        return path, body
    first = await http.post("/v1/responses", json={"model": MODEL, "input": "first"})
    return path, {**body, "previous_response_id": first.json()["id"]}


@pytest.mark.parametrize("route", list(ROUTES))
async def test_a_burst_on_a_route_that_runs_a_model_turn_admits_exactly_the_keys_limit(limited, worker, route):
    key = fresh_key()
    async with httpx.AsyncClient(base_url=limited, headers=bearer(key), timeout=60) as http:
        path, body = await continued(http, route)
        held, refused, answers = await burst(worker[1], N, lambda: http.post(path, json=body), is_429)
        assert (held, refused) == (LIMIT, N - LIMIT)
        assert sorted(a.status_code for a in answers) == [200] * LIMIT + [429] * (N - LIMIT)
        error = refusal_of(next(a for a in answers if a.status_code == 429))
        assert error["code"] == "rate_limit_exceeded" and f"at most {LIMIT} per API key" in error["message"]
        if route in ("responses", "compact", "chat-completions"):  # answered after the slot was given back
            assert (await http.post(path, json=body)).status_code == 200


async def test_the_limit_is_shared_by_responses_compactions_and_relayed_completions(limited, worker):
    key = fresh_key()
    async with httpx.AsyncClient(base_url=limited, headers=bearer(key), timeout=60) as http:
        paths = [await continued(http, r) for r in ("responses", "compact", "chat-completions")] * 3
        requests = iter(paths)

        def next_request() -> Any:
            path, body = next(requests)
            return http.post(path, json=body)

        held, refused, _ = await burst(worker[1], len(paths), next_request, is_429)
    assert (held, refused) == (LIMIT, len(paths) - LIMIT)


async def test_another_keys_burst_is_not_held_back(limited, worker):
    a, b = fresh_key(), fresh_key()
    async with (
        httpx.AsyncClient(base_url=limited, headers=bearer(a), timeout=60) as first,
        httpx.AsyncClient(base_url=limited, headers=bearer(b), timeout=60) as second,
    ):
        bodies = {first: await continued(first, "responses"), second: await continued(second, "responses")}
        clients = iter([first, second] * N)

        def next_request() -> Any:
            http = next(clients)
            path, body = bodies[http]
            return http.post(path, json=body)

        held, refused, _ = await burst(worker[1], 2 * N, next_request, is_429)
    assert (held, refused) == (2 * LIMIT, 2 * (N - LIMIT))


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/v1/responses"


async def ws_create(url: str, key: str, **create: Any) -> dict[str, Any]:
    """Open a socket, send one response.create, and answer its terminal event or its error event."""
    async with websockets.connect(url, additional_headers=bearer(key)) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hello", **create}))
        async for raw in ws:
            event = json.loads(raw)
            if event["type"] in ("error", "response.completed", "response.failed", "response.incomplete"):
                return event
    raise AssertionError("the socket closed before a terminal event")


def is_error_event(event: Any) -> bool:
    return isinstance(event, dict) and event["type"] == "error"


async def test_response_create_on_many_sockets_at_once_admits_exactly_the_keys_limit(limited, worker):
    key = fresh_key()
    async with httpx.AsyncClient(base_url=limited, headers=bearer(key), timeout=60) as http:
        _, body = await continued(http, "responses")

    def create() -> Any:
        return ws_create(ws_url(limited), key, previous_response_id=body["previous_response_id"])

    held, refused, events = await burst(worker[1], SOCKETS, create, is_error_event)
    assert (held, refused) == (LIMIT, SOCKETS - LIMIT)
    errors = [e for e in events if is_error_event(e)]
    assert {(e["status"], e["error"]["code"]) for e in errors} == {(429, "rate_limit_exceeded")}
    assert sum(e["type"] == "response.completed" for e in events) == LIMIT


async def test_sockets_beyond_the_keys_bound_are_refused_on_the_upgrade(limited):
    key, other = fresh_key(), fresh_key()
    url = ws_url(limited)
    async with OpenSockets(url, key, SOCKETS):
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(url, additional_headers=bearer(key)):
                pass
        answer = refused.value.response
        assert answer.status_code == 429
        error = json.loads(answer.body)["error"]
        assert error["code"] == "rate_limit_exceeded" and f"at most {SOCKETS} per API key" in error["message"]
        async with websockets.connect(url, additional_headers=bearer(other)) as ws:  # another key's own bound
            await ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hello"}))
            assert json.loads(await ws.recv())["type"] == "response.created"


class OpenSockets:
    """`n` open sockets of one key for the length of a block."""

    def __init__(self, url: str, key: str, n: int) -> None:
        self.url, self.key, self.n = url, key, n
        self.open: list[Any] = []

    async def __aenter__(self) -> list[Any]:
        for _ in range(self.n):
            self.open.append(await websockets.connect(self.url, additional_headers=bearer(self.key)))
        return self.open

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(ws.close() for ws in self.open))


async def test_the_rate_limit_counts_each_response_create_on_a_socket_and_the_socket_stays_open(rated, worker):
    key = fresh_key()
    worker[1].open()
    async with websockets.connect(ws_url(rated), additional_headers=bearer(key)) as ws:  # request 1 of 3
        answers = []
        for _ in range(4):
            await ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hello"}))
            async for raw in ws:
                event = json.loads(raw)
                if event["type"] in ("error", "response.completed"):
                    answers.append(event)
                    break
    assert [a["type"] for a in answers] == ["response.completed", "response.completed", "error", "error"]
    assert (answers[2]["status"], answers[2]["error"]["code"]) == (429, "rate_limit_exceeded")


async def test_the_sdk_sees_a_refused_burst_as_rate_limit_errors(limited, worker):
    key = fresh_key()
    client = openai.AsyncOpenAI(base_url=f"{limited}/v1", api_key=key, max_retries=0, timeout=60)
    first = await client.responses.create(model=MODEL, input="first")

    async def create() -> Any:
        try:
            return await client.responses.create(model=MODEL, input="hello", previous_response_id=first.id)
        except openai.RateLimitError as exc:
            return exc

    held, refused, results = await burst(worker[1], 4, create, lambda r: isinstance(r, openai.RateLimitError))
    assert (held, refused) == (LIMIT, 4 - LIMIT)
    assert sorted(type(r).__name__ for r in results) == ["RateLimitError"] * 2 + ["Response"] * 2


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(routes=st.lists(st.sampled_from(sorted(ROUTES)), min_size=LIMIT + 1, max_size=6))
def test_any_mix_of_routes_in_a_burst_admits_exactly_the_limit(limited, worker, routes):
    key = fresh_key()

    async def run() -> tuple[int, int]:
        async with httpx.AsyncClient(base_url=limited, headers=bearer(key), timeout=60) as http:
            requests = iter([await continued(http, route) for route in routes])

            def next_request() -> Any:
                path, body = next(requests)
                return http.post(path, json=body)

            held, refused, _ = await burst(worker[1], len(routes), next_request, is_429)
            return held, refused

    assert asyncio.run(run()) == (LIMIT, len(routes) - LIMIT)
