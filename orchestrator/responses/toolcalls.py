"""Running the built-in and MCP calls the model wrote: each by the kind that claims its recipient
(`kinds/`), within the response's `max_tool_calls`. Failures, bad arguments, unknown recipients and the
limit become tool messages the model reads; the loop goes on. Each call run is told to the replica's feed
of tool calls (`callfeed`), which the console streams."""

from __future__ import annotations

import time

from orchestrator.kinds import classify
from orchestrator.kinds.base import answer, rejected
from orchestrator.responses.run import Call, Run

LIMIT_REACHED = "Error: the tool-call limit of this response is reached; answer now without tools."


def sort(r: Run, calls: list[Call]) -> tuple[list[Call], list[Call], list[Call]]:
    """Classify each call once: (calls run here, calls the client runs (functions), calls past the limit)."""
    here: list[Call] = []
    functions: list[Call] = []
    ignored: list[Call] = []
    for c in calls:
        c.kind, c.ns, c.fn = classify(r.toolset, c.msg.recipient or "")
        client_runs = c.kind is not None and not c.kind.executed
        (ignored if not c.admitted else functions if client_runs else here).append(c)
    return here, functions, ignored


async def call(r: Run, c: Call) -> bool:
    """Run one admitted, classified call; False when the response must stop for an approval."""
    recipient = c.msg.recipient or ""
    started = time.perf_counter()
    if c.kind is None:
        known = sorted([*r.toolset.builtins, *r.toolset.mcp]) + (["functions"] if r.toolset.functions else [])
        outcome = rejected(f"Error: unknown tool `{recipient}`. Available namespaces: {', '.join(known) or 'none'}.")
    elif (result := await c.kind.call(r, c.msg, c.ns, c.fn, c.stream)) is None:
        return False
    else:
        outcome = result
    if c.stream is not None:
        c.stream.abandon()  # an item no kind finished (its call was refused before a kind ran it) failed
    ns = c.ns if c.kind is not None else "unknown"
    r.tools.log.append((ns, outcome.kind))
    if r.feed is not None:
        r.feed.record(ns, c.fn or recipient, started, outcome.kind, r.builder.id)
    answer(r, recipient, outcome.text, c.msg.channel)
    return True


def refuse(r: Run, c: Call) -> None:
    """A call past `max_tool_calls`: not run and not an output item; only the model reads the refusal."""
    if c.kind is None or c.kind.executed:  # client functions are not in the tool-call metrics
        r.tools.log.append((c.ns if c.kind is not None else "unknown", "rejected"))
    answer(r, c.msg.recipient or "", LIMIT_REACHED, c.msg.channel)
