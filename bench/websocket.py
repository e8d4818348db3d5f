"""An agent loop of 20 client tool calls over Responses WebSocket mode against the same loop over HTTP SSE.

Each loop: a request that makes the model call the client function `step`; the client answers each call
with a `function_call_output` continuing the previous response (`previous_response_id`), 20 times, then the
model answers. Time per turn is from sending the request to its terminal event. The worker is the SCRIPTED
stand-in (its choices are scripted, everything else is real: orchestrator over loopback HTTP / WebSocket,
SQLite store); both transports run against the same orchestrator in the same run, alternating loops.
Usage: python -m bench.websocket [--loops 5] [--calls 20] [--out results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402

from bench.report import print_values, save  # noqa: E402
from orchestrator.app import create_app  # noqa: E402
from orchestrator.settings import OrchestratorSettings  # noqa: E402
from orchestrator.store import SQLiteStore  # noqa: E402
from orchestrator.worker.scripted import Scenario, ScriptedModel  # noqa: E402
from orchestrator.worker.scripted import build_app as build_worker  # noqa: E402
from tests.support.asgi import serve_asgi  # noqa: E402

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
    call = next(o for o in final["output"] if o["type"] == "function_call")
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


def _row(name: str, loops: list[list[float]]) -> dict[str, Any]:
    turns = sorted(t for loop in loops for t in loop)
    p99 = turns[min(len(turns) - 1, len(turns) * 99 // 100)]
    return {
        "name": name,
        "value": round(statistics.median(turns) * 1000, 2),
        "unit": "ms per turn p50",
        "p99_ms": round(p99 * 1000, 2),
        "loop_p50_ms": round(statistics.median(sum(lp) for lp in loops) * 1000, 1),
        "turns": len(turns),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    model = ScriptedModel(Scenario.from_dict({"rules": RULES}))
    with serve_asgi(build_worker(model)) as worker:
        settings = OrchestratorSettings(
            worker_urls=[worker], tools_url=None, date="2026-12-02", max_tool_calls=args.calls + 8
        )
        with serve_asgi(create_app(settings, store=SQLiteStore(":memory:"))) as url:
            client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0)

            async def run() -> tuple[list[list[float]], list[list[float]]]:
                await sse_loop(client, 2)  # warm both paths
                await ws_loop(client, 2)
                sse, ws = [], []
                for _ in range(args.loops):
                    sse.append(await sse_loop(client, args.calls))
                    ws.append(await ws_loop(client, args.calls))
                return sse, ws

            sse, ws = asyncio.run(run())
    rows = [
        _row(f"{args.calls}-call agent loop over HTTP SSE (baseline)", sse),
        _row(f"{args.calls}-call agent loop over WebSocket", ws),
    ]
    rows[0]["retried_turns"] = RETRIES["sse"]
    rows.append(
        {
            "name": "WebSocket / SSE, time per turn (p50)",
            "value": round(rows[1]["value"] / rows[0]["value"], 3),
            "unit": "ratio",
        }
    )
    save(args.out, rows)
    print_values(rows, width=52, value_width=9)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
