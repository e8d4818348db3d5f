"""`apply_patch` run by the client: the model asks for one file operation at a time (create, update or
delete a file, with a V4A diff), the call is an `apply_patch_call` item whose `operation` the client's
editor applies, and its `apply_patch_call_output` (status and text) is what the model reads back.

gpt-oss was not trained on a patch tool, so it is shown as the other client tools are: a function
`functions.apply_patch` in the developer message whose JSON arguments are the operation itself
(`{type, path, diff}`). The item is added once the call is complete, because an `apply_patch_call`
always carries a whole operation; a call whose arguments are not one goes back to the model as an error
(`argument_error`, retried as invalid function JSON is). Nothing is applied in the fleet."""

from __future__ import annotations

import json
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.base import DIRECT_ONLY, EchoContext, Kind, Parsing, Stream, tool_args
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.events import new_id
from orchestrator.responses.run import Run

NAME = "apply_patch"
RECIPIENT = f"functions.{NAME}"
OPERATIONS = ("create_file", "update_file", "delete_file")
FUNCTION = {
    "name": NAME,
    "description": (
        "Create, update or delete one file in the user's workspace; the user applies it and says whether it "
        "worked. `diff` is a V4A diff: for create_file every line of the new file prefixed with '+'; for "
        "update_file one or more hunks, each starting with '@@' (optionally followed by a line to anchor on), "
        "then context lines prefixed with ' ', removed lines with '-' and added lines with '+'. delete_file "
        "takes no diff. Paths are relative to the workspace."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": list(OPERATIONS)},
            "path": {"type": "string"},
            "diff": {"type": "string"},
        },
        "required": ["type", "path"],
    },
}


def operation(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The call's JSON arguments as an `operation`, or the error the model reads instead."""
    args, err = tool_args(text)
    if args is None:
        return None, err
    kind, path, diff = args.get("type"), args.get("path"), args.get("diff")
    if kind not in OPERATIONS:
        return None, f"Error: `type` must be one of {', '.join(OPERATIONS)}."
    if not isinstance(path, str) or not path:
        return None, "Error: `path` must be the file's path."
    if kind == "delete_file":
        return {"type": kind, "path": path}, None
    if not isinstance(diff, str):
        return None, f"Error: {kind} needs `diff`, a V4A diff as a string."
    return {"type": kind, "path": path, "diff": diff}, None


class ApplyPatchStream(Stream):
    """No item while the call is written: it is added, whole, once the operation is known."""

    def __init__(self, r: Run) -> None:
        self.r, self.closed = r, False

    @property
    def in_progress(self) -> bool:
        return not self.closed

    def close(self, msg: Message | None, *, complete: bool = True) -> None:
        self.closed = True
        op, _ = operation(h.text_of(msg) if msg is not None else "")
        if not complete or op is None:
            return  # cut short, or not an operation: the model is told what is wrong (`turns.run`)
        self.item = self.r.builder.add_item(
            {"id": new_id("apc"), "type": "apply_patch_call", "call_id": new_id("call"), "operation": op}
            | {"status": "in_progress"}
        )
        self.r.tools.calls[self.item.get("call_id")] = RECIPIENT
        self.item.finish("completed")


class ApplyPatchKind(Kind):
    tool_types = ("apply_patch",)
    echoes = ("apply_patch_call", "apply_patch_call_output")
    executed = False
    fields = {"allowed_callers": DIRECT_ONLY}

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        if NAME in {f["name"] for f in out.functions} or NAME in out.custom:
            raise RequestError(f"a function or custom tool named {NAME!r} and apply_patch cannot be combined", where)
        out.shown[NAME] = FUNCTION

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        if NAME not in tools.shown:
            raise RequestError("tool_choice names apply_patch, which is not in tools", "tool_choice")
        return Requirement(RECIPIENT, f"<|channel|>commentary to={RECIPIENT}", exact=True)

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "functions" and fn == NAME and NAME in toolset.shown

    def stream(self, r: Run, ns: str, fn: str) -> Stream | None:
        return ApplyPatchStream(r)

    def argument_error(self, text: str) -> str | None:
        return operation(text)[1]

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        if item.get("type") == "apply_patch_call":
            op, call_id = item.get("operation"), item.get("call_id")
            if not isinstance(op, dict) or not call_id or operation(json.dumps(op))[0] is None:
                raise RequestError("apply_patch_call items need call_id and an operation {type, path, diff}", where)
            ctx.calls[call_id] = RECIPIENT
            return [h.assistant(json.dumps(op), "commentary", RECIPIENT, "json")]
        call_id = item.get("call_id")
        if ctx.calls.get(call_id) != RECIPIENT:
            raise RequestError(f"no apply_patch call with call_id {call_id!r} in this conversation", f"{where}.call_id")
        status = item.get("status")
        if status not in ("completed", "failed"):
            raise RequestError("apply_patch_call_output status must be completed or failed", f"{where}.status")
        output = item.get("output")
        text = f"{status}: {output}" if output else status
        return [h.tool_result(RECIPIENT, text)]
