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
import json
import os
import platform
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker

from bench.sessions import concurrent_throughput, first_calls, row, warm_calls
from tests.support.service import running_service

IMAGE = "toolfleet/container-sandbox:latest"
LABELS = {"toolfleet.role": "bench-baseline"}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200, help="warm execs measured")
    p.add_argument("--sessions", type=int, default=20, help="new sessions measured, with and without the pool")
    p.add_argument("--arrival-s", type=float, default=0.5, help="pause between new sessions (lets the pool refill)")
    p.add_argument("--baseline-n", type=int, default=30, help="calls of each baseline")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    return p.parse_args(argv)


async def timed_exec(session: Any) -> float:
    start = time.perf_counter()
    result = await session.call_tool("exec", {"cmd": ["true"]})
    elapsed = (time.perf_counter() - start) * 1000
    assert not result.is_error and result.structured_content["exit_code"] == 0, result.content
    return elapsed


def docker_run_baseline(n: int) -> list[float]:
    """A fresh container per command, removed afterwards."""
    client = docker.from_env()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        client.containers.run(IMAGE, ["true"], remove=True, network_mode="none", labels=LABELS)
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def docker_exec_baseline(n: int) -> list[float]:
    """`docker exec` per command in one running container: create, start (attached), inspect the exit code."""
    client = docker.from_env()
    container = client.containers.run(IMAGE, ["sleep", "infinity"], detach=True, network_mode="none", labels=LABELS)
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
    rows.append(row("baseline: docker run --rm per command", docker_run_baseline(args.baseline_n)))
    rows.append(row("baseline: docker exec per command", docker_exec_baseline(args.baseline_n)))
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        figures = ", ".join(f"{k}={v}" for k, v in r.items() if k != "name")
        print(f"{r['name']:<48} {figures}")
    by_name = {r["name"]: r for r in rows}
    warm = by_name["warm exec true"]["p50_ms"]
    for name in ("baseline: docker run --rm per command", "baseline: docker exec per command"):
        print(f"{'ratio ' + name.removeprefix('baseline: ') + ' p50 / warm':<48} {by_name[name]['p50_ms'] / warm:.1f}x")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    rows = asyncio.run(measure(args))
    print_table(rows)
    if args.out:
        env = {"python": platform.python_version(), "cpus": os.cpu_count()}
        Path(args.out).write_text(json.dumps({"env": env, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
