"""Background responses that outlive their replica: how long after a SIGKILL another replica adopts a running
background response (p50, from the kill to the hold taken by the survivor, two orchestrator subprocesses on
one redis-server, the scripted stand-in worker); what the heartbeat costs per response and round at
`--events` events: before (the baseline, run here too: the hold renewed and the record rewritten with its
whole event log) and now (the hold alone: the events are appended to their log as they come, whose one
append is timed too); and what write-ahead adds before a client has an event (`responses/journal.py`).

Usage: python -m bench.adoption [--kills 5] [--hold-s 2] [--responses 200] [--events 2000] [--tokens 300]
       [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import print_values, save  # noqa: E402
from orchestrator.persist import Record  # noqa: E402
from orchestrator.persist.redis import RedisStores  # noqa: E402
from orchestrator.responses.events import ResponseBuilder  # noqa: E402
from orchestrator.responses.journal import Journal  # noqa: E402
from orchestrator.settings import OrchestratorSettings  # noqa: E402
from orchestrator.worker.scripted import Scenario, ScriptedModel, build_app  # noqa: E402
from tests.support.asgi import serve_asgi  # noqa: E402
from tests.support.redis import redis_server  # noqa: E402
from tests.support.service import running_service  # noqa: E402

SLOW = "<|channel|>final<|message|>" + "slow " * 2000 + "<|return|>"  # 20 s at 10 ms a token: outlives a kill


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.adoption")
    p.add_argument("--kills", type=int, default=5, help="replicas killed under a running background response")
    p.add_argument("--hold-s", type=float, default=2.0, help="--background-hold-s of the replicas")
    p.add_argument("--responses", type=int, default=200, help="background responses one heartbeat renews")
    p.add_argument("--events", type=int, default=2000, help="events each of them has so far")
    p.add_argument("--tokens", type=int, default=300, help="deltas streamed to time the write-ahead delay")
    p.add_argument("--token-ms", type=float, default=10.0, help="between two of them (a 100 token/s model)")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def holder_of(r: redis.Redis, key: str) -> bytes | None:
    value = r.get(key)
    return value if isinstance(value, bytes) else None


def one_kill(flags: list[str], survivor_url: str, r: redis.Redis, prefix: str) -> float | None:
    """Seconds from a SIGKILL of the replica running a background response to its hold taken by the other;
    None when the hold lapsed before the kill (the replica starved of the CPU past its hold: no sample)."""
    with running_service(["-m", "orchestrator", *flags]) as doomed:
        body = {"input": "long job", "background": True}
        rid = httpx.post(f"{doomed.url}/v1/responses", json=body, timeout=30).json()["id"]
        first = holder_of(r, f"{prefix}running:{rid}")
        while not httpx.get(f"{survivor_url}/v1/responses/{rid}", timeout=30).json()["output"]:
            time.sleep(0.05)  # until its answer is under way (its events stored)
        if holder_of(r, f"{prefix}running:{rid}") != first:
            return None
        doomed.stop(signal.SIGKILL)
        killed = time.monotonic()
        while holder_of(r, f"{prefix}running:{rid}") in (first, None):
            if time.monotonic() - killed > 120:
                raise RuntimeError(f"{rid} was not adopted within 120 s of the kill")
            time.sleep(0.005)
        return time.monotonic() - killed


def adoption(args: argparse.Namespace, redis_url: str, worker_url: str) -> dict[str, Any]:
    prefix = f"bench{uuid.uuid4().hex[:8]}:"
    flags = ["--store", "redis", "--redis-url", redis_url, "--redis-prefix", prefix]
    flags += ["--worker-urls", f'["{worker_url}"]', "--background-hold-s", str(args.hold_s)]
    r = redis.Redis.from_url(redis_url)
    with running_service(["-m", "orchestrator", *flags]) as survivor:
        samples = [one_kill(flags, survivor.url, r, prefix) for _ in range(args.kills)]
    took = [t for t in samples if t is not None]
    p50 = statistics.median(took) if took else float("nan")
    lapsed = len(samples) - len(took)  # holds that lapsed before their kill: not counted
    name = "adopted after a SIGKILL (p50 from the kill)"
    return {"name": name, "value": f"{p50:.2f} s", "hold_s": args.hold_s, "kills": len(took), "lapsed_before": lapsed}


def _events(rid: str, n: int) -> ResponseBuilder:
    """A running response's builder with `n` events so far (a 2,000-token answer's worth)."""
    builder = ResponseBuilder({"id": rid, "status": "in_progress", "output": []})
    for i in range(n):
        builder.emit("response.output_text.delta", output_index=0, item_id="msg", content_index=0, delta=f"w{i} ")
    return builder


async def _per_response(rounds: int, ids: list[str], one_round: Callable[[], Awaitable[Any]]) -> dict[str, str]:
    """Wall and this process's CPU time per response and round (CPU: the replica's own cost, which swings
    less with the neighbours of a shared machine)."""
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(rounds):
        await one_round()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"value": f"{wall / rounds / len(ids) * 1e3:.3f} ms", "cpu": f"{cpu / rounds / len(ids) * 1e3:.3f} ms"}


async def heartbeat(args: argparse.Namespace, redis_url: str) -> list[dict[str, Any]]:
    """One heartbeat round over `--responses` responses of `--events` events each. Before: the hold renewed
    and each record rewritten with its whole event log (the baseline, what the heartbeat did before the
    log was append-only). Now: the hold alone, the events being appended as they come; and what one append
    of a new event costs at that log length."""
    stores = RedisStores(redis_url, prefix=f"bench{uuid.uuid4().hex[:8]}:")
    store, holder = stores.responses, "bench-replica"
    ids = [f"resp_{i}" for i in range(args.responses)]
    builders = [_events(rid, args.events) for rid in ids]

    async def rewrite() -> None:
        await store.hold_running(ids, 30, holder)
        for b in builders:
            await store.put(Record(b.id, "conv_bench", b.snapshot(), [], [], list(b.events), owner="bench"))

    async def append() -> None:
        for b in builders:
            b.emit("response.output_text.delta", output_index=0, item_id="msg", content_index=0, delta="more ")
            await store.append_events(b.id, len(b.events) - 1, b.events[-1:], holder, 30)

    try:
        for b in builders:
            assert await store.append_events(b.id, 0, b.events, holder, 30)
        before = await _per_response(5, ids, rewrite)
        now = await _per_response(5, ids, lambda: store.hold_running(ids, 30, holder))
        appended = await _per_response(5, ids, append)
    finally:
        await stores.aclose()
    extra = {"responses": args.responses, "events": args.events}
    return [
        {"name": "heartbeat per response: before (hold + log rewrite)", **before, **extra},
        {"name": "heartbeat per response: now (hold only)", **now, **extra},
        {"name": "one event appended to such a log", **appended, **extra},
    ]


async def write_ahead(args: argparse.Namespace, redis_url: str) -> list[dict[str, Any]]:
    """What write-ahead adds before a client has an event: from its emit to readers let have it (stored by
    the journal), one response streaming a token every `--token-ms`, at the default flush window and none."""
    stores = RedisStores(redis_url, prefix=f"bench{uuid.uuid4().hex[:8]}:")
    rows = []
    try:
        for window in sorted({OrchestratorSettings.model_fields["event_flush_s"].default, 0.05, 0.0}, reverse=True):
            cpu = time.process_time()
            delays = await _delays(stores.responses, window, args)
            cpu = (time.process_time() - cpu) / len(delays)
            p50, p99 = statistics.median(delays), statistics.quantiles(delays, n=100)[98]
            rows.append(
                {
                    "name": f"write-ahead delay, flush window {window * 1e3:.0f} ms",
                    "value": f"{p50 * 1e3:.2f} ms",
                    "p99": f"{p99 * 1e3:.2f} ms",
                    "cpu_per_event": f"{cpu * 1e3:.3f} ms",
                }
            )
    finally:
        await stores.aclose()
    return rows


async def _delays(store: Any, window: float, args: argparse.Namespace) -> list[float]:
    """Seconds from each event's emit to its publish, over `--tokens` deltas."""
    builder = ResponseBuilder({"id": f"resp_{uuid.uuid4().hex}", "status": "in_progress", "output": []})
    journal = Journal(store, builder, "bench-replica", 30, window)
    journal.start(lambda: None)
    emitted: list[float] = []
    published: list[float] = []

    async def read() -> None:
        async for _ in builder.follow():
            published.append(time.perf_counter())

    reader = asyncio.create_task(read())
    for i in range(args.tokens):
        builder.emit("response.output_text.delta", output_index=0, item_id="msg", content_index=0, delta=f"w{i} ")
        emitted.append(time.perf_counter())
        await asyncio.sleep(args.token_ms / 1e3)
    builder.finish("completed")
    emitted.append(time.perf_counter())
    await journal.close()
    await reader
    return [p - e for e, p in zip(emitted, published, strict=True)]


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    model = ScriptedModel(Scenario(default=SLOW, token_delay_s=0.01))
    with redis_server() as redis_url, serve_asgi(build_app(model)) as worker_url:
        rows = asyncio.run(heartbeat(args, redis_url)) + asyncio.run(write_ahead(args, redis_url))
        rows.insert(0, adoption(args, redis_url, worker_url))
    print_values(rows, 48, 10)
    save(args.out, rows)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
