"""One module per output-item kind, behind the `Kind` interface (`base`): how its item opens, streams and
finishes (success and error), what the model reads back, and how the item is echoed when a client sends
it back as input. Adding a kind: one module with a `Kind` subclass, and one line in `TOOLS` below."""

from __future__ import annotations

from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.kinds.base import EchoContext, Kind, Stream
from orchestrator.kinds.code_interpreter import CodeInterpreterKind
from orchestrator.kinds.function import FunctionKind
from orchestrator.kinds.mcp import McpKind
from orchestrator.kinds.message import MessageKind
from orchestrator.kinds.reasoning import ReasoningKind
from orchestrator.kinds.shell import ShellKind
from orchestrator.kinds.web_search import WebSearchKind
from orchestrator.run import Run
from orchestrator.schema import RequestError, Toolset

MESSAGE, REASONING = MessageKind(), ReasoningKind()
# The kinds of tool calls, in the order they claim a recipient (shell before mcp: container.exec).
TOOLS: tuple[Kind, ...] = (FunctionKind(), WebSearchKind(), CodeInterpreterKind(), ShellKind(), McpKind())
_ECHOES = {t: kind for kind in (MESSAGE, REASONING, *TOOLS) for t in kind.echoes}
_NAMESPACES = {ns: kind for kind in TOOLS for ns in kind.namespaces}
_DEFAULT = Kind()  # an MCP server's namespace, or a recipient no kind defines: its listed tools, as written


def classify(toolset: Toolset, recipient: str) -> tuple[Kind | None, str, str]:
    """(kind, namespace, function) of a recipient; kind None: no tool of this request has that name."""
    ns, _, fn = recipient.partition(".")
    fn = fn.split(" ")[0]
    return next((k for k in TOOLS if k.claims(toolset, ns, fn)), None), ns, fn


def open_stream(r: Run, channel: str | None, recipient: str | None) -> Stream | None:
    """The item a message opens at its header: reasoning, a message, or the tool call's own (if it has one)."""
    if recipient is None or recipient == "assistant":
        return REASONING.open(r) if channel == "analysis" else MESSAGE.open(r)
    kind, ns, fn = classify(r.toolset, recipient)
    return kind.stream(r, ns, fn) if kind is not None else None


def chat_functions(ns: h.Namespace) -> list[dict[str, Any]]:
    """The chat functions a namespace is offered as, by the kind that owns it."""
    return _NAMESPACES.get(ns.name, _DEFAULT).chat_functions(ns)


def chat_arguments(msg: Message) -> str:
    """A Harmony call message as chat `arguments`, by the kind of its namespace."""
    return _NAMESPACES.get((msg.recipient or "").partition(".")[0], _DEFAULT).chat_arguments(msg)


def from_chat(recipient: str, arguments: str) -> tuple[Message, str | None]:
    """A chat tool call as a Harmony message (and an error to answer it with), by its namespace's kind."""
    return _NAMESPACES.get(recipient.partition(".")[0], _DEFAULT).from_chat(recipient, arguments)


def to_messages(items: list[dict[str, Any]], ctx: EchoContext) -> list[Message]:
    """Input items as Harmony messages, each by the kind that owns its type."""
    out: list[Message] = []
    for i, item in enumerate(items):
        kind = _ECHOES.get(t) if isinstance(t := item.get("type"), str) else None
        if kind is None:
            raise RequestError(f"unsupported input item type {item.get('type')!r}", f"input[{i}].type")
        out += kind.echo(item, f"input[{i}]", ctx)
    return out


__all__ = [
    "TOOLS",
    "EchoContext",
    "Kind",
    "Stream",
    "chat_arguments",
    "chat_functions",
    "classify",
    "from_chat",
    "open_stream",
    "to_messages",
]
