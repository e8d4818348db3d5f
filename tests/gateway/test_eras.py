"""Both MCP eras keep state and leak nothing, on the real python, container and browser servers.

The official SDK's client in `mode="auto"` (2026-07-28: no session at all) and `mode="legacy"` (2025:
`initialize` and `Mcp-Session-Id`), directly against one replica and through a gateway with two
replicas of each tool: state holds by session handle and by `x-session-id`; calls that name no session
leave the session and container counts where they were; bad handles get clear errors; a handle whose
replica died is "lost", naming it, while other handles keep their state.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.browser.web import browser_args, write_corpus
from tests.container import conftest as container
from tests.python_sandbox import conftest as python
from tests.support.gateway import (
    ACCEPT,
    GatewayProc,
    connect,
    eventually,
    gateway_config,
    metric,
    running_gateway,
)
from tests.support.service import Service, running_service

MODES = ("auto", "legacy")


@dataclass
class Fleet:
    gateway: GatewayProc
    replicas: dict[str, list[Service]]
    instances: dict[str, list[str]]
    """The docker label of each replica's sandboxes (empty for the browser)."""

    def url(self, ns: str, route: str) -> str:
        return self.gateway.url(ns) if route == "gateway" else f"{self.replicas[ns][0].url}/mcp"

    def sessions(self, ns: str) -> int:
        return sum(httpx.get(f"{r.url}/healthz", timeout=5).json()["sessions"] for r in self.replicas[ns])

    def active(self, ns: str) -> float:
        """The replicas' `toolfleet_tool_sessions_active` gauges, summed."""
        return sum(metric(r.url, "toolfleet_tool_sessions_active", namespace=ns) for r in self.replicas[ns])

    def containers(self, ns: str) -> int:
        counts = {"python": python.containers_of, "container": container.sandboxes_of}
        return sum(len(counts[ns](i)) for i in self.instances[ns]) if ns in counts else 0


def _servers(ns: str, corpus: Path, index: Path) -> tuple[list[list[str]], list[str]]:
    if ns == "python":
        ids = [f"pytest-eras-{uuid.uuid4().hex[:8]}" for _ in range(2)]
        return [python.server_args("docker", i, timeout_s=20) for i in ids], ids
    if ns == "container":
        ids = [f"pytest-eras-{uuid.uuid4().hex[:8]}" for _ in range(2)]
        return [container.server_args(i) for i in ids], ids
    web = "http://127.0.0.1:9"  # never fetched: the tests read the local corpus only
    return [browser_args(web, corpus, index / str(n)) for n in range(2)], []


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    python.require_backend("docker")
    container.require_docker()
    corpus = write_corpus(tmp_path_factory.mktemp("corpus"))
    index = tmp_path_factory.mktemp("index")
    replicas: dict[str, list[Service]] = {}
    instances: dict[str, list[str]] = {}
    with contextlib.ExitStack() as stack:
        for ns in ("python", "container", "browser"):
            argv, instances[ns] = _servers(ns, corpus, index)
            replicas[ns] = [stack.enter_context(running_service(a)) for a in argv]
        urls = {ns: [f"{r.url}/mcp" for r in rs] for ns, rs in replicas.items()}
        # slow probes on a loaded machine must not mark a live replica down (a killed one is caught at once)
        cfg = gateway_config(urls, health={"timeout_s": 10, "failures_to_open": 5})
        gw = stack.enter_context(running_gateway(cfg))
        yield Fleet(gw, replicas, instances)
    for ns in ("python", "container"):
        assert Fleet(gw, replicas, instances).containers(ns) == 0, f"{ns} left containers behind"


STATEFUL = {
    # namespace: (the call that makes state, the call that reads it, what the read shows)
    "python": (("python", {"code": "x = 41"}), ("python", {"code": "x += 1; print(x)"}), "42"),
    "container": (
        ("exec", {"cmd": ["sh", "-c", "echo kept > /tmp/mark"]}),
        ("exec", {"cmd": ["cat", "/tmp/mark"]}),
        "kept",
    ),
    "browser": (("search", {"query": "oolong tea"}), ("open", {"id": 0, "cursor": 0}), "oxidised"),
}


async def _call(client: Any, tool: str, args: dict[str, Any]) -> tuple[str, dict[str, Any] | None, bool]:
    """A call's text, structured content and whether it failed: a tool's error result (a bad handle's too, on
    both routes), or the gateway's JSON-RPC error for a session it lost."""
    try:
        result = await client.call_tool(tool, args)
    except MCPError as exc:
        return str(exc), None, True
    return result.content[0].text, result.structured_content, bool(result.is_error)


@pytest.mark.parametrize("route", ["direct", "gateway"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ns", list(STATEFUL))
async def test_state_holds_by_session_handle_in_both_eras(fleet: Fleet, ns: str, mode: str, route: str) -> None:
    (make, make_args), (read, read_args), shown = STATEFUL[ns]
    async with connect(fleet.url(ns, route), "streamable-http", mode=mode) as client:
        await client.list_tools()  # a 2026-07-28 client learns which arguments travel as Mcp-Param-* headers
        text, structured, error = await _call(client, make, {**make_args, "session_handle": "new"})
        assert not error, text
        handle = structured["session_handle"]  # type: ignore[index]
        assert handle.startswith(f"{ns}.") and f"session handle: {handle}" in text
        assert "expires after 30 minutes idle" in text
        text, structured, error = await _call(client, read, {**read_args, "session_handle": handle})
        assert not error and shown in text, text
        assert structured["session_handle"] == handle  # type: ignore[index]
        freed, _, _ = await _call(client, "cleanup_session", {"session_handle": handle})
        assert freed == f"session {handle} cleaned up"


@pytest.mark.parametrize("route", ["direct", "gateway"])
@pytest.mark.parametrize("mode", MODES)
async def test_state_holds_by_x_session_id_in_both_eras(fleet: Fleet, mode: str, route: str) -> None:
    sid = f"conv-{uuid.uuid4().hex[:8]}"
    async with connect(fleet.url("python", route), "streamable-http", mode=mode, headers={"x-session-id": sid}) as c:
        await _call(c, "python", {"code": "x = 41"})
        printed = [(await _call(c, "python", {"code": "x += 1; print(x)"}))[0].strip() for _ in range(2)]
        assert printed == ["42", "43"]
        assert (await _call(c, "cleanup_session", {}))[0] == f"session {sid} cleaned up"


@pytest.mark.parametrize("ns", list(STATEFUL))
async def test_legacy_sse_through_the_gateway_lists_the_trained_shapes_without_a_handle(fleet: Fleet, ns: str) -> None:
    """vLLM's `--tool-server` reads the gateway's `/{ns}/sse` listing into the prompt: no handle argument there,
    as on a tool server's own `/sse`; the streamable listing of the same replicas declares it."""

    async def argument_names(transport: str) -> set[str]:
        async with connect(fleet.gateway.url(ns, transport), transport, mode="legacy") as client:
            listed = await client.list_tools()
        return {name for tool in listed.tools for name in tool.input_schema.get("properties", {})}

    assert "session_handle" not in await argument_names("sse")
    assert "session_handle" in await argument_names("streamable-http")


async def test_a_call_without_a_session_keeps_no_state(fleet: Fleet) -> None:
    async with connect(fleet.url("python", "gateway"), "streamable-http") as client:
        await _call(client, "python", {"code": "x = 41"})
        text, structured, _ = await _call(client, "python", {"code": "print(x)"})
    assert "NameError" in text and structured is None


@pytest.mark.parametrize("route", ["direct", "gateway"])
@pytest.mark.parametrize("ns", list(STATEFUL))
async def test_a_hundred_calls_without_a_session_leave_sessions_and_containers_at_baseline(
    fleet: Fleet, ns: str, route: str
) -> None:
    await eventually(lambda: fleet.containers(ns) == 2 * (ns != "browser"), 60, "warm pools full")
    sessions, active, containers = fleet.sessions(ns), fleet.active(ns), fleet.containers(ns)
    (tool, args), _, _ = STATEFUL[ns]
    async with connect(fleet.url(ns, route), "streamable-http") as client:

        async def four_at_a_time(lane: int) -> None:
            for _ in range(25):
                text, _, error = await _call(client, tool, args)
                assert not error, text

        async with anyio.create_task_group() as tg:
            for lane in range(4):
                tg.start_soon(four_at_a_time, lane)
    assert (fleet.sessions(ns), fleet.active(ns)) == (sessions, active)
    await eventually(lambda: fleet.containers(ns) == containers, 60, f"{ns} containers back at {containers}")


@pytest.mark.parametrize("route", ["direct", "gateway"])
async def test_forged_and_other_namespace_handles_get_clear_errors(fleet: Fleet, route: str) -> None:
    async with connect(fleet.url("python", route), "streamable-http") as client:
        await client.list_tools()
        _, structured, _ = await _call(client, "python", {"code": "1", "session_handle": "new"})
        real = structured["session_handle"]  # type: ignore[index]
        forged = real[:-4] + ("AAAA" if not real.endswith("AAAA") else "BBBB")
        text, _, error = await _call(client, "python", {"code": "1", "session_handle": forged})
        assert error and forged in text and ("not issued by this fleet" in text or "never issued here" in text)
        other = "container" + real[len("python") :]
        text, _, error = await _call(client, "python", {"code": "1", "session_handle": other})
        assert error and "belongs to the 'container' tools" in text
        await _call(client, "cleanup_session", {"session_handle": real})
        text, _, error = await _call(client, "python", {"code": "1", "session_handle": real})
        assert error and real in text and ("ended or expired" in text or "ended (cleanup_session)" in text)
    assert fleet.sessions("python") == 0


@pytest.fixture(scope="module")
def browser_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One browser replica (no docker needed) and a gateway in front of it."""
    corpus = write_corpus(tmp_path_factory.mktemp("corpus"))
    argv = browser_args("http://127.0.0.1:9", corpus, tmp_path_factory.mktemp("index"))
    with running_service(argv) as replica, running_gateway(gateway_config({"browser": [f"{replica.url}/mcp"]})) as gw:
        yield Fleet(gw, {"browser": [replica]}, {"browser": []})


@pytest.mark.parametrize("route", ["direct", "gateway"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_bad_handle_is_a_tool_error_the_model_reads_on_both_routes(
    browser_fleet: Fleet, mode: str, route: str
) -> None:
    """MCP: argument errors are tool execution errors. A malformed handle, another namespace's and one never
    issued are each the call's `isError` result (not a JSON-RPC error), saying why and what to pass instead."""
    cases = {
        "forged-0123": "'forged-0123' is not a session handle: pass one a call answered, or 'new'",
        "python.abc.def": "belongs to the 'python' tools, not 'browser': pass 'new'",
        "browser.abc.def": "pass 'new'",
    }
    async with connect(browser_fleet.url("browser", route), "streamable-http", mode=mode) as client:
        await client.list_tools()
        for handle, words in cases.items():
            result = await client.call_tool("search", {"query": "tea", "session_handle": handle})
            text = result.content[0].text  # type: ignore[union-attr]
            assert result.is_error and words in text and "forged-0123' tools" not in text, text
        good = await client.call_tool("search", {"query": "tea", "session_handle": "new"})
    assert not good.is_error and browser_fleet.sessions("browser") == 1
    async with connect(browser_fleet.url("browser", route), "streamable-http", mode=mode) as client:
        await client.call_tool("cleanup_session", {"session_handle": good.structured_content["session_handle"]})  # type: ignore[index]
    assert browser_fleet.sessions("browser") == 0


@pytest.mark.parametrize("route", ["direct", "gateway"])
async def test_an_expired_handle_says_how_long_it_was_idle(tmp_path: Path, route: str) -> None:
    """Through the gateway the pin still names the replica, which says the handle expired (not "unknown")."""
    corpus = write_corpus(tmp_path / "c")
    short = ["--session-ttl-s", "0.5", "--reap-interval-s", "0.2"]
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(running_service([*browser_args("http://127.0.0.1:9", corpus, tmp_path / n), *short]))
            for n in ("i1", "i2")
        ]
        url = f"{servers[0].url}/mcp"
        if route == "gateway":
            cfg = gateway_config({"browser": [f"{s.url}/mcp" for s in servers]}, health={"timeout_s": 10})
            url = stack.enter_context(running_gateway(cfg)).url("browser")
        async with connect(url, "streamable-http") as client:
            await client.list_tools()
            _, structured, _ = await _call(client, "search", {"query": "tea", "session_handle": "new"})
            handle = structured["session_handle"]  # type: ignore[index]
            await eventually(lambda: sum(map(_sessions, servers)) == 0, 10, "reaped")
            text, _, error = await _call(client, "open", {"id": 0, "cursor": 0, "session_handle": handle})
    assert error and f"session handle {handle!r} was reaped after" in text and "pass 'new'" in text, text


def _post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(url, json=body, headers={**ACCEPT, **headers}, timeout=30)


def _modern_call(arguments: dict[str, Any]) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    params = {"name": "python", "arguments": arguments, "_meta": meta}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


def test_the_gateway_refuses_2026_headers_that_disagree_with_the_body(fleet: Fleet) -> None:
    url = fleet.url("python", "gateway")
    base = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "python"}
    body = _modern_call({"code": "1", "session_handle": "new"})
    cases = [
        {**base, "mcp-method": "tools/list"},
        {**base, "mcp-name": "other"},
        base,  # the handle argument is declared x-mcp-header: its Mcp-Param header is missing
        {**base, "mcp-param-session-handle": "python.forged.value"},
    ]
    refused_here = {"namespace": "python", "code": "-32020"}
    before = metric(fleet.gateway.base, "toolfleet_gateway_errors_total", **refused_here)
    for headers in cases:
        answer = _post(url, body, **headers)
        assert answer.status_code == 400, (headers, answer.text)
        assert answer.json()["error"]["code"] == -32020, answer.text
    # the gateway refused them itself (the count is of errors it answered, not of upstream answers it relayed)
    assert metric(fleet.gateway.base, "toolfleet_gateway_errors_total", **refused_here) == before + len(cases)
    good = _post(url, body, **(base | {"mcp-param-session-handle": "new"}))
    assert good.status_code == 200 and "session_handle" in good.text
    handle = good.json()["result"]["structuredContent"]["session_handle"]
    end = _modern_call({"session_handle": handle}) | {"id": 2}
    end["params"]["name"] = "cleanup_session"
    done = _post(url, end, **(base | {"mcp-name": "cleanup_session", "mcp-param-session-handle": handle}))
    assert "cleaned up" in done.text


async def test_a_handle_whose_replica_died_is_lost_and_named_while_others_keep_their_state(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus")
    with (
        running_service(browser_args("http://127.0.0.1:9", corpus, tmp_path / "i1")) as one,
        running_service(browser_args("http://127.0.0.1:9", corpus, tmp_path / "i2")) as two,
        running_gateway(gateway_config({"browser": [f"{one.url}/mcp", f"{two.url}/mcp"]})) as gw,
    ):
        async with connect(gw.url("browser"), "streamable-http") as client:
            await client.list_tools()
            handles = []
            for _ in range(2):  # the second goes to the replica with fewer pins: the other one
                _, structured, _ = await _call(client, "search", {"query": "tea", "session_handle": "new"})
                handles.append(structured["session_handle"])  # type: ignore[index]
            assert [_sessions(one), _sessions(two)] == [1, 1]
            doomed, kept = handles
            holder = one if await _holds(client, one, doomed) else two
            holder.stop()
            opened = {"id": 0, "cursor": 0}
            text, _, error = await _call(client, "open", {**opened, "session_handle": doomed})
            # handles are fleet-signed: it moves to the other replica, which has no snapshot of it (the browser
            # keeps none) and says it was lost
            assert error and f"session handle {doomed!r} was lost with its replica" in text, text
            text, _, error = await _call(client, "open", {**opened, "session_handle": kept})
            assert not error and "oxidised" in text


def _sessions(server: Service) -> int:
    return httpx.get(f"{server.url}/healthz", timeout=5).json()["sessions"]


async def _holds(client: Any, server: Service, handle: str) -> bool:
    """Whether `server` holds `handle` (asked directly: another server refuses a handle it did not mint)."""
    async with connect(f"{server.url}/mcp", "streamable-http") as direct:
        await direct.list_tools()
        _, _, error = await _call(direct, "open", {"id": 0, "cursor": 0, "session_handle": handle})
    return not error
