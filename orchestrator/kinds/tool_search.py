"""`tool_search` run by the client (`execution: "client"`, as Codex sends it): the model is shown it as the
function `tool_search` with the request's parameters; its call is a `tool_search_call` item for the client,
whose `tool_search_output` comes back as what the model reads (the tools found, as JSON). Those tools become
callable when the client lists them in a later request's `tools`, as Codex does. Server-side execution (a
search over deferred tools here) is refused: this server holds no tool catalogue."""

from __future__ import annotations

import json
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.base import DESCRIBED, EchoContext, Field, Kind, Parsing, Stream, tool_args
from orchestrator.request.params import HONOURED
from orchestrator.request.schema import Toolset
from orchestrator.responses.events import new_id
from orchestrator.responses.run import Run

NAME = "tool_search"
RECIPIENT = f"functions.{NAME}"


class ToolSearchStream(Stream):
    def __init__(self, r: Run) -> None:
        item = {
            "id": new_id("ts"),
            "type": "tool_search_call",
            "call_id": new_id("call"),
            "arguments": {},
            "execution": "client",
            "status": "in_progress",
        }
        super().__init__(r, r.builder.add_item(item))

    def close(self, msg: Message | None, *, complete: bool = True) -> None:
        args, err = tool_args(h.text_of(msg) if msg is not None else "")
        done = complete and err is None
        if done:
            self.r.tools.calls[self.item.get("call_id")] = RECIPIENT
        self.item.finish("completed" if done else "incomplete", arguments=args or {})


class ToolSearchKind(Kind):
    tool_types = ("tool_search",)
    echoes = ("tool_search_call", "tool_search_output")
    executed = False
    fields = {
        "description": DESCRIBED,
        "execution": Field(HONOURED, "`client` only (a 400 otherwise)"),
        "parameters": Field(HONOURED, "the search function's JSON schema, shown to the model"),
    }

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        if tool.get("execution", "server") != "client":
            message = "tool_search runs on the client here (execution 'client'): this server holds no deferred tools"
            raise RequestError(message, f"{where}.execution")
        if NAME in {f["name"] for f in out.functions}:
            raise RequestError(f"a function named {NAME!r} and a tool_search tool cannot be combined", where)
        out.shown[NAME] = {
            "name": NAME,
            "description": tool.get("description") or "Search for tools.",
            "parameters": tool.get("parameters"),
        }

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "functions" and fn == NAME and NAME in toolset.shown

    def stream(self, r: Run, ns: str, fn: str) -> Stream | None:
        return ToolSearchStream(r)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        if item.get("type") == "tool_search_call":
            if item.get("call_id"):
                ctx.calls[item["call_id"]] = RECIPIENT
            return [h.assistant(json.dumps(item.get("arguments") or {}), "commentary", RECIPIENT, "json")]
        return [h.tool_result(RECIPIENT, json.dumps(item.get("tools") or []))]
