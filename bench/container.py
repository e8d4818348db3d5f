"""Figures of the container tool through MCP, beside `docker run --rm` and `docker exec` per command, in one run.

Usage: python -m bench.container [--n 200] [--sessions 20] [--out results.json] [--runtimes runc,runsc]

Rows, under each OCI runtime of `--runtimes` (runc and gVisor's runsc, then a side-by-side table): warm
`exec ["true"]` (streamable HTTP, mcp 2.x client); the first exec of a new session with and
without the warm pool; 8 concurrent sessions' throughput; and the baselines, straight on the
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

from bench import sessions
from bench.report import print_rows, save

IMAGE = "toolfleet/container-sandbox:latest"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    return sessions.tool_bench_parser(
        __doc__, calls="execs", baseline_n=30, baseline="calls of each baseline"
    ).parse_args(argv)


timed_exec = sessions.timed_tool("exec", {"cmd": ["true"]}, lambda answer: answer.structured_content["exit_code"] == 0)


def docker_exec_baseline(n: int) -> list[float]:
    """`docker exec` per command in one running container: create, start (attached), inspect the exit code."""
    client = docker.from_env()
    container = client.containers.run(
        IMAGE, ["sleep", "infinity"], detach=True, network_mode="none", labels=sessions.BASELINE_LABELS
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


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for runtime in sessions.engine_runtimes(args.runtimes):
        rows += await measure_runtime(args, runtime)
    rows.append(
        sessions.row(
            "baseline: docker run --rm per command", sessions.fresh_container_runs(IMAGE, ["true"], args.baseline_n)
        )
    )
    rows.append(sessions.row("baseline: docker exec per command", docker_exec_baseline(args.baseline_n)))
    return rows


async def measure_runtime(args: argparse.Namespace, runtime: str) -> list[dict[str, Any]]:
    """The server's rows with its session containers under one OCI runtime (runc, or gVisor's runsc)."""
    rows = []
    instance = f"bench-ctr-{uuid.uuid4().hex[:8]}"
    with sessions.tool_server("tools.container", instance, 2, "--oci-runtime", runtime) as server:
        await asyncio.sleep(2)  # let the pool fill before the first measured session
        rows += await sessions.pooled_rows(server.url, args, timed_exec, call="exec true", pool=2)
    with sessions.tool_server("tools.container", f"{instance}-nopool", 0, "--oci-runtime", runtime) as server:
        rows.append(await sessions.unpooled_row(server.url, args, timed_exec, call="exec true"))
    return sessions.tagged(rows, runtime)


def print_table(rows: list[dict[str, Any]]) -> None:
    print_rows(rows, width=56)
    by_name = {r["name"]: r for r in rows}
    for warm in (r for r in rows if r["name"].startswith("warm exec true [")):
        for name in ("baseline: docker run --rm per command", "baseline: docker exec per command"):
            label = f"ratio {name.removeprefix('baseline: ')} p50 / {warm['name']}"
            print(f"{label:<56} {by_name[name]['p50_ms'] / warm['p50_ms']:.1f}x")
    sessions.print_side_by_side(rows)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    rows = asyncio.run(measure(args))
    print_table(rows)
    save(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
