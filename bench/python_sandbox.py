"""Figures of the python tool through MCP, with the gpt-oss reference approach as baseline, in one run.

Usage: python -m bench.python_sandbox [--n 200] [--sessions 20] [--out results.json] [--backend docker|local]
       [--runtimes runc,runsc]

Rows, under each OCI runtime of `--runtimes` (runc and gVisor's runsc, then a side-by-side table): a warm
`print(1)` call (streamable HTTP, mcp 2.x client); the first call of a new session with and
without the warm pool; 8 concurrent sessions' throughput; server RSS and one session's
sandbox memory; and the baseline: a fresh container per call running the code (`docker run --rm`
through the engine API), which is what gpt-oss's reference python tool does.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import docker

from bench import sessions
from bench.report import print_rows, save
from tests.support.mcp2 import mcp_session
from tests.support.service import Service

IMAGE = "toolfleet/python-sandbox:latest"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = sessions.tool_bench_parser(__doc__, calls="calls", baseline_n=15, baseline="fresh-container baseline calls")
    p.add_argument("--backend", default="docker", choices=["docker", "local"])
    return p.parse_args(argv)


timed_call = sessions.timed_tool("python", {"code": "print(1)"}, lambda answer: answer.text.strip() == "1")


def memory(server: Service, instance: str) -> dict[str, Any]:
    rss_kb = next(int(line.split()[1]) for line in open(f"/proc/{server.proc.pid}/status") if line.startswith("VmRSS"))
    figures: dict[str, Any] = {"name": "memory", "server_rss_mb": round(rss_kb / 1024, 1)}
    client = docker.from_env()
    found = client.containers.list(filters={"label": f"toolfleet.instance={instance}"})
    if found:
        stats = found[0].stats(stream=False)
        figures["sandbox_container_mb"] = round(stats["memory_stats"]["usage"] / 2**20, 1)
    return figures


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for runtime in sessions.engine_runtimes(args.runtimes) if args.backend == "docker" else ["local"]:
        rows += await measure_runtime(args, runtime)
    if args.backend == "docker":
        rows.append(
            sessions.row(
                "baseline: fresh container per call",
                sessions.fresh_container_runs(IMAGE, ["python3", "-c", "print(1)"], args.baseline_n, expect=b"1"),
            )
        )
    return rows


async def measure_runtime(args: argparse.Namespace, runtime: str) -> list[dict[str, Any]]:
    """The server's rows with its sandboxes under one OCI runtime (runc, or gVisor's runsc)."""
    rows = []
    instance = f"bench-{uuid.uuid4().hex[:8]}"
    flags = ["--backend", args.backend, *(["--oci-runtime", runtime] if args.backend == "docker" else [])]
    with sessions.tool_server("tools.python_sandbox", instance, 2, *flags) as server:
        rows += await sessions.pooled_rows(server.url, args, timed_call, call="call print(1)", pool=2)
        async with mcp_session(server.url, "streamable-http", {"x-session-id": "bench-mem"}) as session:
            await session.call_tool("python", {"code": "1"})
            rows.append(memory(server, instance))
            await session.call_tool("cleanup_session", {})
    with sessions.tool_server("tools.python_sandbox", f"{instance}-nopool", 0, *flags) as server:
        rows.append(await sessions.unpooled_row(server.url, args, timed_call, call="call print(1)"))
    return sessions.tagged(rows, runtime)


def print_table(rows: list[dict[str, Any]]) -> None:
    print_rows(rows, width=56)
    by_name = {r["name"]: r for r in rows}
    base = by_name.get("baseline: fresh container per call")
    for r in rows:
        if base and r["name"].startswith("warm call print(1) ["):
            print(f"{'ratio baseline p50 / ' + r['name'] + ' p50':<56} {base['p50_ms'] / r['p50_ms']:.1f}x")
    sessions.print_side_by_side(rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    rows = asyncio.run(measure(args))
    print_table(rows)
    save(args.out, rows, backend=args.backend)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
