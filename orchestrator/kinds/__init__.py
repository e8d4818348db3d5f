"""One module per tool type (and per output-item kind), behind the `Kind` interface (`base`): the request
`tools[]` entries it accepts and `tool_choice` naming it, the namespaces it serves, how its item opens,
streams and finishes, what the model reads back, and how the item is echoed when a client sends it back as
input. Adding a tool type: one module with a `Kind` subclass, and one line in `TOOLS` below; the
dispatch tables and the built-in and sandbox namespace lists are derived from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openai_harmony import Message

from orchestrator import harmony as h
from orchestrator.errors import RequestError
from orchestrator.kinds.apply_patch import ApplyPatchKind
from orchestrator.kinds.base import EchoContext, Kind, Parsing, Stream, check_fields
from orchestrator.kinds.code_interpreter import CodeInterpreterKind
from orchestrator.kinds.compaction import CompactionKind, CompactionTriggerKind
from orchestrator.kinds.custom import CustomKind
from orchestrator.kinds.file_search import FileSearchKind
from orchestrator.kinds.function import FunctionKind
from orchestrator.kinds.local_shell import LocalShellKind
from orchestrator.kinds.mcp import McpKind
from orchestrator.kinds.message import MessageKind
from orchestrator.kinds.namespace import NamespaceKind
from orchestrator.kinds.reasoning import ReasoningKind
from orchestrator.kinds.shell import ShellKind
from orchestrator.kinds.tool_search import ToolSearchKind
from orchestrator.kinds.web_search import WebSearchKind
from orchestrator.request.schema import Requirement, Toolset
from orchestrator.responses.run import Run

MESSAGE, REASONING = MessageKind(), ReasoningKind()
# The kinds of tool calls, in the order they claim a recipient (shell before mcp: container.exec).
TOOLS: tuple[Kind, ...] = (
    CustomKind(),
    ToolSearchKind(),
    ApplyPatchKind(),
    FunctionKind(),
    LocalShellKind(),
    NamespaceKind(),
    WebSearchKind(),
    CodeInterpreterKind(),
    FileSearchKind(),
    ShellKind(),
    McpKind(),
)
BUILTIN_NAMESPACES: tuple[str, ...] = tuple(ns for kind in TOOLS for ns in kind.namespaces)
SANDBOX_NAMESPACES: tuple[str, ...] = tuple(ns for kind in TOOLS if kind.sandboxed for ns in kind.namespaces)
_TYPES = {t: kind for kind in TOOLS for t in kind.tool_types}
_ECHOING = (MESSAGE, REASONING, CompactionKind(), CompactionTriggerKind(), *TOOLS)
_ECHOES = {t: kind for kind in _ECHOING for t in kind.echoes}
_NAMESPACES = {ns: kind for kind in TOOLS for ns in kind.namespaces}
_DEFAULT = Kind()  # an MCP server's namespace, or a recipient no kind defines: its listed tools, as written


def _typed(table: dict[str, Kind], value: Any) -> Kind | None:
    return table.get(value) if isinstance(value, str) else None


def toolset(tools: list[dict[str, Any]], tool_choice: Any, gateway_url: Callable[[str], str | None]) -> Toolset:
    """The request's tools as what the model may address, each parsed by the kind that owns its type."""
    out = Toolset()
    owners = [_owner(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
    if tool_choice == "none":
        return out
    ctx = Parsing(gateway_url, BUILTIN_NAMESPACES)
    allowed = _allowed(tool_choice, tools)
    for i, (tool, kind) in enumerate(zip(tools, owners, strict=True)):
        if allowed is None or any(_names(tool, a) for a in allowed):
            kind.parse(tool, f"tools[{i}]", out, ctx)
    out.required = _requirement(tool_choice["mode"] if allowed is not None else tool_choice, out)
    return out


def _owner(tool: dict[str, Any], where: str) -> Kind:
    """The kind that owns a request tool's type, once every field of the tool is known to it."""
    kind = _typed(_TYPES, tool.get("type"))
    if kind is None:
        raise RequestError(f"unsupported tool type {tool.get('type')!r}", f"{where}.type")
    check_fields(kind.fields, tool, where)
    return kind


def _allowed(choice: Any, tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """`tool_choice: {"type": "allowed_tools", "mode", "tools"}`: the tools the model may use (the others are
    not shown to it at all); None: every tool of the request."""
    if not isinstance(choice, dict) or choice.get("type") != "allowed_tools":
        return None
    listed = choice.get("tools")
    if choice.get("mode") not in ("auto", "required") or not isinstance(listed, list) or not listed:
        raise RequestError("allowed_tools needs mode auto or required and a list of tools", "tool_choice")
    for j, entry in enumerate(listed):
        if not isinstance(entry, dict) or not any(_names(t, entry) for t in tools):
            raise RequestError(f"allowed_tools names a tool that is not in tools: {entry!r}", f"tool_choice.tools[{j}]")
    return listed


def _names(tool: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Whether an allowed_tools entry ({type, and name or server_label when the type has them}) names `tool`."""
    keys = ("type", "name", "server_label")
    return all(tool.get(k) == entry[k] for k in keys if k in entry)


def _requirement(choice: Any, tools: Toolset) -> Requirement | None:
    """`tool_choice` as a Requirement; a choice naming a tool the request does not enable is a 400."""
    if choice == "auto":
        return None
    if choice == "required":
        client = tools.functions or tools.mcp or tools.namespaces or tools.custom or tools.local_shell or tools.shown
        if not (tools.builtins or client):
            raise RequestError("tool_choice 'required' needs at least one tool in tools", "tool_choice")
        channel = "commentary" if client else "analysis"
        return Requirement("", f"<|channel|>{channel} to=")
    kind = _typed(_TYPES, choice.get("type")) if isinstance(choice, dict) else None
    required = kind.requirement(choice, tools) if kind is not None else None
    if required is None:
        named = [t for k in TOOLS if type(k).requirement is not Kind.requirement for t in k.tool_types]
        choices = ", ".join(named[:-1]) + f" or {named[-1]}"
        raise RequestError(
            f"unsupported tool_choice {choice!r} (auto, none, required, or a {choices} tool of this request)",
            "tool_choice",
        )
    return required


def echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A request tool as the response lists it, by the kind that owns its type."""
    kind = _typed(_TYPES, tool.get("type"))
    return kind.echo_tool(tool) if kind is not None else dict(tool)


def fallback(ns: str) -> h.Namespace:
    """What the model is shown of a built-in namespace whose tool server cannot be listed."""
    return _NAMESPACES[ns].fallback(ns)


def listed(ns: str) -> bool:
    """Whether the model is shown a built-in namespace as its tool server lists it (else as its kind shows it)."""
    return _NAMESPACES[ns].listed


def kept_ids(items: list[dict[str, Any]]) -> list[str]:
    """Ids of the input items whose echo reads the tool text kept for them (web_search_call)."""
    return [str(i.get("id")) for i in items if (k := _typed(_ECHOES, i.get("type"))) is not None and k.reads_kept_text]


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
        kind = _typed(_ECHOES, item.get("type"))
        if kind is None:
            raise RequestError(f"unsupported input item type {item.get('type')!r}", f"input[{i}].type")
        out += kind.echo(item, f"input[{i}]", ctx)
    return out


__all__ = [
    "BUILTIN_NAMESPACES",
    "SANDBOX_NAMESPACES",
    "TOOLS",
    "EchoContext",
    "Kind",
    "Stream",
    "chat_arguments",
    "chat_functions",
    "classify",
    "echo_tool",
    "fallback",
    "from_chat",
    "kept_ids",
    "listed",
    "open_stream",
    "to_messages",
    "toolset",
]
