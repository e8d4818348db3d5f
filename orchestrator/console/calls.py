"""`/console/live/calls`: the finished tool calls streamed as server-sent events, which `static/live.js` adds
to the Live page's table of recent calls (without JavaScript the page shows the last ones on reload).

A stream lasts at most `STREAM_S` and says it is alive every `HEARTBEAT_S`; the browser's EventSource opens a
new one by itself (after `retry`), so no stream holds a replica's shutdown for long.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from orchestrator.callfeed import WATCHERS, CallFeed, ToolCallSeen
from orchestrator.console.parts import Parts
from orchestrator.console.render import duration, page, to

HEARTBEAT_S = 15.0
STREAM_S = 30.0


def shown(call: ToolCallSeen) -> str:
    """A call as the script reads it: its fields, with the absolute time and the latency written out."""
    stamp = datetime.fromtimestamp(call.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return json.dumps({**call.model_dump(), "when": stamp, "latency": duration(call.latency_ms / 1000)})


async def _events(feed: CallFeed) -> AsyncIterator[str]:
    with feed.watch() as queue:
        yield "retry: 3000\n\n"
        ends = time.monotonic() + STREAM_S
        while (left := ends - time.monotonic()) > 0:
            try:
                call = await asyncio.wait_for(queue.get(), min(HEARTBEAT_S, left))
            except TimeoutError:
                yield ": alive\n\n"
                continue
            yield f"event: call\ndata: {shown(call)}\n\n"


def routes(router: APIRouter, parts: Parts) -> None:
    @router.get("/console/live/calls")
    async def calls(request: Request) -> Response:
        if (session := parts.sessions.check(request)) is None:
            return to("/login")
        feed = parts.deps.service.calls
        if feed.watching >= WATCHERS:
            error = f"{WATCHERS} streams of tool calls are open on this replica already: reload later."
            return page(request, "error.html", 503, user=session, error=error)
        headers = {"x-accel-buffering": "no"}
        return StreamingResponse(_events(feed), media_type="text/event-stream", headers=headers)
