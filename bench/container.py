"""Figures of the container tool through MCP, beside `docker run --rm` and `docker exec` per command, in one run.

Usage: python -m bench.container [--n 200] [--sessions 20] [--out results.json]

Rows: warm `exec ["true"]` (streamable HTTP, mcp 2.x client); the first exec of a new session with
and without the warm pool; 8 concurrent sessions' throughput; and the baselines, straight on the
engine API with the same image: a fresh container per command (`docker run --rm`) and `docker exec`
in a running container (create + start + inspect, what a server without a resident agent pays).
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any

import docker

from bench.report import print_rows, save
from bench.sessions import (
    BASELINE_LABELS,
    concurrent_throughput,
    first_calls,
    fresh_container_runs,
    row,
    timed_tool,
    tool_bench_parser,
    warm_calls,
)
from tests.support.service import running_service

IMAGE = "toolfleet/container-sandbox:latest"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    return tool_bench_parser(__doc__, calls="execs", baseline_n=30, baseline="calls of each baseline").parse_args(argv)


timed_exec = timed_tool("exec", {"cmd": ["true"]}, lambda result: result.structured_content["exit_code"] == 0)


def docker_exec_baseline(n: int) -> list[float]:
    """`docker exec` per command in one running container: create, start (attached), inspect the exit code."""
    client = docker.from_env()
    container = client.containers.run(
        IMAGE, ["sleep", "infinity"], detach=True, network_mode="none", labels=BASELINE_LABELS
    )
    try:
        samples = []
        for _ in range(n + 5):
            start = time.perf_counter()
            exec_id = client.api.exec_create(container.id, ["true"])["Id"]
            client.api.exec_start(exec_id)
            assert client.api.exec_inspect(exec_id)["ExitCode"] == 0
            samples.append((time.perf_counter() - start) * 1000)
        return samples[5:]
    finally:
        container.remove(force=True)


def start(instance: str, pool: int) -> Any:
    args = ["-m", "tools.container", "--instance", instance, "--pool-size", str(pool), "--log-level", "WARNING"]
    return running_service(args)


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    instance = f"bench-ctr-{uuid.uuid4().hex[:8]}"
    with start(instance, pool=2) as server:
        await asyncio.sleep(2)  # let the pool fill before the first measured session
        rows.append(row("warm exec true", await warm_calls(server.url, args.n, timed_exec)))
        firsts = await first_calls(server.url, args.sessions, args.arrival_s, timed_exec)
        rows.append(row("first exec of a new session, warm pool", firsts, pool_size=2, arrival_s=args.arrival_s))
        rows.append(await concurrent_throughput(server.url, "warm exec true", timed_exec))
    with start(f"{instance}-nopool", pool=0) as server:
        firsts = await first_calls(server.url, args.sessions, args.arrival_s, timed_exec)
        rows.append(row("first exec of a new session, no pool", firsts, pool_size=0))
    rows.append(row("baseline: docker run --rm per command", fresh_container_runs(IMAGE, ["true"], args.baseline_n)))
    rows.append(row("baseline: docker exec per command", docker_exec_baseline(args.baseline_n)))
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print_rows(rows)
    by_name = {r["name"]: r for r in rows}
    warm = by_name["warm exec true"]["p50_ms"]
    for name in ("baseline: docker run --rm per command", "baseline: docker exec per command"):
        print(f"{'ratio ' + name.removeprefix('baseline: ') + ' p50 / warm':<48} {by_name[name]['p50_ms'] / warm:.1f}x")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    rows = asyncio.run(measure(args))
    print_table(rows)
    save(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
