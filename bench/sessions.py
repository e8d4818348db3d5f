"""Measurements every tool-server bench shares: percentile rows, new sessions' first calls, concurrent sessions."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.mcp2 import mcp_session

Timed = Callable[[Any], Awaitable[float]]
"""One measured tool call on an open MCP session; answers its milliseconds."""


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def row(name: str, ms: list[float], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "n": len(ms),
        "p50_ms": round(pct(ms, 50), 2),
        "p99_ms": round(pct(ms, 99), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
        **extra,
    }


async def warm_calls(url: str, n: int, timed: Timed, warmup: int = 20) -> list[float]:
    async with mcp_session(url, "streamable-http", {"x-session-id": f"bench-warm-{uuid.uuid4().hex[:8]}"}) as session:
        for _ in range(warmup):
            await timed(session)
        samples = [await timed(session) for _ in range(n)]
        await session.call_tool("cleanup_session", {})
    return samples


async def first_calls(url: str, sessions: int, arrival_s: float, timed: Timed) -> list[float]:
    """Time from a new session's first `tools/call` to its answer (the MCP handshake is not included)."""
    samples = []
    for _ in range(sessions):
        async with mcp_session(url, "streamable-http", {"x-session-id": f"bench-{uuid.uuid4().hex[:8]}"}) as s:
            samples.append(await timed(s))
            await s.call_tool("cleanup_session", {})
        await asyncio.sleep(arrival_s)
    return samples


async def concurrent_throughput(
    url: str, name: str, timed: Timed, sessions: int = 8, calls: int = 50
) -> dict[str, Any]:
    async def one(i: int) -> list[float]:
        async with mcp_session(url, "streamable-http", {"x-session-id": f"bench-conc-{i}"}) as session:
            await timed(session)
            out = [await timed(session) for _ in range(calls)]
            await session.call_tool("cleanup_session", {})
            return out

    start = time.perf_counter()
    per_session = await asyncio.gather(*(one(i) for i in range(sessions)))
    wall = time.perf_counter() - start
    flat = [x for xs in per_session for x in xs]
    return row(f"{sessions} concurrent sessions, {name}", flat, calls_per_s=round(len(flat) / wall, 1))
