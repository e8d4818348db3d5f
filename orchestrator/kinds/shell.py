"""`shell_call` / `shell_call_output` items: `container.exec` when the client sent a shell tool (else
those calls are `mcp_call`s). Both render back as the exec call and its result."""

from __future__ import annotations

import json
import shlex
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds import local_shell
from orchestrator.kinds.base import DIRECT_ONLY, EchoContext, Field, Kind, Parsing, Stream
from orchestrator.kinds.local_shell import CONTAINER_EXEC
from orchestrator.request.params import HONOURED
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.events import Item, new_id
from orchestrator.responses.run import Run
from orchestrator.tools import ToolOutcome


class ShellKind(Kind):
    """Also the container namespace's chat functions (with or without a shell tool: the same contract)."""

    tool_types = ("shell",)
    echoes = ("shell_call", "shell_call_output")
    namespaces = ("container",)
    sandboxed = True

    fields = {
        "environment": Field(HONOURED, "`container_auto` (the container tool) or `local` (the client runs it)"),
        "allowed_callers": DIRECT_ONLY,
    }

    def parse(self, tool: dict[str, Any], where: str, out: Toolset, ctx: Parsing) -> None:
        environment = tool.get("environment") if isinstance(tool.get("environment"), dict) else {}
        env = environment.get("type")
        if env == "local":  # the client runs the commands (`kinds/local_shell.py`)
            return local_shell.enable(out, "shell_call", f"{where}.environment")
        if env == "container_reference":  # a /v1/containers container: its files in /mnt/data (`workspace.py`)
            out.containers["container"] = (f"{where}.environment.container_id", _container_id(environment, where))
        elif env not in (None, "container_auto"):
            message = f"shell environment {env!r} is not supported: commands run in the container tool"
            raise RequestError(
                message + " (environment container_auto, container_reference or local)", f"{where}.environment"
            )
        if out.local_shell is not None:
            raise RequestError("one shell per request: a local shell and a container shell cannot be combined", where)
        out.shell_for_container = True  # container.exec calls come out as shell_call items
        out.builtins.setdefault("container", {})

    def requirement(self, choice: dict[str, Any], tools: Toolset) -> Requirement | None:
        """`{"type": "shell"}`: the exec call, of the container shell or the local one."""
        if not tools.shell_for_container and tools.local_shell is None:
            return None
        return Requirement("container.exec", "<|channel|>commentary to=container.exec", exact=True)

    def fallback(self, ns: str) -> h.Namespace:
        return h.Namespace(ns, "Run commands in a persistent container (currently unavailable).")

    def claims(self, toolset: Toolset, ns: str, fn: str) -> bool:
        return ns == "container" and fn == "exec" and "container" in toolset.builtins and toolset.shell_for_container

    def arguments(self, r: Run, msg: Message, ns: str, fn: str) -> tuple[dict[str, Any], str | None]:
        args, err = super().arguments(r, msg, ns, fn)
        if err is None and not _is_command(args.get("cmd")):
            err = "Error: container.exec needs `cmd`, a non-empty list of strings."
        return args, err

    def begin(self, r: Run, msg: Message, ns: str, fn: str, args: dict[str, Any], stream: Stream | None) -> Item:
        """The `shell_call` item, complete before the command runs (its output is an item of its own)."""
        command = shlex.join(args["cmd"]) if _is_command(args.get("cmd")) else h.text_of(msg)
        timeout = args.get("timeout")
        timeout_ms = int(timeout * 1000) if isinstance(timeout, int | float) else None
        action = {"commands": [command], "timeout_ms": timeout_ms, "max_output_length": None}
        item = r.builder.add_item(
            {
                "id": new_id("sh"),
                "type": "shell_call",
                "call_id": new_id("call"),
                "action": action,
                "status": "in_progress",
                "environment": (
                    {"type": "container_reference", "container_id": space.container_id}
                    if (space := r.workspaces.get("container")) is not None
                    else None
                ),
            }
        )
        item.indexed_event("response.shell_call_command.added", command_index=0, command="")
        item.indexed_event("response.shell_call_command.delta", command_index=0, delta=command)
        item.indexed_event("response.shell_call_command.done", command_index=0, command=command)
        item.finish("completed")
        return item

    def end(self, r: Run, item: Item, fn: str, outcome: ToolOutcome) -> None:
        result = _output(outcome)
        output = r.builder.add_item(
            {
                "id": new_id("sho"),
                "type": "shell_call_output",
                "call_id": item.get("call_id"),
                "output": [],
                "status": "in_progress",
                "max_output_length": None,
            }
        )
        delta = {k: result[k] for k in ("stdout", "stderr") if result[k]}
        if delta:
            output.event("response.shell_call_output_content.delta", command_index=0, delta=delta)
        output.event("response.shell_call_output_content.done", command_index=0, output=[result])
        output.finish("completed", output=[result])
        r.tools.results[output.id] = outcome.text

    def chat_functions(self, ns: h.Namespace) -> list[dict[str, Any]]:
        return list(ns.tools) or [CONTAINER_EXEC]

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


def _container_id(environment: dict[str, Any], where: str) -> str:
    if unknown := sorted(set(environment) - {"type", "container_id"}):
        raise RequestError(f"unknown environment field(s): {', '.join(unknown)}", f"{where}.environment")
    container_id = environment.get("container_id")
    if not isinstance(container_id, str) or not container_id.startswith("cntr_"):
        raise RequestError(f"No such Container: {container_id}", f"{where}.environment.container_id", 404, "not_found")
    return container_id


def _is_command(cmd: Any) -> bool:
    return isinstance(cmd, list) and bool(cmd) and all(isinstance(c, str) for c in cmd)


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
