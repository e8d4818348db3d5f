"""`function_call` items: calls of the client's own functions (`functions.NAME`, or `NS.NAME` for a function
of a `namespace` tool, whose item carries `namespace`), returned to the client, which sends the result back
as a `function_call_output` item."""

from __future__ import annotations

import json
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.events import new_id
from orchestrator.kinds.base import EchoContext, Kind, Stream, tool_args
from orchestrator.run import Run
from orchestrator.schema import RequestError, Toolset


class FunctionStream(Stream):
    delta_event = "response.function_call_arguments.delta"
    shows_arguments = True

    def __init__(self, r: Run, name: str, namespace: str | None = None) -> None:
        item = {"id": new_id("fc"), "type": "function_call", "call_id": new_id("call"), "name": name, "arguments": ""}
        if namespace is not None:
            item["namespace"] = namespace
        super().__init__(r, r.builder.add_item({**item, "status": "in_progress"}))

    def close(self, msg: Message | None, *, complete: bool = True) -> None:
        b, text = self.r.builder, h.text_of(msg) if msg is not None else ""
        item = b.output[self.index]
        status = "completed" if complete else "incomplete"
        b.item_event(self.index, "response.function_call_arguments.done", arguments=text, name=item["name"])
        if complete and self.r.turn.json_retries > 0 and tool_args(text)[1] is not None:
            status = "incomplete"  # invalid JSON: the model is told and writes the call again (`turns.run`)
        item.update(arguments=text, status=status)
        if status == "completed":
            self.r.tools.calls[item["call_id"]] = _recipient(item)
        b.done_item(self.index)


class FunctionKind(Kind):
    echoes = ("function_call", "function_call_output")
    executed = False

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "functions" or ns in toolset.namespaces

    def stream(self, r: Run, ns: str, fn: str) -> Stream | None:
        return FunctionStream(r, fn, None if ns == "functions" else ns)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        if item.get("type") == "function_call":
            name, call_id = item.get("name"), item.get("call_id")
            if not name or not call_id:
                raise RequestError("function_call items need name and call_id", where)
            ctx.calls[call_id] = _recipient(item)
            return [h.assistant(str(item.get("arguments", "")), "commentary", ctx.calls[call_id], "json")]
        call_id = item.get("call_id")
        if call_id not in ctx.calls:
            raise RequestError(f"no function call with call_id {call_id!r} in this conversation", f"{where}.call_id")
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        recipient = ctx.calls[call_id]
        return [h.tool_result(recipient if "." in recipient else f"functions.{recipient}", text)]


def _recipient(item: dict[str, Any]) -> str:
    """What the model addressed: `functions.NAME`, or `NS.NAME` for a namespaced function."""
    return f"{item.get('namespace') or 'functions'}.{item['name']}"
