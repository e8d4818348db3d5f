"""Prefix-cache affinity across orchestrator replicas: cache hit rate and per-turn latency of concurrent agent
loops, with affinity on, off, and on one replica, in the same run.

Usage: python -m bench.affinity [--loops 16] [--turns 10] [--rounds 2] [--vllm [--max-output-tokens 8]]
                                [--out results.json]

Two workers (the SCRIPTED stand-in, whose prefix cache is a model of vLLM's; or, with --vllm, two real vLLM
CPU workers serving the tiny gpt-oss with dummy weights and `--enable-prefix-caching`), one redis-server, and
three fleets of orchestrator processes in front of them, all on loopback:
- `affinity on`: two replicas sharing the affinity map in Redis (`--store redis`);
- `affinity off`: two replicas with `--affinity false` (each request to the least loaded worker);
- `single replica`: one replica, affinity on.
The bench is the load balancer: each request goes to the fleet's next replica in turn (round robin). `--loops`
agent loops run at once, `--turns` turns each; a loop continues with `previous_response_id` (even loops) or a
conversation (odd loops), and opens with a message of its own so that no two loops share more than the system
prompt. The fleets take turns (A, B, C, A, B, C over `--rounds`), so a neighbour's load on this shared machine
falls on all three alike.

Figures per fleet:
- continuation hit rate: of the turns after a loop's first, those whose cached prompt tokens (the worker's own
  `cached_tokens`, relayed in the response's usage) cover the previous turn's prompt, less one cache block (a
  continuation on a worker that never saw the loop finds the system prompt at most);
- token hit rate: the workers' own counters (`vllm:prefix_cache_hits` / `_queries`, scraped from each worker's
  /metrics before and after), first turns included;
- per-turn latency p50 / p99 of the continuations, request sent to response received (not streamed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.report import print_rows, save
from orchestrator.worker.client import prefix_cache_counters
from tests.support.redis import redis_server
from tests.support.service import running_service
from tests.support.vllm import vllm_server

BLOCK = 32
"""vLLM's cache block in tokens (`--block-size` given to the real workers: the CPU build wants a multiple of
32); a hit finds the previous prompt less at most one partial block."""
VLLM_ARGS = ("--enable-prefix-caching", "--enable-prompt-tokens-details", "--block-size", str(BLOCK))
STAND_IN_REPLY = "<|channel|>final<|message|>" + "Noted; working on the next step of the plan." * 2 + "<|return|>"
FLEETS = ("affinity on (2 replicas, Redis)", "affinity off (2 replicas)", "single replica (affinity on)")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.affinity", description=__doc__.splitlines()[0])
    p.add_argument("--loops", type=int, default=None, help="concurrent agent loops (default 16; 4 with --vllm)")
    p.add_argument("--turns", type=int, default=10, help="turns per loop")
    p.add_argument("--rounds", type=int, default=2, help="times each fleet runs its loops, interleaved")
    p.add_argument("--vllm", action="store_true", help="two real vLLM CPU workers instead of the stand-in")
    p.add_argument("--max-output-tokens", type=int, default=8, help="per turn (the real workers write gibberish)")
    p.add_argument("--token-delay-s", type=float, default=0.002, help="the stand-in's pause per streamed token")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)
    args.loops = args.loops or (4 if args.vllm else 16)
    return args


@dataclass
class Turn:
    turn: int
    seconds: float
    prompt_tokens: int
    cached_tokens: int


@contextlib.contextmanager
def stand_in_workers(tmp: Path, token_delay_s: float) -> Iterator[list[str]]:
    scenario = tmp / "scenario.json"
    scenario.write_text(json.dumps({"default": STAND_IN_REPLY, "token_delay_s": token_delay_s}))
    with contextlib.ExitStack() as stack:
        args = ["-m", "toolkit.cli", "worker", "--scripted", "--scenario", str(scenario), "--log-level", "WARNING"]
        yield [stack.enter_context(running_service(args)).url for _ in range(2)]


@contextlib.contextmanager
def vllm_workers() -> Iterator[list[str]]:
    """Two real vLLM CPU workers, started one after the other (each start loads the 2 cores fully)."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(vllm_server(extra_args=VLLM_ARGS)).base_url for _ in range(2)]


@contextlib.contextmanager
def fleets(workers: list[str], redis_url: str) -> Iterator[dict[str, list[str]]]:
    """The three fleets' replica URLs; every orchestrator a process of its own, stopped on the way out."""

    def replica(prefix: str, affinity: bool) -> str:
        args = ["-m", "toolkit.cli", "orchestrator", "--worker-urls", json.dumps(workers), "--store", "redis"]
        args += ["--redis-url", redis_url, "--redis-prefix", prefix, "--affinity", str(affinity).lower()]
        return stack.enter_context(running_service([*args, "--log-level", "WARNING"])).url

    with contextlib.ExitStack() as stack:
        on, off, single = (f"bench-affinity-{uuid.uuid4().hex[:8]}-{n}:" for n in range(3))
        yield {
            FLEETS[0]: [replica(on, True), replica(on, True)],
            FLEETS[1]: [replica(off, False), replica(off, False)],
            FLEETS[2]: [replica(single, True)],
        }


async def cache_counters(http: httpx.AsyncClient, workers: list[str]) -> dict[str, float]:
    """Both workers' prefix-cache counters (tokens), summed."""
    total = {"hits": 0.0, "queries": 0.0}
    for url in workers:
        found = prefix_cache_counters((await http.get(f"{url}/metrics")).text)
        for kind in total:
            total[kind] += found.get(kind, 0.0)
    return total


async def agent_loop(http: httpx.AsyncClient, balancer: Iterator[str], fleet: str, n: int, args: Any) -> list[Turn]:
    """One loop: an opening of its own, then `turns - 1` continuations by previous_response_id or conversation."""
    tag = uuid.uuid4().hex[:12]
    body: dict[str, Any] = {"model": "m", "max_output_tokens": args.max_output_tokens, "temperature": 0}
    if n % 2:
        body["conversation"] = (await http.post(f"{next(balancer)}/v1/conversations", json={})).json()["id"]
    turns, text = [], f"Agent loop {tag}: plan the migration of service {tag} and report after each step."
    for i in range(args.turns):
        started = time.perf_counter()
        resp = await http.post(f"{next(balancer)}/v1/responses", json=body | {"input": text})
        seconds = time.perf_counter() - started
        out = resp.json()
        if resp.status_code != 200 or out.get("status") not in ("completed", "incomplete"):
            raise RuntimeError(f"{fleet}, loop {n}, turn {i}: HTTP {resp.status_code}: {resp.text[:500]}")
        usage = out["usage"]
        cached = (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
        turns.append(Turn(i, seconds, usage["input_tokens"], cached))
        if "conversation" not in body:
            body["previous_response_id"] = out["id"]
        text = f"Step {i + 1} done for {tag}; go on."
    return turns


async def run_fleet(
    http: httpx.AsyncClient, fleet: str, replicas: list[str], workers: list[str], args: Any
) -> tuple[list[Turn], dict[str, float]]:
    """The fleet's loops at once; their turns and the workers' cache counters over them."""
    before = await cache_counters(http, workers)
    balancer = itertools.cycle(replicas)
    loops = await asyncio.gather(*(agent_loop(http, balancer, fleet, n, args) for n in range(args.loops)))
    after = await cache_counters(http, workers)
    return [t for loop in loops for t in loop], {k: after[k] - before[k] for k in after}


def summary(fleet: str, turns: list[list[Turn]], counters: list[dict[str, float]]) -> dict[str, Any]:
    """A fleet's row from its loops' turns (each loop's in order) and its counters' deltas."""
    hits = continuations = 0
    for loop in turns:
        for prev, cur in itertools.pairwise(loop):
            continuations += 1
            hits += cur.cached_tokens >= prev.prompt_tokens - BLOCK
    ms = sorted(t.seconds * 1000 for loop in turns for t in loop[1:])
    queries = sum(c["queries"] for c in counters)
    return {
        "name": fleet,
        "continuation_hit_rate": round(hits / continuations, 4) if continuations else None,
        "continuations": continuations,
        "token_hit_rate": round(sum(c["hits"] for c in counters) / queries, 4) if queries else None,
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(ms[min(len(ms) - 1, len(ms) * 99 // 100)], 1),
    }


def by_loop(turns: list[Turn]) -> list[list[Turn]]:
    """A fleet run's turns (loops one after another, each from turn 0) split back into loops."""
    loops: list[list[Turn]] = []
    for t in turns:
        if t.turn == 0:
            loops.append([])
        loops[-1].append(t)
    return loops


async def measure(replicas: dict[str, list[str]], workers: list[str], args: Any) -> list[dict[str, Any]]:
    """Every fleet `--rounds` times, interleaved; one row per fleet."""
    turns: dict[str, list[list[Turn]]] = {f: [] for f in replicas}
    counters: dict[str, list[dict[str, float]]] = {f: [] for f in replicas}
    limits = httpx.Limits(max_connections=4 * args.loops)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        for _ in range(args.rounds):
            for fleet, urls in replicas.items():
                done, delta = await run_fleet(http, fleet, urls, workers, args)
                turns[fleet] += by_loop(done)
                counters[fleet].append(delta)
    return [summary(f, turns[f], counters[f]) for f in replicas]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-affinity-")))
        workers = stack.enter_context(vllm_workers() if args.vllm else stand_in_workers(tmp, args.token_delay_s))
        replicas = stack.enter_context(fleets(workers, stack.enter_context(redis_server())))
        warm = argparse.Namespace(**vars(args) | {"rounds": 1, "turns": 2})
        asyncio.run(measure(replicas, workers, warm))  # warm-up: connections, first compiles, Redis scripts
        rows = asyncio.run(measure(replicas, workers, args))
    worker = "two vLLM CPU workers (tiny gpt-oss, dummy weights)" if args.vllm else "two SCRIPTED stand-in workers"
    setup = {"workers": worker, "loops": args.loops, "turns": args.turns, "rounds": args.rounds}
    print(f"{worker}: {args.loops} loops x {args.turns} turns, {args.rounds} rounds per fleet")
    print_rows(rows, width=36)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"({time.perf_counter() - started:.0f} s in all; load average {load} on {os.cpu_count()} cores)")
    save(args.out, rows, **setup)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
