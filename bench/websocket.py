"""An agent loop of 20 client tool calls over Responses WebSocket mode against the same loop over HTTP SSE.

Each loop: a request that makes the model call the client function `step`; the client answers each call
with a `function_call_output` continuing the previous response (`previous_response_id`), 20 times, then the
model answers. Time per turn is from sending the request to its terminal event. The worker is the SCRIPTED
stand-in (its choices are scripted, everything else is real: orchestrator over loopback HTTP / WebSocket,
SQLite store); both transports run against the same orchestrator in the same run, alternating loops.
The worker and the orchestrator are processes of their own, so the orchestrator's CPU time per turn (its
process's user + system time over a loop, from /proc) is measured apart from the client's and the worker's:
on a loaded machine wall time swings with the neighbours, CPU time much less.
Usage: python -m bench.websocket [--loops 5] [--calls 20] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "orchestrator"))

import openai  # noqa: E402
from test_fleet import _port, _process  # noqa: E402

from bench.report import cpu_seconds, print_values, save  # noqa: E402

STEP = {
    "type": "function",
    "name": "step",
    "description": "Do the next step.",
    "parameters": {"type": "object", "properties": {"i": {"type": "integer"}}},
}
CALL = '<|channel|>commentary to=functions.step <|constrain|>json<|message|>{"i":1}<|call|>'
RULES = [
    {"match": "functions.step to=assistant.*all done", "reply": "<|channel|>final<|message|>Finished.<|return|>"},
    {"match": "functions.step to=assistant|begin", "reply": CALL},
]
TERMINAL = ("response.completed", "response.failed", "response.incomplete", "error")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.websocket")
    p.add_argument("--loops", type=int, default=5, help="agent loops per transport")
    p.add_argument("--calls", type=int, default=20, help="tool calls per loop")
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def _output(final: dict[str, Any], i: int, calls: int) -> list[dict[str, Any]]:
    call = next((o for o in final["output"] if o["type"] == "function_call"), None)
    if call is None:  # e.g. the worker was unreachable: say so rather than stop on a bare StopIteration
        raise RuntimeError(f"turn {i}: no function call in a {final['status']} response: {final.get('error')}")
    text = "all done" if i == calls else f"ok {i}"
    return [{"type": "function_call_output", "call_id": call["call_id"], "output": text}]


RETRIES = {"sse": 0}
"""Turns that had to wait for the previous response to be stored: an SSE stream's terminal event can come
before the store write, so `previous_response_id` may briefly be 404 (a WebSocket connection keeps it)."""


async def _sse_turn(client: openai.AsyncOpenAI, request: dict[str, Any]) -> dict[str, Any]:
    while True:
        try:
            stream = await client.responses.create(model="m", tools=[STEP], stream=True, **request)
            break
        except openai.NotFoundError:
            RETRIES["sse"] += 1
            await asyncio.sleep(0.005)
    async for event in stream:
        if event.type in TERMINAL:
            final = event.response.model_dump(mode="json")
    return final


async def sse_loop(client: openai.AsyncOpenAI, calls: int) -> list[float]:
    turns, request = [], {"input": "begin"}
    for i in range(calls + 1):
        started = time.perf_counter()
        final = await _sse_turn(client, request)
        turns.append(time.perf_counter() - started)
        if i < calls:
            request = {"input": _output(final, i + 1, calls), "previous_response_id": final["id"]}
    assert final["output"][-1]["type"] == "message", final
    return turns


async def ws_loop(client: openai.AsyncOpenAI, calls: int) -> list[float]:
    turns, request = [], {"input": "begin"}
    async with client.responses.connect() as conn:
        for i in range(calls + 1):
            started = time.perf_counter()
            await conn.response.create(model="m", tools=[STEP], **request)
            async for event in conn:
                if event.type in TERMINAL:
                    final = json.loads(event.to_json())["response"]
                    break
            turns.append(time.perf_counter() - started)
            if i < calls:
                request = {"input": _output(final, i + 1, calls), "previous_response_id": final["id"]}
    assert final["output"][-1]["type"] == "message", final
    return turns


@contextlib.contextmanager
def _fleet(calls: int) -> Iterator[tuple[str, int]]:
    """The scripted worker and the orchestrator as processes; yields the orchestrator's URL and pid."""
    w, o = _port(), _port()
    with tempfile.TemporaryDirectory(prefix="bench-websocket-") as tmp:
        scenario = Path(tmp) / "scenario.json"
        scenario.write_text(json.dumps({"rules": RULES}))
        worker = ["-m", "orchestrator.worker", "--scripted", "--port", str(w), "--scenario", str(scenario)]
        orchestrator = ["-m", "orchestrator", "--port", str(o), "--worker-urls", f'["http://127.0.0.1:{w}"]']
        orchestrator += ["--store-path", ":memory:", "--max-tool-calls", str(calls + 8)]
        quiet = ["--log-level", "WARNING"]
        with (
            _process([*worker, *quiet], f"http://127.0.0.1:{w}/health"),
            _process([*orchestrator, *quiet], f"http://127.0.0.1:{o}/healthz") as proc,
        ):
            yield f"http://127.0.0.1:{o}", proc.pid


async def _measured(loop: Callable[[], Awaitable[list[float]]], pid: int) -> tuple[list[float], float]:
    """One loop's turn times and the orchestrator's CPU seconds per turn over it."""
    before = cpu_seconds(pid)
    turns = await loop()
    return turns, (cpu_seconds(pid) - before) / len(turns)


def _row(name: str, loops: list[tuple[list[float], float]]) -> dict[str, Any]:
    turns = sorted(t for loop, _ in loops for t in loop)
    p99 = turns[min(len(turns) - 1, len(turns) * 99 // 100)]
    return {
        "name": name,
        "value": round(statistics.median(turns) * 1000, 2),
        "unit": "ms per turn p50",
        "p99_ms": round(p99 * 1000, 2),
        "cpu_ms_per_turn": round(statistics.median(cpu for _, cpu in loops) * 1000, 2),
        "loop_p50_ms": round(statistics.median(sum(lp) for lp, _ in loops) * 1000, 1),
        "turns": len(turns),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    with _fleet(args.calls) as (url, pid):
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0)

        async def run() -> tuple[list[tuple[list[float], float]], list[tuple[list[float], float]]]:
            await sse_loop(client, 2)  # warm both paths
            await ws_loop(client, 2)
            sse, ws = [], []
            for _ in range(args.loops):
                sse.append(await _measured(lambda: sse_loop(client, args.calls), pid))
                ws.append(await _measured(lambda: ws_loop(client, args.calls), pid))
            return sse, ws

        sse, ws = asyncio.run(run())
    rows = [
        _row(f"{args.calls}-call agent loop over HTTP SSE (baseline)", sse),
        _row(f"{args.calls}-call agent loop over WebSocket", ws),
    ]
    rows[0]["retried_turns"] = RETRIES["sse"]
    for what, key, unit in (("time", "value", "p50"), ("orchestrator CPU", "cpu_ms_per_turn", "median of loops")):
        ratio = round(rows[1][key] / rows[0][key], 3) if rows[0][key] else None
        rows.append({"name": f"WebSocket / SSE, {what} per turn ({unit})", "value": ratio, "unit": "ratio"})
    save(args.out, rows)
    print_values(rows, width=60, value_width=9)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
