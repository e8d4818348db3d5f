"""Generated malformed and oversized JSON-RPC against each real tool server's streamable HTTP `/mcp`.

Servers: python on the local (bubblewrap) backend, python on docker, the container tool (docker) and
the browser (offline test corpus); each a subprocess on a loopback port with a small body limit. Two
properties per server: messages outside any MCP session (any bytes, any content type), and messages
inside an initialized session (envelopes, and `tools/call` with the server's own tool names and
wrong, missing or huge arguments). Every answer is a 2xx or a 4xx with a JSON-RPC error body, each
JSON-RPC reply is a result or an error, nothing hangs (a per-request timeout); afterwards a valid call
still works, and the server's session count and the run's labelled containers are back to baseline.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.browser.web import browser_args, write_corpus
from tests.container.conftest import require_docker
from tests.container.conftest import server_args as container_args
from tests.python_sandbox.conftest import containers_of, require_backend
from tests.python_sandbox.conftest import server_args as python_args
from tests.support.gateway import ACCEPT, INIT
from tests.support.jsonrpc_fuzz import bodies, check_answer, envelopes, json_values
from tests.support.service import Service, running_service

LIMIT = 8192
"""Each server's `--max-body-bytes` here, small so that oversized bodies cost little to generate."""
TIMEOUT_S = 20.0
"""No answer within this is a hang (sandboxed calls are limited to a few seconds by the flags)."""
CONTENT_TYPES = ["application/json", "text/plain", "application/x-www-form-urlencoded", "", "application/json; x=1"]
ACCEPTS = ["application/json, text/event-stream", "application/json", "text/html", "*/*"]


@dataclass(frozen=True)
class Target:
    """One tool server under fuzz: its flags, a valid call and what its answer holds, and its budget."""

    args: Callable[[str, Path], list[str]]
    valid_call: tuple[str, dict[str, Any], str]
    examples: int
    require: Callable[[], object]
    docker: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every call (the browser's: the local corpus only, so no generated URL is fetched)."""


def _browser(instance: str, tmp: Path) -> list[str]:
    # No fixture web: the corpus is all this fuzz needs, and calls say external access is off.
    return browser_args("http://127.0.0.1:9", write_corpus(tmp / "corpus"), tmp / "index")


TARGETS = {
    "python-local": Target(
        lambda i, _: python_args("local", i),
        ("python", {"code": "print(6 * 7)"}, "42"),
        100,
        lambda: require_backend("local"),
    ),
    "python-docker": Target(
        lambda i, _: python_args("docker", i),
        ("python", {"code": "print(6 * 7)"}, "42"),
        40,
        lambda: require_backend("docker"),
        docker=True,
    ),
    "container": Target(
        lambda i, _: container_args(i), ("exec", {"cmd": ["echo", "ok"]}, "ok"), 40, require_docker, docker=True
    ),
    "browser": Target(
        _browser,
        ("search", {"query": "oolong tea"}, "tea"),
        100,
        lambda: None,
        headers={"x-browser-external-access": "off"},
    ),
}


@dataclass
class Server:
    target: Target
    service: Service
    instance: str
    tools: list[dict[str, Any]]
    """What `tools/list` answers."""


@pytest.fixture(scope="module", params=list(TARGETS))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    target = TARGETS[request.param]
    target.require()
    instance = f"pytest-fuzz-{uuid.uuid4().hex[:10]}"
    args = [*target.args(instance, tmp_path_factory.mktemp(request.param)), "--max-body-bytes", str(LIMIT)]
    with running_service(args) as svc, httpx.Client(timeout=TIMEOUT_S, trust_env=False) as client:
        sid = open_session(client, svc.url)
        listed = rpc(client, svc.url, sid, "tools/list", {})
        close_session(client, svc.url, sid)
        yield Server(target, svc, instance, listed["result"]["tools"])
    if target.docker:
        assert containers_of(instance) == [], "the server left containers behind"


def replies(response: httpx.Response) -> list[Any]:
    """The JSON-RPC messages of a 2xx answer: a JSON body, or the `data:` lines of an SSE stream."""
    if not response.content:
        return []
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]
    return [response.json()]


def open_session(client: httpx.Client, url: str, headers: dict[str, str] | None = None) -> str:
    answer = client.post(f"{url}/mcp", json=INIT, headers={**ACCEPT, **(headers or {})})
    assert answer.status_code == 200, answer.text
    sid = answer.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert client.post(f"{url}/mcp", json=note, headers={**ACCEPT, "mcp-session-id": sid}).status_code == 202
    return sid


def close_session(client: httpx.Client, url: str, sid: str) -> None:
    assert client.request("DELETE", f"{url}/mcp", headers={"mcp-session-id": sid}).status_code == 200


def rpc(
    client: httpx.Client,
    url: str,
    sid: str,
    method: str,
    params: Any,
    key: str | None = None,
    extra: dict[str, str] | None = None,
) -> Any:
    """One request in the MCP session `sid` (under the sandbox session `key` when given); its reply."""
    message = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    headers = {**ACCEPT, **(extra or {}), "mcp-session-id": sid, **({"x-session-id": key} if key else {})}
    answer = client.post(f"{url}/mcp", json=message, headers=headers)
    assert answer.status_code == 200, answer.text
    return next(m for m in replies(answer) if m.get("id") == 7)


def session_count(client: httpx.Client, server: Server) -> int:
    return int(client.get(f"{server.service.url}/healthz").json()["sessions"])


def settle(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Whether `check` holds within `timeout_s` (removals finish in the background)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def fuzz_settings(server: Server) -> settings:
    return settings(
        max_examples=server.target.examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )


def test_messages_outside_a_session(server: Server) -> None:
    url = f"{server.service.url}/mcp"
    with httpx.Client(timeout=TIMEOUT_S, trust_env=False) as client:
        before = session_count(client, server)

        @fuzz_settings(server)
        @given(
            body=bodies(LIMIT),
            ctype=st.sampled_from(CONTENT_TYPES),
            accept=st.sampled_from(ACCEPTS),
            method=st.sampled_from(["POST", "POST", "POST", "GET", "DELETE", "PUT"]),
            sid=st.none() | st.text("0123456789abcdef", max_size=32),
        )
        def post(body: bytes, ctype: str, accept: str, method: str, sid: str | None) -> None:
            headers = {"content-type": ctype, "accept": accept} | ({"mcp-session-id": sid} if sid is not None else {})
            response = client.request(method, url, content=body, headers=headers)
            check_answer(response)
            if opened := response.headers.get("mcp-session-id"):
                # The SDK names a session in every answer to a request without one; a refused opening
                # request must not leave it behind.
                assert response.status_code >= 400, response.text
                gone = client.request("DELETE", url, headers={"mcp-session-id": opened})
                assert gone.status_code == 404, gone.text

        post()
        still_serves(client, server)
        assert settle(lambda: session_count(client, server) <= before), session_count(client, server)


HUGE = st.integers(LIMIT // 4, LIMIT * 2).map(lambda n: "x" * n)
"""A string argument near or over the body limit."""
TYPED: dict[str, st.SearchStrategy[Any]] = {
    "string": st.text(max_size=40) | HUGE,
    "integer": st.integers(),
    "number": st.floats(allow_nan=False),
    "boolean": st.booleans(),
    "array": st.lists(st.text(max_size=10), max_size=3),
    "object": st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
}


def typed(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value of the type a tool parameter declares (the first declared one), or any JSON value."""
    declared = [schema.get("type")] + [alt.get("type") for alt in schema.get("anyOf", [])]
    kinds = [k for d in declared for k in (d if isinstance(d, list) else [d])]
    return next((TYPED[k] for k in kinds if k in TYPED), json_values)


def well_typed(tool: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments of the declared types, so that the call reaches the tool (whose checks then decide)."""
    props = tool["inputSchema"].get("properties", {})
    required = set(tool["inputSchema"].get("required", []))
    return st.fixed_dictionaries(
        {k: typed(v) for k, v in props.items() if k in required},
        optional={k: typed(v) for k, v in props.items() if k not in required},
    )


def calls(tools: list[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """`tools/call` of the server's own tools (and unknown ones) with well-typed, wrong, missing or
    huge arguments."""
    loose = st.none() | json_values | st.dictionaries(st.text(max_size=12), json_values | HUGE, max_size=4)
    typed_calls = [st.fixed_dictionaries({"name": st.just(t["name"]), "arguments": well_typed(t)}) for t in tools]
    loose_call = st.fixed_dictionaries(
        {"name": st.sampled_from([t["name"] for t in tools]) | st.text(max_size=16)},
        optional={"arguments": loose, "_meta": json_values},
    )
    # two in three calls are well typed: those are the ones that reach the tools' own code
    params = st.sampled_from([*typed_calls, *typed_calls, loose_call]).flatmap(lambda chosen: chosen)
    envelope = {"jsonrpc": st.just("2.0"), "id": st.integers(1, 10**6), "method": st.just("tools/call")}
    return st.fixed_dictionaries({**envelope, "params": params})


def test_messages_in_a_session(server: Server) -> None:
    url = f"{server.service.url}/mcp"
    key = f"fuzz-{uuid.uuid4().hex[:12]}"
    with httpx.Client(timeout=TIMEOUT_S, trust_env=False) as client:
        before = session_count(client, server)
        containers = len(containers_of(server.instance)) if server.target.docker else 0
        sid = open_session(client, server.service.url)
        seen: Counter[str] = Counter()
        call = calls(server.tools)
        # calls weigh most: they are what reaches the tool code; envelopes and batches test the framing
        kinds = {"call": call, "envelope": envelopes, "batch": st.lists(call | envelopes, min_size=1, max_size=3)}
        messages = st.sampled_from(["call"] * 6 + ["envelope", "batch"]).flatmap(kinds.__getitem__)

        @fuzz_settings(server)
        @given(message=messages, keyed=st.booleans())
        def post(message: Any, keyed: bool) -> None:
            headers = {**ACCEPT, **server.target.headers, "mcp-session-id": sid}
            headers |= {"x-session-id": key} if keyed else {}
            response = client.post(url, content=json.dumps(message).encode(), headers=headers)
            check_answer(response)
            if response.status_code >= 400:
                seen["refused"] += 1
            for reply in replies(response) if response.status_code == 200 else []:
                if "id" in reply and "method" not in reply:  # a response (not a notification or progress)
                    assert ("result" in reply) != ("error" in reply), reply
                    if "error" in reply:
                        seen["refused"] += 1
                    elif sent_to(message, reply["id"]) != "cleanup_session":
                        seen["reached"] += 1  # the tool's own code answered (a result or an error result)

        post()
        assert seen["reached"] and seen["refused"], seen
        valid_call(client, server, sid)
        # the two sandbox sessions the fuzz could open: the x-session-id one and the MCP session's own
        cleanup(client, server, sid, key)
        cleanup(client, server, sid)
        close_session(client, server.service.url, sid)
        assert settle(lambda: session_count(client, server) <= before), session_count(client, server)
        if server.target.docker:
            assert settle(lambda: len(containers_of(server.instance)) <= containers), containers_of(server.instance)


def sent_to(message: Any, rid: Any) -> str | None:
    """The tool a `tools/call` with id `rid` in `message` (one or a batch) named."""
    for m in message if isinstance(message, list) else [message]:
        if isinstance(m, dict) and m.get("id") == rid and isinstance(m.get("params"), dict):
            return str(m["params"].get("name"))
    return None


def still_serves(client: httpx.Client, server: Server) -> None:
    """A fresh session opens, answers a valid call, and ends when cleaned up and deleted."""
    sid = open_session(client, server.service.url)
    valid_call(client, server, sid)
    cleanup(client, server, sid)
    close_session(client, server.service.url, sid)


def valid_call(client: httpx.Client, server: Server, sid: str) -> None:
    name, args, expected = server.target.valid_call
    call = {"name": name, "arguments": args}
    result = rpc(client, server.service.url, sid, "tools/call", call, extra=server.target.headers)["result"]
    assert not result.get("isError") and expected in result["content"][0]["text"], result


def cleanup(client: httpx.Client, server: Server, sid: str, key: str | None = None) -> None:
    rpc(client, server.service.url, sid, "tools/call", {"name": "cleanup_session", "arguments": {}}, key)


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("POST", "/mcp", {"content-type": "text/plain"}, 400),  # the SDK's Content-Type check
        ("POST", "/mcp", {"host": "evil.example"}, 421),  # the SDK's DNS-rebinding guard
        ("POST", "/mcp", {"origin": "http://evil.example"}, 403),
        ("PUT", "/mcp", {}, 405),  # routing
        ("POST", "/messages/?session_id=0", {"content-type": "text/plain"}, 400),  # legacy SSE transport
    ],
)
def test_refusals_are_jsonrpc_errors(
    server: Server, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    """The refusals the SDK and Starlette write as plain text reach the client as JSON-RPC errors."""
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    response = httpx.request(
        method,
        server.service.url + path,
        content=ping,
        headers={**ACCEPT, **headers},
        timeout=TIMEOUT_S,
        trust_env=False,
    )
    assert response.status_code == status, response.text
    check_answer(response)
