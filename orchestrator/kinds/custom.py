"""`custom` tools: client tools whose input is free text (`custom_tool_call` items, their input streamed as
`response.custom_tool_call_input.delta` events), optionally bound by a `lark` or `regex` grammar.

The model is shown each as a function of the `functions` namespace that takes plain text, and addresses
`functions.NAME`. A grammar is enforced by the worker's structured decoding: when the model heads for the
tool, that generation is aborted and the call is written again with its header prefilled and vLLM's
`structured_outputs` (`grammar` / `regex`) as the constraint (`turns._constrained_call`), as tool_choice
prefills. The client runs the call and sends a `custom_tool_call_output` back."""

from __future__ import annotations

import json
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.base import DESCRIBED, DIRECT_ONLY, NOT_DEFERRED, EchoContext, Field, Kind, Parsing, Stream
from orchestrator.kinds.function import NOT_ASYNC
from orchestrator.request.params import HONOURED
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.events import new_id
from orchestrator.responses.run import Run

FREEFORM = " (Freeform: write the input as plain text, not JSON.)"


def constraint(tool: dict[str, Any]) -> dict[str, Any] | None:
    """A custom tool's grammar as vLLM `structured_outputs`; None: free text."""
    fmt = tool.get("format") or {"type": "text"}
    if fmt.get("type") == "grammar":
        key = {"lark": "grammar", "regex": "regex"}[fmt["syntax"]]
        return {key: fmt["definition"]}
    return None


class CustomStream(Stream):
    delta_event = "response.custom_tool_call_input.delta"

    def __init__(self, r: Run, name: str) -> None:
        item = {"id": new_id("ctc"), "type": "custom_tool_call", "call_id": new_id("call"), "name": name, "input": ""}
        super().__init__(r, r.builder.add_item(item))

    @property
    def in_progress(self) -> bool:
        return self.item.open

    def close(self, msg: Message | None, *, complete: bool = True) -> None:
        text = h.text_of(msg) if msg is not None else ""
        self.item.event("response.custom_tool_call_input.done", input=text)
        self.r.tools.calls[self.item.get("call_id")] = f"functions.{self.item.get('name')}"
        self.item.finish(None, input=text)


class CustomKind(Kind):
    tool_types = ("custom",)
    echoes = ("custom_tool_call", "custom_tool_call_output")
    executed = False
    json_arguments = False
    fields = {
        "name": Field(HONOURED, "what the model calls it by"),
        "description": DESCRIBED,
        "format": Field(HONOURED, "text, or a lark / regex grammar enforced by structured decoding"),
        "allowed_callers": DIRECT_ONLY,
        "async": NOT_ASYNC,
        "defer_loading": NOT_DEFERRED,
    }

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        name = tool.get("name")
        if not isinstance(name, str) or not name or name in {f["name"] for f in out.functions}:
            raise RequestError("custom tools need a name no function of this request has", f"{where}.name")
        fmt = tool.get("format") or {"type": "text"}
        if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "grammar"):
            raise RequestError("custom tool format must be text or grammar", f"{where}.format")
        if fmt["type"] == "grammar" and (
            fmt.get("syntax") not in ("lark", "regex") or not isinstance(fmt.get("definition"), str)
        ):
            raise RequestError("a grammar needs syntax lark or regex and a definition", f"{where}.format")
        out.custom[name] = tool

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        name = choice.get("name")
        if name not in tools.custom:
            raise RequestError(f"tool_choice names custom tool {name!r}, which is not in tools", "tool_choice")
        return Requirement(f"functions.{name}", f"<|channel|>commentary to=functions.{name}", exact=True)

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "functions" and fn in toolset.custom

    def stream(self, r: Run, ns: str, fn: str) -> Stream | None:
        return CustomStream(r, fn)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        if item.get("type") == "custom_tool_call":
            name, call_id = item.get("name"), item.get("call_id")
            if not name or not call_id:
                raise RequestError("custom_tool_call items need name and call_id", where)
            ctx.calls[call_id] = f"functions.{name}"
            return [h.assistant(str(item.get("input") or ""), "commentary", f"functions.{name}")]
        call_id = item.get("call_id")
        if call_id not in ctx.calls:
            raise RequestError(f"no custom tool call with call_id {call_id!r} in this conversation", f"{where}.call_id")
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        return [h.tool_result(ctx.calls[call_id], text)]


def shown(tool: dict[str, Any]) -> dict[str, Any]:
    """A custom tool as the model is shown it: a function taking plain text."""
    return {"name": tool["name"], "description": (tool.get("description") or "") + FREEFORM, "parameters": None}
