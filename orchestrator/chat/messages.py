"""Harmony messages as OpenAI chat messages, and the request's tools as chat function definitions.

Function names: a client function keeps its name, `python` stays `python`, and a namespace's tool
`ns.fn` (browser.search, container.exec, an MCP server's tool) is offered as `ns_fn`. The map back to
Harmony recipients comes with the definitions; a name that two tools would share is a 400.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from openai_harmony import DeveloperContent, Message

from orchestrator import harmony as h
from orchestrator import kinds
from orchestrator.errors import RequestError
from orchestrator.kinds.base import tool_args
from orchestrator.request.attachments import split_images
from orchestrator.request.schema import Requirement


def chat_name(recipient: str) -> str:
    """The function name a Harmony recipient is offered under on the chat path."""
    if recipient.startswith("functions."):
        return recipient.removeprefix("functions.")
    return recipient.replace(".", "_", 1)


@dataclass
class ChatTools:
    """The `tools` of a chat request and the Harmony recipient behind each function name."""

    functions: list[dict[str, Any]] = field(default_factory=list)
    recipients: dict[str, str] = field(default_factory=dict)  # function name -> recipient
    freeform: set[str] = field(default_factory=set)  # recipients of custom tools: text wrapped as {"input"}

    def from_chat(self, recipient: str, arguments: str) -> tuple[Message, str | None]:
        """A chat tool call as a Harmony message (and the error the model reads instead of a run): a custom
        tool's `{"input": TEXT}` becomes its plain text; the others are read by their namespace's kind."""
        if recipient not in self.freeform:
            return kinds.from_chat(recipient, arguments)
        value = tool_args(arguments)[0] or {}
        text = value.get("input")
        if not isinstance(text, str):
            return h.assistant(arguments, "commentary", recipient), FREEFORM_ERROR
        return h.assistant(text, "commentary", recipient), None

    def recipient(self, name: str) -> str:
        """A name the model wrote; one that is not offered stays itself (the tool caller says it is unknown)."""
        return self.recipients.get(name, name)

    def choice(self, required: Requirement | None) -> tuple[list[dict[str, Any]], Any]:
        """(tools, tool_choice) for a turn: `tool_choice` of the request as the chat API spells it. A
        requirement for one namespace or server offers only its functions, with `required`."""
        if not self.functions:
            return [], None
        if required is None:
            return self.functions, "auto"
        if required.exact:
            return self.functions, {"type": "function", "function": {"name": chat_name(required.recipient)}}
        allowed = [f for f in self.functions if required.met_by(self.recipients[f["function"]["name"]])]
        return allowed or self.functions, "required"


FREEFORM = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
FREEFORM_NOTE = " (Freeform: pass the whole text as `input`.)"
FREEFORM_ERROR = 'Error: send the text as {"input": "..."}. Write the call again.'


def chat_tools(
    namespaces: list[h.Namespace], functions: list[dict[str, Any]], custom: list[dict[str, Any]] | None = None
) -> ChatTools:
    """The chat functions of a request: its namespaces' tools, client functions under their own names, and
    custom tools as functions taking their text as `input` (a grammar is not enforced on this path)."""
    out = ChatTools()

    def add(recipient: str, description: str, parameters: Any) -> None:
        name = chat_name(recipient)
        if name in out.recipients:
            raise RequestError(f"two tools would be offered to the model as function {name!r}", "tools")
        out.recipients[name] = recipient
        params = parameters or {"type": "object", "properties": {}}
        out.functions.append(
            {"type": "function", "function": {"name": name, "description": description or "", "parameters": params}}
        )

    for ns in namespaces:  # each as the kind that owns the namespace offers it
        for tool in kinds.chat_functions(ns):
            recipient = f"{ns.name}.{tool['name']}" if tool["name"] else ns.name
            add(recipient, tool.get("description") or ns.description, tool.get("parameters"))
    for f in functions:
        add(f"functions.{f['name']}", f.get("description") or "", f.get("parameters"))
    for t in custom or []:
        add(f"functions.{t['name']}", (t.get("description") or "") + FREEFORM_NOTE, FREEFORM)
        out.freeform.add(f"functions.{t['name']}")
    return out


def to_chat(messages: list[Message], freeform: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The conversation as chat messages. Consecutive assistant messages (reasoning, text, calls) merge into
    one; tool results answer the oldest open call of the same tool. Call ids are the call's position, so a
    turn's messages extend the previous turn's (the worker's prefix cache hits). Reasoning before the last
    user message is dropped, as Harmony drops analysis before the last final answer."""
    users = [i for i, m in enumerate(messages) if m.author.role == h.Role.USER]
    last_user = users[-1] if users else -1
    out: list[dict[str, Any]] = []
    open_calls: list[tuple[str, str]] = []  # (recipient, call id) awaiting a tool result
    for i, msg in enumerate(messages):
        role = msg.author.role
        if role == h.Role.SYSTEM:
            continue  # Harmony's system message (identity, date, tools) - the chat template has its own
        if role == h.Role.DEVELOPER:
            text = _developer_text(msg)
            if text:
                out.append({"role": "system", "content": text})
        elif role == h.Role.USER:
            out.append({"role": "user", "content": split_images(h.text_of(msg))})
        elif role == h.Role.TOOL:
            name = msg.author.name or ""
            match = next((k for k, (r, _) in enumerate(open_calls) if r == name), None)
            call_id = open_calls.pop(match)[1] if match is not None else f"call_{i}"
            out.append({"role": "tool", "tool_call_id": call_id, "content": h.text_of(msg)})
        elif role == h.Role.ASSISTANT:
            _assistant(out, msg, i, i > last_user, open_calls, freeform)
    return out


def _developer_text(msg: Message) -> str:
    parts = [c.instructions or "" if isinstance(c, DeveloperContent) else getattr(c, "text", "") for c in msg.content]
    return "".join(parts)


def _assistant(
    out: list[dict[str, Any]],
    msg: Message,
    i: int,
    keep_reasoning: bool,
    open_calls: list[tuple[str, str]],
    freeform: set[str] | frozenset[str],
) -> None:
    text, recipient = h.text_of(msg), msg.recipient
    current = out[-1] if out and out[-1]["role"] == "assistant" else None
    if recipient and recipient != "assistant":
        call_id = f"call_{i}"
        arguments = json.dumps({"input": text}) if recipient in freeform else kinds.chat_arguments(msg)
        call = {"id": call_id, "type": "function", "function": {"name": chat_name(recipient), "arguments": arguments}}
        if current is None:
            current = {"role": "assistant", "content": ""}
            out.append(current)
        current.setdefault("tool_calls", []).append(call)
        open_calls.append((recipient, call_id))
    elif msg.channel == "analysis":
        if not keep_reasoning:
            return
        if current is None or current["content"] or current.get("tool_calls") or current.get("reasoning"):
            out.append({"role": "assistant", "content": "", "reasoning": text})
        else:
            current["reasoning"] = text
    else:
        if current is None or current["content"] or current.get("tool_calls"):
            out.append({"role": "assistant", "content": text})
        else:
            current["content"] = text
