"""A warm tool call in each MCP era, on the python, container and browser servers, in one run.

Usage: python -m bench.eras [--n 200] [--out results.json] [--tools python,container,browser]

Rows per tool: the 2025-era warm call (`initialize`, `Mcp-Session-Id`, state by `x-session-id`: what the
orchestrator did before), the 2026-07-28 warm call by session handle (`mode="auto"`, the handle also sent
as `Mcp-Param-Session-Handle`), the 2026-07-28 warm call by `x-session-id` (what the orchestrator does now),
and a 2026-07-28 call that names no session (its sandbox comes from the warm pool and is removed at once).
`handle_vs_2025_p50_ms` is the handle path's p50 minus the 2025 era's, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Sequence
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


async def _timed(client: Any, tool: str, args: dict[str, Any], n: int, warmup: int) -> list[float]:
    samples = []
    for i in range(warmup + n):
        start = time.perf_counter()
        result = await client.call_tool(tool, args)
        elapsed = (time.perf_counter() - start) * 1000
        assert not result.is_error, result.content
        if i >= warmup:
            samples.append(elapsed)
    return samples


async def _rows(ns: str, url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    tool, arguments = CALLS[ns]
    sid = {"x-session-id": f"bench-eras-{uuid.uuid4().hex[:8]}"}
    async with connect(url, "streamable-http", mode="legacy", headers=sid) as client:
        old = await _timed(client, tool, arguments, args.n, 20)
        await client.call_tool("cleanup_session", {})
    async with connect(url, "streamable-http", headers=sid) as client:
        by_id = await _timed(client, tool, arguments, args.n, 20)
        await client.call_tool("cleanup_session", {})
    async with connect(url, "streamable-http") as client:
        await client.list_tools()  # learn the x-mcp-header arguments
        first = await client.call_tool(tool, {**arguments, "session_handle": "new"})
        handle = first.structured_content["session_handle"]  # type: ignore[index]
        by_handle = await _timed(client, tool, {**arguments, "session_handle": handle}, args.n, 20)
        await client.call_tool("cleanup_session", {"session_handle": handle})
        stateless = await _timed(client, tool, arguments, args.stateless_n, 3)
    rows = [
        sessions.row(f"{ns} warm call, 2025 era (x-session-id)", old),
        sessions.row(f"{ns} warm call, 2026-07-28 by x-session-id", by_id),
        sessions.row(f"{ns} warm call, 2026-07-28 by handle", by_handle),
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
