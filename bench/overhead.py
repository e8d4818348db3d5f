"""What toolfleet adds to a response against vLLM serving the same request itself: latency and time to first
token through vLLM's own `/v1/responses` and through the orchestrator, over SSE and over WebSocket mode.

Usage: python -m bench.overhead [--reps 20] [--reps-concurrent 6] [--tokens 16] [--out results.json]

One real vLLM CPU worker (the tiny gpt-oss, dummy weights) and one orchestrator process in front of it, on
loopback. The same body goes to three paths, interleaved request by request so a neighbour's load on this
shared machine falls on all alike:
- `vLLM /v1/responses, SSE`: vLLM's own Responses API (the baseline);
- `toolfleet, SSE`: the orchestrator's `POST /v1/responses` (it renders Harmony and streams `/v1/completions`);
- `toolfleet, WebSocket`: the orchestrator's WebSocket mode, one connection per client kept across requests.
At concurrency 1 and 8 (8 clients at once, each waiting for its answer before the next request).

The random weights write gibberish, so every request is bounded (`max_output_tokens`, temperature 0) and
the output tokens each path generated are reported: the ratio is only fair where they match. The two render
their own Harmony system message (vLLM's names its model identity and knowledge cutoff), so their prompt
tokens are reported too. Latency: request sent to terminal event; TTFT: to the first event after
`response.created` / `response.in_progress` (the first that carries output). Random tokens seldom form a
Harmony message header, and neither server streams output before one: `output_before_end` is the share of
responses with an output event before the terminal one; where it is 0, TTFT is the whole response both ways.
CPU per response, counted to the path that ran meanwhile: vLLM's API server process (its own /v1/responses,
or the /v1/completions the orchestrator sends) and the orchestrator's process; on a shared machine these swing
much less with the neighbours than wall time does. The engine's own process is the same work both ways.

Not measured here: a response with a tool call. Random weights call no tool of their own accord, and vLLM's
own `/v1/responses` has no way to force one, so there is no like-for-like request; `bench.fleet` and
`bench.websocket` time tool turns through the orchestrator on the stand-in.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import websockets

from bench.report import cpu_seconds, print_rows, save
from tests.support.service import running_service
from tests.support.vllm import vllm_server

PREAMBLE = ("response.created", "response.in_progress", "response.queued")
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
PATHS = ("vLLM /v1/responses, SSE", "toolfleet, SSE", "toolfleet, WebSocket")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=40, help="requests per path at concurrency 1")
    p.add_argument("--reps-concurrent", type=int, default=8, help="rounds of 8 requests per path at concurrency 8")
    p.add_argument("--tokens", type=int, default=16, help="max_output_tokens of every request")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    return p.parse_args(argv)


@dataclass
class Sample:
    seconds: float
    ttft: float
    input_tokens: int
    output_tokens: int
    early: bool  # an output event came before the terminal one (else TTFT is the whole response)


class Timer:
    """Times one response's events: the first output event and the terminal one."""

    def __init__(self) -> None:
        self.started, self.first, self.early = time.perf_counter(), 0.0, False

    def event(self, event: dict[str, Any]) -> Sample | None:
        kind = event.get("type", "")
        if not self.first and kind not in PREAMBLE:
            self.first, self.early = time.perf_counter(), kind not in TERMINAL
        if kind not in TERMINAL:
            return None
        if kind == "error" or "response" not in event:
            raise RuntimeError(f"the response failed: {json.dumps(event)[:500]}")
        usage = event["response"].get("usage") or {}
        now = time.perf_counter()
        tokens = usage["input_tokens"], usage["output_tokens"]
        return Sample(now - self.started, self.first - self.started, *tokens, self.early)


async def sse_events(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    async with http.stream("POST", f"{url}/v1/responses", json=body | {"stream": True}) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status_code}: {(await resp.aread())[:500]!r}")
        async for line in resp.aiter_lines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                yield json.loads(line[5:])


async def over_sse(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> Sample:
    timer = Timer()
    async for event in sse_events(http, url, body):
        if (sample := timer.event(event)) is not None:
            return sample
    raise RuntimeError(f"{url}: the stream ended without a terminal event")


async def over_ws(ws: Any, body: dict[str, Any]) -> Sample:
    timer = Timer()
    await ws.send(json.dumps({"type": "response.create", **body}))
    async for frame in ws:
        if (sample := timer.event(json.loads(frame))) is not None:
            return sample
    raise RuntimeError("the WebSocket closed without a terminal event")


Send = Callable[[int], Awaitable[Sample]]
"""One request of a path by client `i` (its own WebSocket connection, for that path)."""


@dataclass
class Path:
    samples: list[Sample] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)  # by process: CPU seconds spent while this path ran


async def interleaved(paths: dict[str, Send], clients: int, rounds: int, pids: dict[str, int]) -> dict[str, Path]:
    """`rounds` rounds; in each, every path in turn serves `clients` requests at once, and the CPU time each
    of `pids` spent meanwhile is counted to it."""
    runs = {name: Path(cpu_s=dict.fromkeys(pids, 0.0)) for name in paths}
    for _ in range(rounds):
        for name, send in paths.items():
            before = {p: cpu_seconds(pid) for p, pid in pids.items()}
            runs[name].samples += await asyncio.gather(*(send(i) for i in range(clients)))
            for p, pid in pids.items():
                runs[name].cpu_s[p] += cpu_seconds(pid) - before[p]
    return runs


def pct(values: list[float], q: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, len(ordered) * q // 100)]


def row(name: str, run: Path, base: list[Sample] | None) -> dict[str, Any]:
    samples = run.samples
    ms = [s.seconds * 1000 for s in samples]
    ttft = [s.ttft * 1000 for s in samples]
    out: dict[str, Any] = {
        "name": name,
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(pct(ms, 99), 1),
        "ttft_p50_ms": round(statistics.median(ttft), 1),
        "ttft_p99_ms": round(pct(ttft, 99), 1),
        "n": len(samples),
        "output_tokens": round(statistics.mean(s.output_tokens for s in samples), 2),
        "input_tokens": round(statistics.mean(s.input_tokens for s in samples), 1),
        "output_before_end": round(statistics.mean(s.early for s in samples), 2),
        **{f"{p}_cpu_ms_per_response": round(cpu * 1000 / len(samples), 2) for p, cpu in run.cpu_s.items()},
    }
    if base is not None:
        out["p50_vs_vllm_x"] = round(statistics.median(ms) / statistics.median(s.seconds * 1000 for s in base), 4)
        base_ttft = statistics.median(s.ttft * 1000 for s in base)
        out["ttft_p50_vs_vllm_x"] = round(statistics.median(ttft) / base_ttft, 4)
    return out


async def measure(
    vllm: str, ours: str, model: str, pids: dict[str, int], args: argparse.Namespace
) -> list[dict[str, Any]]:
    body = {"model": model, "input": "Say hello.", "max_output_tokens": args.tokens, "temperature": 0}
    body |= {"store": False, "reasoning": {"effort": "low"}}
    rows: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=32)) as http,
        contextlib.AsyncExitStack() as stack,
    ):
        ws_url = ours.replace("http://", "ws://") + "/v1/responses"
        sockets = [await stack.enter_async_context(websockets.connect(ws_url)) for _ in range(8)]
        paths: dict[str, Send] = {
            PATHS[0]: lambda i: over_sse(http, vllm, body),
            PATHS[1]: lambda i: over_sse(http, ours, body),
            PATHS[2]: lambda i: over_ws(sockets[i], body),
        }
        await interleaved(paths, 8, 1, pids)  # warm-up: connections, the engine's batch shapes
        for clients, rounds in ((1, args.reps), (8, args.reps_concurrent)):
            runs = await interleaved(paths, clients, rounds, pids)
            base = runs[PATHS[0]].samples
            for name in PATHS:
                rows.append(row(f"{name}, concurrency {clients}", runs[name], None if name == PATHS[0] else base))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    with vllm_server() as worker:
        orchestrator = ["-m", "toolkit.cli", "orchestrator", "--worker-urls", json.dumps([worker.base_url])]
        with running_service([*orchestrator, "--store-path", ":memory:", "--log-level", "WARNING"]) as ours:
            pids = {"vllm_api_server": worker.proc.pid, "orchestrator": ours.proc.pid}
            rows = asyncio.run(measure(worker.base_url, ours.url, worker.model, pids, args))
    print_rows(rows, width=44)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"({time.perf_counter() - started:.0f} s in all; load average {load} on {os.cpu_count()} cores)")
    save(args.out, rows, worker="vLLM 0.32 CPU, tiny gpt-oss, dummy weights", max_output_tokens=args.tokens)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
