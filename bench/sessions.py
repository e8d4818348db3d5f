"""Measurements every tool-server bench shares: percentile rows, one timed tool call, new sessions' first calls,
concurrent sessions, and the fresh-container-per-call baseline the tool servers are measured against."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any

import docker

from bench.wire import Answer, answer_of, client_session
from tests.support.mcp2 import mcp_session
from tests.support.service import Service, running_service

Timed = Callable[[Any], Awaitable[float]]
"""One measured tool call on an open MCP session; answers its milliseconds."""

BASELINE_LABELS = {"toolfleet.role": "bench-baseline"}


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


def tool_bench_parser(doc: str, *, calls: str, baseline_n: int, baseline: str) -> argparse.ArgumentParser:
    """The flags every tool-server bench takes: warm calls, new sessions and their arrival gap, baseline runs, --out."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--n", type=int, default=200, help=f"warm {calls} measured")
    p.add_argument("--sessions", type=int, default=20, help="new sessions measured, with and without the pool")
    p.add_argument("--arrival-s", type=float, default=0.5, help="pause between new sessions (lets the pool refill)")
    p.add_argument("--baseline-n", type=int, default=baseline_n, help=baseline)
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    p.add_argument(
        "--runtimes",
        default="runc,runsc",
        help="OCI runtimes measured side by side (those the engine lacks are skipped)",
    )
    return p


def engine_runtimes(wanted: str) -> list[str]:
    """The runtimes of the comma-separated `wanted` that the Docker engine has; says which it skips."""
    known = docker.from_env().info().get("Runtimes") or {}
    found = [rt for rt in wanted.split(",") if rt in known]
    for rt in set(wanted.split(",")) - set(found):
        print(f"skipping {rt}: the Docker engine has no such runtime (deploy/setup-host.sh gvisor registers runsc)")
    return found


def tagged(rows: list[dict[str, Any]], runtime: str) -> list[dict[str, Any]]:
    return [{**r, "name": f"{r['name']} [{runtime}]", "runtime": runtime} for r in rows]


def print_side_by_side(rows: list[dict[str, Any]]) -> None:
    """Each measured row beside its counterpart under the other runtimes: p50 / p99, and the ratio to runc."""
    by_base: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if "runtime" in r and "p50_ms" in r:
            by_base.setdefault(r["name"].rsplit(" [", 1)[0], {})[r["runtime"]] = r
    runtimes = sorted({rt for per in by_base.values() for rt in per}, key=lambda rt: rt != "runc")
    if len(runtimes) < 2:
        return
    print(f"\n{'p50 / p99 ms':<48} " + " ".join(f"{rt:>16}" for rt in runtimes) + "  p50 ratio to runc")
    for base, per in by_base.items():
        cells = " ".join(
            f"{per[rt]['p50_ms']:>7.1f} / {per[rt]['p99_ms']:<6.1f}" if rt in per else f"{'-':>16}" for rt in runtimes
        )
        ratios = ", ".join(
            f"{rt} {per[rt]['p50_ms'] / per['runc']['p50_ms']:.1f}x"
            for rt in runtimes[1:]
            if rt in per and "runc" in per
        )
        print(f"{base:<48} {cells}  {ratios}")


def tool_server(module: str, instance: str, pool: int, *flags: str) -> AbstractContextManager[Service]:
    """The tool server `python -m module` as a real process, its sandboxes labelled with `instance`."""
    args = ["-m", module, *flags, "--instance", instance, "--pool-size", str(pool), "--log-level", "WARNING"]
    return running_service(args)


def timed_tool(tool: str, arguments: dict[str, Any], ok: Callable[[Answer], bool]) -> Timed:
    """A `Timed` that calls `tool` on either client's session and checks the answer with `ok` (a wrong answer
    makes the figure meaningless)."""

    async def timed(session: Any) -> float:
        start = time.perf_counter()
        result = await session.call_tool(tool, arguments)
        elapsed = (time.perf_counter() - start) * 1000
        answer = answer_of(result)
        assert not answer.is_error and ok(answer), answer
        return elapsed

    return timed


def fresh_container_runs(image: str, cmd: list[str], n: int, expect: bytes | None = None) -> list[float]:
    """A new container per command, removed afterwards (`docker run --rm` through the engine API): the baseline."""
    client = docker.from_env()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        out = client.containers.run(image, cmd, remove=True, network_mode="none", labels=BASELINE_LABELS)
        samples.append((time.perf_counter() - start) * 1000)
        assert expect is None or out.strip() == expect, out
    return samples


async def warm_calls(url: str, n: int, timed: Timed, client: str = "sdk", warmup: int = 20) -> list[float]:
    """`n` calls on one session through `client` (see `bench.wire.CLIENTS`), after `warmup` unmeasured ones."""
    async with client_session(client, url, {"x-session-id": f"bench-warm-{uuid.uuid4().hex[:8]}"}) as session:
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


async def pooled_rows(
    url: str, args: argparse.Namespace, timed: Timed, *, call: str, pool: int
) -> list[dict[str, Any]]:
    """A server with a warm pool of `pool`: warm `call`s (through the SDK client, then the lean one), a new
    session's first one, 8 concurrent sessions."""
    warm = row(f"warm {call}", await warm_calls(url, args.n, timed))
    lean = row(f"warm {call}, lean client", await warm_calls(url, args.n, timed, "wire"))
    firsts = await first_calls(url, args.sessions, args.arrival_s, timed)
    first = row(
        f"first {call.split()[0]} of a new session, warm pool", firsts, pool_size=pool, arrival_s=args.arrival_s
    )
    return [warm, lean, first, await concurrent_throughput(url, f"warm {call}", timed)]


async def unpooled_row(url: str, args: argparse.Namespace, timed: Timed, *, call: str) -> dict[str, Any]:
    """A server without a pool: each new session's first `call` pays for its sandbox."""
    firsts = await first_calls(url, args.sessions, args.arrival_s, timed)
    return row(f"first {call.split()[0]} of a new session, no pool", firsts, pool_size=0)
