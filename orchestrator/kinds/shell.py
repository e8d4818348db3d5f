"""`shell_call` / `shell_call_output` items: `container.exec` when the client sent a shell tool (else
those calls are `mcp_call`s). Both render back as the exec call and its result."""

from __future__ import annotations

import json
import shlex
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.events import new_id
from orchestrator.kinds.base import EchoContext, Kind, Parsing, Stream, invoke, rejected, tool_args
from orchestrator.run import Run
from orchestrator.schema import RequestError, Toolset
from orchestrator.tools import ToolOutcome

# The container contract (DESIGN.md), offered on the chat path when the container server cannot be listed.
_CONTAINER_EXEC = {
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


class ShellKind(Kind):
    """Also the container namespace's chat functions (with or without a shell tool: the same contract)."""

    tool_types = ("shell",)
    echoes = ("shell_call", "shell_call_output")
    namespaces = ("container",)

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        env = (tool.get("environment") or {}).get("type") if isinstance(tool.get("environment"), dict) else None
        if env not in (None, "container_auto"):
            message = f"shell environment {env!r} is not supported: commands run in the container tool"
            raise RequestError(message + " (environment container_auto)", f"{where}.environment")
        out.shell_for_container = True  # container.exec calls come out as shell_call items
        out.builtins.setdefault("container", {})

    def fallback(self, ns: str) -> h.Namespace:
        return h.Namespace(ns, "Run commands in a persistent container (currently unavailable).")

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "container" and fn == "exec" and "container" in toolset.builtins and toolset.shell_for_container

    async def call(self, r: Run, msg: Message, ns: str, fn: str, stream: Stream | None) -> ToolOutcome:
        b = r.builder
        args, err = tool_args(h.text_of(msg))
        cmd = (args or {}).get("cmd")
        if err is None and not (isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd)):
            err = "Error: container.exec needs `cmd`, a non-empty list of strings."
        command = shlex.join(cmd) if err is None else h.text_of(msg)
        timeout = (args or {}).get("timeout")
        call_id = new_id("call")
        timeout_ms = int(timeout * 1000) if isinstance(timeout, int | float) else None
        action = {"commands": [command], "timeout_ms": timeout_ms, "max_output_length": None}
        index = b.add_item(
            {
                "id": new_id("sh"),
                "type": "shell_call",
                "call_id": call_id,
                "action": action,
                "status": "in_progress",
                "environment": None,
            }
        )
        b.emit("response.shell_call_command.added", output_index=index, command_index=0, command="")
        b.emit("response.shell_call_command.delta", output_index=index, command_index=0, delta=command)
        b.emit("response.shell_call_command.done", output_index=index, command_index=0, command=command)
        b.output[index]["status"] = "completed"
        b.done_item(index)
        outcome = rejected(err) if err else await invoke(r, "container", "exec", args or {})
        result = _output(outcome)
        index = b.add_item(
            {
                "id": new_id("sho"),
                "type": "shell_call_output",
                "call_id": call_id,
                "output": [],
                "status": "in_progress",
                "max_output_length": None,
            }
        )
        delta = {k: result[k] for k in ("stdout", "stderr") if result[k]}
        if delta:
            b.item_event(index, "response.shell_call_output_content.delta", command_index=0, delta=delta)
        b.item_event(index, "response.shell_call_output_content.done", command_index=0, output=[result])
        b.output[index].update(output=[result], status="completed")
        b.done_item(index)
        r.tools.results[b.output[index]["id"]] = outcome.text
        return outcome

    def chat_functions(self, ns: h.Namespace) -> list[dict[str, Any]]:
        return list(ns.tools) or [_CONTAINER_EXEC]

    def echo(self, item: dict[str, Any], where: str, ctx: EchoContext) -> list[Message]:
        if item.get("type") == "shell_call_output":
            chunks = item.get("output") or []
            text = "".join(
                str(c.get("stdout") or "") + str(c.get("stderr") or "") for c in chunks if isinstance(c, dict)
            )
            return [h.tool_result("container.exec", text)]
        commands = (item.get("action") or {}).get("commands") or []
        if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
            raise RequestError("shell_call items need action.commands, a list of strings", where)
        out = []
        for command in commands:  # exec form, as the model wrote it: {"cmd": [...]}
            try:
                cmd = shlex.split(command)
            except ValueError:
                cmd = ["bash", "-lc", command]
            out.append(h.assistant(json.dumps({"cmd": cmd}), "commentary", "container.exec", "json"))
        return out


def _output(outcome: ToolOutcome) -> dict[str, Any]:
    """One `shell_call_output` chunk: the server's structured {stdout, stderr, exit_code, timed_out} when it
    sends one, else the text as stdout (exit 0) or, for a failed call, as stderr (exit 1)."""
    s = outcome.structured or {}
    if isinstance(s.get("stdout"), str) or isinstance(s.get("exit_code"), int):
        timed_out = bool(s.get("timed_out"))
        code = s.get("exit_code") if isinstance(s.get("exit_code"), int) else (1 if outcome.is_error else 0)
        return {
            "stdout": str(s.get("stdout") or ""),
            "stderr": str(s.get("stderr") or ""),
            "outcome": {"type": "timeout"} if timed_out else {"type": "exit", "exit_code": code},
        }
    if outcome.is_error:
        return {"stdout": "", "stderr": outcome.text, "outcome": {"type": "exit", "exit_code": 1}}
    return {"stdout": outcome.text, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
