"""Background responses that outlive their replica: how long after a SIGKILL another replica adopts a running
background response (p50, from the kill to the hold taken by the survivor, two orchestrator subprocesses on
one redis-server, the scripted stand-in worker), and what the heartbeat costs per response and round:
renewing the hold alone (the heartbeat before adoption: the baseline) and renewing it plus writing the
response's newest events (now), against the same Redis in the same run.

Usage: python -m bench.adoption [--kills 5] [--hold-s 2] [--responses 200] [--events 2000] [--out results.json]
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
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import print_values, save  # noqa: E402
from orchestrator.persist.redis import RedisStores  # noqa: E402
from orchestrator.responses.checkpoint import Checkpoints, Where  # noqa: E402
from orchestrator.responses.events import ResponseBuilder  # noqa: E402
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
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def holder_of(r: redis.Redis, key: str) -> bytes | None:
    value = r.get(key)
    return value if isinstance(value, bytes) else None


def one_kill(flags: list[str], survivor_url: str, r: redis.Redis, prefix: str) -> float:
    """Seconds from a SIGKILL of the replica running a background response to its hold taken by the other."""
    with running_service(["-m", "orchestrator", *flags]) as doomed:
        body = {"input": "long job", "background": True}
        rid = httpx.post(f"{doomed.url}/v1/responses", json=body, timeout=30).json()["id"]
        while not httpx.get(f"{survivor_url}/v1/responses/{rid}", timeout=30).json()["output"]:
            time.sleep(0.05)  # until its answer is under way (the heartbeat stored it)
        first = holder_of(r, f"{prefix}running:{rid}")
        doomed.stop(signal.SIGKILL)
        killed = time.monotonic()
        while holder_of(r, f"{prefix}running:{rid}") in (first, None):
            time.sleep(0.005)
        return time.monotonic() - killed


def adoption(args: argparse.Namespace, redis_url: str, worker_url: str) -> dict[str, Any]:
    prefix = f"bench{uuid.uuid4().hex[:8]}:"
    flags = ["--store", "redis", "--redis-url", redis_url, "--redis-prefix", prefix]
    flags += ["--worker-urls", f'["{worker_url}"]', "--background-hold-s", str(args.hold_s)]
    r = redis.Redis.from_url(redis_url)
    with running_service(["-m", "orchestrator", *flags]) as survivor:
        took = [one_kill(flags, survivor.url, r, prefix) for _ in range(args.kills)]
    p50 = statistics.median(took)
    return {"name": "adopted after a SIGKILL (p50 from the kill)", "value": f"{p50:.2f} s", "hold_s": args.hold_s}


def _checkpoint(store: Any, rid: str, events: int) -> Checkpoints:
    """A running response's checkpoint with `events` events so far (a 2,000-token answer's worth)."""
    builder = ResponseBuilder({"id": rid, "status": "in_progress", "output": []})
    for i in range(events):
        builder.emit("response.output_text.delta", output_index=0, item_id="msg", content_index=0, delta=f"w{i} ")
    checkpoint = Checkpoints(store, Where(rid, [], "bench", 2, {"input": "x"}), "bench-replica")
    checkpoint.run = type("RunView", (), {"builder": builder, "conversation": "conv_bench"})()  # type: ignore[assignment]
    return checkpoint


async def heartbeat(args: argparse.Namespace, redis_url: str) -> list[dict[str, Any]]:
    """One heartbeat round over `--responses` responses: the hold alone (baseline), then hold + new events."""
    stores = RedisStores(redis_url, prefix=f"bench{uuid.uuid4().hex[:8]}:")
    ids = [f"resp_{i}" for i in range(args.responses)]
    checkpoints = [_checkpoint(stores.responses, rid, args.events) for rid in ids]
    try:
        started = time.perf_counter()
        for _ in range(5):
            await stores.responses.hold_running(ids, 30, "bench-replica")
        hold = (time.perf_counter() - started) / 5 / len(ids)
        started = time.perf_counter()
        for round_ in range(5):
            await stores.responses.hold_running(ids, 30, "bench-replica")
            for c in checkpoints:
                c.run.builder.emit("response.output_text.delta", delta=f"r{round_}")  # type: ignore[union-attr]
                await c.flush()
        flushed = (time.perf_counter() - started) / 5 / len(ids)
    finally:
        await stores.aclose()
    extra = {"responses": args.responses, "events": args.events}
    return [
        {"name": "heartbeat per response: hold only (baseline)", "value": f"{hold * 1e3:.3f} ms", **extra},
        {"name": "heartbeat per response: hold + newest events", "value": f"{flushed * 1e3:.3f} ms", **extra},
    ]


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    model = ScriptedModel(Scenario(default=SLOW, token_delay_s=0.01))
    with redis_server() as redis_url, serve_asgi(build_app(model)) as worker_url:
        rows = asyncio.run(heartbeat(args, redis_url))
        rows.insert(0, adoption(args, redis_url, worker_url))
    print_values(rows, 48, 10)
    save(args.out, rows)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
