"""A warm tool call in each MCP era, on the python, container and browser servers, in one run.

Usage: python -m bench.eras [--n 200] [--out results.json] [--tools python,container,browser]

Rows per tool: the 2025-era warm call (`initialize`, `Mcp-Session-Id`, state by `x-session-id`: what the
orchestrator did before), the 2026-07-28 warm call by session handle (`mode="auto"`, the handle also sent
as `Mcp-Param-Session-Handle`), the 2026-07-28 warm call by `x-session-id` (what the orchestrator does now),
and a 2026-07-28 call that names no session (its sandbox comes from the warm pool and is removed at once).
`handle_vs_2025_p50_ms` is the handle path's p50 minus the 2025 era's, measured in the same run; the three
warm paths take turns call by call, so load that drifts during the run weighs on each alike.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from bench import sessions
from bench.report import print_rows, save
from tests.browser.web import browser_args, write_corpus
from tests.support.gateway import connect
from tests.support.service import running_service

CALLS = {
    "python": ("python", {"code": "print(1)"}),
    "container": ("exec", {"cmd": ["true"]}),
    "browser": ("search", {"query": "tea"}),
}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200, help="warm calls measured per row")
    p.add_argument("--stateless-n", type=int, default=30, help="calls that name no session (each pays for a sandbox)")
    p.add_argument("--tools", default="python,container,browser")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    return p.parse_args(argv)


async def _interleaved(calls: dict[str, Callable[[], Awaitable[Any]]], n: int, warmup: int) -> dict[str, list[float]]:
    """Time each path's call in turn, round after round, so a machine whose load drifts during the run weighs
    on every path alike (one path after another put the last one under whatever load came later)."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(warmup + n):
        for name, call in calls.items():
            start = time.perf_counter()
            result = await call()
            elapsed = (time.perf_counter() - start) * 1000
            assert not result.is_error, result.content
            if i >= warmup:
                samples[name].append(elapsed)
    return samples


async def _rows(ns: str, url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    tool, arguments = CALLS[ns]
    run = uuid.uuid4().hex[:8]
    async with contextlib.AsyncExitStack() as stack:
        old = await stack.enter_async_context(
            connect(url, "streamable-http", mode="legacy", headers={"x-session-id": f"bench-eras-old-{run}"})
        )
        by_id = await stack.enter_async_context(
            connect(url, "streamable-http", headers={"x-session-id": f"bench-eras-new-{run}"})
        )
        new = await stack.enter_async_context(connect(url, "streamable-http"))
        await new.list_tools()  # learn the x-mcp-header arguments
        first = await new.call_tool(tool, {**arguments, "session_handle": "new"})
        handle = first.structured_content["session_handle"]  # type: ignore[index]
        with_handle = {**arguments, "session_handle": handle}
        timed = await _interleaved(
            {
                "2025": lambda: old.call_tool(tool, arguments),
                "id": lambda: by_id.call_tool(tool, arguments),
                "handle": lambda: new.call_tool(tool, with_handle),
            },
            args.n,
            20,
        )
        for client in (old, by_id):
            await client.call_tool("cleanup_session", {})
        await new.call_tool("cleanup_session", {"session_handle": handle})
        stateless = (await _interleaved({"none": lambda: new.call_tool(tool, arguments)}, args.stateless_n, 3))["none"]
    rows = [
        sessions.row(f"{ns} warm call, 2025 era (x-session-id)", timed["2025"]),
        sessions.row(f"{ns} warm call, 2026-07-28 by x-session-id", timed["id"]),
        sessions.row(f"{ns} warm call, 2026-07-28 by handle", timed["handle"]),
        sessions.row(f"{ns} call, 2026-07-28 no session", stateless),
    ]
    rows[2]["handle_vs_2025_p50_ms"] = round(rows[2]["p50_ms"] - rows[0]["p50_ms"], 2)
    return rows


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    instance = f"bench-eras-{uuid.uuid4().hex[:8]}"
    wanted = args.tools.split(",")
    for ns, module in (("python", "tools.python_sandbox"), ("container", "tools.container")):
        if ns in wanted:
            with sessions.tool_server(module, f"{instance}-{ns}", 2) as server:
                rows += await _rows(ns, f"{server.url}/mcp", args)
    if "browser" in wanted:
        with tempfile.TemporaryDirectory(prefix="bench-eras-") as tmp:
            corpus = write_corpus(Path(tmp) / "corpus")
            argv = [*browser_args("http://127.0.0.1:9", corpus, Path(tmp) / "index"), "--log-level", "WARNING"]
            with running_service(argv) as server:
                rows += await _rows("browser", f"{server.url}/mcp", args)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    rows = asyncio.run(measure(args))
    print_rows(rows, width=52)
    save(args.out, rows, n=args.n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
