"""Running the built-in and MCP calls the model wrote: each by the kind that claims its recipient
(`kinds/`), within the response's `max_tool_calls`. Failures, bad arguments, unknown recipients and the
limit become tool messages the model reads; the loop goes on."""

from __future__ import annotations

from openai_harmony import Message

from orchestrator.kinds import classify
from orchestrator.kinds.base import answer, rejected
from orchestrator.run import Call, Run

LIMIT_REACHED = "Error: the tool-call limit of this response is reached; answer now without tools."


async def call(r: Run, c: Call) -> bool:
    """Run one admitted call; False when the response must stop for an approval."""
    recipient = c.msg.recipient or ""
    kind, ns, fn = classify(r.toolset, recipient)
    if kind is None:
        known = sorted([*r.toolset.builtins, *r.toolset.mcp]) + (["functions"] if r.toolset.functions else [])
        outcome = rejected(f"Error: unknown tool `{recipient}`. Available namespaces: {', '.join(known) or 'none'}.")
    elif (result := await kind.call(r, c.msg, ns, fn, c.stream)) is None:
        return False
    else:
        outcome = result
    if c.stream is not None and c.stream.in_progress:  # a kind that did not finish its item: it failed
        r.builder.output[c.stream.index]["status"] = "failed"
        r.builder.done_item(c.stream.index)
    r.tools.log.append((ns if kind is not None else "unknown", outcome.kind))
    answer(r, recipient, outcome.text, c.msg.channel)
    return True


def refuse(r: Run, msg: Message) -> None:
    """A call past `max_tool_calls`: not run and not an output item; only the model reads the refusal."""
    kind, ns, _ = classify(r.toolset, msg.recipient or "")
    if kind is None or kind.executed:  # client functions are not in the tool-call metrics
        r.tools.log.append((ns if kind is not None else "unknown", "rejected"))
    answer(r, msg.recipient or "", LIMIT_REACHED, msg.channel)


def is_client_call(r: Run, msg: Message) -> bool:
    """Whether the client runs this call (a function): it is returned to the client, not run here."""
    kind = classify(r.toolset, msg.recipient or "")[0]
    return kind is not None and not kind.executed
