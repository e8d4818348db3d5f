"""Orchestrator figures: streamed tokens/s through parse + events, time per tool turn (and its CPU with the MCP
client included: the lean client vs the `mcp` SDK's, against a tool server in its own process), 32 concurrent streams,
and vLLM's own /v1/responses overhead over /v1/completions as the baseline. Each for the Harmony path and
the chat path (chat-template workers over /v1/chat/completions); with --vllm, the chat path against
vLLM's own /v1/responses on the same tiny chat model and request.

Also the response store: put + get per response, SQLite and (when redis-server is installed) Redis, and a tick of
the foreground roster (what listing foreground responses on every replica's console costs a replica).
The orchestrator process's CPU per plain response (SSE and JSON) on the scripted worker, read from `/proc`.
Usage: python -m bench.orchestrator [--tokens 20000] [--turns 200] [--streams 32] [--store-n 200] [--plain 400]
                                    [--vllm] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "orchestrator"))

from bench.report import print_values, save  # noqa: E402
from orchestrator import harmony as h  # noqa: E402
from orchestrator.chat import ChatTurns, chat_tools  # noqa: E402
from orchestrator.kinds import toolset  # noqa: E402
from orchestrator.responses.events import ResponseBuilder  # noqa: E402
from orchestrator.responses.run import Limits, Run  # noqa: E402
from orchestrator.responses.turns import run  # noqa: E402
from orchestrator.tools import Endpoints, ToolOutcome, ToolSessions  # noqa: E402
from orchestrator.worker.client import Chunk, GenerateRequest  # noqa: E402


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.orchestrator")
    p.add_argument("--tokens", type=int, default=20_000, help="tokens in the streamed answer")
    p.add_argument("--turns", type=int, default=200, help="tool turns in the tool-turn measurement")
    p.add_argument("--streams", type=int, default=32, help="concurrent streams over HTTP")
    p.add_argument("--stream-tokens", type=int, default=500, help="tokens per concurrent stream")
    p.add_argument("--store-n", type=int, default=200, help="responses put and read back per store")
    p.add_argument("--plain", type=int, default=400, help="plain responses timed per row (orchestrator CPU)")
    p.add_argument("--vllm", action="store_true", help="also measure the tiny vLLM CPU worker baseline")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


class _InstantTools(ToolSessions):
    """A tool that answers at once, so the tool-turn figure is the orchestrator's own time."""

    async def call(self, url: str, name: str, args: dict[str, Any], headers: dict[str, str] | None = None):
        return ToolOutcome("42\n")


def _run(
    reply_for,
    tools: list[dict[str, Any]],
    max_tool_calls: int = 10_000,
    chat_deltas=None,
    sessions: ToolSessions | None = None,
    python_url: str = "http://127.0.0.1:9/mcp",
) -> tuple[Run, list[int]]:
    body = {"id": "resp_bench", "object": "response", "created_at": 0, "model": "m", "output": [], "tools": []}
    counts = [0]

    async def generate(req: GenerateRequest) -> AsyncIterator[Chunk]:
        toks = reply_for(counts[0])
        counts[0] += 1
        yield Chunk([], len(req.prompt))
        for t in toks:  # one token per chunk, as vLLM streams
            yield Chunk([t])
        yield Chunk([], len(req.prompt), 0, "stop")

    async def chat(req) -> AsyncIterator[dict[str, Any]]:  # vLLM's chunk objects, one delta per token
        deltas = chat_deltas(counts[0])
        counts[0] += 1
        yield {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "prompt_token_ids": [0] * 9}
        for d in deltas:
            yield {"choices": [{"index": 0, "delta": d, "finish_reason": None, "token_ids": [1]}]}
        yield {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": len(deltas)}}

    namespaces = [h.Namespace("python", "python tool")]
    system = h.system_message(effort="low", date="2026-12-02", namespaces=namespaces)
    ts = toolset(tools, "auto", lambda _: None)
    r = Run(
        ResponseBuilder(body),
        [system, h.user("go")],
        ts,
        Endpoints(None, {"python": python_url}),
        sessions or _InstantTools(session_id="c"),
        generate,
        Limits(10**9, max_tool_calls, max_tool_calls + 8),
        "c",
    )
    if chat_deltas is not None:
        r.model = ChatTurns(chat, chat_tools(namespaces if tools else [], ts.functions))
    return r, counts


def bench_stream(n: int) -> dict[str, Any]:
    words = h.encoding().encode(" tok" * n, allowed_special=set())[:n]
    reply = h.encoding().encode("<|channel|>final<|message|>", allowed_special="all") + words + [h.RETURN]
    r, _ = _run(lambda i: reply, [])
    start = time.perf_counter()
    asyncio.run(run(r))
    wire = sum(len(json.dumps(e, separators=(",", ":"))) for e in r.builder.events)  # what SSE would send
    elapsed = time.perf_counter() - start
    return {
        "name": "streamed tokens/s (parse + events + JSON, one core)",
        "tokens": len(reply),
        "seconds": round(elapsed, 4),
        "value": round(len(reply) / elapsed),
        "events": len(r.builder.events),
        "wire_bytes": wire,
    }


def bench_chat_stream(n: int) -> dict[str, Any]:
    deltas = [{"content": " tok"}] * n
    r, _ = _run(None, [], chat_deltas=lambda i: deltas)
    start = time.perf_counter()
    asyncio.run(run(r))
    wire = sum(len(json.dumps(e, separators=(",", ":"))) for e in r.builder.events)  # as the Harmony row
    elapsed = time.perf_counter() - start
    return {
        "name": "chat path: streamed tokens/s (deltas + events + JSON, one core)",
        "tokens": n,
        "seconds": round(elapsed, 4),
        "value": round(n / elapsed),
        "events": len(r.builder.events),
        "wire_bytes": wire,
    }


def bench_chat_tool_turns(turns: int) -> dict[str, Any]:
    call = [
        {"tool_calls": [{"index": 0, "id": "c", "type": "function", "function": {"name": "python"}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"code": "print(6*7)"}'}}]},
    ]
    final = [{"content": "42"}]
    r, counts = _run(None, [{"type": "code_interpreter"}], chat_deltas=lambda i: call if i < turns else final)
    start = time.perf_counter()
    asyncio.run(run(r))
    elapsed = time.perf_counter() - start
    assert counts[0] == turns + 1, counts
    return {
        "name": "chat path: orchestrator ms per tool turn (tool excluded)",
        "turns": turns,
        "value": round(elapsed / turns * 1000, 3),
    }


def bench_tool_turns(turns: int) -> dict[str, Any]:
    enc = h.encoding()
    call = enc.encode("<|channel|>analysis to=python<|message|>print(6*7)<|call|>", allowed_special="all")
    final = enc.encode("<|channel|>final<|message|>42<|return|>", allowed_special="all")
    r, counts = _run(lambda i: call if i < turns else final, [{"type": "code_interpreter"}])
    start = time.perf_counter()
    asyncio.run(run(r))
    elapsed = time.perf_counter() - start
    assert counts[0] == turns + 1, counts
    # the conversation grows with every turn (as a real one does), so report the first and last thirds too
    return {
        "name": "orchestrator ms per tool turn (tool excluded)",
        "turns": turns,
        "value": round(elapsed / turns * 1000, 3),
        "prompt_tokens_last_turn": r.usage.last_prompt,
    }


class _SdkTools(ToolSessions):
    """Tool calls through the `mcp` SDK's client, as the orchestrator made them before its lean client: one
    client per server for the response (its era negotiated by `mode="auto"`), the same headers, and the same
    `ToolSessions.call` around it (span, log line, outcome)."""

    def __init__(self, client: Any) -> None:
        super().__init__(session_id="c")
        self._sdk = client

    async def _get(self, url: str, *_: Any) -> Any:
        return self

    async def call_tool(self, name: str, args: dict[str, Any], on_task: Any = None) -> dict[str, Any]:
        """The SDK's result read as the old `_answered` read it (attributes, no re-serialisation). `on_task` is
        for a call that becomes an MCP task: the bench's `print(6*7)` never does (the caller checks each answer)."""
        result = await self._sdk.call_tool(name, args)
        content = [{"type": part.type, "text": getattr(part, "text", "")} for part in result.content]
        return {"content": content, "isError": result.is_error, "structuredContent": result.structured_content}


@contextlib.asynccontextmanager
async def _sdk_sessions(url: str) -> AsyncIterator[ToolSessions]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from toolkit.wire import OWNER_HEADER, SESSION_HEADER, sign_owner

    headers = {SESSION_HEADER: "c", OWNER_HEADER: sign_owner("anonymous")}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="auto", read_timeout_seconds=60) as c:
            yield _SdkTools(c)


@contextlib.asynccontextmanager
async def _no_client(url: str) -> AsyncIterator[ToolSessions]:
    yield _InstantTools(session_id="c")


class _WaitingTools(ToolSessions):
    """A tool that answers in-process after a 0.5 ms wait: the loop sleeps and wakes once per call, as it does
    for a tool server's answer, with no client code at all (on a loaded machine that wake alone costs CPU)."""

    async def call(self, url: str, name: str, args: dict[str, Any], headers: dict[str, str] | None = None):
        await asyncio.sleep(0.0005)
        return ToolOutcome("42\n")


@contextlib.asynccontextmanager
async def _waiting(url: str) -> AsyncIterator[ToolSessions]:
    yield _WaitingTools(session_id="c")


@contextlib.asynccontextmanager
async def _lean_sessions(url: str) -> AsyncIterator[ToolSessions]:
    sessions = ToolSessions(session_id="c")
    try:
        yield sessions
    finally:
        await sessions.aclose()


async def _cpu_per_turn(turns: int, url: str, client: str) -> float:
    """CPU ms of this process (the turn loop and the MCP client; the tool server runs in its own) per tool turn."""
    enc = h.encoding()
    call = enc.encode("<|channel|>analysis to=python<|message|>print(6*7)<|call|>", allowed_special="all")
    final = enc.encode("<|channel|>final<|message|>42<|return|>", allowed_special="all")
    opened = {"sdk": _sdk_sessions, "lean": _lean_sessions, "none": _no_client, "wait": _waiting}[client](url)
    async with opened as sessions:
        warm, _ = _run(lambda i: call if i < 3 else final, [{"type": "code_interpreter"}], 10, None, sessions, url)
        await run(warm)  # the era negotiated and the connection open, as in a conversation's later turns
        r, counts = _run(
            lambda i: call if i < turns else final, [{"type": "code_interpreter"}], 10**4, None, sessions, url
        )
        start = time.process_time()
        await run(r)
        elapsed = time.process_time() - start
    assert counts[0] == turns + 1 and r.builder.body["status"] == "completed", (counts, r.builder.body["status"])
    calls = [item for item in r.builder.body["output"] if item["type"] == "code_interpreter_call"]
    failed = [item for item in calls if item.get("outputs") != [{"type": "logs", "logs": "42\n"}]]
    assert len(calls) == turns and not failed, f"{client}: a call the tool did not answer: {failed[:1]}"
    return elapsed / turns * 1000


@contextlib.contextmanager
def _tool_server():
    """The fixture python tool server (it answers `print(6*7)` at once) in a process of its own, on the HTTP
    protocol every service runs (`toolkit.serve`)."""
    from test_fleet import _port, _process

    port = _port()
    code = (
        "import sys, uvicorn; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/tests/orchestrator']\n"
        "from fixture_tools import python_server\nfrom toolkit.settings import ToolServerSettings\n"
        "from toolkit.serve import OneWriteProtocol\n"
        "app = python_server(ToolServerSettings()).build_app()\n"
        "uvicorn.run(app, port=int(sys.argv[2]), log_level='warning', access_log=False, http=OneWriteProtocol)"
    )
    with _process(["-c", code, str(ROOT), str(port)], f"http://127.0.0.1:{port}/healthz"):
        yield f"http://127.0.0.1:{port}/mcp"


def bench_tool_turn_cpu(turns: int) -> list[dict[str, Any]]:
    """The orchestrator's CPU per tool turn with the MCP client included, lean and SDK, over one server. The
    service's JSON logging at INFO is on (one `tool.call` line per call is part of the cost), written to
    /dev/null: the loggers first used here keep that sink for the rest of this process. The row of a tool
    that answers in-process after a wait is the floor under the client rows: the loop sleeping and waking
    once per call, which a call to a server in another process cannot avoid either."""
    from toolkit.logging import configure_logging

    rows = []
    sink = open(os.devnull, "w")  # kept open: the loggers cached here write to it until the process ends
    with _tool_server() as url, contextlib.redirect_stderr(sink):
        configure_logging("INFO", service="orchestrator")
        clients = (
            ("none", "no MCP client: the tool answers in-process"),
            ("wait", "no MCP client: the tool answers in-process after 0.5 ms"),
            ("lean", "MCP client included: the kit's lean client"),
            ("sdk", "MCP client included: the mcp SDK's client"),
        )
        for client, label in clients:
            ms = asyncio.run(_cpu_per_turn(turns, url, client))
            rows.append(
                {
                    "name": f"orchestrator CPU ms per tool turn ({label})",
                    "turns": turns,
                    "value": round(ms, 3),
                }
            )
    return rows


@contextlib.contextmanager
def _stack(token_delay_s: float = 0.0):
    """Scripted worker and orchestrator as real processes (so they do not share this process's GIL); yields the
    orchestrator's URL and process."""
    import subprocess

    from test_fleet import _port, _process

    w, o = _port(), _port()
    scenario = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-scenario-{os.getpid()}.json"
    scenario.write_text(
        json.dumps(
            {"token_delay_s": token_delay_s, "default": "<|channel|>final<|message|>" + " tok" * 500 + "<|return|>"}
        )
    )
    try:
        with (
            _process(
                [
                    "-m",
                    "orchestrator.worker",
                    "--scripted",
                    "--port",
                    str(w),
                    "--scenario",
                    str(scenario),
                    "--log-level",
                    "WARNING",
                ],
                f"http://127.0.0.1:{w}/health",
            ),
            _process(
                [
                    "-m",
                    "orchestrator",
                    "--port",
                    str(o),
                    "--worker-urls",
                    f'["http://127.0.0.1:{w}"]',
                    "--store-path",
                    ":memory:",
                    "--log-level",
                    "WARNING",
                ],
                f"http://127.0.0.1:{o}/healthz",
            ) as orchestrator,
        ):
            yield f"http://127.0.0.1:{o}", orchestrator
    finally:
        scenario.unlink(missing_ok=True)
        del subprocess


async def _one_stream(client, url: str) -> tuple[int, float]:
    start, deltas = time.perf_counter(), 0
    async with client.stream(
        "POST", f"{url}/v1/responses", json={"input": "go", "stream": True, "store": False}
    ) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data:") and '"response.output_text.delta"' in line:
                deltas += 1
    return deltas, time.perf_counter() - start


def bench_concurrent(streams: int) -> dict[str, Any]:
    import httpx

    with _stack() as (url, _):

        async def main():
            async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=streams * 2)) as client:
                await _one_stream(client, url)  # warm-up
                start = time.perf_counter()
                results = await asyncio.gather(*(_one_stream(client, url) for _ in range(streams)))
                return results, time.perf_counter() - start

        results, elapsed = asyncio.run(main())
    tokens = sum(n for n, _ in results)
    return {
        "name": f"{streams} concurrent streams over HTTP (scripted worker, own processes)",
        "value": round(tokens / elapsed),
        "unit": "tokens/s",
        "tokens": tokens,
        "seconds": round(elapsed, 3),
        "p50_stream_s": round(sorted(s for _, s in results)[len(results) // 2], 3),
    }


def bench_plain_cpu(n: int) -> list[dict[str, Any]]:
    """The orchestrator process's CPU per plain response (16 tokens, one request at a time), streamed and not:
    what it adds to a response beside the worker's own work, read from `/proc` (`cpu_seconds`)."""
    import httpx

    from bench.report import cpu_seconds

    body = {"input": "Say hello.", "max_output_tokens": 16, "temperature": 0, "store": False}
    rows = []
    with _stack() as (url, proc), httpx.Client(base_url=url, timeout=120) as client:
        for stream in (True, False):
            for _ in range(10):  # warm-up: the worker's connection open, the renders cached
                client.post("/v1/responses", json={**body, "stream": stream}).raise_for_status()
            before = cpu_seconds(proc.pid)
            for _ in range(n):
                client.post("/v1/responses", json={**body, "stream": stream}).raise_for_status()
            ms = (cpu_seconds(proc.pid) - before) * 1000 / n
            how = "SSE" if stream else "JSON"
            name = f"orchestrator CPU ms per plain response, {how} (scripted worker, own processes, 16 tokens)"
            rows.append({"name": name, "value": round(ms, 2), "responses": n})
    return rows


def bench_store(n: int) -> list[dict[str, Any]]:
    """ms per put + get of a stored response (500 streamed tokens: body, events, messages), SQLite and Redis."""
    import shutil
    import tempfile

    from orchestrator.persist import Record
    from orchestrator.persist.redis import RedisStores
    from orchestrator.persist.sqlite import SQLiteStores

    words = h.encoding().encode(" tok" * 500, allowed_special=set())[:500]
    r, _ = _run(
        lambda i: h.encoding().encode("<|channel|>final<|message|>", allowed_special="all") + words + [h.RETURN], []
    )
    asyncio.run(run(r))
    size = len(json.dumps(r.builder.events)) + len(json.dumps(r.builder.body))

    records = [Record(f"resp_{i}", "conv", r.builder.body, [], h.dump(r.messages), r.builder.events) for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        ms = asyncio.run(_put_get_ms(SQLiteStores(f"{tmp}/bench.sqlite3"), records))
    rows = [
        {
            "name": "store put+get ms per response (SQLite file, WAL)",
            "value": round(ms, 3),
            "n": n,
            "record_bytes": size,
        }
    ]
    if shutil.which("redis-server"):
        from conftest import redis_server

        with redis_server() as url:
            ms = asyncio.run(_put_get_ms(RedisStores(url), records))
        rows.append(
            {
                "name": "store put+get ms per response (Redis on loopback)",
                "value": round(ms, 3),
                "n": n,
                "record_bytes": size,
            }
        )
    return rows


async def _put_get_ms(stores: Any, records: list[Any]) -> float:
    """ms per put + get of each record; the stores are closed after."""
    store = stores.responses
    start = time.perf_counter()
    for rec in records:
        await store.put(rec)
        assert await store.get(rec.id) is not None
    elapsed = time.perf_counter() - start
    await stores.aclose()
    return elapsed / len(records) * 1000


def bench_roster(n: int, running: int = 32) -> list[dict[str, Any]]:
    """What listing foreground responses fleet-wide costs a replica (`responses/roster.py`): nothing on a
    response's path, and each second one tick, writing its list of `running` responses when it changed or only
    its expiry when not; wall and CPU ms (every thread) per tick, SQLite and Redis."""
    import shutil
    import tempfile

    from orchestrator.persist.redis import RedisStores
    from orchestrator.persist.sqlite import SQLiteStores

    found = []
    with tempfile.TemporaryDirectory() as tmp:
        found.append(("SQLite file, WAL", asyncio.run(_roster_ms(SQLiteStores(f"{tmp}/bench.sqlite3"), n, running))))
    if shutil.which("redis-server"):
        from conftest import redis_server

        with redis_server() as url:
            found.append(("Redis on loopback", asyncio.run(_roster_ms(RedisStores(url), n, running))))
    return [
        {"name": f"roster tick ms, {step} ({where})", "value": wall, "cpu_ms": cpu, "n": n, "running": running}
        for where, steps in found
        for step, (wall, cpu) in steps.items()
    ]


async def _roster_ms(stores: Any, n: int, running: int) -> dict[str, tuple[float, float]]:
    """{step: (wall, CPU) ms per tick} for a changed list and an unchanged one; the stores are closed after."""
    from orchestrator.persist.roster import Running

    roster, steps = stores.roster, {}
    lists = [
        [Running(f"resp_{t}_{i}", "key", "gpt-oss", time.time(), "replica_b", t) for i in range(running)]
        for t in range(n)
    ]
    ticks = {
        f"{running} responses written": lambda t: roster.renew("replica_b", lists[t], 5.0),
        "unchanged (expiry only)": lambda t: roster.extend("replica_b", 5.0),
    }
    for step, tick in ticks.items():
        wall, cpu = time.perf_counter(), time.process_time()
        for t in range(n):
            await tick(t)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        steps[step] = (round(wall / n * 1000, 3), round(cpu / n * 1000, 3))
    await stores.aclose()
    return steps


def bench_vllm() -> dict[str, Any]:
    """vLLM's own /v1/responses vs /v1/completions for the same prompt and number of tokens."""

    from tests.support.vllm import vllm_server

    n, reps = 32, 5
    with vllm_server() as server:
        base, model = server.base_url, server.model
        prompt = h.render([h.system_message(effort="low", date="2026-12-02", namespaces=[]), h.user("Say hello.")])
        _, tokens = _vllm_responses(base, model, n)
        _vllm_completions(base, model, prompt, tokens)
        r = sorted(_vllm_responses(base, model, n)[0] for _ in range(reps))[reps // 2]
        c = sorted(_vllm_completions(base, model, prompt, tokens) for _ in range(reps))[reps // 2]
    return {
        "name": "vLLM /v1/responses over /v1/completions (tiny CPU worker, same tokens, median)",
        "tokens": tokens,
        "completions_s": round(c, 4),
        "responses_s": round(r, 4),
        "overhead_ms": round((r - c) * 1000, 2),
        "value": round(r / c, 3),
        "unit": "ratio",
    }


def _vllm_responses(base: str, model: str, n: int) -> tuple[float, int]:
    """One `/v1/responses` of vLLM's own: its seconds and output tokens."""
    import httpx

    t = time.perf_counter()
    body = {
        "model": model,
        "input": "Say hello.",
        "max_output_tokens": n,
        "temperature": 0,
        "reasoning": {"effort": "low"},
        "store": False,
    }
    resp = httpx.post(f"{base}/v1/responses", json=body, timeout=300)
    resp.raise_for_status()
    return time.perf_counter() - t, resp.json()["usage"]["output_tokens"]


def _vllm_completions(base: str, model: str, prompt: list[int], tokens: int) -> float:
    """The same number of tokens, straight from the engine: its seconds."""
    import httpx

    t = time.perf_counter()
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": tokens,
        "min_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
    }
    httpx.post(f"{base}/v1/completions", json=body, timeout=300).raise_for_status()
    return time.perf_counter() - t


def bench_vllm_chat() -> dict[str, Any]:
    """The chat path (this orchestrator over a tiny vLLM chat worker) vs vLLM's own /v1/responses on that
    worker, for the same request; the ratio is ours over vLLM's (median of 5, same output tokens checked)."""
    import httpx

    from orchestrator.app import create_app
    from orchestrator.persist.sqlite import SQLiteStores
    from orchestrator.settings import OrchestratorSettings
    from tests.support.asgi import serve_asgi
    from tests.support.vllm import CHAT_SERVE_ARGS, tiny_chat_model, vllm_server

    n, reps = 32, 5
    body = {"input": "Say hello.", "max_output_tokens": n, "temperature": 0, "store": False}
    with tiny_chat_model() as model, vllm_server(model=model, extra_args=CHAT_SERVE_ARGS) as server:
        settings = OrchestratorSettings(worker_urls=[server.base_url], log_level="WARNING")
        with serve_asgi(create_app(settings, stores=SQLiteStores())) as ours:

            def timed(base: str) -> tuple[float, int]:
                t = time.perf_counter()
                resp = httpx.post(f"{base}/v1/responses", json=body | {"model": server.model}, timeout=300)
                resp.raise_for_status()
                return time.perf_counter() - t, resp.json()["usage"]["output_tokens"]

            try:
                timed(server.base_url)
            except httpx.HTTPStatusError as exc:
                return {
                    "name": "chat path vs vLLM /v1/responses (tiny chat model)",
                    "value": None,
                    "error": f"vLLM's /v1/responses refused: {exc.response.text[:300]}",
                }
            timed(ours)
            theirs_s, ours_s = [], []
            for _ in range(reps):  # interleaved, so drift hits both
                t, theirs_tokens = timed(server.base_url)
                theirs_s.append(t)
                t, ours_tokens = timed(ours)
                ours_s.append(t)
    v, o = sorted(theirs_s)[reps // 2], sorted(ours_s)[reps // 2]
    return {
        "name": "chat path /v1/responses over vLLM's own /v1/responses (tiny chat CPU worker, median)",
        "tokens_vllm": theirs_tokens,
        "tokens_ours": ours_tokens,
        "vllm_s": round(v, 4),
        "ours_s": round(o, 4),
        "overhead_ms": round((o - v) * 1000, 2),
        "value": round(o / v, 3),
        "unit": "ratio",
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    h.encoding()
    rows = [
        bench_stream(args.tokens),
        bench_chat_stream(args.tokens),
        bench_tool_turns(args.turns),
        *bench_tool_turn_cpu(args.turns),
        bench_chat_tool_turns(args.turns),
        bench_concurrent(args.streams),
        *bench_plain_cpu(args.plain),
    ]
    rows += bench_store(args.store_n)
    rows += bench_roster(args.store_n)
    if args.vllm:
        rows += [bench_vllm(), bench_vllm_chat()]
    save(args.out, rows)
    print_values(rows, width=80, value_width=12)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
