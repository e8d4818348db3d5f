"""The kit's floor: what one `tools/call` of a tool that does nothing costs, beside a plain SDK server's.

Usage: python -m bench.kit [--n 500] [--out results.json]

Two servers in this process, each served by uvicorn (uvloop, httptools) on loopback in a thread of its own: a
kit `ToolServer` whose no-op tool runs in the caller's session (span, `tool.call` log line, metrics), and the
baseline, a plain `mcp` 2.x `MCPServer` with the same tool. Each is timed with two clients over 2025-era
streamable HTTP with `x-session-id`: the `mcp` 2.x SDK's, and `bench.wire`'s lean one (as the gateway's calls
arrive; the SDK client's own work is part of the first rows' wall time, not of their Python call counts).
Rows: wall p50/p99, and the Python function calls and coroutine resumptions in the server's thread per call
(cProfile there; it does not depend on the machine's load, which wall figures on a shared machine do), with the
kit/baseline ratio of each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import uvicorn
import uvloop
from mcp.server.mcpserver import Context, MCPServer
from starlette.types import ASGIApp

from bench.report import print_rows, save
from bench.sessions import row
from bench.wire import CLIENTS, client_session
from toolkit.logging import configure_logging
from toolkit.server import ToolServer
from toolkit.settings import ToolServerSettings


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=500, help="calls measured per server (wall, then profiled)")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    return p.parse_args(argv)


class _Nothing:
    async def aclose(self) -> None:
        return None


async def _nothing(_key: str) -> _Nothing:
    return _Nothing()


def kit_app(settings: ToolServerSettings | None = None) -> ASGIApp:
    """A kit server whose one tool, `noop`, runs in the caller's session (`bench.console` holds 1,000 of them)."""
    mcp = MCPServer("kit")
    kit: ToolServer[_Nothing] = ToolServer(mcp, settings or ToolServerSettings(), _nothing)

    @mcp.tool()
    async def noop(ctx: Context) -> str:
        async with kit.session(ctx, "noop"):
            return "ok"

    return kit.build_app()


def sdk_app() -> ASGIApp:
    mcp = MCPServer("sdk")

    @mcp.tool()
    async def noop() -> str:
        return "ok"

    return mcp.streamable_http_app()


@contextlib.contextmanager
def served(app: ASGIApp) -> Iterator[tuple[str, asyncio.AbstractEventLoop]]:
    """The app on a loopback port, its uvloop loop in a thread (so a profiler can be switched on there)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on"))
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", loop
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


async def measure_one(name: str, app: ASGIApp, n: int, client: str) -> dict[str, Any]:
    with served(app) as (url, loop):
        headers = {"x-session-id": uuid.uuid4().hex}
        async with client_session(client, url, headers) as session:
            for _ in range(50):
                await session.call_tool("noop", {})
            ms = []
            for _ in range(n):
                start = time.perf_counter()
                await session.call_tool("noop", {})
                ms.append((time.perf_counter() - start) * 1000)
            profiler = cProfile.Profile()
            loop.call_soon_threadsafe(profiler.enable)
            await asyncio.sleep(0.1)
            for _ in range(n):
                await session.call_tool("noop", {})
            await asyncio.sleep(0.1)
            loop.call_soon_threadsafe(profiler.disable)
            await asyncio.sleep(0.1)
    calls = pstats.Stats(profiler).total_calls  # type: ignore[attr-defined]  # pstats keeps the count here
    return row(name, ms, python_calls_per_call=round(calls / n))


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for client in CLIENTS:
        kit = await measure_one(f"kit ToolServer: no-op tools/call, {client} client", kit_app(), args.n, client)
        sdk = await measure_one(f"baseline, plain SDK MCPServer: same, {client} client", sdk_app(), args.n, client)
        kit["p50_vs_sdk_x"] = round(kit["p50_ms"] / sdk["p50_ms"], 2)
        kit["calls_vs_sdk_x"] = round(kit["python_calls_per_call"] / sdk["python_calls_per_call"], 2)
        rows += [kit, sdk]
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    sink = open(os.devnull, "w")  # the log lines go nowhere, for the rest of the process
    with contextlib.redirect_stderr(sink):
        configure_logging("INFO", service="bench-kit")  # the kit's tool.call line is part of its cost, as in service
    rows = asyncio.run(measure(args))
    print_rows(rows, width=52)
    save(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
