"""`code_interpreter_call` items: the `python` tool; the code streams into the item as the model writes it."""

from __future__ import annotations

import json
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.containers import MEMORY_LIMITS
from orchestrator.errors import RequestError
from orchestrator.kinds.base import DIRECT_ONLY, EchoContext, Field, Kind, Parsing, Stream, ToolStream, tool_args
from orchestrator.request.params import HONOURED
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.events import Item, new_id
from orchestrator.responses.run import Run
from orchestrator.tools import ToolOutcome

_CHAT_PARAMETERS = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "Python source to run in the stateful session"}},
    "required": ["code"],
}


class CodeStream(ToolStream):
    delta_event = "response.code_interpreter_call_code.delta"
    done_event = "response.code_interpreter_call_code.done"
    field = "code"

    def __init__(self, r: Run) -> None:
        item = {
            "id": new_id("ci"),
            "type": "code_interpreter_call",
            "code": "",
            "container_id": space.container_id if (space := r.workspaces.get("python")) is not None else "auto",
            "outputs": None,
            "status": "in_progress",
        }
        super().__init__(r, r.builder.add_item(item))
        self.item.event("response.code_interpreter_call.in_progress")


class CodeInterpreterKind(Kind):
    """Harmony's python tool takes the code itself; on the chat path it is a function `python({code})`."""

    tool_types = ("code_interpreter",)
    echoes = ("code_interpreter_call",)
    namespaces = ("python",)
    sandboxed = True

    fields = {
        "container": Field(HONOURED, '`{"type": "auto"}` (a container id or file_ids: 400, see below)'),
        "allowed_callers": DIRECT_ONLY,
    }

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        if (spec := tool.get("container")) is not None:
            _check_container(spec, where)
            out.containers["python"] = (f"{where}.container", spec)
        out.builtins.setdefault("python", {})

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        return (
            Requirement("python", "<|channel|>analysis to=python", exact=True) if "python" in tools.builtins else None
        )

    def echo_tool(self, tool: dict[str, Any]) -> dict[str, Any]:
        return {**tool, "container": tool.get("container", {"type": "auto"})}

    def fallback(self, ns: str) -> h.Namespace:
        return h.Namespace(ns, h.SystemContent.new().with_python_tool().tools["python"].description)

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "python" and "python" in toolset.builtins

    def stream(self, r: Run, ns: str, fn: str) -> Stream | None:
        return CodeStream(r)

    def arguments(self, r: Run, msg: Message, ns: str, fn: str) -> tuple[dict[str, Any], str | None]:
        return {"code": h.text_of(msg)}, None  # Harmony's python takes the code itself

    def function(self, fn: str) -> str:
        return "python"

    def begin(self, r: Run, msg: Message, ns: str, fn: str, args: dict[str, Any], stream: Stream | None) -> Item:
        if stream is None:
            stream = CodeStream(r)
            stream.item.event("response.code_interpreter_call_code.done", code=args["code"])
        stream.item.update(code=args["code"], status="interpreting")
        stream.item.event("response.code_interpreter_call.interpreting")
        return stream.item

    def end(self, r: Run, item: Item, fn: str, outcome: ToolOutcome) -> None:
        outputs: list[dict[str, Any]] = [{"type": "logs", "logs": outcome.text}] if outcome.text else []
        outputs += [{"type": "image", "url": url} for url in outcome.images]
        if (space := r.workspaces.get("python")) is not None:
            outputs += space.images(outcome.files, r.public_url)
        status = "failed" if outcome.is_error else "completed"
        item.finish(status, "response.code_interpreter_call.completed", outputs=outputs)

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        logs = "".join(o.get("logs", "") for o in item.get("outputs") or [] if o.get("type") == "logs")
        return [
            h.assistant(str(item.get("code") or ""), "analysis", "python"),
            h.tool_result("python", logs, "analysis"),
        ]

    def chat_functions(self, ns: h.Namespace) -> list[dict[str, Any]]:
        return [{"name": "", "description": ns.description, "parameters": _CHAT_PARAMETERS}]

    def chat_arguments(self, msg: Message) -> str:
        return h.text_of(msg) if msg.content_type == "json" else json.dumps({"code": h.text_of(msg)})

    def from_chat(self, recipient: str, arguments: str) -> tuple[Message, str | None]:
        args, err = tool_args(arguments)
        code = (args or {}).get("code")
        if isinstance(code, str):
            return h.assistant(code, "analysis", "python"), None
        return h.assistant(arguments, "analysis", "python", "json"), err or "Error: python needs `code`, a string."


def _check_container(spec: Any, where: str) -> None:
    """A code_interpreter's `container`: a container id, or `auto` (with the caller's `file_ids` and a
    `memory_limit`); the service resolves it once the caller is known (`workspace.resolve`)."""
    if isinstance(spec, str):
        if not spec.startswith("cntr_"):
            raise RequestError(f"No such Container: {spec}", f"{where}.container", 404, "not_found")
        return
    if not isinstance(spec, dict) or spec.get("type") != "auto":
        raise RequestError('container must be a container id or {"type": "auto"}', f"{where}.container")
    if unknown := sorted(set(spec) - {"type", "file_ids", "memory_limit", "network_policy"}):
        raise RequestError(f"unknown container field(s): {', '.join(unknown)}", f"{where}.container")
    ids = spec.get("file_ids")
    if ids is not None and not (isinstance(ids, list) and len(ids) <= 100 and all(isinstance(i, str) for i in ids)):
        raise RequestError("file_ids must be a list of at most 100 file ids", f"{where}.container.file_ids")
    if spec.get("memory_limit") is not None and spec["memory_limit"] not in MEMORY_LIMITS:
        message = f"memory_limit must be one of {', '.join(MEMORY_LIMITS)}"
        raise RequestError(message, f"{where}.container.memory_limit")
    if (spec.get("network_policy") or {"type": "disabled"}) != {"type": "disabled"}:
        raise RequestError(
            "the python sandbox has no network: only network_policy disabled", f"{where}.container.network_policy"
        )
