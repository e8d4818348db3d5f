"""New-session latency of the python tool when more sessions start at once than its warm pool holds: the pool's
burst (`--pool-burst`, default 4) against `--pool-burst 1` as the baseline, in one run.

Usage: python -m bench.new_sessions [--concurrency 16] [--rounds 5] [--pool-size 2] [--burst 4] [--out results.json]
       [--runtime runc]

Each round opens `--concurrency` new sessions at once (each its own x-session-id) and times each one's first
`print(1)` call (the MCP handshake is not included); then every session is cleaned up and the round waits for
the warm pool to refill (read from the server's own /metrics: `toolfleet_tool_sandboxes`), so every round starts
from a full pool. Rows: p50/p99 of the first calls, new sessions per second over each round's wall time, the
sandboxes' memory (limit and used, from /metrics, with all sessions of a round held) and the server's RSS; then
the ratio of the baseline's p50 and p99 to the burst's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench import sessions
from bench.report import print_rows, save
from tests.support.mcp2 import mcp_session
from tests.support.service import Service

MIB = 2**20
USED = "toolfleet_tool_sandbox_memory_used_bytes"
SAMPLE_S = 0.5
"""The servers' --memory-sample-s: short, so a round's held sandboxes are sampled soon."""

timed_call = sessions.timed_tool("python", {"code": "print(1)"}, lambda answer: answer.text.strip() == "1")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=16, help="new sessions started at once in each round")
    p.add_argument("--rounds", type=int, default=5, help="rounds measured per configuration")
    p.add_argument("--pool-size", type=int, default=2, help="warm pool of both servers")
    p.add_argument("--burst", type=int, default=4, help="--pool-burst measured against the baseline's 1")
    p.add_argument("--runtime", default="runc", help="OCI runtime of the sandboxes")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    return p.parse_args(argv)


async def census(http: httpx.AsyncClient, server: Service) -> dict[str, float]:
    """The server's sandbox gauges: counts by state, and the memory figures by metric name."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families((await http.get(f"{server.url}/metrics")).text):
        for sample in family.samples:
            if sample.name == "toolfleet_tool_sandboxes":
                found[sample.labels["state"]] = sample.value
            elif sample.name.startswith("toolfleet_tool_sandbox_memory"):
                found[sample.name] = sample.value
    return found


async def until(http: httpx.AsyncClient, server: Service, done: Callable[[dict[str, float]], bool]) -> dict[str, float]:
    """The server's census once `done` holds of it (polled every 0.1 s)."""
    while True:
        now = await census(http, server)
        if done(now):
            return now
        await asyncio.sleep(0.1)


async def held_memory(http: httpx.AsyncClient, server: Service, held: int) -> dict[str, float]:
    """The memory gauges once every session of a round holds its sandbox and two samples have ended since (the
    first may have begun before); an engine under load takes a while per sandbox, so each is given 30 s."""
    now = await until(http, server, lambda now: now.get("held") == held)
    for _ in range(2):
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(30):
                now = await until(http, server, lambda now, before=now[USED]: now[USED] != before)
    return now


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return round(next(int(ln.split()[1]) for ln in status if ln.startswith("VmRSS")) / 1024, 1)


async def one_round(server: Service, concurrency: int) -> tuple[list[float], float, dict[str, float]]:
    """First-call latencies of `concurrency` new sessions started at once, the round's wall time, and memory."""
    ids = [f"bench-new-{uuid.uuid4().hex[:8]}" for _ in range(concurrency)]
    opened = asyncio.Event()
    ready = 0

    async def first_call(sid: str) -> float:
        nonlocal ready
        async with mcp_session(server.url, "streamable-http", {"x-session-id": sid}) as session:
            ready += 1
            if ready == concurrency:
                opened.set()
            await opened.wait()  # every handshake done: the first calls start together
            return await timed_call(session)

    samples = await asyncio.gather(*(first_call(sid) for sid in ids))
    wall = max(samples) / 1000  # the first calls started together: the round lasts as long as its slowest
    async with httpx.AsyncClient() as http:
        memory = await held_memory(http, server, concurrency)
    for sid in ids:
        async with mcp_session(server.url, "streamable-http", {"x-session-id": sid}) as session:
            await session.call_tool("cleanup_session", {})
    return list(samples), wall, memory


async def measure_config(args: argparse.Namespace, burst: int) -> dict[str, Any]:
    instance = f"bench-new-{uuid.uuid4().hex[:8]}"
    flags = ["--oci-runtime", args.runtime, "--pool-burst", str(burst), "--memory-sample-s", str(SAMPLE_S)]
    flags += ["--max-sessions", str(max(256, args.concurrency))]
    samples: list[float] = []
    walls: list[float] = []
    memory: dict[str, float] = {}
    with sessions.tool_server("tools.python_sandbox", instance, args.pool_size, *flags) as server:
        full = {"starting": 0, "warm": args.pool_size, "held": 0}
        async with httpx.AsyncClient() as http:
            for _ in range(args.rounds):
                await until(http, server, lambda now: {k: now.get(k) for k in full} == full)
                ms, wall, memory = await one_round(server, args.concurrency)
                samples += ms
                walls.append(wall)
        rss = rss_mb(server.proc.pid)
    name = f"first call, {args.concurrency} new sessions at once, pool burst {burst}"
    return sessions.row(
        name,
        samples,
        burst=burst,
        pool_size=args.pool_size,
        sessions_per_s=round(args.concurrency * len(walls) / sum(walls), 1),
        sandbox_memory_limit_mb=round(memory["toolfleet_tool_sandbox_memory_limit_bytes"] / MIB),
        sandbox_memory_used_mb=round(memory[USED] / MIB, 1),
        server_rss_mb=rss,
    )


def print_table(rows: list[dict[str, Any]]) -> None:
    print_rows(rows, width=64)
    burst, base = rows
    for figure in ("p50_ms", "p99_ms"):
        label = f"ratio baseline (burst 1) / burst {burst['burst']} {figure.removesuffix('_ms')}"
        print(f"{label:<64} {base[figure] / burst[figure]:.2f}x")
    print(f"{'ratio sessions/s burst / baseline':<64} {burst['sessions_per_s'] / base['sessions_per_s']:.2f}x")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    rows = [asyncio.run(measure_config(args, args.burst)), asyncio.run(measure_config(args, 1))]
    print_table(rows)
    save(args.out, rows, concurrency=args.concurrency, rounds=args.rounds, runtime=args.runtime)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
