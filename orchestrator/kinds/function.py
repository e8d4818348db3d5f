"""`function_call` items: calls of the client's own functions (`functions.NAME`; a `namespace` tool's
functions are `NS.NAME` and their items carry `namespace`, `kinds/namespace.py`), returned to the client,
which sends the result back as a `function_call_output` item."""

from __future__ import annotations

import json
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.base import (
    DESCRIBED,
    DIRECT_ONLY,
    NOT_DEFERRED,
    EchoContext,
    Field,
    Kind,
    Parsing,
    Stream,
    tool_args,
)
from orchestrator.request.params import HONOURED, NO_OP, REFUSED
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.events import new_id
from orchestrator.responses.run import Run


class FunctionStream(Stream):
    delta_event = "response.function_call_arguments.delta"
    shows_arguments = True

    def __init__(self, r: Run, name: str, namespace: str | None = None) -> None:
        item = {"id": new_id("fc"), "type": "function_call", "call_id": new_id("call"), "name": name, "arguments": ""}
        if namespace is not None:
            item["namespace"] = namespace
        super().__init__(r, r.builder.add_item({**item, "status": "in_progress"}))

    def close(self, msg: Message | None, *, complete: bool = True) -> None:
        item, text = self.item, h.text_of(msg) if msg is not None else ""
        status = "completed" if complete else "incomplete"
        item.event("response.function_call_arguments.done", arguments=text, name=item.get("name"))
        if complete and self.r.turn.json_retries > 0 and tool_args(text)[1] is not None:
            status = "incomplete"  # invalid JSON: the model is told and writes the call again (`turns.run`)
        if status == "completed":
            self.r.tools.calls[item.get("call_id")] = f"{item.get('namespace') or 'functions'}.{item.get('name')}"
        item.finish(status, arguments=text)


NOT_ASYNC = Field(REFUSED, "a client call ends the response; its output comes back in the next request")


class FunctionKind(Kind):
    tool_types = ("function",)
    echoes = ("function_call", "function_call_output")
    executed = False
    fields = {
        "name": Field(HONOURED, "what the model calls it by"),
        "description": DESCRIBED,
        "parameters": Field(HONOURED, "its JSON schema, shown to the model"),
        "strict": Field(
            NO_OP, "echoed; arguments are not decoded under the schema (invalid JSON goes back to the model)"
        ),
        "allowed_callers": DIRECT_ONLY,
        "async": NOT_ASYNC,
        "defer_loading": NOT_DEFERRED,
        "output_schema": Field(REFUSED, "the model is not shown what a function returns"),
    }

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise RequestError("function tools need a name", f"{where}.name")
        out.functions.append(tool)

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        name = choice.get("name")
        if name not in {f["name"] for f in tools.functions}:
            raise RequestError(f"tool_choice names function {name!r}, which is not in tools", "tool_choice")
        return Requirement(f"functions.{name}", f"<|channel|>commentary to=functions.{name}", exact=True)

    def echo_tool(self, tool: dict[str, Any]) -> dict[str, Any]:
        parameters = tool.get("parameters", {"type": "object", "properties": {}})
        return {**tool, "parameters": parameters, "strict": tool.get("strict", False)}

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "functions"

    def stream(self, r: Run, ns: str, fn: str) -> Stream | None:
        return FunctionStream(r, fn)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        if item.get("type") == "function_call":
            name, call_id = item.get("name"), item.get("call_id")
            if not name or not call_id:
                raise RequestError("function_call items need name and call_id", where)
            ctx.calls[call_id] = recipient = f"{item.get('namespace') or 'functions'}.{name}"
            return [h.assistant(str(item.get("arguments", "")), "commentary", recipient, "json")]
        call_id = item.get("call_id")
        if call_id not in ctx.calls:
            raise RequestError(f"no function call with call_id {call_id!r} in this conversation", f"{where}.call_id")
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        recipient = ctx.calls[call_id]  # `ns.name`; a bare name in conversations stored before namespaces
        return [h.tool_result(recipient if "." in recipient else f"functions.{recipient}", text)]
