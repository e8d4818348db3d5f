"""Shells the client runs on its own machine: `{"type": "local_shell"}` (`local_shell_call` items) and
`{"type": "shell", "environment": {"type": "local"}}` (`shell_call` items with a local environment).

The model is shown the container contract it was trained on (`container.exec{cmd: [...], ...}`, described
as the user's machine) and addresses `container.exec`; the call becomes an item for the client, whose
result comes back as `local_shell_call_output` (or `shell_call_output`, echoed by `ShellKind`) and is what
the model reads as the exec result. Nothing runs in the fleet."""

from __future__ import annotations

import json
import shlex
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.base import EchoContext, Kind, Parsing, Stream, tool_args
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.events import new_id
from orchestrator.responses.run import Run

# The container contract (DESIGN.md), offered on the chat path when the container server cannot be listed.
CONTAINER_EXEC = {
    "name": "exec",
    "description": "Run a command in this conversation's persistent container.",
    "parameters": {
        "type": "object",
        "properties": {
            "cmd": {"type": "array", "items": {"type": "string"}, "description": "program and arguments"},
            "workdir": {"type": "string"},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
            "session_name": {"type": "string"},
            "timeout": {"type": "integer", "description": "seconds"},
            "user": {"type": "string"},
        },
        "required": ["cmd"],
    },
}

DESCRIPTION = "Run commands in a shell on the user's machine; the user runs each command and returns its output."
LOCAL_EXEC = {**CONTAINER_EXEC, "description": DESCRIPTION}


MAX_TIMEOUT_S = 86_400


def _timeout_ms(seconds: Any) -> int | None:
    """The model's `timeout` as the item's `timeout_ms`: only a positive number of seconds up to a day, since the
    model writes any number (1e306 s overflowed to a crash, a negative one reached the client)."""
    usable = isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 < seconds <= MAX_TIMEOUT_S
    return int(seconds * 1000) if usable else None


def enable(out: Toolset, item_type: str, where: str) -> None:
    """A local shell for the model (`container.exec`), whose calls come out as `item_type` items."""
    if out.shell_for_container or (out.local_shell not in (None, item_type)):
        raise RequestError("one shell per request: a local shell and a container shell cannot be combined", where)
    out.local_shell = item_type
    out.namespaces["container"] = (DESCRIPTION, [LOCAL_EXEC])


class LocalShellStream(Stream):
    """The call's item, opened at its header and complete once the model has written the command."""

    def __init__(self, r: Run, item_type: str) -> None:
        self.item_type = item_type
        item = {"id": new_id("lsh"), "type": item_type, "call_id": new_id("call"), "status": "in_progress"}
        if item_type == "shell_call":
            item |= {
                "action": {"commands": [], "timeout_ms": None, "max_output_length": None},
                "environment": {"type": "local"},
            }
        else:
            item["action"] = {"type": "exec", "command": [], "env": {}}
        super().__init__(r, r.builder.add_item(item))

    def close(self, msg: Message | None, *, complete: bool = True) -> None:
        args, err = tool_args(h.text_of(msg) if msg is not None else "")
        cmd = (args or {}).get("cmd")
        if not complete or err is not None or not _is_command(cmd):
            self.item.finish("incomplete")
            return
        timeout_ms = _timeout_ms(args.get("timeout") if args else None)
        if self.item_type == "shell_call":
            command = shlex.join(cmd)
            self.item.indexed_event("response.shell_call_command.added", command_index=0, command="")
            self.item.indexed_event("response.shell_call_command.delta", command_index=0, delta=command)
            self.item.indexed_event("response.shell_call_command.done", command_index=0, command=command)
            action = {"commands": [command], "timeout_ms": timeout_ms, "max_output_length": None}
        else:
            env = args.get("env") if isinstance(args.get("env"), dict) else {}
            action = {
                "type": "exec",
                "command": cmd,
                "env": env,
                "timeout_ms": timeout_ms,
                "working_directory": args.get("workdir"),
                "user": args.get("user"),
            }
        self.r.tools.calls[self.item.get("call_id")] = "container.exec"
        self.item.finish("completed", action=action)


class LocalShellKind(Kind):
    tool_types = ("local_shell",)
    echoes = ("local_shell_call", "local_shell_call_output")
    executed = False

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        enable(out, "local_shell_call", where)

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        if tools.local_shell is None:
            return None
        return Requirement("container.exec", "<|channel|>commentary to=container.exec", exact=True)

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "container" and fn == "exec" and toolset.local_shell is not None

    def stream(self, r: Run, ns: str, fn: str) -> Stream | None:
        return LocalShellStream(r, r.toolset.local_shell or "local_shell_call")

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        if item.get("type") == "local_shell_call_output":
            return [h.tool_result("container.exec", str(item.get("output") or ""))]
        command = (item.get("action") or {}).get("command")
        if not _is_command(command):
            raise RequestError("local_shell_call items need action.command, a list of strings", where)
        return [h.assistant(json.dumps({"cmd": command}), "commentary", "container.exec", "json")]


def _is_command(cmd: Any) -> bool:
    return isinstance(cmd, list) and bool(cmd) and all(isinstance(c, str) for c in cmd)
